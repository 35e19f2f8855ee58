package lock

import (
	"sync"
	"time"
)

// owners is the client's registry of owners: an owner (lifecycle.go)
// lives in it while something uses it - a call, a live hold, a parked
// subscription (park.go), a while remembered (remember) - and each use is
// counted once: acquire counts it and release gives it back, the only two places the count changes; the
// entry goes when none is left. Its lock, owners.mu, is taken alone; the
// owner's own state is under the owner's lock.
type owners struct {
	life *lifetime // the client's: parked subscriptions close with it

	mu     sync.Mutex
	byKey  map[string]*entry // by Mutex.ownerKey
	parked int               // entries with a parked subscription
}

// entry is an owner in the registry. The owner lives in its entry, so
// that a new owner costs one allocation less.
type entry struct {
	own    owner
	uses   int        // calls using it, plus one while its hold lasts, one while a subscription is parked, one while remembered
	parked *parkedSub // the subscription of an ended wait (park.go)
	// remembered: kept until then (remember), whatever else uses it.
	remembered time.Time
}

func (r *owners) init(life *lifetime) {
	r.life, r.byKey = life, make(map[string]*entry)
}

// acquire returns m's owner, made if the registry has none, and counts one
// more use of it; release gives it back.
func (r *owners) acquire(m *Mutex) *owner {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &r.acquireLocked(m).own
}

func (r *owners) acquireLocked(m *Mutex) *entry {
	e := r.byKey[m.ownerKey]
	if e == nil {
		e = &entry{}
		e.own.init(m.ownerKey, m)
		r.byKey[m.ownerKey] = e
	}
	e.uses++
	return e
}

// lookup returns m's owner if the registry has it, or nil.
func (r *owners) lookup(m *Mutex) *owner {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.byKey[m.ownerKey]; e != nil {
		return &e.own
	}
	return nil
}

// release gives back a use of o counted by acquire.
func (r *owners) release(o *owner) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.releaseLocked(o.key)
}

func (r *owners) releaseLocked(key string) {
	e := r.byKey[key]
	e.uses--
	if e.uses == 0 {
		delete(r.byKey, key)
	}
}

// remember keeps m's owner in the registry for d from now, as one use:
// what the client knows of it - the grants it has spent, a queue entry it
// still owes a leave - outlives the calls and the hold that used it while
// the server may still keep that state. One goroutine per owner, at most.
func (r *owners) remember(m *Mutex, d time.Duration) {
	until := time.Now().Add(d)
	r.mu.Lock()
	e := r.acquireLocked(m)
	if !e.remembered.IsZero() { // remembered already: its goroutine waits longer
		e.remembered = later(e.remembered, until)
		r.releaseLocked(m.ownerKey)
		r.mu.Unlock()
		return
	}
	e.remembered = until
	r.mu.Unlock()
	if !r.life.spawn(func() { r.forget(m.ownerKey, e) }) {
		r.unremember(m.ownerKey, e) // closed meanwhile
	}
}

// forget gives back the use remember counted once its time has passed,
// or when the client closes.
func (r *owners) forget(key string, e *entry) {
	for {
		r.mu.Lock()
		left := time.Until(e.remembered)
		r.mu.Unlock()
		if left <= 0 {
			break
		}
		t := time.NewTimer(left)
		select {
		case <-t.C:
			continue // it may have been remembered longer meanwhile
		case <-r.life.closing:
			t.Stop()
		}
		break
	}
	r.unremember(key, e)
}

func (r *owners) unremember(key string, e *entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.remembered = time.Time{}
	r.releaseLocked(key)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
