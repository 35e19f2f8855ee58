package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock/internal/wire"
	"github.com/fairlock/fairlock/lock/observe"
)

// The attempt protocol of an acquire call (waiter.go has its wait):
// every script a waiter sends goes through its owner's gate - an attempt
// (acquire.lua) and what follows from its reply (a grant taken, a grant
// given back), a hand-over grant taken from a message, and leaving the
// queue (leave.lua) - and each reply is applied to the owner
// (lifecycle.go) before the gate is free again.

// attemptTimeout bounds one acquire attempt. Attempts do not follow the
// caller's cancellation: a request abandoned in flight could still reach
// Redis after the cleanup, and queue (or grant) the owner after its call
// returned. Cancellation is honoured between attempts, one attempt later
// at most. Attempts sent within attemptGrain of each other share one
// deadline (sharedBound): an attempt ends between attemptTimeout and
// attemptTimeout+attemptGrain after it was sent.
const (
	attemptTimeout = 5 * time.Second
	attemptGrain   = 500 * time.Millisecond
)

// errOwnerWaits is why an acquire call whose context ended before it could
// send anything could not tell whether the lock is busy.
var errOwnerWaits = errors.New("another call of this owner is still waiting for the server's reply")

// attempt runs acquire.lua through the owner's gate and applies its
// reply: a hold (grant), or the owner queued. A call whose deadline
// passes before it enters the gate - another call of the owner holds it,
// waiting for the server - fails with ErrUnavailable (errOwnerWaits). A transient error leaves
// the outcome unknown: the same request (same view, so it cannot apply
// twice) is sent again after a back-off until the caller's context ends
// (X14), and then undone; a wake-up that arrives meanwhile ends the
// back-off (the retry reads whatever it announced: a grant waits in the
// lock hash for the owner's next attempt). A single attempt does not
// retry.
func (w *waiter) attempt(ctx context.Context) (r wire.AcquireReply, h *Hold, err error) {
	if !w.joined && !w.call.Once {
		// Outside the gate, which the owner's other calls need meanwhile
		// (leaveLeftover waits again, inside, for a leave that failed
		// since).
		if err := w.o.awaitLeaves(ctx); err != nil {
			w.failing.Store(&err) // its caller may return first (runBounded)
			return r, nil, err
		}
	}
	entered := false
	defer func() {
		if err != nil && !entered && !errors.Is(err, context.Canceled) && w.o.gateHeld() && w.lastAck.IsZero() {
			// ctx's deadline passed while another call of the owner held
			// the gate, waiting for the server: this call has had no
			// answer and cannot tell whether the lock is busy. (A
			// deadline that had passed already, with the gate free, is a
			// plain one; so is one that found the gate held after the
			// server had queued this call: the lock was busy, and the
			// owner behind others - the other call's round trip may be a
			// heartbeat woken with this call's attempt.)
			err = joinLine(err, ErrUnavailable, errOwnerWaits)
			// Its caller may return before the call does (runBounded),
			// and must say the same.
			w.failing.Store(&err)
		}
	}()
	err = w.o.withGate(ctx, func() error {
		entered = true
		var sent time.Time
		var err error
		if r, sent, err = w.send(ctx); err != nil {
			w.undo(ctx, w.call.View)
			return err
		}
		if r.Acquired {
			if h, err = w.grant(ctx, r, sent); err == nil && w.abandoned.Load() {
				h, err = nil, w.giveBackAbandoned(ctx)
			}
			return err
		}
		w.lastAck, w.ackedAt = sent, r.Now
		w.m.c.floor.observe(r.Now, time.Now())
		if !w.call.Once {
			w.o.queuedBy()
		}
		return nil
	})
	return r, h, err
}

// send sends the attempt with the owner's view, again after a transient
// error (attempt), and returns the reply and when the request that
// answered was sent.
func (w *waiter) send(ctx context.Context) (r wire.AcquireReply, sent time.Time, err error) {
	w.retry.wake = nil
	if w.sub != nil {
		w.retry.wake = w.sub.Events()
	}
	w.call.Retry = w.o.mayHaveRun()
	err = w.retry.do(ctx, func() (err error) {
		if err := w.leaveLeftover(ctx); err != nil {
			return err
		}
		// Three times at most: a request naming a hold the server no
		// longer has is refused (r.Gone), the hold ends, and the next
		// names none; a grant of a hold the owner has ended is given
		// back (giveBackSpent), and the next finds it gone.
		for range 3 {
			w.call.View, w.call.HoldLease, w.call.Spent = w.o.attemptView()
			w.sentSeq = w.m.c.wakes.seq()
			sent = time.Now()
			w.inFlight.Store(true)
			r, err = w.evalAcquire(ctx, sent)
			w.noteFailure(err)
			w.call.Retry = w.call.Retry || (err != nil && !notRun(err))
			switch {
			case err != nil:
				return err
			case r.Gone:
				w.o.gone(w.call.View)
			case r.Acquired && r.Token != w.call.View.Token && w.o.spentGrant(r.Token):
				// (A re-entry of a hold that ended meanwhile is grant's.)
				if err := w.giveBackSpent(ctx, r); err != nil {
					return err
				}
			default:
				return nil
			}
			// The next request has not run before (but another call's
			// may have: mayHaveRun).
			w.call.Retry = w.o.mayHaveRun()
		}
		return fmt.Errorf("%w: acquire refused, or granted a hold this owner had ended, three times", ErrUnexpectedReply)
	})
	return r, sent, err
}

// leaveLeftover, before the call's first attempt, takes the owner out of
// a queue entry no waiting call of the owner holds: an earlier call's,
// whose leave gave up (the entry stays live until its liveness deadline,
// X5) or has not run yet. The attempt would heartbeat that entry and keep
// its place; the call queues at the tail instead, behind the waiters that
// queued after the earlier call (B3), and a grant left to that entry goes
// back. An entry of a call still waiting is shared (B3), and so is one
// this call found shared at its first attempt.
func (w *waiter) leaveLeftover(ctx context.Context) error {
	if w.joined {
		return nil
	}
	if w.o.leftover(w) {
		w.inFlight.Store(true)
		err := w.giveBack(ctx, w.o.view())
		w.noteFailure(err)
		if err != nil {
			return err
		}
		// No attempt of this call has been sent: what the leave settled
		// is all the next one may have run before.
		w.call.Retry = w.o.mayHaveRun()
	}
	if !w.call.Once {
		// A call that never queues has no entry, nor grant, to lose.
		if err := w.o.awaitLeaves(ctx); err != nil {
			// Its caller may return while the undo after it waits for
			// the server (runBounded), and must say the same.
			w.failing.Store(&err)
			return err
		}
	}
	w.joined = true
	return nil
}

// giveBackSpent gives back a grant of a hold the owner has ended
// (spentGrant): acquire.lua took the field of that hold - a hand-over
// grant the client held by its message, never taken up on the server -
// for a grant the client did not know of yet, and took it up. Kept, it
// would be a new hold with the ended hold's token, which that hold's
// Unlock, unacknowledged and still on its way, could release under it
// (X6, X13). Given back, the lock goes to the head, and the next request
// queues the owner behind it (B3). A give-back that fails is tried again
// with the attempt, which then finds the field a leftover (acquire.lua
// releases or replaces it).
func (w *waiter) giveBackSpent(ctx context.Context, r wire.AcquireReply) error {
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	if _, err := w.m.giveBackTo(cctx, wire.View{Token: r.Token, Count: r.Count}, 0, w.lease); err != nil {
		return fmt.Errorf("giving back a grant of a hold this owner had ended: %v", err)
	}
	return nil
}

// giveBackAbandoned releases, in the owner's gate, the count a grant
// brought to a call whose caller has returned (runBounded): before the gate
// is free, so that no other call of the owner re-enters the hold and keeps
// the lock by the place in line of a caller who is gone, ahead of the
// owners queued after it. The call ends with its caller's error.
func (w *waiter) giveBackAbandoned(ctx context.Context) error {
	cctx, cancel := cleanupContext(context.Background())
	defer cancel()
	var result observe.ReleaseResult
	_ = w.m.unlock(cctx, w.o, &result)
	if err := ctx.Err(); err != nil {
		return err
	}
	return context.Canceled
}

// evalAcquire sends one attempt, sent at sent, bounded by attemptTimeout
// (and up to attemptGrain more: sharedBound) and not by ctx's
// cancellation (see attemptTimeout). With WithReplicaAcks a grant fewer
// replicas acknowledged is an error (X9): the caller undoes it.
func (w *waiter) evalAcquire(ctx context.Context, sent time.Time) (wire.AcquireReply, error) {
	c := w.m.c
	ctx = c.attemptBound.bound(ctx, sent)
	call := w.call.Call(c.scripts, w.m.keys)
	if c.cfg.replicas == 0 {
		rep, err := c.b.Eval(ctx, call.Script, call.Keys, call.Args)
		if err != nil {
			return wire.AcquireReply{}, err
		}
		return wire.DecodeAcquire(rep)
	}
	rep, acked, err := c.b.(backend.ReplicaWaiter).EvalWait(ctx, call.Script, call.Keys, call.Args, c.cfg.replicas, c.cfg.replicaWait)
	if err != nil {
		return wire.AcquireReply{}, err
	}
	r, err := wire.DecodeAcquire(rep)
	if err == nil && r.Acquired && acked < c.cfg.replicas {
		return wire.AcquireReply{}, fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrNotReplicated, acked, c.cfg.replicas, c.cfg.replicaWait)
	}
	return r, err
}

// grant applies a granted attempt sent at sent, in the owner's gate: the
// live hold re-entered, or a new hold, handed to the watchdog. What the
// owner cannot keep - a re-entry of a hold that ended while the attempt
// was in flight, a grant slower than its lease, a grant after Close - is
// given back.
func (w *waiter) grant(ctx context.Context, r wire.AcquireReply, sent time.Time) (*Hold, error) {
	live := w.o.current()
	h, err := w.o.granted(r, sent, w.call.View, w.lease, w.watchdog)
	switch {
	case errors.Is(err, errEndedReentry):
		// The client has told the hold's holders it is over and renews
		// it no more (X13): every count of it goes back.
		cctx, cancel := cleanupContext(ctx)
		defer cancel()
		w.m.giveBackAll(cctx, wire.View{Token: r.Token, Count: r.Count}, w.lease)
		return nil, err
	case err != nil:
		w.undo(ctx, wire.View{})
		return nil, err
	case h == live:
		return h, nil
	}
	if err := w.m.c.track(h, w.m, w.o); err != nil {
		w.o.end(h, err)
		w.undo(ctx, wire.View{})
		return nil, err
	}
	return h, nil
}

// adopt takes up, through the owner's gate, a hand-over grant announced
// on the owner's channel (one message, no round trip): the release that
// found this owner first in line granted it the lock. Only a grant that
// ran after the owner's latest attempt that queued it (by the server's
// clock) is for this call - an older message, from an earlier call of
// the owner, is ignored. Such a grant ran after that attempt was sent
// (lastAck), and lasts until the liveness deadline the attempt set, a
// waiter timeout after it ran; so the hold's deadline is lastAck plus the
// waiter timeout (or the lease, if shorter), and a renewal takes the
// grant up, extending it to the lease, once a third of that has passed
// (unless the hold ended sooner). It returns nil - and the caller
// attempts as usual - when the grant is not for this call, the owner
// cannot take it (owner.adopt), or grants must be acknowledged by
// replicas (X9: only an attempt, sent with WAIT, takes them up).
func (w *waiter) adopt(ctx context.Context, g wire.Message) (h *Hold) {
	c := w.m.c
	if c.cfg.replicas > 0 || w.lastAck.IsZero() || g.At <= w.ackedAt {
		return nil
	}
	firm := min(w.lease, c.cfg.waiterTimeout)
	_ = w.o.withGate(ctx, func() error {
		if h = w.o.adopt(g.Token, w.lastAck, firm, w.lease, w.watchdog); h == nil {
			return nil
		}
		if err := c.track(h, w.m, w.o); err != nil {
			w.o.end(h, err)
			w.undo(ctx, wire.View{})
			h = nil
			return nil
		}
		// Renewed to the lease by a third of the firm deadline, so a
		// renewal has two thirds of it to get through.
		c.dog.confirm(h, w.lastAck.Add(firm/3))
		w.result.HoldCount, w.result.Token = 1, g.Token
		return nil
	})
	return h
}

// undo, in the owner's gate, takes the owner out of the queue and gives
// back whatever an attempt of unknown outcome may have granted beyond
// view, the hold the client knows. If the server cannot be asked, the
// client no longer knows the owner's count: its hold ends as lost, so no
// renewal keeps a lock nobody will release, and the lock frees itself
// within a lease (X13). While another call of the owner is waiting and
// the owner holds nothing, the queue entry is that call's, and so is
// whatever the attempt may have granted - the owner's place in line, as a
// grant takes the owner out of the queue. The owner's attempts then say
// they may have run before until a reply settles that (leftGrant), so
// the next takes a grant up as a new hold; the owner's last waiting call,
// if it ends first, leaves the queue and gives the grant back (the owner
// counts as queued).
func (w *waiter) undo(ctx context.Context, view wire.View) {
	if view.Count == 0 && w.o.othersWaiting(w) {
		w.o.leftGrant()
		return
	}
	if err := w.giveBack(ctx, view); err != nil {
		w.o.endLive(fmt.Errorf("%w: its count is unknown after a failed acquire (%v); it frees itself within the lease", ErrLockLost, err))
	}
}

// giveBack, in the owner's gate, takes the owner out of the queue and
// gives back whatever the server says it holds beyond view, the hold the
// client knows (a grant of unknown outcome, a hand-over grant not taken
// up).
func (w *waiter) giveBack(ctx context.Context, view wire.View) error {
	left, err := w.m.leaveQueue(ctx, view.Token)
	if err != nil {
		// The entry stays live until its liveness deadline, at most a
		// waiter timeout from now, and the leave may still reach the
		// server until it gives up: the owner is remembered, still
		// queued, so that its next call leaves it first (leaveLeftover)
		// and queues only after (awaitLeaves).
		var u leaveUnsettled
		keep := w.m.c.cfg.waiterTimeout
		if errors.As(err, &u) {
			w.o.unsettledLeave(u.end)
			keep = max(keep, time.Until(u.end))
		}
		w.m.c.owners.remember(w.m, keep)
		return err
	}
	if extra := w.o.left(left, view); extra.Count > 0 {
		cctx, cancel := cleanupContext(ctx)
		defer cancel()
		_, _, err = w.m.release(cctx, extra, w.lease)
	}
	return err
}

// leave takes the owner out of the queue through its gate, best effort
// (X5): a hand-over grant the owner was given and did not take up passes
// on (leave.lua), and anything else the server says the owner holds that
// the client does not know of is given back.
func (w *waiter) leave(ctx context.Context) {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	_ = w.o.withGate(ctx, func() error {
		if !w.o.mustLeave() {
			// Not queued (a grant or a leave since), or another call of
			// the owner started waiting meanwhile: the queue entry, and
			// any grant on its way, are that call's now, and it leaves
			// when it ends.
			return nil
		}
		return w.giveBack(ctx, w.o.view())
	})
}
