package lock

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock/internal/wire"
	"github.com/fairlock/fairlock/lock/observe"
)

// waiter is one acquire call: its attempts (attempt.go), its
// subscription to the owner's wake-up channel, its watch on the lock hash
// (keyWatch) and its timers, and its single way out. It is the call's
// own: only the call's goroutine touches it, but for the fields the
// caller reads while the call goes on beside it (deadline.go).
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
	joined  bool      // the first attempt found no leftover queue entry to leave (leaveLeftover)
	counted bool      // counted among the owner's waiting calls (guarded by o.mu)
	gaveUp  bool      // and among its abandoned ones (owner.abandon)
	lastAck time.Time // send time of the latest attempt that queued the owner
	ackedAt int64     // the server's time (µs) when that attempt ran
	headAt  time.Time // when this call learnt the owner is first in line
	sentSeq uint64    // the client's hold ends (localWakes.seq) when the latest attempt was sent
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
		w.o.startWaiting(w)
		w.sub = c.owners.takeParked(w.m)
	}
	h, err := w.loop(ctx)
	if w.local != nil {
		c.wakes.stop(w.m.keys.Hash, w.local)
	}
	w.stopSubscribing()
	if w.sub != nil {
		c.owners.park(w.m, w.sub)
	}
	w.watch.stop()
	if w.timer != nil {
		w.timer.Stop()
	}
	if !w.call.Once && w.o.stopWaiting(w, err != nil) {
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

// startSubscribe subscribes to the owner's wake-up channel beside the
// wait loop (background.go), riding through transient errors with
// back-off for at most subscribeTimeout (X14). Meanwhile the waiter keeps
// its heartbeat, and the head its attempt at the lease's end, by their
// timers (X2, X3); once the subscription is confirmed the waiter attempts
// again at once (sleep), since a release between its attempt and the
// subscription published to nobody.
func (w *waiter) startSubscribe(ctx context.Context) {
	c, channel := w.m.c, w.m.channel
	w.subbing = goBackground(ctx, &c.life, subscribeTimeout, func(ctx context.Context) (sub *backend.Subscription, err error) {
		err = newRetrier(c.life.closing).do(ctx, func() (err error) {
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
	c, hash := w.m.c, w.m.keys.Hash
	w.local = make(chan struct{}, 1)
	// Registered before it looks at the holds: a hold that ends after
	// the look wakes it.
	ended := c.wakes.await(hash, w.local, w.sentSeq)
	heldHere := !ended && c.holds.heldByOther(hash, w.o)
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
	watchTried := false // one try per sleep
	for {
		wake := w.subscribeWhenDue(ctx, end)
		if !watchTried && !w.headAt.IsZero() && w.sub != nil && w.watch.idle() {
			if armAt := w.headAt.Add(watchDelay); time.Now().Before(armAt) {
				wake = earliest(wake, armAt)
			} else {
				w.watch.arm(ctx, w.m)
				watchTried = true
			}
		}
		w.setTimer(wake)
		select {
		case e := <-w.events():
			msg := w.heard(e)
			if msg.Kind != wire.Head {
				return msg, nil
			}
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
			} // else the watch or the subscription is due
		case <-ctx.Done():
			return wire.Message{}, ctx.Err()
		case <-w.m.c.life.closing:
			return wire.Message{}, ErrClosed
		}
	}
}

// subscribeWhenDue starts the subscription the head put off
// (subscribeAt) once it is due, and returns when the sleep must wake at
// the latest: at end, or when the subscription comes due.
func (w *waiter) subscribeWhenDue(ctx context.Context, end time.Time) time.Time {
	switch {
	case w.subscribeAt.IsZero():
		return end
	case time.Now().Before(w.subscribeAt):
		return earliest(end, w.subscribeAt)
	}
	w.subscribeAt = time.Time{}
	w.startSubscribe(ctx)
	return end
}

// heard takes a wake-up from the owner's channel - the latest news it
// has: a grant behind a "first in line" - and returns its message.
func (w *waiter) heard(e backend.Event) wire.Message {
	e = w.sub.Latest(e)
	w.woke(e)
	msg := wire.ParseMessage(e.Payload)
	if msg.Kind == wire.Head {
		w.becameHead()
	}
	return msg
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
