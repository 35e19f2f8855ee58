package lock

import (
	"context"
	"errors"
	"time"

	"github.com/fairlock/fairlock/lock/internal/wire"
)

// The owner's waiting calls and its place in the queue (lifecycle.go has
// the rest of the owner's transitions): which of an owner's calls waits,
// and which must leave the queue when it ends.

// startWaiting counts w, a call that may queue the owner.
func (o *owner) startWaiting(w *waiter) {
	o.mu.Lock()
	o.waiting++
	w.counted = true
	o.mu.Unlock()
}

// stopWaiting uncounts w and reports whether the owner must leave the
// queue now: w was the owner's last waiting call but those abandoned, and
// it failed (err) or the owner is still marked queued.
func (o *owner) stopWaiting(w *waiter, failed bool) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.waiting--
	if w.gaveUp {
		o.abandoned--
	}
	w.counted, w.gaveUp = false, false
	return o.live(nil) == 0 && (failed || o.queued)
}

// abandon marks w, if it is a waiting call still counted, as abandoned by
// its caller: it goes on
// in the background until its attempt in flight is answered, but the
// owner's queue entry is no longer its own. The owner's next call then
// leaves that entry, and queues at the tail (leaveLeftover): kept, it
// would hold a place in line - and take a grant up - for a caller who
// has returned, ahead of the owners queued after it (soak seed
// 137617542961740: a TryLock(0) 17 ms after such a Lock returned took
// the grant handed to its entry, ahead of three waiters).
func (o *owner) abandon(w *waiter) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if w.counted && !w.gaveUp {
		w.gaveUp = true
		o.abandoned++
	}
}

// live returns how many of the owner's calls wait for a caller, less w
// (nil: none) if it is one of them. Called with o.mu held.
func (o *owner) live(w *waiter) int {
	n := o.waiting - o.abandoned
	if w != nil && w.counted && !w.gaveUp {
		n--
	}
	return n
}

// othersWaiting reports whether a call of the owner other than w waits
// for its caller.
func (o *owner) othersWaiting(w *waiter) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.live(w) > 0
}

// queuedBy applies an acquire reply that queued the owner. The server
// then had no grant for the owner that the client does not know of: the
// attempt would have taken it up (mayHaveRun) or released it.
func (o *owner) queuedBy() {
	o.mu.Lock()
	o.queued, o.grantMayWait = true, false
	o.mu.Unlock()
}

// leftGrant records an attempt of unknown outcome that another waiting
// call of the owner takes over (undo): it may have queued the owner, or
// granted it the lock - which took the owner out of the queue, so the
// grant is that call's place in line.
func (o *owner) leftGrant() {
	o.mu.Lock()
	o.queued, o.grantMayWait = true, true
	o.mu.Unlock()
}

// mayHaveRun reports whether the owner's next attempt must say it may
// have run before: a grant left by leftGrant may wait on the server, and
// acquire.lua then takes a field the client does not know of up as a new
// hold, where a request that cannot have run before takes it for the
// leftover of an ended hold, releases it and queues the owner behind the
// waiters (B3).
func (o *owner) mayHaveRun() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.grantMayWait
}

// leftover reports whether the owner is marked queued while no call of
// its own but w waits for a caller: the entry is an ended or abandoned
// call's, whose leave gave up or is still to run.
func (o *owner) leftover(w *waiter) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.queued && o.live(w) == 0
}

// mustLeave reports whether the owner's last waiting call must leave the
// queue: it is still marked queued and no other call waits for a caller
// (else the queue entry, and any grant on its way, are that call's).
func (o *owner) mustLeave() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.queued && o.live(nil) == 0
}

// left applies leave.lua's reply: the owner is out of the queue, and
// every grant it had until now is taken up or given back, so a message
// announcing one is stale for its other calls. It returns what the
// server says the owner holds beyond known, the hold the client knows -
// a grant of unknown outcome, to give back - or a zero View.
func (o *owner) left(r wire.LeaveReply, known wire.View) wire.View {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.queued, o.grantMayWait = false, false
	o.spendLocked(r.Held.Token)
	if r.Held != known && r.Held.Count > 0 {
		return r.Held
	}
	return wire.View{}
}

// unsettledLeave records a leave that did not settle (it failed, or gave
// up): it may still reach the server until end.
func (o *owner) unsettledLeave(end time.Time) {
	o.mu.Lock()
	o.leaveUnsettled = later(o.leaveUnsettled, end)
	o.mu.Unlock()
}

// awaitLeaves waits until no leave of the owner that did not settle can
// reach the server any more, or ctx ends: from then its leave does
// nothing (leave.lua), and cannot take out the entry the caller is about
// to queue, or pass on that entry's grant (X5). At most cleanupTimeout,
// and only after such a leave. A call whose ctx ends first has asked the
// server nothing: it cannot tell whether the lock is busy
// (ErrUnavailable, errLeaveUnsettled).
func (o *owner) awaitLeaves(ctx context.Context) error {
	o.mu.Lock()
	end := o.leaveUnsettled
	o.mu.Unlock()
	wait := time.Until(end)
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return joinLine(ctx.Err(), ErrUnavailable, errLeaveUnsettled)
	}
}

// errLeaveUnsettled is why a call that waited out its owner's earlier
// leave, unanswered and maybe still on its way, could not tell whether the
// lock is busy.
var errLeaveUnsettled = errors.New("an earlier leave of this owner had no answer and may still reach the server")
