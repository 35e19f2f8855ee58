package lock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Owner identifies a lock owner: the client's ID and an owner number within
// that client. Its String form "<ClientID>:<ID>" is the field in the lock
// hash, as Redisson writes "<uuid>:<threadId>".
type Owner struct {
	ClientID string
	ID       int64
}

// String returns "<ClientID>:<ID>".
func (o Owner) String() string { return o.ClientID + ":" + itoa(o.ID) }

// Hold is a held lock, returned by every successful acquire. Re-entering
// returns the same Hold with its count raised; the Hold ends when the
// owner's last Unlock releases the lock (Err: ErrReleased) or when the lock
// is lost (Err wraps ErrLockLost). It is safe for concurrent use, and a nil
// *Hold (what a failed acquire returns) behaves as a hold that has ended
// with ErrNotHeld.
//
// The Hold owns its lease deadline: the send time of the latest grant,
// re-entry or renewal the server acknowledged, plus the lease, less a
// guard (5% of the lease, at most 100 ms) for timer lateness. The
// server cannot expire the lock before that instant, so when the deadline
// passes without a newer acknowledgement - a partition, a paused server,
// renewals failing - Done closes before anyone else can be granted the
// lock (X12).
type Hold struct {
	token    int64
	acquired time.Time
	done     chan struct{}
	ended    func(*Hold, error) // told once, after the hold ends

	mu       sync.Mutex
	count    int
	watchdog bool          // renewed by the client's watchdog until it ends
	lease    time.Duration // the longest lease any of its acquisitions asked for
	deadline time.Time     // when the hold ends unless acknowledged again
	timer    *time.Timer   // fires at deadline
	releases int           // Unlock calls in flight: they decide its end
	// unconfirmed: a hand-over grant the server counts as held but has
	// not been renewed to the lease yet (adopt); the next renewal does.
	unconfirmed bool
	err         error
}

// leaseGuard is how much earlier than the lease allows the client ends a
// hold: room for a late timer on a loaded machine.
func leaseGuard(lease time.Duration) time.Duration {
	return min(lease/20, 100*time.Millisecond)
}

// newHold starts a hold granted after a request sent at sent: the server
// keeps it at least until sent+firm; lease is what it is renewed to.
func newHold(token int64, count int, sent time.Time, firm, lease time.Duration, watchdog bool, ended func(*Hold, error)) *Hold {
	h := &Hold{token: token, acquired: sent, done: make(chan struct{}), ended: ended,
		count: count, watchdog: watchdog, lease: lease}
	h.deadline = sent.Add(firm - leaseGuard(firm))
	// Under the lock: a deadline already passed fires at once, and expire
	// and end use the timer.
	h.mu.Lock()
	h.timer = time.AfterFunc(time.Until(h.deadline), h.expire)
	h.mu.Unlock()
	return h
}

// Token returns the fencing token (X6): it is larger than the token of every
// earlier hold of this lock by any fairlock client. Pass it to the storage
// you guard and reject writes carrying an older one. 0 for a nil Hold.
func (h *Hold) Token() int64 {
	if h == nil {
		return 0
	}
	return h.token
}

// Done returns a channel that is closed when the hold ends: released by the
// last Unlock, or lost (X7). Stop working on the guarded resource when it
// closes without your Unlock. For a nil Hold it is closed already.
func (h *Hold) Done() <-chan struct{} {
	if h == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return h.done
}

// Err returns nil while the hold lasts; afterwards ErrReleased, ErrClosed,
// or an error wrapping ErrLockLost that says how it was lost. For a nil
// Hold it returns ErrNotHeld.
func (h *Hold) Err() error {
	if h == nil {
		return ErrNotHeld
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// Context returns a context derived from parent (context.Background when
// parent is nil) that is cancelled, with Err as its cause, when the hold
// ends - the idiom for "stop now". Call the CancelFunc when done with it.
func (h *Hold) Context(parent context.Context) (context.Context, context.CancelFunc) {
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithCancelCause(parent)
	if h == nil {
		cancel(ErrNotHeld)
		return ctx, func() {}
	}
	// The goroutine ends when the hold ends or the context is cancelled,
	// whichever comes first; the returned CancelFunc guarantees the latter.
	go func() {
		select {
		case <-h.done:
			cancel(h.Err())
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// view returns what the client knows of the hold, zero once it has ended.
func (h *Hold) view() holdView {
	if h == nil {
		return holdView{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return holdView{}
	}
	return holdView{token: h.token, count: h.count}
}

// live reports whether the hold has not ended.
func (h *Hold) live() bool {
	return h != nil && h.Err() == nil
}

// reentered records a re-entry (count from the server) sent at sent. A
// hold stays renewed by the watchdog once any of its acquisitions asked
// for it, so an inner explicit lease never ends an outer watchdog hold.
// It reports false, recording nothing, when the hold has ended meanwhile
// (an Unlock that gave up, a loss): an ended hold never comes back.
func (h *Hold) reentered(count int, sent time.Time, lease time.Duration, watchdog bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return false
	}
	h.count = count
	h.watchdog = h.watchdog || watchdog
	h.lease = max(h.lease, lease)
	h.extendLocked(sent, lease)
	return true
}

// released records the count left after an Unlock that left holds, sent
// at sent: the server extended the lease then.
func (h *Hold) released(count int, sent time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count = count
	h.extendLocked(sent, h.lease)
}

// renewal returns what the watchdog sends for this hold: the lease to
// renew to (0: only check, for a hold with an explicit lease or one being
// unlocked), the token and the hold's own lease (a hand-over grant not
// confirmed yet is taken up with it). ok is false once the hold has ended.
func (h *Hold) renewal() (call renewCall, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return renewCall{}, false
	}
	call.token, call.holdLease = h.token, h.lease
	// While an Unlock is in flight the hold is only checked, so a lock
	// never outlives its Unlock call by more than a lease (X13).
	if (h.watchdog || h.unconfirmed) && h.releases == 0 {
		call.lease = h.lease
	}
	return call, true
}

// renewed records a renewal (or Extend) to lease sent at sent that the
// server acknowledged; a hand-over grant is taken up by it. It reports
// false when the hold had ended meanwhile.
func (h *Hold) renewed(sent time.Time, lease time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return false
	}
	h.unconfirmed = false
	h.extendLocked(sent, lease)
	return true
}

// extendLocked moves the deadline to sent+lease (less the guard) when that
// is later: the server's expiry never moves back while held (scripts'
// extend), so the latest acknowledgement bounds it.
func (h *Hold) extendLocked(sent time.Time, lease time.Duration) {
	if h.err != nil {
		return
	}
	if d := sent.Add(lease - leaseGuard(lease)); d.After(h.deadline) {
		h.deadline = d
		h.timer.Reset(time.Until(d))
	}
}

// releasing marks an Unlock of the hold in flight (on) or answered (off):
// meanwhile a renewal that finds the hold gone does not end it as lost,
// since the Unlock may have released it.
func (h *Hold) releasing(on bool) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if on {
		h.releases++
	} else {
		h.releases--
	}
}

// lost ends the hold with err unless an Unlock of it is in flight.
func (h *Hold) lost(err error) {
	h.mu.Lock()
	releasing := h.releases > 0
	h.mu.Unlock()
	if !releasing {
		h.end(err)
	}
}

// expire runs when the deadline timer fires.
func (h *Hold) expire() {
	h.mu.Lock()
	left := time.Until(h.deadline)
	if left > 0 && h.err == nil { // extended while the timer fired
		h.timer.Reset(left)
	}
	h.mu.Unlock()
	if left <= 0 {
		h.endOverdue()
	}
}

// endIfOverdue ends a hold whose deadline has passed already (a grant
// whose reply came after its lease), without waiting for the timer.
func (h *Hold) endIfOverdue() {
	h.mu.Lock()
	overdue := !time.Now().Before(h.deadline)
	h.mu.Unlock()
	if overdue {
		h.endOverdue()
	}
}

// endOverdue ends the hold as lost by its deadline.
func (h *Hold) endOverdue() {
	h.end(fmt.Errorf("%w: no grant or renewal acknowledged within the lease (%v)", ErrLockLost, h.leaseNow()))
}

func (h *Hold) leaseNow() time.Duration { return h.leaseOr(0) }

// leaseOr returns the hold's lease, or def for a nil Hold.
func (h *Hold) leaseOr(def time.Duration) time.Duration {
	if h == nil {
		return def
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lease
}

// end closes the hold with err; later calls do nothing. It reports whether
// this call ended it.
func (h *Hold) end(err error) bool {
	h.mu.Lock()
	if h.err != nil {
		h.mu.Unlock()
		return false
	}
	h.err = err
	h.timer.Stop()
	close(h.done)
	h.mu.Unlock()
	h.ended(h, err)
	return true
}
