package lock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/fairlock/fairlock/backend"
)

// attemptTimeout bounds one acquire attempt. Attempts do not follow the
// caller's cancellation: a request abandoned in flight could still reach
// Redis after the cleanup, and queue (or grant) the owner after its call
// returned. Cancellation is honoured between attempts, one attempt later
// at most.
const attemptTimeout = 5 * time.Second

// waiter is one acquire call: its attempts, its subscription and timers,
// and its single way out.
type waiter struct {
	m        *Mutex
	o        *ownerState
	call     acquireCall // view is filled in for each attempt
	lease    time.Duration
	watchdog bool
	retry    *retrier
	tr       AcquireTracker // nil without an observer
	result   *AcquireResult

	sub     *backend.Subscription // this owner's wake-up channel, once queued
	watch   keyWatch              // the lock hash, while this owner is the head
	timer   *time.Timer
	lastAck time.Time // send time of the latest attempt that queued the owner
	ackedAt int64     // the server's time (µs) when that attempt ran
	headAt  time.Time // when this call learnt the owner is first in line
}

// run makes the call: attempts until the lock is granted, the call gives
// up, or an error ends it; then it cleans up in one place.
func (w *waiter) run(ctx context.Context) (*Hold, error) {
	c := w.m.c
	if !w.call.once {
		c.startWaiting(w.o)
		w.sub = c.takeParked(w.o)
	}
	h, err := w.loop(ctx)
	if w.sub != nil {
		c.park(w.o, w.sub)
	}
	w.watch.stop()
	if w.timer != nil {
		w.timer.Stop()
	}
	if !w.call.once && c.stopWaiting(w.o) && (err != nil || w.o.queued.Load()) {
		// The owner's last waiting call leaves the queue it shares with
		// the others (X5), also when it got the lock but another call left
		// the owner marked queued after that (an attempt of unknown
		// outcome, undo).
		w.leave(ctx)
	}
	return h, err
}

func (w *waiter) loop(ctx context.Context) (*Hold, error) {
	for {
		r, h, err := w.attempt(ctx)
		switch {
		case err != nil:
			return nil, err
		case h != nil:
			return h, nil
		case w.call.once:
			return nil, ErrNotAcquired
		}
		w.noteQueued(r.position)
		if w.sub == nil {
			if err := w.subscribe(ctx); err != nil {
				return nil, err
			}
			// Check again: a release between the attempt and the
			// subscription published to nobody.
			continue
		}
		if r.head {
			w.becameHead()
		} else {
			w.notHead()
		}
		g, err := w.sleep(ctx, r.hint)
		if err != nil {
			return nil, err
		}
		if g.token > 0 {
			if h := w.adopt(ctx, g); h != nil {
				return h, nil
			}
		}
	}
}

// attempt runs acquire.lua under the owner's gate and applies its reply.
// A transient error leaves the outcome unknown: the same request (same
// view, so it cannot apply twice) is sent again after a back-off until the
// caller's context ends (X14), and then undone. TryLockOnce does not
// retry.
func (w *waiter) attempt(ctx context.Context) (acquireReply, *Hold, error) {
	if err := w.o.enter(ctx); err != nil {
		return acquireReply{}, nil, err
	}
	defer w.o.exit()
	for {
		w.call.view, w.call.holdLease = w.o.current().view(), w.o.current().leaseNow()
		sent := time.Now()
		r, err := w.m.c.evalAcquire(ctx, w.m.keys, w.call)
		if err == nil {
			if !r.acquired {
				w.lastAck, w.ackedAt = sent, r.now
				if !w.call.once {
					w.o.queued.Store(true)
				}
				return r, nil, nil
			}
			h, err := w.grant(ctx, r, sent)
			return r, h, err
		}
		if transient(err) && !w.call.once && ctx.Err() == nil {
			if err = w.retry.pause(ctx, err); err == nil {
				continue
			}
		}
		w.undo(ctx, w.call.view)
		return acquireReply{}, nil, err
	}
}

// grant applies a granted attempt sent at sent: the live hold re-entered,
// or a new hold.
func (w *waiter) grant(ctx context.Context, r acquireReply, sent time.Time) (*Hold, error) {
	if live := w.o.current(); live != nil {
		if live.token == r.token {
			live.reentered(r.count, sent, w.lease, w.watchdog)
			return live, nil
		}
		// The server replaced it (it had ended there: lease ran out or
		// forced), so the client's hold was already lost.
		live.end(fmt.Errorf("%w: the server no longer had it when this owner acquired again", ErrLockLost))
	}
	h := newHold(r.token, r.count, sent, w.lease, w.lease, w.watchdog, w.m.holdEnded)
	if err := w.start(ctx, h); err != nil {
		return nil, err
	}
	return h, nil
}

// start makes h the owner's hold and hands it to the watchdog. After Close,
// or when the hold's deadline passed before its grant could be applied (a
// reply slower than the lease), it gives the grant back, so nobody waits
// for a lease that no one will release, and returns why. The caller holds
// the gate.
func (w *waiter) start(ctx context.Context, h *Hold) error {
	w.o.spend(h.token)
	h.endIfOverdue()
	if err := w.m.c.track(h, w.m, w.o); err != nil {
		h.end(err)
		w.undo(ctx, holdView{})
		return err
	}
	w.o.queued.Store(false) // the grant took the owner out of the queue
	w.o.hold = h
	return nil
}

// adopt takes up a hand-over grant announced on the owner's channel (one
// message, no round trip): the release that found this owner first in
// line granted it the lock. Only a grant that ran after the owner's latest
// attempt that queued it (by the server's clock) is for this call - an
// older message, from an earlier call of the owner, is ignored. Such a
// grant ran after that attempt was sent (lastAck), and lasts until the
// liveness deadline the attempt set, a waiter timeout after it ran; so the
// hold's deadline is lastAck plus the waiter timeout (or the lease, if
// shorter) - when less than a third of that is left, an attempt takes the
// grant up instead - and a renewal takes the grant up, extending it to the
// lease, once a third of that has passed (unless the hold ended sooner). It returns nil - and the caller attempts as usual - when the
// grant is not for this call, the owner holds already (another
// goroutine of the owner took the grant up, or an attempt did), another
// call of the owner has taken that grant up or given it back already (it
// is spent), or grants must be acknowledged by replicas (X9: only an
// attempt, sent with WAIT, takes them up).
func (w *waiter) adopt(ctx context.Context, g grantMessage) *Hold {
	c := w.m.c
	if c.cfg.replicas > 0 || w.lastAck.IsZero() || g.at <= w.ackedAt || w.o.enter(ctx) != nil {
		return nil
	}
	token := g.token
	defer w.o.exit()
	if w.o.current() != nil || w.o.spent(token) {
		return nil
	}
	firm := min(w.lease, c.cfg.waiterTimeout)
	if time.Until(w.lastAck.Add(firm)) < firm/3 {
		// Too late to trust the grant's first deadline: an attempt takes it
		// up with a fresh acknowledgement instead.
		return nil
	}
	h := newHold(token, 1, w.lastAck, firm, w.lease, w.watchdog, w.m.holdEnded)
	h.unconfirmed = true
	if w.start(ctx, h) != nil {
		return nil
	}
	// Renewed to the lease by a third of the firm deadline, so a renewal
	// has two thirds of it to get through.
	c.confirm(h, w.lastAck.Add(firm/3))
	w.result.HoldCount, w.result.Token = 1, token
	return h
}

// undo takes the owner out of the queue and gives back whatever an attempt
// of unknown outcome may have granted beyond view, the hold the client
// knows. If the server cannot be asked, the client no longer knows the
// owner's count: its hold ends as lost, so no renewal keeps a lock nobody
// will release, and the lock frees itself within a lease (X13). While
// another call of the owner is waiting and the owner holds nothing, the
// queue entry is that call's, and so is whatever the attempt may have
// granted: its next attempt takes a grant up as a new hold, and the
// owner's last waiting call, if it ends first, leaves the queue and gives
// the grant back (the owner counts as queued). The caller holds the gate.
func (w *waiter) undo(ctx context.Context, view holdView) {
	if view.count == 0 && w.m.c.waitingOthers(w.o, !w.call.once) {
		w.o.queued.Store(true)
		return
	}
	if err := w.giveBack(ctx, view); err != nil {
		if live := w.o.current(); live != nil {
			live.end(fmt.Errorf("%w: its count is unknown after a failed acquire (%v); it frees itself within the lease", ErrLockLost, err))
		}
	}
}

// giveBack takes the owner out of the queue and gives back whatever the
// server says it holds beyond view, the hold the client knows (a grant of
// unknown outcome, a hand-over grant not taken up). The caller holds the
// gate.
func (w *waiter) giveBack(ctx context.Context, view holdView) error {
	left, err := w.m.leaveQueue(ctx, view.token)
	if err == nil {
		// Out of the queue, and every grant this owner had until now is
		// taken up or given back: a message announcing one is stale for
		// its other calls.
		w.o.queued.Store(false)
		w.o.spend(left.held.token)
	}
	if err == nil && left.held != view && left.held.count > 0 {
		cctx, cancel := cleanupContext(ctx)
		_, _, err = w.m.release(cctx, left.held, w.lease)
		cancel()
	}
	return err
}

// leave takes the owner out of the queue, best effort (X5), under the
// gate: a hand-over grant the owner was given and did not take up passes on
// (leave.lua), and anything else the server says the owner holds that the
// client does not know of is given back.
func (w *waiter) leave(ctx context.Context) {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	if w.o.enter(ctx) != nil {
		return
	}
	defer w.o.exit()
	if !w.o.queued.Load() || w.m.c.waitingOthers(w.o, false) {
		// Not queued (a grant or a leave since), or another call of the
		// owner started waiting meanwhile: the queue entry, and any grant
		// on its way, are that call's now, and it leaves when it ends.
		return
	}
	_ = w.giveBack(ctx, w.o.current().view())
}

// subscribe subscribes to the owner's wake-up channel, riding through
// transient errors until ctx ends (X14).
func (w *waiter) subscribe(ctx context.Context) error {
	for {
		sub, err := w.m.c.b.Subscribe(ctx, w.m.channel)
		if err == nil {
			w.sub = sub
			return nil
		}
		if ctx.Err() != nil || !transient(err) {
			return err
		}
		if err := w.retry.pause(ctx, err); err != nil {
			return err
		}
	}
}

// watchDelay is how long an owner waits first in line before it watches
// the lock hash (keyWatch). A hand-over usually comes sooner, with its own
// message, so a short wait at the head costs no tracking commands; a
// change that publishes nothing (a DEL by hand) is noticed at most this
// much later than with a watch from the start.
const watchDelay = 20 * time.Millisecond

// becameHead notes that the owner is first in line.
func (w *waiter) becameHead() {
	if w.headAt.IsZero() {
		w.headAt = time.Now()
	}
}

// notHead notes that the owner is not first in line (any more: dropped as
// dead and queued again at the tail), so it stops watching the lock hash.
func (w *waiter) notHead() {
	w.headAt = time.Time{}
	w.watch.stop()
}

// sleep waits for a wake-up, or at most hint: the heartbeat interval, or
// the lease left when this owner is at the head (X3, X4). It returns the
// hand-over grant the wake-up announced, if any. A wake-up that only says
// the owner is now first in line, and how long the hold has left
// ("head:<ms>", wake in prelude.lua), shortens the wait without a round
// trip; a head that has waited watchDelay starts watching the lock hash
// (one try per sleep: a failed watch costs only the early wake-up).
// Since Go 1.23 Reset also discards a tick nobody received.
func (w *waiter) sleep(ctx context.Context, hint time.Duration) (grantMessage, error) {
	end := time.Now().Add(max(hint, time.Millisecond))
	tried := false
	for {
		wake := end
		if !tried && !w.headAt.IsZero() && w.watch.sub == nil {
			armAt := w.headAt.Add(watchDelay)
			if !time.Now().Before(armAt) {
				w.watch.arm(ctx, w.m)
				tried = true
				continue
			}
			wake = earliest(end, armAt)
		}
		if w.timer == nil {
			w.timer = time.NewTimer(time.Until(wake))
		} else {
			w.timer.Reset(time.Until(wake))
		}
		select {
		case e := <-w.sub.Events():
			w.woke(e)
			if !strings.HasPrefix(e.Payload, headPrefix) {
				return parseGrant(e.Payload), nil
			}
			if ttl, ok := parseHead(e.Payload); ok {
				w.becameHead()
				end = earliest(end, time.Now().Add(ttl))
			}
		case e := <-w.watch.events():
			w.watch.stop() // fired: armed again while still the head
			w.woke(e)
			// A hand-over changes the hash too, and its grant message comes
			// on the same connection right behind the invalidation: let the
			// reader deliver it, and take the grant without a round trip.
			runtime.Gosched()
			select {
			case e := <-w.sub.Events():
				return parseGrant(e.Payload), nil
			default:
			}
			return grantMessage{}, nil
		case <-w.timer.C:
			if !time.Now().Before(end) {
				return grantMessage{}, nil
			} // else the watch is due
		case <-ctx.Done():
			return grantMessage{}, ctx.Err()
		case <-w.m.c.closing:
			return grantMessage{}, ErrClosed
		}
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// headPrefix starts the message that tells a fairlock waiter it is first
// in line behind a held lock: "head:<ms the hold has left>".
const headPrefix = "head:"

// parseHead returns the time left that a head message announced.
func parseHead(payload string) (time.Duration, bool) {
	rest, ok := strings.CutPrefix(payload, headPrefix)
	ms, err := strconv.ParseInt(rest, 10, 64)
	if !ok || err != nil || ms <= 0 {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// grantMessage is a hand-over grant announced on an owner's channel
// ("grant:<token>:<server µs>", hand_over in prelude.lua).
type grantMessage struct {
	token int64 // 0: not a grant
	at    int64 // the server's time when it was granted, µs
}

func parseGrant(payload string) grantMessage {
	rest, ok := strings.CutPrefix(payload, "grant:")
	if !ok {
		return grantMessage{}
	}
	t, at, ok := strings.Cut(rest, ":")
	token, err1 := strconv.ParseInt(t, 10, 64)
	ms, err2 := strconv.ParseInt(at, 10, 64)
	if !ok || err1 != nil || err2 != nil || token <= 0 {
		return grantMessage{}
	}
	return grantMessage{token: token, at: ms}
}

// noteQueued records the first queue position (again after being dropped
// as dead and re-queued).
func (w *waiter) noteQueued(position int) {
	if position > 0 && w.result.Position == 0 {
		w.result.Position = position
		if w.tr != nil {
			w.tr.Queued(position)
		}
	}
}

func (w *waiter) woke(e backend.Event) {
	w.result.Wakeups++
	if w.tr != nil {
		w.tr.Woken(e.Reconnect)
	}
}

// evalAcquire sends one acquire attempt, bounded by attemptTimeout and not
// by ctx's cancellation (see attemptTimeout). With WithReplicaAcks a grant
// fewer replicas acknowledged is an error (X9): the caller undoes it.
func (c *Client) evalAcquire(ctx context.Context, k keyset, a acquireCall) (acquireReply, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), attemptTimeout)
	defer cancel()
	if c.cfg.replicas == 0 {
		rep, err := c.b.Eval(ctx, c.scripts.acquire, k.scriptKeys(), a.args())
		if err != nil {
			return acquireReply{}, err
		}
		return decodeAcquire(rep)
	}
	rep, acked, err := c.b.(backend.ReplicaWaiter).EvalWait(ctx, c.scripts.acquire, k.scriptKeys(), a.args(), c.cfg.replicas, c.cfg.replicaWait)
	if err != nil {
		return acquireReply{}, err
	}
	r, err := decodeAcquire(rep)
	if err == nil && r.acquired && acked < c.cfg.replicas {
		return acquireReply{}, fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrNotReplicated, acked, c.cfg.replicas, c.cfg.replicaWait)
	}
	return r, err
}

// keyWatch is the head waiter's watch on the lock hash (backend.KeyWatcher):
// a change that publishes nothing - a DEL by hand, an expiry - wakes it at
// once rather than at its timer.
type keyWatch struct {
	sub *backend.Subscription
}

// arm starts watching unless already watching or the backend cannot; a
// failure only costs the early wake-up, never the wait.
func (w *keyWatch) arm(ctx context.Context, m *Mutex) {
	kw, ok := m.c.b.(backend.KeyWatcher)
	if w.sub != nil || !ok || m.c.noKeyWatch.Load() {
		return
	}
	sub, err := kw.WatchKey(ctx, m.keys.hash)
	if errors.Is(err, backend.ErrNotSupported) {
		m.c.noKeyWatch.Store(true)
	}
	if err == nil {
		w.sub = sub
	}
}

// events returns the watch's events, or nil (blocks forever) when idle.
func (w *keyWatch) events() <-chan backend.Event {
	if w.sub == nil {
		return nil
	}
	return w.sub.Events()
}

func (w *keyWatch) stop() {
	if w.sub != nil {
		w.sub.Close()
		w.sub = nil
	}
}
