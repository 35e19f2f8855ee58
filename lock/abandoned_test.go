package lock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fairlock/fairlock/redistest"
)

// abandonedSetup: H (client cx) holds the lock; W (client cw) queued
// first, X (cx) behind it. W's Lock sends its next attempt (a heartbeat),
// which is held back on its way, and its caller gives up: the Lock
// returns while the call goes on in the background, in the owner's gate,
// awaiting that attempt. It returns the held-back requests; answer: the
// attempt, when delivered, is answered (else its reply is lost).
func abandonedSetup(t *testing.T, ctx context.Context, name string, answer bool) (srv *redistest.Server, late *lateRequests, h, w, x *Mutex, gotX <-chan lockResult) {
	t.Helper()
	late = &lateRequests{script: "acquire", limit: 1, answer: answer}
	// Heartbeats every second or so: the held one comes soon.
	srv, h, w, x = heldWithLate(t, ctx, late, name, WithWaiterTimeout(3*time.Second))
	first, cancel := context.WithCancel(ctx)
	gotW := goLockIn(first, w)
	redistest.Eventually(t, 5*time.Second, "W queued, subscribed and attempted again", func() bool {
		v, _ := srv.Do(t, "PUBSUB", "NUMSUB", w.channel).([]any)
		return len(queueOf(t, srv, w)) == 1 && len(v) == 2 && v[1] == int64(1) && late.asked.Load() >= 2
	})
	gotX = goLockIn(ctx, x)
	redistest.Eventually(t, 5*time.Second, "X queued behind W", func() bool { return len(queueOf(t, srv, w)) == 2 })
	late.hold()
	redistest.Eventually(t, 10*time.Second, "W's heartbeat held back", func() bool { return late.heldNow() == 1 })
	cancel()
	if r := <-gotW; !errors.Is(r.err, context.Canceled) || !errors.Is(r.err, ErrUnavailable) {
		t.Fatalf("W's Lock, cancelled with its attempt in flight = %v, want context.Canceled and ErrUnavailable", r.err)
	}
	return srv, late, h, w, x, gotX
}

// TestAbandonedCall_NextTryLockTakesNoGrant: the lock, released while W's
// abandoned call awaits its attempt, is handed to W's entry, first in
// line; the attempt, run late, takes that grant up for a caller who has
// returned. W's TryLock(0), made meanwhile, must not get the lock by that
// place in line - X queued before it (the soak, seed 137617542961740 at
// 503.9 s: a TryLock(0) 17 ms after such a Lock returned took the grant,
// ahead of three waiters). The grant goes back before the owner's next
// call can re-enter it - whether the late attempt is answered, or its
// reply is lost (the call then leaves the queue, giving the grant back) -
// and X acquires.
func TestAbandonedCall_NextTryLockTakesNoGrant(t *testing.T) {
	for _, c := range []struct {
		name   string
		answer bool
	}{{"answered late", true}, {"reply lost", false}} {
		t.Run(c.name, func(t *testing.T) {
			ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
			defer stop()
			_, late, h, w, x, gotX := abandonedSetup(t, ctx, "abandoned-grant", c.answer)
			if err := h.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			gotTry := make(chan lockResult, 1)
			go func() {
				hd, err := w.TryLock(ctx, 0)
				gotTry <- lockResult{hd, err}
			}()
			if n := late.deliver(); n != 1 {
				t.Fatalf("%d attempts held back, want 1: the scenario did not happen", n)
			}
			if r := <-gotTry; r.err == nil {
				_ = w.Unlock(ctx)
				t.Fatal("W's TryLock(0) acquired by the place in line of W's abandoned Lock, ahead of X")
			} else if !errors.Is(r.err, ErrNotAcquired) {
				t.Fatalf("W's TryLock(0) = %v, want ErrNotAcquired", r.err)
			}
			acquiredThenUnlock(t, ctx, x, gotX)
		})
	}
}

// TestAbandonedCall_NextLockQueuesAtTheTail: as above, but the lock is
// still held when the late attempt is answered (W queued), and W's next
// call is a Lock made after X queued: it leaves the abandoned call's
// entry and queues behind X (B3), and X acquires first.
func TestAbandonedCall_NextLockQueuesAtTheTail(t *testing.T) {
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	srv, late, h, w, x, gotX := abandonedSetup(t, ctx, "abandoned-entry", true)
	gotW := goLockIn(ctx, w)
	if n := late.deliver(); n != 1 {
		t.Fatalf("%d attempts held back, want 1: the scenario did not happen", n)
	}
	asked := late.asked.Load()
	redistest.Eventually(t, 10*time.Second, "W's next Lock attempted", func() bool {
		return len(queueOf(t, srv, w)) == 2 && late.asked.Load() > asked
	})
	if q := queueOf(t, srv, w); q[0] == w.field {
		t.Errorf("queue = %v: W's next Lock kept the place of its abandoned call, ahead of X", q)
	}
	// X, queued first, acquires before W's next Lock.
	releaseWFirst(t, ctx, h, x, w, gotX, gotW)
}

// TestAbandonedCall_LastCallWaitingForACallerLeaves: the order the
// soak's seed 137617542961740 needs, made by hand - an abandoned call of
// W's owner still finishing in the background (its attempt in flight)
// while W's last call that a caller waits for ends. Which of the two
// ends first is a race of goroutines; here the abandoned one is counted
// and never ends, so the test is the same every time. The call that
// ends leaves the queue (the entry is nobody's now): the lock, released,
// goes to X, and W's TryLock(0) after it does not take it up by W's old
// place in line.
func TestAbandonedCall_LastCallWaitingForACallerLeaves(t *testing.T) {
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	srv := redistest.Start(t)
	cx, cw := clientOn(t, srv), clientOn(t, srv)
	const name = "abandoned-last"
	h, w, x := newTestMutex(t, cx, name), newTestMutex(t, cw, name), newTestMutex(t, cx, name)
	if _, err := h.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	first, cancel := context.WithCancel(ctx)
	gotW := goLockIn(first, w)
	redistest.Eventually(t, 5*time.Second, "W queued", func() bool { return len(queueOf(t, srv, w)) == 1 })
	gotX := goLockIn(ctx, x)
	redistest.Eventually(t, 5*time.Second, "X queued behind W", func() bool { return len(queueOf(t, srv, w)) == 2 })
	// The call finishing in the background: counted as waiting, its
	// caller gone.
	o := cw.owners.acquire(w)
	gone := &waiter{}
	o.startWaiting(gone)
	o.abandon(gone)
	defer func() {
		o.stopWaiting(gone, true)
		cw.owners.release(o)
	}()
	cancel()
	if r := <-gotW; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("W's Lock, cancelled = %v, want context.Canceled", r.err)
	}
	if q := queueOf(t, srv, w); len(q) != 1 || q[0] != x.field {
		t.Errorf("queue after W's Lock ended = %v, want X (%s) alone: W's entry is nobody's", q, x.field)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if hd, err := w.TryLock(ctx, 0); err == nil {
		t.Errorf("W's TryLock(0) acquired (token %d) by W's old place in line, ahead of X", hd.Token())
		_ = w.Unlock(ctx)
	} else if !errors.Is(err, ErrNotAcquired) {
		t.Errorf("W's TryLock(0) = %v, want ErrNotAcquired", err)
	}
	acquiredThenUnlock(t, ctx, x, gotX)
}

// acquiredThenUnlock checks that m's Lock, whose result got brings,
// acquired; then m unlocks.
func acquiredThenUnlock(t *testing.T, ctx context.Context, m *Mutex, got <-chan lockResult) {
	t.Helper()
	if r := <-got; r.err != nil {
		t.Fatalf("Lock: %v", r.err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
