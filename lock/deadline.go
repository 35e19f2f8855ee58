package lock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fairlock/fairlock/lock/observe"
)

// A waiting call returns by its context's deadline, or when TryLock's wait
// runs out (within cleanupGrace, 250 ms, after it), even while an attempt is in flight to a server that does not
// answer, or the cleanup after it cannot reach the server (X5): the call
// runs beside its caller, who returns as soon as its context ends. What
// the call was doing then - awaiting the attempt (which must not be
// abandoned, or it could take effect after the cleanup), leaving the
// queue, giving back a grant that came too late - finishes in the
// background, counted among the client's calls (Close waits for it). A
// call whose context cannot end runs on the caller's goroutine, at no
// extra cost.

// cleanupGrace is how long past its deadline a call may take to finish
// what it was doing (leave the queue: one round trip) before the rest goes
// on in the background.
const cleanupGrace = 250 * time.Millisecond

// outcome is what a call beside its caller came to, handed over once.
type outcome struct {
	mu        sync.Mutex
	finished  bool // h and err are the call's
	abandoned bool // the caller returned without them
	h         *Hold
	err       error
	done      chan struct{}
}

// runBounded runs w until it ends, or until ctx ends first; then the
// call goes on in the background and runBounded returns ctx's error,
// joined with the latest connection error when the last attempt could
// not reach the server. late reports that the caller gave up.
func (m *Mutex) runBounded(ctx context.Context, w *waiter) (h *Hold, err error, late bool) {
	if ctx.Done() == nil {
		h, err = w.run(ctx)
		return h, err, false
	}
	out := &outcome{done: make(chan struct{})}
	m.c.life.calls.Add(1)
	o := m.c.owners.acquire(m) // the background's own reference to the owner
	go m.runBeside(ctx, w, o, out)
	select {
	case <-out.done:
		return out.h, out.err, false
	case <-ctx.Done():
	}
	// A server that answers ends the call within a round trip: its queue
	// entry is gone when the caller returns. Only a call still stuck
	// after cleanupGrace goes on in the background.
	grace := time.NewTimer(cleanupGrace)
	defer grace.Stop()
	select {
	case <-out.done:
		return out.h, out.err, false
	case <-grace.C:
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	if out.finished {
		return out.h, out.err, false
	}
	out.abandoned = true
	w.abandoned.Store(true)
	w.o.abandon(w)
	switch p := w.failing.Load(); {
	case w.inFlight.Load():
		return nil, joinLine(ctx.Err(), ErrUnavailable, errNoReply), true
	case p != nil:
		return nil, joinLine(ctx.Err(), unavailable(*p)), true
	}
	return nil, ctx.Err(), true
}

// errNoReply is why a call whose caller gave up with an attempt in flight
// could not tell whether the lock is busy.
var errNoReply = errors.New("no reply yet to the attempt in flight")

// runBeside runs w beside its caller and hands its outcome over, or, when
// the caller has returned without it, gives back a hold it brought.
func (m *Mutex) runBeside(ctx context.Context, w *waiter, o *owner, out *outcome) {
	defer m.c.life.calls.Done()
	h, err := w.run(ctx)
	// Its own reference goes before anyone sees the outcome: a caller
	// that returned finds only the references it knows of.
	m.c.owners.release(o)
	out.mu.Lock()
	if out.abandoned {
		out.mu.Unlock()
		m.giveBackLate(h)
		return
	}
	out.h, out.err, out.finished = h, err, true
	out.mu.Unlock()
	close(out.done)
}

// giveBackLate releases a hold a call obtained after its caller had
// returned: one count, as the caller's Unlock would have.
func (m *Mutex) giveBackLate(h *Hold) {
	if h == nil {
		return
	}
	ctx, cancel := cleanupContext(context.Background())
	defer cancel()
	_ = m.Unlock(ctx)
}

// noteFailure records the latest attempt's connection error, or clears it
// after a reply.
func (w *waiter) noteFailure(err error) {
	w.inFlight.Store(false)
	if err != nil && transient(err) {
		w.failing.Store(&err)
		return
	}
	w.failing.Store(nil)
}

// tracker is the call's observer, until the caller has returned.
func (w *waiter) tracker() observe.AcquireTracker {
	if w.abandoned.Load() {
		return nil
	}
	return w.tr
}
