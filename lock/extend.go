package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fairlock/fairlock/lock/internal/wire"
)

// Mutex.Extend: renew.lua with the new lease, through the owner's gate.

// Extend makes h, a hold of this owner taken with an explicit lease
// (LockWithLease or TryLockWithLease), last at least
// lease from now, as redislock's Refresh and redsync's Extend do. The
// server does it only while h is still the lock's hold (its owner and
// fencing token); h's deadline then moves to the send time of the
// acknowledged request plus lease, as a renewal moves it. Extend
// never shortens a hold: when more than lease is left, it stays.
//
// When the hold is gone - its lease ran out, someone force-unlocked or
// deleted the lock, a newer hold replaced it - Extend returns an error
// wrapping ErrLockLost and h ends as a lost hold does (Done closes, Err
// wraps ErrLockLost). A hold that had ended already is never brought back:
// Extend returns its Err (ErrLockLost), or, for a released hold, an error
// wrapping both ErrNotHeld and ErrReleased.
//
// Errors that change nothing in Redis: a nil ctx, or a lease that is not
// positive, under a millisecond or over ten years (ErrInvalidArgument), a
// nil h or a hold of another owner
// (ErrNotHeld), a hold the watchdog renews - taken by Lock or re-entered by
// it (ErrInvalidArgument) - and a closed client (ErrClosed).
//
// Extend runs one at a time with this owner's other calls that change its
// hold (Unlock, acquires), so it never races them: an Extend after Unlock
// finds the hold released. Connection errors are retried with back-off
// until ctx ends or h ends; a request whose outcome is unknown leaves h's
// deadline where it was. If h ends while its Extend is in flight (its
// deadline passed), whatever the server extended is given back at once, so
// a lock the client no longer counts as held is not kept for lease.
func (m *Mutex) Extend(ctx context.Context, h *Hold, lease time.Duration) error {
	if err := m.checkCall(ctx); err != nil {
		return err
	}
	if err := checkDuration("lease", lease); err != nil {
		return m.errorf(err)
	}
	if h == nil {
		return m.errorf(fmt.Errorf("%w: no hold to extend (nil)", ErrNotHeld))
	}
	if err := m.c.life.begin(); err != nil {
		return m.errorf(err)
	}
	defer m.c.life.end()
	o := m.c.owners.acquire(m)
	defer m.c.owners.release(o)
	if err := o.withGate(ctx, func() error { return m.extend(ctx, o, h, lease) }); err != nil {
		return m.errorf(err)
	}
	return nil
}

// extend is Extend in the owner's gate.
func (m *Mutex) extend(ctx context.Context, o *owner, h *Hold, lease time.Duration) error {
	call, view, err := o.extension(h)
	if err != nil {
		return err
	}
	call.Owner, call.Lease, call.Wake = m.field, lease, m.wake()
	got, sent, err := m.sendExtend(ctx, h, call)
	switch {
	case err == nil && got == wire.RenewLost:
		o.end(h, fmt.Errorf("%w: not held when extending (lease ran out, force-unlocked or deleted)", ErrLockLost))
		return h.Err()
	case err == nil && o.renewed(h, call, got, sent):
		return nil
	case h.Err() == nil:
		// Outcome unknown: the server may have extended the hold, which
		// only makes it last longer than the client's deadline says.
		return err
	}
	// h ended (its deadline passed) while the request was in flight: the
	// server may have extended a hold the client no longer counts. Given
	// back by ctx's deadline (plus cleanupGrace), so Extend returns by it
	// too; what is not given back frees itself within lease.
	gctx, cancel := graceContext(ctx)
	defer cancel()
	m.giveBackAll(gctx, view, call.HoldLease)
	if err != nil {
		return joinLine(h.Err(), err)
	}
	return h.Err()
}

// sendExtend runs renew.lua - which lengthens the hold only while it is
// still this owner's hold with this token, and never shortens it -
// retrying transient errors with back-off while ctx and h last. It returns
// renew.lua's answer and when the request that answered was sent.
func (m *Mutex) sendExtend(ctx context.Context, h *Hold, call wire.Renew) (wire.RenewReply, time.Time, error) {
	c := call.Call(m.c.scripts, m.keys)
	got, sent := wire.RenewLost, time.Time{}
	err := newRetrier(m.c.life.closing).do(ctx, func() error {
		sent = time.Now()
		rep, err := m.c.b.Eval(ctx, c.Script, c.Keys, c.Args)
		switch {
		case err == nil:
			got, err = wire.DecodeRenew(rep)
			return err
		case h.Err() != nil: // the hold ended meanwhile: no retry
			return final{err}
		}
		return err
	})
	return got, sent, unwrapFinal(err)
}

// giveBackAll releases, one count at a time, the hold view describes - a
// hold the client has ended - bounded by ctx (the caller's cleanup
// context: cleanupContext or graceContext). It stops at the
// first error or when the server no longer has the hold; the hold frees
// itself within its lease then anyway. It runs in the owner's gate (a
// grant, Extend).
func (m *Mutex) giveBackAll(ctx context.Context, view wire.View, lease time.Duration) {
	_, _ = m.giveBackTo(ctx, view, 0, lease)
}

// errKept: a release that left the count where it was.
var errKept = errors.New("the server kept them")

// giveBackTo releases, one count at a time, the hold view describes down
// to want counts, and returns the count left: 0 when the server no longer
// has the hold; at the first error, or a release that took nothing down
// (errKept), the count reached so far and that error.
func (m *Mutex) giveBackTo(ctx context.Context, view wire.View, want int, lease time.Duration) (int, error) {
	for view.Count > want {
		left, _, err := m.release(ctx, view, lease)
		switch {
		case err != nil:
			return view.Count, err
		case left < 0:
			return 0, nil
		case left >= view.Count:
			return view.Count, errKept
		}
		view.Count = left
	}
	return view.Count, nil
}
