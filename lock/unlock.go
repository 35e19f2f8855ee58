package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fairlock/fairlock/lock/internal/wire"
	"github.com/fairlock/fairlock/lock/observe"
)

// A Mutex's releases: Unlock, this owner's, through the owner's gate;
// ForceUnlock and Delete, anyone's.

// Unlock releases one hold of this owner: the lock is released when
// the count reaches 0, and the next waiter is woken. It returns ErrNotHeld,
// changing nothing, when this owner does not hold the lock.
//
// Connection errors are retried with back-off for 2 to 2.2 s (within the
// unlock latch's lifetime, and never applied twice). A deadline of ctx
// that comes sooner ends Unlock at that deadline. A cancellation of ctx
// stops the retries but lets the request in flight finish - one round
// trip, or those seconds when the server does not answer - so that an
// Unlock cancelled while its request was on the way still releases the
// lock when the server answers, instead of leaving it held until its
// lease runs out. When Unlock fails all the same, the Hold ends (Err
// wraps ErrLockLost) and is no longer renewed, so the lock frees itself
// within one lease whatever happened on the server; when those seconds
// ran out before ctx did, Unlock's error wraps ErrLockLost too, and the
// last connection error.
func (m *Mutex) Unlock(ctx context.Context) (err error) {
	if err := m.checkCall(ctx); err != nil {
		if ctx != nil && ctx.Err() != nil {
			m.endUnsent(ctx.Err())
		}
		return err
	}
	if err := m.c.life.begin(); err != nil {
		return m.errorf(err)
	}
	defer m.c.life.end()
	var result observe.ReleaseResult
	ctx, tr := m.observeRelease(ctx, observe.OpUnlock)
	if tr != nil {
		defer func() { tr.End(releaseResult(result, err, errors.Is(err, ErrNotHeld))) }()
	}
	o := m.c.owners.acquire(m)
	defer m.c.owners.release(o)
	entered := false
	err = o.withGate(ctx, func() error {
		entered = true
		return m.unlock(ctx, o, &result)
	})
	if !entered {
		m.endUnsent(err)
	}
	if err != nil {
		return m.errorf(err)
	}
	return nil
}

// unlock is Unlock in the owner's gate: it sends the release and applies
// its answer (result: what the observer hears).
func (m *Mutex) unlock(ctx context.Context, o *owner, result *observe.ReleaseResult) error {
	h, view, lease := o.releasing(m.c.cfg.lease)
	left, sent, err := m.release(ctx, view, lease)
	if err == nil && h != nil && left > view.Count-1 {
		left, err = m.giveBackUnknown(ctx, view.Token, left, view.Count-1, lease)
	}
	if o.released(h, left, sent, err) && err == nil && left == 0 {
		result.Held = time.Since(h.acquired)
	}
	switch {
	case err != nil:
		return err
	case left < 0:
		return ErrNotHeld
	}
	result.HoldCount = left
	return nil
}

// giveBackUnknown releases the counts of the hold token beyond want, the
// count the client knows is left, that the server says are there (left):
// a re-entry whose caller gave up with its request unanswered, which the
// server ran after the undo that looked for it - a client's connections
// do not keep one owner's requests in order (rueidis spreads them over
// several, go-redis over its pool). Kept, they would hold the lock for
// nobody's Unlock, renewed for as long as the client lives. It returns the
// count left, or an error when the server could not be asked (the hold
// then ends as lost and frees itself within the lease).
func (m *Mutex) giveBackUnknown(ctx context.Context, token int64, left, want int, lease time.Duration) (int, error) {
	ctx, cancel := graceContext(ctx)
	defer cancel()
	left, err := m.giveBackTo(ctx, wire.View{Token: token, Count: left}, want, lease)
	if err != nil {
		return left, fmt.Errorf("%w: counts this client did not know of remain (%v); no longer renewed, it frees itself within the lease", ErrLockLost, err)
	}
	return left, nil
}

// endUnsent ends the owner's hold, if it has a live one, for an Unlock
// that gives up (for the reason err) before it could send its release -
// its context had ended, or ended while it waited for its turn behind
// another call of the owner - so that nothing renews it again and the
// lock frees itself within the lease (X13). It needs no turn: an attempt
// of the owner in flight meanwhile that re-enters the hold finds it ended
// and gives its counts back.
func (m *Mutex) endUnsent(err error) {
	if o := m.c.owners.lookup(m); o != nil {
		o.endLive(fmt.Errorf("%w: unlock gave up before its release was sent (%v); no longer renewed, it frees itself within the lease", ErrLockLost, err))
	}
}

// observeRelease tells the observer, if any, of a release call starting.
func (m *Mutex) observeRelease(ctx context.Context, op observe.Op) (context.Context, observe.ReleaseTracker) {
	if obs := m.c.cfg.observer; obs != nil {
		return obs.StartRelease(ctx, m.call(op))
	}
	return ctx, nil
}

// releaseResult completes r for the observer: released unless err, or
// notHeld.
func releaseResult(r observe.ReleaseResult, err error, notHeld bool) observe.ReleaseResult {
	r.Err = err
	switch {
	case notHeld:
		r.Outcome = observe.OutcomeNotHeld
	case err != nil:
		r.Outcome = observe.OutcomeError
	default:
		r.Outcome = observe.OutcomeReleased
	}
	return r
}

// release runs unlock.lua for the hold view describes (the lock lives at
// least lease more while holds remain), retrying transient
// errors with back-off for at most unlockRetryWindow: every retry reaches
// the server while the first attempt's latch lives (B10), and a later one
// finds the count already taken down. It returns the count left (-1: not
// held) and when the request that answered was sent.
func (m *Mutex) release(ctx context.Context, view wire.View, lease time.Duration) (int, time.Time, error) {
	req := wire.Unlock{Owner: m.field, Lease: lease, Wake: m.wake(), Latch: unlockLatchTTL, View: view, RequestID: m.c.requests.next()}
	window := m.c.unlockBound.at(time.Now())
	actx := unlockContext(ctx, window)
	retry := newRetrier(m.c.life.closing)
	retry.window = window.Done()
	left, sent := 0, time.Time{}
	err := retry.do(ctx, func() error {
		sent = time.Now()
		call := req.Call(m.c.scripts, m.keys)
		rep, err := m.c.b.Eval(actx, call.Script, call.Keys, call.Args)
		req.Retry = true
		if err == nil {
			left, err = wire.DecodeUnlock(rep)
		}
		return err
	})
	if err == nil || ctx.Err() != nil || window.Err() == nil {
		return left, sent, err
	}
	// The retry window ran out, not the caller's context: the hold is
	// lost to the client (X13), for the last connection error.
	if retry.last != nil && !errors.Is(retry.last, context.DeadlineExceeded) {
		return 0, sent, fmt.Errorf("%w: unlock not acknowledged within %v: %w", ErrLockLost, unlockRetryWindow, retry.last)
	}
	return 0, sent, fmt.Errorf("%w: unlock not acknowledged within %v", ErrLockLost, unlockRetryWindow)
}

// ForceUnlock releases the lock whoever holds it and wakes the next waiter,
// which a fairlock waiter takes at once. A fairlock holder is told within
// about one network delay: its Hold ends with ErrLockLost. It reports
// whether a holder was removed. Anyone who can run the scripts can
// force-unlock. It makes one attempt: a connection error comes back
// marked ErrUnavailable, and the caller may try again.
func (m *Mutex) ForceUnlock(ctx context.Context) (released bool, err error) {
	if err := m.checkCall(ctx); err != nil {
		return false, err
	}
	ctx, tr := m.observeRelease(ctx, observe.OpForceUnlock)
	if tr != nil {
		defer func() { tr.End(releaseResult(observe.ReleaseResult{}, err, err == nil && !released)) }()
	}
	n, err := m.evict(ctx, wire.Evict{Wake: m.wake()}, "force-unlocked")
	return n == 1, err
}

// Delete removes the lock's state - the lock hash, queue and timeouts -
// whoever holds it, and wakes the head waiter, which takes the lock; other
// waiters queue again at their next heartbeat. A fairlock holder is told
// within about one network delay: its Hold ends with ErrLockLost. The
// fencing counter is kept so tokens never go backwards. It reports
// whether anything existed. Like ForceUnlock, it makes one attempt; a
// connection error comes back marked ErrUnavailable.
func (m *Mutex) Delete(ctx context.Context) (bool, error) {
	if err := m.checkCall(ctx); err != nil {
		return false, err
	}
	n, err := m.evict(ctx, wire.Evict{Delete: true, Wake: m.wake()}, "deleted")
	return n > 0, err
}

// evict runs ForceUnlock's or Delete's script and returns its count. The
// hold this owner had when the call was sent ends as lost; a hold granted
// while the call was in flight (the call woke this very owner) is a newer
// one and stays.
func (m *Mutex) evict(ctx context.Context, req wire.Evict, how string) (int, error) {
	if err := m.c.life.begin(); err != nil {
		return 0, m.errorf(err)
	}
	defer m.c.life.end()
	o := m.c.owners.acquire(m)
	defer m.c.owners.release(o)
	var prev *Hold
	if err := o.withGate(ctx, func() error { prev = o.current(); return nil }); err != nil {
		return 0, m.errorf(err)
	}
	call := req.Call(m.c.scripts, m.keys)
	rep, err := m.c.b.Eval(ctx, call.Script, call.Keys, call.Args)
	if err != nil {
		return 0, m.errorf(unavailable(err))
	}
	n, err := wire.DecodeCount(call, rep)
	if err != nil {
		return 0, m.errorf(err)
	}
	o.end(prev, fmt.Errorf("%w: lock %s", ErrLockLost, how))
	return n, nil
}
