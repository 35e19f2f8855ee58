package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
)

// TestPruneWaiters_DropsDeadHeadAndWakesNext: a waiter whose process died
// (its queue entry stopped heartbeating) is dropped, and the live waiter
// behind it is woken as the new head (B5, X3): it takes the lock when the
// holder's lease runs out, long before its own heartbeat would have
// noticed.
func TestPruneWaiters_DropsDeadHeadAndWakesNext(t *testing.T) {
	srv := realServer(t)
	holderClient := realClient(t, srv)
	// Heartbeats every 20 s: only a wake-up gets this waiter going sooner.
	waiterClient := realClient(t, srv, lock.WithWaiterTimeout(time.Minute))
	admin := realClient(t, srv)
	ctx := testCtx(t, 60*time.Second)
	const name = "prune-head"

	holder := realMutex(t, holderClient, name)
	if _, err := holder.LockWithLease(ctx, 4*time.Second); err != nil {
		t.Fatal(err)
	}
	// The dead waiter: queued first, alive for 1.5 s more, then silent.
	queueEntry(t, srv, name, "0b1ef9a4-dead-4000-8000-000000000000:1", 1500, true)
	live := realMutex(t, waiterClient, name)
	waited := goLock(testCtx(t, 15*time.Second), live)

	probe := realMutex(t, admin, name)
	redistest.Eventually(t, 10*time.Second, "the live waiter queued behind the dead one, then the dead one's deadline", func() bool {
		st, err := probe.Inspect(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		return len(st.Queue) == 2 && st.Queue[1].Owner == live.Owner() && st.ServerTime.After(st.Queue[0].Deadline)
	})
	n, err := admin.PruneWaiters(ctx, name)
	if err != nil || n != 1 {
		t.Fatalf("PruneWaiters = %d, %v; want 1", n, err)
	}
	st, err := probe.Inspect(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if st.QueueLength > 1 || (len(st.Queue) == 1 && st.Queue[0].Owner != live.Owner()) {
		t.Fatalf("queue after pruning: %+v, want only the live waiter (or nobody: it acquired)", st.Queue)
	}
	// Woken as head, the waiter waits no longer than the 4 s lease left.
	h := awaitLock(t, waited, 12*time.Second, "the live waiter after the prune")
	if err := live.Unlock(ctx); err != nil {
		t.Fatal(err, h.Err())
	}
}

// TestPruneWaiters_DropsDeadWaitersBehindLiveOnes: dead waiters further
// back - fairlock ones past their liveness deadline, Redisson ones past
// their Redisson deadline - go too; live ones, fairlock or Redisson, keep
// their places.
func TestPruneWaiters_DropsDeadWaitersBehindLiveOnes(t *testing.T) {
	srv := realServer(t)
	c := realClient(t, srv)
	admin := realClient(t, srv)
	ctx := testCtx(t, 60*time.Second)
	const name = "prune-behind"

	holder := realMutex(t, c, name)
	if _, err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	live := realMutex(t, c, name)
	waited := goLock(ctx, live)
	probe := realMutex(t, admin, name)
	redistest.Eventually(t, 10*time.Second, "the live waiter queued", func() bool {
		st, err := probe.Inspect(ctx, 0)
		return err == nil && st.QueueLength == 1
	})
	// In one script, the live Redisson waiter last: a heartbeat of the live
	// waiter (which drops a dead tail, rightly) must not take a dead one
	// before the prune.
	queueEntries(t, srv, name,
		entry{"dead-fairlock:1", -1000, true},
		entry{"dead-redisson:1", -1000, false},
		entry{"live-redisson:1", 60_000, false})

	n, err := admin.PruneWaiters(ctx, name)
	if err != nil || n != 2 {
		t.Fatalf("PruneWaiters = %d, %v; want 2", n, err)
	}
	queue, timeouts, alive := queueKeys(name)
	got := mustDo(t, srv, "LRANGE", queue, "0", "-1").([]any)
	if len(got) != 2 || got[0] != live.Owner() || got[1] != "live-redisson:1" {
		t.Fatalf("queue after pruning = %v, want [%s live-redisson:1]", got, live.Owner())
	}
	for _, key := range []string{timeouts, alive} {
		for _, dead := range []string{"dead-fairlock:1", "dead-redisson:1"} {
			if s := mustDo(t, srv, "ZSCORE", key, dead); s != nil {
				t.Errorf("%s still has %s", key, dead)
			}
		}
	}
	if n, err := admin.PruneWaiters(ctx, name); err != nil || n != 0 {
		t.Fatalf("second PruneWaiters = %d, %v; want 0", n, err)
	}

	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	awaitLock(t, waited, 10*time.Second, "the live waiter")
	if err := live.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPruneWaiters_Rejects: X10 for PruneWaiters, and ErrClosed.
func TestPruneWaiters_Rejects(t *testing.T) {
	srv := realServer(t)
	c := realClient(t, srv)
	if _, err := c.PruneWaiters(context.Background(), ""); !errors.Is(err, lock.ErrInvalidName) {
		t.Errorf("empty name: %v, want ErrInvalidName", err)
	}
	if _, err := c.PruneWaiters(context.Background(), "a{}b"); !errors.Is(err, lock.ErrInvalidName) {
		t.Errorf("split name: %v, want ErrInvalidName", err)
	}
	var nilCtx context.Context
	if _, err := c.PruneWaiters(nilCtx, "x"); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("nil context: %v, want ErrNilContext", err)
	}
	if n, err := c.PruneWaiters(context.Background(), "nobody-waits"); err != nil || n != 0 {
		t.Errorf("PruneWaiters of an unused lock = %d, %v; want 0", n, err)
	}
	c.Close()
	if _, err := c.PruneWaiters(context.Background(), "x"); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}
