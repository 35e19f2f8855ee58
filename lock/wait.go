package lock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock/internal/wire"
	"github.com/fairlock/fairlock/lock/observe"
)

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

// waiter is one acquire call: its attempts, its subscription and timers,
// and its single way out.
type waiter struct {
	m        *Mutex
	o        *owner
	call     wire.Acquire // view is filled in for each attempt
	lease    time.Duration
	watchdog bool
	retry    retrier
	tr       observe.AcquireTracker // nil without an observer
	result   observe.AcquireResult  // copied to the caller's when the call ends

	sub     *backend.Subscription // this owner's wake-up channel, once queued
	subbing *background           // its Subscribe in flight (startSubscribe)
	watch   keyWatch              // the lock hash, while this owner is the head
	timer   *time.Timer
	lastAck time.Time // send time of the latest attempt that queued the owner
	ackedAt int64     // the server's time (µs) when that attempt ran
	headAt  time.Time // when this call learnt the owner is first in line
	sentSeq uint64    // the client's hold ends (endSeq) when the latest attempt was sent
	// subscribeAt: when to subscribe, if the head still waits then (zero:
	// at once); set while another owner of the client holds the lock.
	subscribeAt time.Time
	local       chan struct{} // wakes the head when a hold of this client on the lock ends (localwake.go)

	// Read by the caller while the call goes on beside it (deadline.go).
	failing   atomic.Pointer[error] // the latest attempt's connection error; nil after a reply
	inFlight  atomic.Bool           // an attempt awaits its reply
	abandoned atomic.Bool           // the caller returned: the observer hears no more
}

// run makes the call: attempts until the lock is granted, the call gives
// up, or an error ends it; then it cleans up in one place.
func (w *waiter) run(ctx context.Context) (*Hold, error) {
	c := w.m.c
	if !w.call.Once {
		w.o.startWaiting()
		w.sub = c.takeParked(w.o)
	}
	h, err := w.loop(ctx)
	if w.local != nil {
		c.stopAwaiting(w.m.keys.Hash, w.local)
	}
	w.stopSubscribing()
	if w.sub != nil {
		c.park(w.o, w.sub)
	}
	w.watch.stop()
	if w.timer != nil {
		w.timer.Stop()
	}
	if !w.call.Once && w.o.stopWaiting(err != nil) {
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
		case w.call.Once:
			return nil, ErrNotAcquired
		}
		w.noteQueued(r.Position)
		if r.Head {
			w.becameHead()
			if w.awaitHolder() {
				continue // a local hold on the lock ended meanwhile: its wake-up went to nobody
			}
		} else {
			w.notHead()
		}
		if w.sub == nil && w.subbing == nil && w.subscribeAt.IsZero() {
			w.startSubscribe(ctx)
		}
		g, err := w.sleep(ctx, r.Hint)
		if err != nil {
			return nil, err
		}
		if g.Kind == wire.Grant {
			if h := w.adopt(ctx, g); h != nil {
				return h, nil
			}
		}
	}
}

// attempt runs acquire.lua under the owner's gate and applies its reply.
// A transient error leaves the outcome unknown: the same request (same
// view, so it cannot apply twice) is sent again after a back-off until the
// caller's context ends (X14), and then undone; a wake-up that arrives
// meanwhile ends the back-off (the retry reads whatever it announced: a
// grant waits in the lock hash for the owner's next attempt). A single
// attempt does not retry.
func (w *waiter) attempt(ctx context.Context) (wire.AcquireReply, *Hold, error) {
	if err := w.o.enter(ctx); err != nil {
		return wire.AcquireReply{}, nil, err
	}
	defer w.o.exit()
	w.retry.wake = nil
	if w.sub != nil {
		w.retry.wake = w.sub.Events()
	}
	var r wire.AcquireReply
	var sent time.Time
	w.call.Retry = false
	err := w.retry.do(ctx, func() (err error) {
		w.call.View, w.call.HoldLease = w.o.attemptView()
		w.sentSeq = w.m.c.endSeq()
		sent = time.Now()
		w.inFlight.Store(true)
		r, err = w.m.c.evalAcquire(ctx, sent, w.m.keys, w.call)
		w.noteFailure(err)
		w.call.Retry = w.call.Retry || (err != nil && !notRun(err))
		return err
	})
	switch {
	case err != nil:
		w.undo(ctx, w.call.View)
		return wire.AcquireReply{}, nil, err
	case r.Acquired:
		h, err := w.grant(ctx, r, sent)
		return r, h, err
	}
	w.lastAck, w.ackedAt = sent, r.Now
	if !w.call.Once {
		w.o.queuedBy()
	}
	return r, nil, nil
}

// grant applies a granted attempt sent at sent: the live hold re-entered,
// or a new hold, handed to the watchdog. What the owner cannot keep - a
// re-entry of a hold that ended while the attempt was in flight, a grant
// slower than its lease, a grant after Close - is given back. The caller
// holds the gate.
func (w *waiter) grant(ctx context.Context, r wire.AcquireReply, sent time.Time) (*Hold, error) {
	live := w.o.current()
	h, err := w.o.granted(r, sent, w.call.View, w.lease, w.watchdog)
	switch {
	case errors.Is(err, errEndedReentry):
		// The client has told the hold's holders it is over and renews
		// it no more (X13): every count of it goes back.
		w.m.giveBackAll(ctx, wire.View{Token: r.Token, Count: r.Count}, w.lease)
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

// adopt takes up a hand-over grant announced on the owner's channel (one
// message, no round trip): the release that found this owner first in
// line granted it the lock. Only a grant that ran after the owner's latest
// attempt that queued it (by the server's clock) is for this call - an
// older message, from an earlier call of the owner, is ignored. Such a
// grant ran after that attempt was sent (lastAck), and lasts until the
// liveness deadline the attempt set, a waiter timeout after it ran; so the
// hold's deadline is lastAck plus the waiter timeout (or the lease, if
// shorter), and a renewal takes the grant up, extending it to the lease,
// once a third of that has passed (unless the hold ended sooner). It
// returns nil - and the caller attempts as usual - when the grant is not
// for this call, the owner cannot take it (owner.adopt), or grants must
// be acknowledged by replicas (X9: only an attempt, sent with WAIT, takes
// them up).
func (w *waiter) adopt(ctx context.Context, g wire.Message) *Hold {
	c := w.m.c
	if c.cfg.replicas > 0 || w.lastAck.IsZero() || g.At <= w.ackedAt || w.o.enter(ctx) != nil {
		return nil
	}
	defer w.o.exit()
	firm := min(w.lease, c.cfg.waiterTimeout)
	h := w.o.adopt(g.Token, w.lastAck, firm, w.lease, w.watchdog)
	if h == nil {
		return nil
	}
	if err := c.track(h, w.m, w.o); err != nil {
		w.o.end(h, err)
		w.undo(ctx, wire.View{})
		return nil
	}
	// Renewed to the lease by a third of the firm deadline, so a renewal
	// has two thirds of it to get through.
	c.dog.confirm(h, w.lastAck.Add(firm/3))
	w.result.HoldCount, w.result.Token = 1, g.Token
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
func (w *waiter) undo(ctx context.Context, view wire.View) {
	if view.Count == 0 && w.o.othersWaiting(!w.call.Once) {
		w.o.queuedBy()
		return
	}
	if err := w.giveBack(ctx, view); err != nil {
		w.o.endLive(fmt.Errorf("%w: its count is unknown after a failed acquire (%v); it frees itself within the lease", ErrLockLost, err))
	}
}

// giveBack takes the owner out of the queue and gives back whatever the
// server says it holds beyond view, the hold the client knows (a grant of
// unknown outcome, a hand-over grant not taken up). The caller holds the
// gate.
func (w *waiter) giveBack(ctx context.Context, view wire.View) error {
	left, err := w.m.leaveQueue(ctx, view.Token)
	if err != nil {
		return err
	}
	if extra := w.o.left(left, view); extra.Count > 0 {
		cctx, cancel := cleanupContext(ctx)
		defer cancel()
		_, _, err = w.m.release(cctx, extra, w.lease)
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
	if !w.o.mustLeave() {
		// Not queued (a grant or a leave since), or another call of the
		// owner started waiting meanwhile: the queue entry, and any grant
		// on its way, are that call's now, and it leaves when it ends.
		return
	}
	_ = w.giveBack(ctx, w.o.view())
}

// startSubscribe subscribes to the owner's wake-up channel beside the
// wait loop (background.go), riding through transient errors with
// back-off for at most subscribeTimeout (X14). Meanwhile the waiter keeps
// its heartbeat, and the head its attempt at the lease's end, by their
// timers (X2, X3); once the subscription is confirmed the waiter attempts
// again at once (sleep), since a release between its attempt and the
// subscription published to nobody.
func (w *waiter) startSubscribe(ctx context.Context) {
	c, channel := w.m.c, w.m.channel
	w.subbing = c.goBackground(ctx, subscribeTimeout, func(ctx context.Context) (sub *backend.Subscription, err error) {
		err = newRetrier(c.closing).do(ctx, func() (err error) {
			sub, err = c.subscribe(ctx, channel)
			return err
		})
		return sub, err
	})
}

// subscribed applies the result of the Subscribe in flight. It reports
// whether the waiter is subscribed now, or the error that ends its call:
// ctx's, or one that is not transient. After a transient one (the try
// ran out of time on a stalled connection) another try starts.
func (w *waiter) subscribed(ctx context.Context, r backgroundResult) (bool, error) {
	w.subbing = nil
	switch {
	case r.err == nil:
		w.sub = r.sub
		return true, nil
	case ctx.Err() != nil:
		return false, ctx.Err()
	case !transient(r.err), errors.Is(r.err, ErrClosed):
		return false, r.err
	}
	w.startSubscribe(ctx)
	return false, nil
}

// stopSubscribing ends the Subscribe in flight, if any, when the call
// ends; a subscription it has made is kept (parked, in run).
func (w *waiter) stopSubscribing() {
	if sub := w.subbing.stop(); sub != nil {
		w.sub = sub
	}
	w.subbing = nil
}

// events returns the wake-ups of the owner's channel, or nil (blocks
// forever) while not subscribed.
func (w *waiter) events() <-chan backend.Event {
	if w.sub == nil {
		return nil
	}
	return w.sub.Events()
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

// awaitHolder has the head told when a hold of this client on the lock
// ends (localwake.go) while it is not subscribed yet: when the holder
// shares the client, its release usually comes before the head's
// subscription would. It reports whether one ended after the attempt that
// made the owner the head was sent; the caller attempts again at once
// then. While another owner of the client holds the lock, the head
// subscribes only localSubscribeDelay later (subscribeAt). Once per call.
func (w *waiter) awaitHolder() bool {
	if w.local != nil || w.sub != nil {
		return false // registered already, or subscribed: the message comes
	}
	w.local = make(chan struct{}, 1)
	ended, heldHere := w.m.c.awaitLocal(w.m.keys.Hash, w.local, w.sentSeq, w.o)
	if heldHere && w.subbing == nil {
		w.subscribeAt = time.Now().Add(localSubscribeDelay)
	}
	if ended {
		w.woke(backend.Event{}) // a wake-up in process, before the head registered
	}
	return ended
}

// localWake returns the channel of the head's local wake-ups, or nil
// (blocks forever) once it is subscribed: then the release's own message
// comes, and may hand the lock over without a round trip.
func (w *waiter) localWake() <-chan struct{} {
	if w.sub != nil {
		return nil
	}
	return w.local
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
// trip; a head that has waited watchDelay, subscribed, starts watching the
// lock hash (one try per sleep: a failed watch costs only the early
// wake-up). The subscription and the watch are made beside the sleep
// (background.go), whose timer runs meanwhile, whatever the subscription
// connection does (X2); a subscription confirmed ends the sleep, for an
// attempt (startSubscribe). A head that put off its subscription
// (subscribeAt) starts it when due, and until then wakes at a local
// wake-up (localwake.go). Since Go 1.23 Reset also discards a tick nobody
// received.
func (w *waiter) sleep(ctx context.Context, hint time.Duration) (wire.Message, error) {
	end := time.Now().Add(max(hint, time.Millisecond))
	tried := false
	for {
		wake := end
		if !w.subscribeAt.IsZero() {
			if !time.Now().Before(w.subscribeAt) {
				w.subscribeAt = time.Time{}
				w.startSubscribe(ctx)
			} else {
				wake = earliest(wake, w.subscribeAt)
			}
		}
		if !tried && !w.headAt.IsZero() && w.sub != nil && w.watch.idle() {
			armAt := w.headAt.Add(watchDelay)
			if !time.Now().Before(armAt) {
				w.watch.arm(ctx, w.m)
				tried = true
				continue
			}
			wake = earliest(end, armAt)
		}
		w.setTimer(wake)
		select {
		case e := <-w.events():
			e = w.sub.Latest(e) // the latest news: a grant behind a "first in line"
			w.woke(e)
			msg := wire.ParseMessage(e.Payload)
			if msg.Kind != wire.Head {
				return msg, nil
			}
			w.becameHead()
			end = earliest(end, time.Now().Add(msg.TTL))
		case e := <-w.watch.events():
			return w.keyChanged(e), nil
		case <-w.localWake():
			w.woke(backend.Event{})
			return wire.Message{}, nil // a hold of this client on the lock ended: attempt
		case r := <-w.subbing.result():
			if ok, err := w.subscribed(ctx, r); ok || err != nil {
				return wire.Message{}, err
			}
		case r := <-w.watch.armed():
			w.watch.settle(w.m, r)
		case <-w.timer.C:
			if !time.Now().Before(end) {
				return wire.Message{}, nil
			} // else the watch is due
		case <-ctx.Done():
			return wire.Message{}, ctx.Err()
		case <-w.m.c.closing:
			return wire.Message{}, ErrClosed
		}
	}
}

// setTimer sets the sleep's timer to fire at wake.
func (w *waiter) setTimer(wake time.Time) {
	if w.timer == nil {
		w.timer = time.NewTimer(time.Until(wake))
		return
	}
	w.timer.Reset(time.Until(wake))
}

// keyChanged handles the watch's event: the lock hash changed. A
// hand-over changes the hash too, and its grant message comes on the same
// connection right behind the invalidation: the reader is let deliver
// it, so the grant is taken without a round trip.
func (w *waiter) keyChanged(e backend.Event) wire.Message {
	w.watch.stop() // fired: armed again while still the head
	w.woke(e)
	runtime.Gosched()
	select {
	case e := <-w.events():
		return wire.ParseMessage(e.Payload)
	default:
		return wire.Message{}
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// noteQueued records the first queue position (again after being dropped
// as dead and re-queued).
func (w *waiter) noteQueued(position int) {
	if position > 0 && w.result.Position == 0 {
		w.result.Position = position
		if tr := w.tracker(); tr != nil {
			tr.Queued(position)
		}
	}
}

func (w *waiter) woke(e backend.Event) {
	w.result.Wakeups++
	if tr := w.tracker(); tr != nil {
		tr.Woken(e.Reconnect)
	}
}

// evalAcquire sends one acquire attempt, sent at sent, bounded by
// attemptTimeout (and up to attemptGrain more: sharedBound) and not by
// ctx's cancellation (see attemptTimeout). With WithReplicaAcks a grant
// fewer replicas acknowledged is an error (X9): the caller undoes it.
func (c *Client) evalAcquire(ctx context.Context, sent time.Time, k wire.Keys, a wire.Acquire) (wire.AcquireReply, error) {
	ctx = c.attemptBound.bound(ctx, sent)
	call := a.Call(c.scripts, k)
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

// keyWatch is the head waiter's watch on the lock hash (backend.KeyWatcher):
// a change that publishes nothing - a DEL by hand, an expiry - wakes it at
// once rather than at its timer.
type keyWatch struct {
	sub    *backend.Subscription
	arming *background // a WatchKey in flight (arm)
}

// idle reports whether the head neither watches nor is arming a watch.
func (w *keyWatch) idle() bool { return w.sub == nil && w.arming == nil }

// arm starts arming a watch beside the wait loop (background.go), unless
// one is armed or arming already or the backend cannot; a failure, or a
// subscription connection that stalls, only costs the early wake-up,
// never the wait or the heartbeat (X2).
func (w *keyWatch) arm(ctx context.Context, m *Mutex) {
	kw := m.c.watcher()
	if !w.idle() || kw == nil {
		return
	}
	key := m.keys.Hash
	w.arming = m.c.goBackground(ctx, watchTimeout, func(ctx context.Context) (*backend.Subscription, error) {
		return kw.WatchKey(ctx, key)
	})
}

// armed returns the channel the arming's result arrives on, or nil
// (blocks forever) when none is in flight.
func (w *keyWatch) armed() <-chan backgroundResult { return w.arming.result() }

// settle applies the arming's result.
func (w *keyWatch) settle(m *Mutex, r backgroundResult) {
	w.arming = nil
	if errors.Is(r.err, backend.ErrNotSupported) {
		m.c.noKeyWatch.Store(true)
	}
	if r.err == nil {
		w.sub = r.sub
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
	if sub := w.arming.stop(); sub != nil {
		sub.Close()
	}
	w.arming = nil
	if w.sub != nil {
		w.sub.Close()
		w.sub = nil
	}
}
