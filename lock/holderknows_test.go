package lock_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

// Regression tests for the defects the soak (internal/soak) and an outside
// audit found in how a holder learns that its hold ended (issue 37). Each
// failed on the code before its fix.

// noticeBound is how soon a holder must be told here: far above the
// 50 ms the figures show, far below the watchdog's tick (10 s at the
// default lease), which is where a lost notice used to end up.
const noticeBound = time.Second

// unwatchedClient is a lock client that watches no keys (client-side
// caching off): it learns of a force-unlock only from its notice channel.
func unwatchedClient(t *testing.T, srv *redistest.Server) *lock.Client {
	t.Helper()
	b, err := rueidisbackend.Dial(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	c, err := lock.NewClient(b)
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// doneWithin waits for h to end, at most d, and returns how long it took.
func doneWithin(t *testing.T, h *lock.Hold, d time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-h.Done():
		if !errors.Is(h.Err(), lock.ErrLockLost) {
			t.Errorf("%s: Err = %v, want ErrLockLost", what, h.Err())
		}
		return time.Since(start)
	case <-time.After(d):
		t.Errorf("%s: Done still open after %v", what, d)
		return d
	}
}

// TestTryLockOnBusyLock_NotUnavailable: TryLock with no wait on a lock
// another owner holds, the server healthy, says the lock is busy - and
// only that. It used to wrap ErrUnavailable too ("server unavailable:
// not acquired"), so code that checks ErrUnavailable first paged "Redis
// down" on ordinary contention.
func TestTryLockOnBusyLock_NotUnavailable(t *testing.T) {
	srv := realServer(t)
	c := realClient(t, srv)
	ctx := testCtx(t, 10*time.Second)
	holder, other := realMutex(t, c, "busy"), realMutex(t, c, "busy")
	if _, err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, wait := range []time.Duration{0, 20 * time.Millisecond} {
		_, err := other.TryLock(ctx, wait)
		if !errors.Is(err, lock.ErrNotAcquired) || errors.Is(err, lock.ErrUnavailable) {
			t.Errorf("TryLock(ctx, %v) on a held lock: %v; want ErrNotAcquired and not ErrUnavailable", wait, err)
		}
	}
}

// TestLossNoticesTogether_AllReachTheirHolds: another client force-unlocks
// 16 holds of one client at once. Every hold ends within the bound. The
// notices arrive on one subscription, which used to keep only the latest
// pending one: 10-14 of the 16 holds were not told, and ended only at the
// watchdog's tick.
func TestLossNoticesTogether_AllReachTheirHolds(t *testing.T) {
	srv := realServer(t)
	holders, admin := unwatchedClient(t, srv), realClient(t, srv)
	ctx := testCtx(t, 30*time.Second)
	const n = 16
	holds := make([]*lock.Hold, n)
	for i := range holds {
		h, err := realMutex(t, holders, fmt.Sprintf("together-%d", i)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		holds[i] = h
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if ok, err := realMutex(t, admin, fmt.Sprintf("together-%d", i)).ForceUnlock(ctx); err != nil || !ok {
				t.Errorf("ForceUnlock %d: %v, %v", i, ok, err)
			}
		})
	}
	wg.Wait()
	var worst time.Duration
	for i, h := range holds {
		worst = max(worst, doneWithin(t, h, noticeBound, fmt.Sprintf("hold %d", i)))
	}
	t.Logf("figures: %d holds force-unlocked at once, the last told %v after the last ForceUnlock returned", n, worst)
}

// TestHoldRetakenInFirst50ms_Noticed: a hold whose hash is deleted by hand
// in its first moments and taken by another owner meanwhile ends within
// the bound. The key watch used to be armed 50 ms into the hold, on a
// key that existed again by then, and checked nothing at arming: the
// hold ended only at the watchdog's tick, while the other owner held.
func TestHoldRetakenInFirst50ms_Noticed(t *testing.T) {
	srv := realServer(t)
	holders, others := realClient(t, srv), realClient(t, srv)
	ctx := testCtx(t, 60*time.Second)
	for i := range 5 {
		name := fmt.Sprintf("retaken-%d", i)
		h, err := realMutex(t, holders, name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		mustDo(t, srv, "DEL", name)
		taker, err := realMutex(t, others, name).TryLock(ctx, 0)
		if err != nil {
			t.Fatalf("round %d: the other owner's TryLock: %v", i, err)
		}
		if taker.Token() <= h.Token() {
			t.Errorf("round %d: the taker's token %d is not above the first hold's %d", i, taker.Token(), h.Token())
		}
		d := doneWithin(t, h, noticeBound, fmt.Sprintf("round %d", i))
		t.Logf("figures: round %d, the first holder told %v after the other owner's grant", i, d)
	}
}

// TestFirstHoldOfClient_NoticeCovered: a client's very first hold,
// force-unlocked at once by another client, ends within the bound on a
// client that watches no keys. The client used to subscribe to its notice
// channel only after its first hold, so a notice sent meanwhile reached
// nobody (1 trial in 10 ended at the watchdog's tick).
func TestFirstHoldOfClient_NoticeCovered(t *testing.T) {
	srv := realServer(t)
	admin := realClient(t, srv)
	ctx := testCtx(t, 60*time.Second)
	for i := range 20 {
		c := unwatchedClient(t, srv)
		name := fmt.Sprintf("first-%d", i)
		h, err := realMutex(t, c, name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := realMutex(t, admin, name).ForceUnlock(ctx); err != nil || !ok {
			t.Fatalf("ForceUnlock: %v, %v", ok, err)
		}
		doneWithin(t, h, noticeBound, fmt.Sprintf("trial %d", i))
		c.Close()
	}
}
