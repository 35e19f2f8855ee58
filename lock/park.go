package lock

import (
	"time"

	"github.com/fairlock/fairlock/backend"
)

// A waiter's subscription to its owner's wake-up channel outlives the
// wait by subscriptionLinger, parked in the owner's registry entry: the
// owner's next wait within that time takes it back and queues without a
// SUBSCRIBE and the re-check behind it (in contention, an owner that
// unlocks and locks again saves two round trips and a script). At most
// maxParked owners of a client keep one parked; Close drops them all.
const (
	subscriptionLinger = time.Second
	maxParked          = 1024
)

// parkedSub is a subscription kept after its wait ended.
type parkedSub struct {
	sub   *backend.Subscription
	taken chan struct{} // closed when a waiter takes it back
}

// takeParked returns the parked subscription of m's owner, if any, with
// any event it received while parked dropped: such an event is about an
// earlier wait. A message still in flight from before can arrive later;
// waiters treat every wake-up as "check again", and ignore grants older
// than their own latest attempt (adopt). The caller uses the owner.
func (r *owners) takeParked(m *Mutex) *backend.Subscription {
	r.mu.Lock()
	p := r.unparkLocked(m.ownerKey, nil)
	r.mu.Unlock()
	if p == nil {
		return nil
	}
	close(p.taken)
	p.sub.Latest(backend.Event{}) // what came meanwhile was for the wait that parked it
	return p.sub
}

// park keeps sub, whose wait has ended, for the next wait of m's owner,
// which counts as a use of it meanwhile, or closes it when the owner has
// one parked already, too many owners do, or the client is closed. The
// caller uses the owner.
func (r *owners) park(m *Mutex, sub *backend.Subscription) {
	r.mu.Lock()
	if r.byKey[m.ownerKey].parked != nil || r.parked >= maxParked || r.life.isClosed() {
		r.mu.Unlock()
		sub.Close()
		return
	}
	p := &parkedSub{sub: sub, taken: make(chan struct{})}
	r.acquireLocked(m).parked = p // the parked subscription uses the owner
	r.parked++
	r.mu.Unlock()
	if !r.life.spawn(func() { r.linger(m.ownerKey, p) }) {
		r.drop(m.ownerKey, p) // closed meanwhile
	}
}

// linger closes p, parked for the owner at key, after subscriptionLinger,
// or when the client closes, unless a waiter takes it back first.
func (r *owners) linger(key string, p *parkedSub) {
	t := time.NewTimer(subscriptionLinger)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.life.closing:
	case <-p.taken:
		return
	}
	r.drop(key, p)
}

// drop unparks p, if a waiter has not taken it back, and closes it.
func (r *owners) drop(key string, p *parkedSub) {
	r.mu.Lock()
	mine := r.unparkLocked(key, p) != nil
	r.mu.Unlock()
	if mine {
		p.sub.Close()
	}
}

// unparkLocked takes the parked subscription of the owner at key off its
// entry - only p, unless p is nil - and gives back the use it counted. It
// returns what it took, or nil.
func (r *owners) unparkLocked(key string, p *parkedSub) *parkedSub {
	e := r.byKey[key]
	if e == nil || e.parked == nil || p != nil && e.parked != p {
		return nil
	}
	p = e.parked
	e.parked = nil
	r.parked--
	r.releaseLocked(key)
	return p
}
