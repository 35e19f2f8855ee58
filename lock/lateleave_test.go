package lock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fairlock/fairlock/redistest"
)

// lateLeaveSetup: H holds the lock (client cx); W (client cw, whose first
// leave request is held back) queued, then its Lock was cancelled, its
// leave held back past the client's bound; W's next Lock has queued
// again, and X (cx) queued behind it. It returns W's next Lock and X's.
func lateLeaveSetup(t *testing.T, ctx context.Context, name string, failFast bool) (srv *redistest.Server, late *lateRequests, h, w, x *Mutex, gotW, gotX <-chan lockResult) {
	t.Helper()
	late = &lateRequests{script: "leave", limit: 1, failFast: failFast}
	srv, h, w, x = heldWithLate(t, ctx, late, name)
	first, cancel := context.WithCancel(ctx)
	gotFirst := goLockIn(first, w)
	redistest.Eventually(t, 5*time.Second, "W queued (acknowledged)", func() bool {
		return len(queueOf(t, srv, w)) == 1 && late.asked.Load() >= 1
	})
	late.hold()
	cancel()
	if r := <-gotFirst; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("W's first Lock, cancelled = %v, want context.Canceled", r.err)
	}
	start := time.Now()
	gotW = goLockIn(ctx, w)
	// The next Lock leaves W's old entry first (the held-back leave
	// gave up: leaveLeftover), then queues W again.
	redistest.Eventually(t, 10*time.Second, "W's next Lock left the old entry", func() bool { return late.passed.Load() >= 1 })
	asked := late.asked.Load()
	redistest.Eventually(t, 10*time.Second, "W queued again", func() bool {
		q := queueOf(t, srv, w)
		return len(q) == 1 && q[0] == w.field && late.asked.Load() > asked
	})
	t.Logf("W queued again %v after its first Lock returned", time.Since(start).Round(time.Millisecond))
	gotX = goLockIn(ctx, x)
	redistest.Eventually(t, 5*time.Second, "X queued behind W", func() bool { return len(queueOf(t, srv, w)) == 2 })
	return srv, late, h, w, x, gotW, gotX
}

// heldWithLate starts a server where H (client cx) holds lock name; W's
// client, with opts, sends its requests through late; X is on cx.
func heldWithLate(t *testing.T, ctx context.Context, late *lateRequests, name string, opts ...Option) (srv *redistest.Server, h, w, x *Mutex) {
	t.Helper()
	srv = redistest.Start(t)
	cx := clientOn(t, srv)
	late.Backend = rueidisOn(t, srv)
	cw := clientOver(t, late, opts...)
	t.Cleanup(func() { late.deliver() })
	h, w, x = newTestMutex(t, cx, name), newTestMutex(t, cw, name), newTestMutex(t, cx, name)
	if _, err := h.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	return srv, h, w, x
}

// deliverLateLeave runs W's held-back leave, now, and checks that it came
// too late to do anything.
func deliverLateLeave(t *testing.T, late *lateRequests) {
	t.Helper()
	if n := late.deliver(); n != 1 {
		t.Fatalf("%d leave requests held back, want 1: the scenario did not happen", n)
	}
	reps := late.ranReplies()
	if len(reps) != 1 {
		t.Fatalf("the late leave ran %d times, want once", len(reps))
	}
	if v, err := reps[0].AsInts(); err != nil || len(v) != 2 || v[0] != -1 {
		t.Errorf("the late leave replied %v (%v), want [-1, the server's time]: it came after its client gave up, and must do nothing", reps[0], err)
	}
}

// TestLateLeave_NextEntryKeepsItsPlace: a leave held back past the
// client's bound (the soak, seed 83018658760334: "leave soak:s1, delay
// 2.227s") ran after the owner's next Lock had queued it again, and took
// that entry out: the owner queued anew at the tail, behind an owner that
// came after it (B3). A leave does nothing from the server's time its
// client gives up on it, and the owner queues again only after (X5): W,
// first in line, acquires before X.
func TestLateLeave_NextEntryKeepsItsPlace(t *testing.T) {
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	srv, late, h, w, x, gotW, gotX := lateLeaveSetup(t, ctx, "late-leave-entry", false)
	deliverLateLeave(t, late)
	if q := queueOf(t, srv, w); len(q) != 2 || q[0] != w.field {
		t.Errorf("queue after the late leave = %v, want W (%s) first, then X", q, w.field)
	}
	releaseWFirst(t, ctx, h, w, x, gotW, gotX)
}

// releaseWFirst unlocks h and checks that W, queued first, acquires
// before X; then each unlocks.
func releaseWFirst(t *testing.T, ctx context.Context, h, w, x *Mutex, gotW, gotX <-chan lockResult) {
	t.Helper()
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-gotW:
		if r.err != nil {
			t.Fatalf("W's Lock: %v", r.err)
		}
	case r := <-gotX:
		t.Fatalf("X acquired first (%v) while W queued before it", r.err)
	case <-ctx.Done():
		t.Fatal("neither W nor X acquired")
	}
	unlockWThenX(t, ctx, w, x, gotX)
}

// unlockWThenX unlocks W, holding, and checks that X, waiting, acquires
// then; X unlocks.
func unlockWThenX(t *testing.T, ctx context.Context, w, x *Mutex, gotX <-chan lockResult) {
	t.Helper()
	if err := w.Unlock(ctx); err != nil {
		t.Fatalf("W's Unlock: %v", err)
	}
	if r := <-gotX; r.err != nil {
		t.Fatalf("X's Lock after W's Unlock: %v", r.err)
	}
	if err := x.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLateLeave_NextGrantStays: as above, but W is handed the lock (a
// grant its client holds by the message, the field 0 on the server)
// before the late leave runs. A leave that finds a grant not taken up
// passes it on: run late, it took W's hold away and handed the lock to X
// while W held it - two holders. It must do nothing: W holds until its
// Unlock, and only then does X acquire.
func TestLateLeave_NextGrantStays(t *testing.T) {
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	srv, late, h, w, x, gotW, gotX := lateLeaveSetup(t, ctx, "late-leave-grant", false)
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-gotW
	if r.err != nil {
		t.Fatalf("W's Lock: %v", r.err)
	}
	if v := srv.Do(t, "HGET", w.keys.Hash, w.field); v != "0" {
		t.Logf("W's field reads %v, not 0: the grant was taken up already (the late leave keeps it either way)", v)
	}
	deliverLateLeave(t, late)
	if v := srv.Do(t, "HGET", w.keys.Hash, w.field); v == nil {
		t.Error("W's grant is gone from the server after the late leave ran")
	}
	select {
	case <-r.h.Done():
		t.Fatalf("W's hold ended after the late leave ran: %v", r.h.Err())
	case rx := <-gotX:
		t.Fatalf("X acquired (token %d, %v) while W held the lock", tokenOf(rx.h), rx.err)
	default:
	}
	unlockWThenX(t, ctx, w, x, gotX)
}

// TestLateLeave_FailedAtOnce_NextQueuesAfterItsBound: W's leave fails at
// once (the connection broke after the request was written: a paused
// server may still run it), and W's next Lock leaves the old entry again
// and would queue W at once - before the server's time from which the
// first leave does nothing, so that leave, run then, would take the new
// entry out. W queues again only once the client's bound on the first
// leave has passed (at least its 2 s), and the leave then does nothing.
func TestLateLeave_FailedAtOnce_NextQueuesAfterItsBound(t *testing.T) {
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	start := time.Now()
	srv, late, h, w, x, gotW, gotX := lateLeaveSetup(t, ctx, "late-leave-failed", true)
	t.Logf("figures: W queued again %v after the setup began (its next Lock waited out the first leave's 2 s bound)", time.Since(start).Round(time.Millisecond))
	deliverLateLeave(t, late)
	if q := queueOf(t, srv, w); len(q) != 2 || q[0] != w.field {
		t.Errorf("queue after the late leave = %v, want W (%s) first, then X", q, w.field)
	}
	releaseWFirst(t, ctx, h, w, x, gotW, gotX)
}

// TestLeaveNeverSent_NextTryLockAsksAtOnce: a TryLock(0) against a server
// that is down fails (connection refused), and so does its leave - which
// therefore never reached the server and cannot later. The owner's next
// TryLock, the server back and the lock free, asks at once and acquires:
// it waited 2 s for that leave, and its own 300 ms ran out there as
// "not acquired" (the cluster soak, seeds 158433210434209 and
// 211070069488786, around failovers).
func TestLeaveNeverSent_NextTryLockAsksAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	c := clientOn(t, srv)
	m := newTestMutex(t, c, "leave-never-sent")
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	srv.Kill(t)
	if _, err := m.TryLock(ctx, 0); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("TryLock(0) with the server down = %v, want ErrUnavailable", err)
	}
	srv.Restart(t)
	start := time.Now()
	var h *Hold
	var err error
	// The client's connections come back at their own pace: each try
	// must fail as unavailable, never as "not acquired" on a free lock.
	for range 20 {
		h, err = m.TryLock(ctx, 300*time.Millisecond)
		t.Logf("try at %v: %v", time.Since(start).Round(time.Millisecond), err)
		if err == nil || !errors.Is(err, ErrUnavailable) {
			break
		}
	}
	if err != nil {
		t.Fatalf("TryLock(300ms) on the free lock, the server back = %v after %v, want a hold", err, time.Since(start))
	}
	t.Logf("figures: acquired %v after the restart", time.Since(start).Round(time.Millisecond))
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	_ = h
}

// TestLeaveUnsettled_NextTryLockSaysUnavailable: W's leave fails with its
// outcome unknown (the connection broke after the request was written),
// so W's next call waits until that leave can no longer reach the server
// (X5). A TryLock whose wait runs out meanwhile has asked the server
// nothing: ErrUnavailable, not ErrNotAcquired.
func TestLeaveUnsettled_NextTryLockSaysUnavailable(t *testing.T) {
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	late := &lateRequests{script: "leave", limit: 1, failFast: true}
	srv := redistest.Start(t)
	holder := newTestMutex(t, clientOn(t, srv), "leave-unsettled")
	late.Backend = rueidisOn(t, srv)
	cw := clientOver(t, late)
	t.Cleanup(func() { late.deliver() })
	w := newTestMutex(t, cw, "leave-unsettled")
	if _, err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	late.hold()
	if _, err := w.TryLock(ctx, 200*time.Millisecond); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("W's first TryLock behind the holder = %v, want ErrNotAcquired", err)
	}
	redistest.Eventually(t, 5*time.Second, "W's leave failed", func() bool {
		late.mu.Lock()
		defer late.mu.Unlock()
		return late.held == 1
	})
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := w.TryLock(ctx, 300*time.Millisecond)
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotAcquired) {
		t.Fatalf("W's next TryLock, waiting out its unsettled leave = %v, want ErrUnavailable", err)
	}
	t.Logf("the error: %v", err)
}

// TestLeave_FloorBehindTheServersClock: the client's floor of the server's
// clock taken from a reply that was long on its way is seconds behind it,
// and a leave dated by it reaches the server after its limit and does
// nothing (the simulation: replies delayed past 2 s, then every leave of
// the client "reached the server after its client had given up on it",
// its owners' entries stayed, and their next calls said ErrUnavailable).
// The expired reply tells the server's time: the leave is sent again,
// dated from it, and takes W out of the queue.
func TestLeave_FloorBehindTheServersClock(t *testing.T) {
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	srv := redistest.Start(t)
	cx := clientOn(t, srv)
	counted := &lateRequests{Backend: rueidisOn(t, srv), script: "none"}
	// A long waiter timeout: no heartbeat's reply mends the floor while
	// the test runs.
	cw := clientOver(t, counted, WithWaiterTimeout(60*time.Second))
	const name = "leave-floor-behind"
	h, w := newTestMutex(t, cx, name), newTestMutex(t, cw, name)
	if _, err := h.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	first, cancel := context.WithCancel(ctx)
	gotW := goLockIn(first, w)
	redistest.Eventually(t, 5*time.Second, "W queued, subscribed and attempted again", func() bool {
		v, _ := srv.Do(t, "PUBSUB", "NUMSUB", w.channel).([]any)
		return len(queueOf(t, srv, w)) == 1 && len(v) == 2 && v[1] == int64(1) && counted.asked.Load() >= 2
	})
	cw.floor.mu.Lock()
	cw.floor.server, cw.floor.local = time.Now().Add(-10*time.Second), time.Now()
	cw.floor.mu.Unlock()
	cancel()
	if r := <-gotW; !errors.Is(r.err, context.Canceled) || errors.Is(r.err, ErrUnavailable) {
		t.Fatalf("W's Lock, cancelled = %v, want context.Canceled alone", r.err)
	}
	if q := queueOf(t, srv, w); len(q) != 0 {
		t.Errorf("queue after W's Lock was cancelled = %v, want it empty: the leave did nothing", q)
	}
	if _, err := w.TryLock(ctx, 0); !errors.Is(err, ErrNotAcquired) {
		t.Errorf("W's TryLock(0) while H holds = %v, want ErrNotAcquired", err)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
