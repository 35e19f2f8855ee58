package conformance

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock"
)

func ruleCases() []testCase {
	return []testCase{
		{"B1_AcquireFreeLock", testB1AcquireFreeLock},
		{"B1_UncontendedCostsTwoRoundTrips", testB1TwoRoundTrips},
		{"B2_Reentrancy", testB2Reentrancy},
		{"B3_FIFO16Owners", testB3FIFO16},
		{"B3_QueuedOnceWhenSharedOwnerWaitsTwice", testB3QueuedOnce},
		{"B4_UnlockWakesNextWaiter", testB4UnlockWakes},
		{"B4_UnlockByNonHolderFails", testB4NonHolder},
		{"B5_StaleHeadsPurged", testB5StaleHeads},
		{"B6_WatchdogKeepsLockAlive", testB6Watchdog},
		{"B6_CrashedHolderFreesByLease", testB6CrashedHolder},
		{"B7_TryLockGivesUpAfterWaitAndLeavesQueue", testB7TryLockGivesUp},
		{"B7_TryLockOnceNeverQueues", testB7TryLockOnce},
		{"B8_ForceUnlockWakesNext", testB8ForceUnlock},
		{"B8_DeleteRemovesKeysAndWakesHead", testB8Delete},
		{"B9_ReadsFromAnotherOwner", testB9Reads},
		{"B10_RetriedUnlockIsIdempotent", testB10RetriedUnlock},
		{"X1_DeadlinesUseServerTime", testX1ServerTime},
		{"X2_LongHoldKeepsLiveWaitersInOrder", testX2LongHold},
		{"X2_CrashedWaiterDelaysAtMostWaiterTimeout", testX2CrashedWaiter},
		{"X3_LeaseExpiryWakesHead", testX3LeaseExpiry},
		{"X3_HashDeletedByHandWakesHead", testX3DeletedByHand},
		{"X3_HeadGivingUpWakesNext", testX3HeadGivesUp},
		{"X3_HashDeletedByHandWakesWatchingHead", testX3WatchedHash},
		{"X4_NoBusySpinWhileWaiting", testX4NoSpin},
		{"X5_CancelledWaiterLeavesNoTrace", testX5Cancel},
		{"X5_LostAcquireReplyLeavesNoHold", testX5LostReply},
		{"X6_FencingTokensIncrease", testX6Tokens},
		{"X7_LostLockIsSignalled", testX7LostLock},
		{"X7_ForceUnlockedHolderIsTold", testX7ForceUnlocked},
		{"X10_BadInputTouchesNothing", testX10BadInput},
		{"P2_500OwnersEachAcquireOnce", testManyOwners},
		{"X11_ShardedPublishStillWakesWaiters", testShardedPublish},
	}
}

func testB1AcquireFreeLock(t *testing.T, s *suite) {
	p := s.newProc(t)
	name := lockName(t)
	m := p.mutex(t, name)
	h := mustLock(t, m)
	if h.Token() <= 0 {
		t.Errorf("token %d, want > 0", h.Token())
	}
	st, err := m.Inspect(ctxFor(t, eventually), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Holders) != 1 || st.Holders[0].Owner != m.Owner().String() || st.Holders[0].Count != 1 {
		t.Errorf("holders %+v, want only %s with count 1", st.Holders, m.Owner())
	}
	if st.TTL <= lock.DefaultLease-slack || st.TTL > lock.DefaultLease {
		t.Errorf("TTL %v, want about the default lease %v", st.TTL, lock.DefaultLease)
	}
	if st.QueueLength != 0 {
		t.Errorf("queue length %d after acquiring a free lock", st.QueueLength)
	}
	mustUnlock(t, m)
	if raw := readRaw(t, p.b, name); raw.hashExists || len(raw.queue) != 0 || raw.timeouts != 0 {
		t.Errorf("after unlock: %+v, want no lock keys", raw)
	}
}

func testB1TwoRoundTrips(t *testing.T, s *suite) {
	p := s.newProc(t)
	m := p.mutex(t, lockName(t))
	mustLock(t, m)
	mustUnlock(t, m)
	if n := p.b.total() - p.b.count(clientSubscribe); n != 2 {
		t.Errorf("uncontended Lock+Unlock made %d backend calls (%v), want 2", n, p.b.counts)
	}
	if n := p.b.count(clientSubscribe); n > 1 {
		t.Errorf("the client subscribed to its own channel %d times, want at most once", n)
	}
}

func testB2Reentrancy(t *testing.T, s *suite) {
	p := s.newProc(t)
	m := p.mutex(t, lockName(t))
	other := s.newProc(t).mutex(t, m.Name())
	h1 := mustLock(t, m)
	h2, err := m.LockWithLease(ctxFor(t, eventually), 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if h1 != h2 || h1.Token() != h2.Token() {
		t.Errorf("re-entry returned a different hold (tokens %d, %d)", h1.Token(), h2.Token())
	}
	if n, _ := m.HoldCount(ctxFor(t, eventually)); n != 2 {
		t.Errorf("hold count %d, want 2", n)
	}
	// A re-entry never shortens the hold (X12): the TTL stays near the
	// watchdog lease instead of dropping to the re-entry's 20 s; a longer
	// lease extends it.
	if ttl, _ := m.RemainTTL(ctxFor(t, eventually)); ttl <= 20*time.Second || ttl > lock.DefaultLease {
		t.Errorf("re-entry with lease 20s left TTL %v, want the %v of the first hold", ttl, lock.DefaultLease)
	}
	if _, err := m.LockWithLease(ctxFor(t, eventually), 2*lock.DefaultLease); err != nil {
		t.Fatal(err)
	}
	if ttl, _ := m.RemainTTL(ctxFor(t, eventually)); ttl <= lock.DefaultLease {
		t.Errorf("re-entry with lease %v left TTL %v, want it extended", 2*lock.DefaultLease, ttl)
	}
	mustUnlock(t, m)
	mustUnlock(t, m)
	if locked, _ := other.IsLocked(ctxFor(t, eventually)); !locked {
		t.Error("lock free after one of two unlocks")
	}
	select {
	case <-h1.Done():
		t.Fatal("hold ended after one of two unlocks")
	default:
	}
	mustUnlock(t, m)
	if locked, _ := other.IsLocked(ctxFor(t, eventually)); locked {
		t.Error("lock still held after the last unlock")
	}
	<-h1.Done()
	if !errors.Is(h1.Err(), lock.ErrReleased) {
		t.Errorf("hold error %v, want ErrReleased", h1.Err())
	}
}

// queueInOrder starts one waiter per mutex, each only after the previous is
// visibly queued, and returns their result channels.
func queueInOrder(t *testing.T, probe *lock.Mutex, already int, ms []*lock.Mutex, acquire func(m *lock.Mutex) (*lock.Hold, error)) []<-chan result {
	t.Helper()
	chans := make([]<-chan result, len(ms))
	for i, m := range ms {
		chans[i] = goAcquire(func() (*lock.Hold, error) { return acquire(m) })
		waitQueued(t, probe, already+i+1)
	}
	return chans
}

func testB3FIFO16(t *testing.T, s *suite) {
	const n = 16
	name := lockName(t)
	holder := s.newProc(t).mutex(t, name)
	mustLock(t, holder)
	procs := []*proc{s.newProc(t), s.newProc(t), s.newProc(t), s.newProc(t)}
	ms := make([]*lock.Mutex, n)
	for i := range ms {
		ms[i] = procs[i%len(procs)].mutex(t, name)
	}
	var (
		mu    sync.Mutex
		order []int
	)
	acquireAndRecord := func(i int) func(*lock.Mutex) (*lock.Hold, error) {
		return func(m *lock.Mutex) (*lock.Hold, error) {
			h, err := m.Lock(ctxFor(t, 60*time.Second))
			if err == nil {
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				err = m.Unlock(ctxFor(t, eventually))
			}
			return h, err
		}
	}
	chans := make([]<-chan result, n)
	for i, m := range ms {
		chans[i] = goAcquire(func() (*lock.Hold, error) { return acquireAndRecord(i)(m) })
		waitQueued(t, holder, i+1)
	}
	mustUnlock(t, holder)
	for i, ch := range chans {
		if r := await(t, ch, 60*time.Second, fmt.Sprintf("owner %d", i)); r.err != nil {
			t.Fatalf("owner %d: %v", i, r.err)
		}
	}
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(order, want) {
		t.Errorf("acquisition order %v, want arrival order %v", order, want)
	}
}

func testB3QueuedOnce(t *testing.T, s *suite) {
	name := lockName(t)
	holder := s.newProc(t).mutex(t, name)
	mustLock(t, holder)
	shared := s.newProc(t).mutex(t, name)
	a := goAcquire(func() (*lock.Hold, error) { return shared.Lock(ctxFor(t, 30*time.Second)) })
	waitQueued(t, holder, 1)
	b := goAcquire(func() (*lock.Hold, error) { return shared.Lock(ctxFor(t, 30*time.Second)) })
	mustNotArrive(t, b, 300*time.Millisecond, "second Lock of the same owner while held by another")
	if n := queueLen(t, holder); n != 1 {
		t.Fatalf("queue length %d with one owner waiting twice, want 1", n)
	}
	mustUnlock(t, holder)
	ra, rb := await(t, a, eventually, "first"), await(t, b, eventually, "second")
	if ra.err != nil || rb.err != nil {
		t.Fatalf("errors %v, %v", ra.err, rb.err)
	}
	if n, _ := shared.HoldCount(ctxFor(t, eventually)); n != 2 {
		t.Errorf("shared owner hold count %d, want 2 (re-entered)", n)
	}
}

func testB4UnlockWakes(t *testing.T, s *suite) {
	name := lockName(t)
	// A long waiter timeout makes the waiter's own heartbeat slow, so only
	// the unlock's wake-up message can hand the lock over quickly.
	holder := s.newProc(t).mutex(t, name)
	wp := s.newProc(t, lock.WithWaiterTimeout(60*time.Second))
	mustLock(t, holder)
	handOver(t, holder, wp, wp.mutex(t, name), slack, "waiter after unlock", func() { mustUnlock(t, holder) })
}

func testB4NonHolder(t *testing.T, s *suite) {
	name := lockName(t)
	holder := s.newProc(t).mutex(t, name)
	stranger := s.newProc(t).mutex(t, name)
	if err := stranger.Unlock(ctxFor(t, eventually)); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("unlock of a free lock: %v, want ErrNotHeld", err)
	}
	mustLock(t, holder)
	before, _ := holder.Inspect(ctxFor(t, eventually), 10)
	if err := stranger.Unlock(ctxFor(t, eventually)); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("unlock by a non-holder: %v, want ErrNotHeld", err)
	}
	after, _ := holder.Inspect(ctxFor(t, eventually), 10)
	if !slices.Equal(before.Holders, after.Holders) || after.TTL > before.TTL || after.QueueLength != 0 {
		t.Errorf("non-holder unlock changed the lock: before %+v after %+v", before, after)
	}
}

func testB5StaleHeads(t *testing.T, s *suite) {
	name := lockName(t)
	p := s.newProc(t)
	injectWaiter(t, p.b, name, "dead-client:1", -time.Second)
	injectWaiter(t, p.b, name, "dead-client:2", -time.Millisecond)
	m := p.mutex(t, name)
	h, err := m.TryLockOnce(ctxFor(t, eventually), lock.WatchdogLease)
	if err != nil {
		t.Fatalf("TryLockOnce behind two dead heads: %v", err)
	}
	_ = h
	if raw := readRaw(t, p.b, name); len(raw.queue) != 0 || raw.timeouts != 0 {
		t.Errorf("dead heads left behind: %+v", raw)
	}
}

func testB6Watchdog(t *testing.T, s *suite) {
	const lease = 600 * time.Millisecond
	p := s.newProc(t, lock.WithLease(lease))
	m := p.mutex(t, lockName(t))
	h := mustLock(t, m)
	// Held for five leases: only renewals can keep it.
	end := time.Now().Add(5 * lease)
	for time.Now().Before(end) {
		held, err := m.IsHeldBy(ctxFor(t, eventually), m.Owner())
		if err != nil || !held {
			t.Fatalf("lock lost after %v of holding (err %v)", time.Until(end)+5*lease, err)
		}
		select {
		case <-h.Done():
			t.Fatalf("hold ended: %v", h.Err())
		case <-time.After(lease / 4):
		}
	}
	if p.b.count("renew") < 3 {
		t.Errorf("%d renewals in five leases, want several", p.b.count("renew"))
	}
	mustUnlock(t, m)
	renewals := p.b.count("renew")
	<-time.After(lease) // a full watchdog period with nothing held
	if n := p.b.count("renew"); n != renewals {
		t.Errorf("watchdog renewed %d times after unlock", n-renewals)
	}
}

func testB6CrashedHolder(t *testing.T, s *suite) {
	name := lockName(t)
	const lease = 700 * time.Millisecond
	crashed := s.newProc(t, lock.WithLease(lease))
	m := crashed.mutex(t, name)
	mustLock(t, m)
	// The holder's process dies without unlocking: its watchdog stops.
	crashed.c.Close()
	waiter := s.newProc(t, lock.WithWaiterTimeout(60*time.Second)).mutex(t, name)
	start := time.Now()
	h, err := waiter.Lock(ctxFor(t, eventually))
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > lease+slack {
		t.Errorf("took %v after the crash, want about the lease %v", d, lease)
	}
	if h == nil {
		t.Fatal("nil hold")
	}
}

func testB7TryLockGivesUp(t *testing.T, s *suite) {
	name := lockName(t)
	holder := s.newProc(t).mutex(t, name)
	mustLock(t, holder)
	tryer := s.newProc(t).mutex(t, name)
	const wait = 500 * time.Millisecond
	start := time.Now()
	_, err := tryer.TryLock(ctxFor(t, eventually), wait, time.Second)
	took := time.Since(start)
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryLock against a holder: %v, want ErrNotAcquired", err)
	}
	if took < wait || took > wait+slack {
		t.Errorf("TryLock(%v) returned after %v", wait, took)
	}
	if n := queueLen(t, holder); n != 0 {
		t.Errorf("queue length %d after giving up, want 0", n)
	}
	mustUnlock(t, holder)
	if _, err := tryer.TryLockOnce(ctxFor(t, eventually), time.Second); err != nil {
		t.Errorf("TryLockOnce right after the holder left: %v", err)
	}
}

func testB7TryLockOnce(t *testing.T, s *suite) {
	name := lockName(t)
	p := s.newProc(t)
	holder := p.mutex(t, name)
	tryer := s.newProc(t).mutex(t, name)
	mustLock(t, holder)
	if _, err := tryer.TryLockOnce(ctxFor(t, eventually), lock.WatchdogLease); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryLockOnce while held: %v", err)
	}
	if n := queueLen(t, holder); n != 0 {
		t.Errorf("TryLockOnce queued (length %d)", n)
	}
	mustUnlock(t, holder)
	// Free lock, but a live waiter is in line: TryLockOnce must not barge.
	injectWaiter(t, p.b, name, "live-client:1", time.Minute)
	if _, err := tryer.TryLockOnce(ctxFor(t, eventually), lock.WatchdogLease); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("TryLockOnce with someone queued: %v, want ErrNotAcquired", err)
	}
}

func testB8ForceUnlock(t *testing.T, s *suite) {
	name := lockName(t)
	// The holder's lease (30 s) and the waiter's heartbeat (20 s) are far
	// away: only the force unlock's wake-up can hand over quickly.
	holder := s.newProc(t).mutex(t, name)
	wp := s.newProc(t, lock.WithWaiterTimeout(60*time.Second))
	admin := s.newProc(t).mutex(t, name)
	mustLock(t, holder)
	handOver(t, admin, wp, wp.mutex(t, name), slack, "waiter after force unlock", func() {
		if ok, err := admin.ForceUnlock(ctxFor(t, eventually)); err != nil || !ok {
			t.Fatalf("ForceUnlock = %v, %v", ok, err)
		}
	})
	if ok, _ := admin.ForceUnlock(ctxFor(t, eventually)); !ok {
		t.Error("ForceUnlock of the waiter's hold reported nothing removed")
	}
	if ok, _ := admin.ForceUnlock(ctxFor(t, eventually)); ok {
		t.Error("ForceUnlock of a free lock reported a removal")
	}
}

// testX7ForceUnlocked: a holder whose lock someone else force-unlocks is
// told by its watchdog (X7).
func testX7ForceUnlocked(t *testing.T, s *suite) {
	name := lockName(t)
	holder := s.newProc(t, lock.WithLease(600*time.Millisecond)).mutex(t, name)
	admin := s.newProc(t).mutex(t, name)
	h := mustLock(t, holder)
	if ok, err := admin.ForceUnlock(ctxFor(t, eventually)); err != nil || !ok {
		t.Fatalf("ForceUnlock = %v, %v", ok, err)
	}
	select {
	case <-h.Done():
	case <-time.After(eventually):
		t.Fatal("force-unlocked holder was not told")
	}
	if !errors.Is(h.Err(), lock.ErrLockLost) {
		t.Errorf("holder's error %v, want ErrLockLost", h.Err())
	}
}

func testB8Delete(t *testing.T, s *suite) {
	name := lockName(t)
	p := s.newProc(t)
	holder := p.mutex(t, name)
	wp := s.newProc(t, lock.WithWaiterTimeout(60*time.Second))
	waiter := wp.mutex(t, name)
	mustLock(t, holder)
	handOver(t, holder, wp, waiter, slack, "head after delete", func() {
		if ok, err := holder.Delete(ctxFor(t, eventually)); err != nil || !ok {
			t.Fatalf("Delete = %v, %v", ok, err)
		}
	})
	mustUnlock(t, waiter)
	if ok, _ := holder.Delete(ctxFor(t, eventually)); ok {
		t.Error("Delete of a free lock reported removals")
	}
	if raw := readRaw(t, p.b, name); raw.hashExists || len(raw.queue) != 0 || raw.timeouts != 0 {
		t.Errorf("keys left after Delete: %+v", raw)
	}
}

func testB9Reads(t *testing.T, s *suite) {
	name := lockName(t)
	holder := s.newProc(t).mutex(t, name)
	other := s.newProc(t).mutex(t, name)
	ctx := ctxFor(t, eventually)
	check := func(when string, locked, heldByHolder bool, count int) {
		t.Helper()
		if got, err := other.IsLocked(ctx); err != nil || got != locked {
			t.Errorf("%s: IsLocked = %v, %v; want %v", when, got, err, locked)
		}
		if got, err := other.IsHeldBy(ctx, holder.Owner()); err != nil || got != heldByHolder {
			t.Errorf("%s: IsHeldBy(holder) = %v, %v; want %v", when, got, err, heldByHolder)
		}
		if got, err := other.IsHeldBy(ctx, other.Owner()); err != nil || got {
			t.Errorf("%s: IsHeldBy(other) = %v, %v; want false", when, got, err)
		}
		if got, err := holder.HoldCount(ctx); err != nil || got != count {
			t.Errorf("%s: HoldCount = %v, %v; want %d", when, got, err, count)
		}
		if got, err := other.HoldCount(ctx); err != nil || got != 0 {
			t.Errorf("%s: other's HoldCount = %v, %v; want 0", when, got, err)
		}
		ttl, err := other.RemainTTL(ctx)
		if err != nil || (locked && (ttl <= 0 || ttl > 5*time.Second)) || (!locked && ttl != 0) {
			t.Errorf("%s: RemainTTL = %v, %v", when, ttl, err)
		}
	}
	check("free", false, false, 0)
	if _, err := holder.LockWithLease(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	check("held once", true, true, 1)
	if _, err := holder.LockWithLease(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	check("held twice", true, true, 2)
	mustUnlock(t, holder)
	mustUnlock(t, holder)
	check("released", false, false, 0)
}

func testB10RetriedUnlock(t *testing.T, s *suite) {
	p := s.newProc(t)
	m := p.mutex(t, lockName(t))
	mustLock(t, m)
	mustLock(t, m)
	lost := false
	p.b.mu.Lock()
	p.b.loseReply = func(script string) bool {
		if script == "unlock" && !lost {
			lost = true
			return true
		}
		return false
	}
	p.b.mu.Unlock()
	// The first unlock runs on the server but its reply is lost; the retry
	// carries the same request ID and must not count down again.
	if err := m.Unlock(ctxFor(t, eventually)); err != nil {
		t.Fatalf("Unlock with a lost first reply: %v", err)
	}
	if got := p.b.count("unlock"); got != 2 {
		t.Errorf("%d unlock calls, want 2 (one retry)", got)
	}
	if n, _ := m.HoldCount(ctxFor(t, eventually)); n != 1 {
		t.Errorf("hold count %d after one (retried) unlock of two holds, want 1", n)
	}
}

func testX1ServerTime(t *testing.T, s *suite) {
	name := lockName(t)
	const waiterTimeout = 40 * time.Second
	holder := s.newProc(t).mutex(t, name)
	waiter := s.newProc(t, lock.WithWaiterTimeout(waiterTimeout)).mutex(t, name)
	mustLock(t, holder)
	goAcquire(func() (*lock.Hold, error) { return waiter.Lock(ctxFor(t, eventually)) })
	waitQueued(t, holder, 1)
	st, err := holder.Inspect(ctxFor(t, eventually), 1)
	if err != nil || len(st.Queue) != 1 {
		t.Fatalf("Inspect = %+v, %v", st, err)
	}
	// The deadline is the server's now plus the waiter timeout (less the
	// time since the waiter's last heartbeat).
	left := st.Queue[0].Deadline.Sub(st.ServerTime)
	if left > waiterTimeout || left < waiterTimeout-slack {
		t.Errorf("deadline is %v after the server's now, want about %v", left, waiterTimeout)
	}
	mustUnlock(t, holder)
}

func testX2LongHold(t *testing.T, s *suite) {
	name := lockName(t)
	const waiterTimeout = 300 * time.Millisecond
	holder := s.newProc(t).mutex(t, name)
	mustLock(t, holder)
	ms := []*lock.Mutex{
		s.newProc(t, lock.WithWaiterTimeout(waiterTimeout)).mutex(t, name),
		s.newProc(t, lock.WithWaiterTimeout(waiterTimeout)).mutex(t, name),
		s.newProc(t, lock.WithWaiterTimeout(waiterTimeout)).mutex(t, name),
	}
	var want []string
	for _, m := range ms {
		want = append(want, m.Owner().String())
	}
	chans := queueInOrder(t, holder, 0, ms, func(m *lock.Mutex) (*lock.Hold, error) {
		return m.Lock(ctxFor(t, 60*time.Second))
	})
	// Hold for ten waiter timeouts; the queue must never change.
	end := time.Now().Add(10 * waiterTimeout)
	for time.Now().Before(end) {
		st, err := holder.Inspect(ctxFor(t, eventually), 10)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, w := range st.Queue {
			got = append(got, w.Owner)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("queue changed during a long hold: %v, want %v", got, want)
		}
		<-time.After(waiterTimeout / 3) // polling pace
	}
	mustUnlock(t, holder)
	for i, ch := range chans {
		r := await(t, ch, eventually, fmt.Sprintf("waiter %d", i))
		if r.err != nil {
			t.Fatal(r.err)
		}
		if i+1 < len(chans) {
			mustNotArrive(t, chans[i+1], 50*time.Millisecond, "next waiter while the previous holds")
		}
		mustUnlock(t, ms[i])
	}
}

func testX2CrashedWaiter(t *testing.T, s *suite) {
	name := lockName(t)
	const waiterTimeout = 800 * time.Millisecond
	p := s.newProc(t, lock.WithWaiterTimeout(waiterTimeout))
	holder := p.mutex(t, name)
	mustLock(t, holder)
	// A waiter that queued and then crashed: its entry stops heartbeating.
	injectWaiter(t, p.b, name, "crashed-client:7", waiterTimeout)
	next := s.newProc(t, lock.WithWaiterTimeout(waiterTimeout)).mutex(t, name)
	ch := goAcquire(func() (*lock.Hold, error) { return next.Lock(ctxFor(t, eventually)) })
	waitQueued(t, holder, 2)
	released := time.Now()
	mustUnlock(t, holder)
	r := await(t, ch, eventually, "waiter behind a crashed one")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if d := r.at.Sub(released); d > waiterTimeout+slack {
		t.Errorf("the crashed waiter delayed the next by %v, want at most about the waiter timeout %v", d, waiterTimeout)
	}
}

func testX3LeaseExpiry(t *testing.T, s *suite) {
	name := lockName(t)
	const lease = 800 * time.Millisecond
	holder := s.newProc(t).mutex(t, name)
	waiter := s.newProc(t, lock.WithWaiterTimeout(60*time.Second)).mutex(t, name)
	if _, err := holder.LockWithLease(ctxFor(t, eventually), lease); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := await(t, goAcquire(func() (*lock.Hold, error) { return waiter.Lock(ctxFor(t, 60*time.Second)) }), 60*time.Second, "waiter")
	if r.err != nil {
		t.Fatal(r.err)
	}
	// No unlock happened: the head must have waited no longer than the
	// lease left (its heartbeat is 20 s away).
	if d := r.at.Sub(start); d > lease+slack {
		t.Errorf("lease-expiry hand-over took %v, want about %v", d, lease)
	}
}

func testX3DeletedByHand(t *testing.T, s *suite) {
	name := lockName(t)
	const waiterTimeout = 900 * time.Millisecond
	p := s.newProc(t)
	holder := p.mutex(t, name)
	wp := s.newProc(t, lock.WithWaiterTimeout(waiterTimeout))
	mustLock(t, holder)
	// DEL by hand (no script, no message, lease far away): the head must
	// still notice within its heartbeat interval.
	handOver(t, holder, wp, wp.mutex(t, name), waiterTimeout/3+slack, "head after DEL by hand", func() {
		evalRaw(t, p.b, `return redis.call('del', KEYS[1])`, []string{name})
	})
}

// testX3WatchedHash: on a backend that can watch keys (backend.KeyWatcher,
// client-side caching), a DEL by hand wakes the head at once, long before
// its heartbeat.
func testX3WatchedHash(t *testing.T, s *suite) {
	name := lockName(t)
	p := s.newProc(t)
	wp := s.newProc(t, lock.WithWaiterTimeout(60*time.Second))
	probe, err := wp.b.WatchKey(ctxFor(t, eventually), name+":probe")
	if errors.Is(err, backend.ErrNotSupported) {
		t.Skipf("the backend cannot watch keys (%v); X3_HashDeletedByHand covers the heartbeat path", err)
	}
	if err != nil {
		t.Fatalf("WatchKey: %v", err)
	}
	probe.Close()
	holder, waiter := p.mutex(t, name), wp.mutex(t, name)
	mustLock(t, holder)
	ch := goAcquire(func() (*lock.Hold, error) { return waiter.Lock(ctxFor(t, 60*time.Second)) })
	waitQueued(t, holder, 1)
	settled(t, wp)
	waitUntil(t, eventually, "the head to watch the lock hash", func() bool { return wp.b.count("WATCHKEY") >= 2 })
	deleted := time.Now()
	evalRaw(t, p.b, `return redis.call('del', KEYS[1])`, []string{name})
	r := await(t, ch, 60*time.Second, "head after DEL by hand")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if d := r.at.Sub(deleted); d > slack {
		t.Errorf("head took %v to notice the deleted hash; its heartbeat is 20 s away, the invalidation should wake it", d)
	}
}

func testX3HeadGivesUp(t *testing.T, s *suite) {
	name := lockName(t)
	p := s.newProc(t)
	holder := p.mutex(t, name)
	// Slow heartbeats (20 s): only a wake-up can make "next" act quickly.
	// The head must not learn of the DEL below by watching the hash.
	hp, np := withoutKeyWatch(s.newProc(t, lock.WithWaiterTimeout(60*time.Second))), s.newProc(t, lock.WithWaiterTimeout(60*time.Second))
	head, next := hp.mutex(t, name), np.mutex(t, name)
	mustLock(t, holder)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hc := goAcquire(func() (*lock.Hold, error) { return head.Lock(ctx) })
	waitQueued(t, holder, 1)
	nc := goAcquire(func() (*lock.Hold, error) { return next.Lock(ctxFor(t, 60*time.Second)) })
	waitQueued(t, holder, 2)
	settled(t, hp)
	settled(t, np)
	// The hash vanishes without a message: the lock is free and "head" is
	// first in line but does not know yet. Then "head" gives up.
	evalRaw(t, p.b, `return redis.call('del', KEYS[1])`, []string{name})
	cancel()
	gaveUp := time.Now()
	if r := await(t, hc, eventually, "head"); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("head: %v, want context.Canceled", r.err)
	}
	rn := await(t, nc, eventually, "next")
	if rn.err != nil {
		t.Fatal(rn.err)
	}
	if d := rn.at.Sub(gaveUp); d > slack {
		t.Errorf("next waiter took %v after the head gave up, want a wake-up", d)
	}
}

func testX4NoSpin(t *testing.T, s *suite) {
	name := lockName(t)
	holder := s.newProc(t).mutex(t, name)
	wp := s.newProc(t, lock.WithWaiterTimeout(3*time.Second))
	waiter := wp.mutex(t, name)
	mustLock(t, holder)
	ch := goAcquire(func() (*lock.Hold, error) { return waiter.Lock(ctxFor(t, eventually)) })
	waitQueued(t, holder, 1)
	before := wp.b.count("acquire")
	mustNotArrive(t, ch, 1500*time.Millisecond, "waiter while held")
	// Heartbeat every 1 s: about 2 calls in 1.5 s. A spin makes thousands.
	if n := wp.b.count("acquire") - before; n > 10 {
		t.Errorf("waiter ran acquire %d times in 1.5 s while the lock was held: busy spin", n)
	}
	mustUnlock(t, holder)
	if r := await(t, ch, eventually, "waiter"); r.err != nil {
		t.Fatal(r.err)
	}
}

func testX5Cancel(t *testing.T, s *suite) {
	name := lockName(t)
	p := s.newProc(t)
	holder := p.mutex(t, name)
	mustLock(t, holder)
	cases := []struct {
		name    string
		acquire func(m *lock.Mutex) <-chan result
		want    error
	}{
		{"cancel", func(m *lock.Mutex) <-chan result {
			ctx, cancel := context.WithCancel(context.Background())
			ch := goAcquire(func() (*lock.Hold, error) { return m.Lock(ctx) })
			waitQueued(t, holder, 1)
			cancel()
			return ch
		}, context.Canceled},
		{"deadline", func(m *lock.Mutex) <-chan result {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			t.Cleanup(cancel)
			return goAcquire(func() (*lock.Hold, error) { return m.Lock(ctx) })
		}, context.DeadlineExceeded},
		{"trylock wait", func(m *lock.Mutex) <-chan result {
			return goAcquire(func() (*lock.Hold, error) { return m.TryLock(ctxFor(t, eventually), 300*time.Millisecond, time.Second) })
		}, lock.ErrNotAcquired},
	}
	for _, tc := range cases {
		m := s.newProc(t).mutex(t, name)
		r := await(t, tc.acquire(m), eventually, tc.name)
		if !errors.Is(r.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, r.err, tc.want)
		}
		if raw := readRaw(t, p.b, name); len(raw.queue) != 0 || raw.timeouts != 0 {
			t.Errorf("%s: left in Redis: %+v", tc.name, raw)
		}
	}
}

// testX5LostReply: an acquire whose replies are all lost keeps retrying
// (X14) until its context ends, then undoes whatever the attempts did: the
// lock ends neither held nor queued for the caller that gave up (X5).
func testX5LostReply(t *testing.T, s *suite) {
	name := lockName(t)
	p := s.newProc(t)
	m := p.mutex(t, name)
	p.b.mu.Lock()
	p.b.loseReply = func(script string) bool { return script == "acquire" }
	p.b.mu.Unlock()
	_, err := m.Lock(ctxFor(t, 500*time.Millisecond))
	if !errors.Is(err, errLostReply) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with lost replies: %v, want the deadline and the backend error", err)
	}
	if n := p.b.count("acquire"); n < 2 {
		t.Errorf("%d acquire attempts, want retries (X14)", n)
	}
	if raw := readRaw(t, p.b, name); raw.hashExists || len(raw.queue) != 0 || raw.timeouts != 0 {
		t.Errorf("left in Redis after lost acquire replies: %+v", raw)
	}
}

func testX6Tokens(t *testing.T, s *suite) {
	name := lockName(t)
	a := s.newProc(t).mutex(t, name)
	b := s.newProc(t).mutex(t, name)
	var last int64
	for i := range 6 {
		m := a
		if i%2 == 1 {
			m = b
		}
		h := mustLock(t, m)
		if h.Token() <= last {
			t.Fatalf("acquisition %d got token %d after %d", i, h.Token(), last)
		}
		if again := mustLock(t, m); again.Token() != h.Token() {
			t.Errorf("re-entry token %d, want %d", again.Token(), h.Token())
		}
		last = h.Token()
		mustUnlock(t, m)
		mustUnlock(t, m)
	}
	if _, err := a.Delete(ctxFor(t, eventually)); err != nil {
		t.Fatal(err)
	}
	if h := mustLock(t, b); h.Token() <= last {
		t.Errorf("token %d after Delete, want > %d (tokens never go back)", h.Token(), last)
	}
}

func testX7LostLock(t *testing.T, s *suite) {
	name := lockName(t)
	m := s.newProc(t).mutex(t, name)
	const lease = 400 * time.Millisecond
	h, err := m.LockWithLease(ctxFor(t, eventually), lease)
	if err != nil {
		t.Fatal(err)
	}
	hctx, cancel := h.Context(context.Background())
	defer cancel()
	select {
	case <-h.Done():
	case <-time.After(lease + slack):
		t.Fatal("expired lease not signalled")
	}
	if !errors.Is(h.Err(), lock.ErrLockLost) {
		t.Errorf("Err = %v, want ErrLockLost", h.Err())
	}
	select {
	case <-hctx.Done():
	case <-time.After(eventually):
		t.Fatal("hold context not cancelled")
	}
	if !errors.Is(context.Cause(hctx), lock.ErrLockLost) {
		t.Errorf("context cause %v, want ErrLockLost", context.Cause(hctx))
	}
	// The hold ends by the client's clock, counted from before the
	// acquire was sent, so the server's key may outlive it a little.
	waitUntil(t, eventually, "the key to expire", func() bool {
		locked, err := m.IsLocked(ctxFor(t, eventually))
		return err == nil && !locked
	})
	if err := m.Unlock(ctxFor(t, eventually)); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Unlock after losing the lock: %v, want ErrNotHeld", err)
	}
}

func testX10BadInput(t *testing.T, s *suite) {
	p := s.newProc(t)
	good := p.mutex(t, lockName(t))
	for _, name := range []string{"", "a{}b", "a{b", "a}b", "x{}"} {
		if _, err := p.c.NewMutex(name); !errors.Is(err, lock.ErrInvalidName) {
			t.Errorf("NewMutex(%q): %v, want ErrInvalidName", name, err)
		}
	}
	if _, err := p.c.NewMutex("{user1}.orders"); err != nil {
		t.Errorf("a name with one hash tag: %v", err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	ctx := context.Background()
	var nilCtx context.Context
	cases := []struct {
		name string
		call func() error
		want error
	}{
		{"Lock nil ctx", func() error { _, err := good.Lock(nilCtx); return err }, lock.ErrNilContext},
		{"Lock cancelled ctx", func() error { _, err := good.Lock(cancelled); return err }, context.Canceled},
		{"LockWithLease zero", func() error { _, err := good.LockWithLease(ctx, 0); return err }, lock.ErrInvalidDuration},
		{"LockWithLease negative", func() error { _, err := good.LockWithLease(ctx, -time.Second); return err }, lock.ErrInvalidDuration},
		{"LockWithLease sub-ms", func() error { _, err := good.LockWithLease(ctx, time.Microsecond); return err }, lock.ErrInvalidDuration},
		{"LockWithLease overflow", func() error { _, err := good.LockWithLease(ctx, time.Duration(1<<62)); return err }, lock.ErrInvalidDuration},
		{"TryLock zero wait", func() error { _, err := good.TryLock(ctx, 0, time.Second); return err }, lock.ErrInvalidDuration},
		{"TryLock negative wait", func() error { _, err := good.TryLock(ctx, -1, time.Second); return err }, lock.ErrInvalidDuration},
		{"TryLock zero lease", func() error { _, err := good.TryLock(ctx, time.Second, 0); return err }, lock.ErrInvalidDuration},
		{"TryLockOnce negative lease", func() error { _, err := good.TryLockOnce(ctx, -2); return err }, lock.ErrInvalidDuration},
		{"Unlock nil ctx", func() error { return good.Unlock(nilCtx) }, lock.ErrNilContext},
		{"Unlock cancelled", func() error { return good.Unlock(cancelled) }, context.Canceled},
		{"ForceUnlock nil ctx", func() error { _, err := good.ForceUnlock(nilCtx); return err }, lock.ErrNilContext},
		{"Delete cancelled", func() error { _, err := good.Delete(cancelled); return err }, context.Canceled},
		{"IsLocked nil ctx", func() error { _, err := good.IsLocked(nilCtx); return err }, lock.ErrNilContext},
		{"Inspect negative limit", func() error { _, err := good.Inspect(ctx, -1); return err }, lock.ErrInvalidOption},
	}
	for _, tc := range cases {
		if err := tc.call(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	for _, o := range []lock.Option{lock.WithLease(0), lock.WithLease(time.Millisecond), lock.WithWaiterTimeout(-1), lock.WithLease(lock.MaxDuration + 1)} {
		if _, err := lock.NewClient(p.b, o); !errors.Is(err, lock.ErrInvalidDuration) {
			t.Errorf("NewClient with a bad duration: %v", err)
		}
	}
	if n := p.b.total(); n != 0 {
		t.Errorf("bad input reached Redis: %v", p.b.counts)
	}
	// Use after Close.
	p.c.Close()
	if _, err := good.Lock(ctx); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("Lock after Close: %v", err)
	}
	if err := good.Unlock(ctx); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("Unlock after Close: %v", err)
	}
	if n := p.b.total(); n != 0 {
		t.Errorf("calls after Close reached Redis: %v", p.b.counts)
	}
}

func testManyOwners(t *testing.T, s *suite) {
	n := 500 * s.cfg.scale
	name := lockName(t)
	procs := make([]*proc, 4)
	for i := range procs {
		procs[i] = s.newProc(t, lock.WithLease(5*time.Second))
	}
	var (
		mu      sync.Mutex
		holders int
		maxSeen int
		got     = map[string]int{}
	)
	chans := make([]<-chan result, n)
	for i := range n {
		m := procs[i%len(procs)].mutex(t, name)
		chans[i] = goAcquire(func() (*lock.Hold, error) {
			h, err := m.Lock(ctxFor(t, 120*time.Second))
			if err != nil {
				return nil, err
			}
			mu.Lock()
			holders++
			maxSeen = max(maxSeen, holders)
			got[m.Owner().String()]++
			holders--
			mu.Unlock()
			return h, m.Unlock(ctxFor(t, eventually))
		})
	}
	for i, ch := range chans {
		if r := await(t, ch, 120*time.Second, fmt.Sprintf("owner %d", i)); r.err != nil {
			t.Fatalf("owner %d: %v", i, r.err)
		}
	}
	if len(got) != n || maxSeen != 1 {
		t.Errorf("%d distinct owners acquired (want %d), max simultaneous holders %d (want 1)", len(got), n, maxSeen)
	}
	for o, c := range got {
		if c != 1 {
			t.Errorf("owner %s acquired %d times", o, c)
		}
	}
}

func testShardedPublish(t *testing.T, s *suite) {
	name := lockName(t)
	holder := s.newProc(t, lock.WithShardedPublish()).mutex(t, name)
	wp := s.newProc(t, lock.WithShardedPublish(), lock.WithWaiterTimeout(60*time.Second))
	mustLock(t, holder)
	handOver(t, holder, wp, wp.mutex(t, name), slack, "waiter after unlock with sharded publish", func() { mustUnlock(t, holder) })
}

func sequentialCases() []sequentialCase {
	return []sequentialCase{
		{testCase{"NoGoroutinesLeftAfterClose", testNoLeaks}, false, false},
		{testCase{"B1_UncontendedTwoCommandsAtServer", testTwoCommandsAtServer}, true, false},
		{testCase{"B10_ScriptFlushIsInvisible", testScriptFlush}, true, false},
		{testCase{"X8_ScriptWorkDoesNotGrowWithTheQueue", testX8ConstantWork}, true, false},
		{testCase{"X9_UnreplicatedAcquireIsRolledBack", testX9Replicas}, false, true},
		{testCase{"X7_RenewalFailingPastTheLeaseIsLoss", testX7RenewalFailing}, true, false},
		{testCase{"X3_ServerRestartDoesNotStrandWaiters", testServerRestart}, true, false},
	}
}

// testX9Replicas: with WithReplicaAcks, an acquire the replica
// acknowledged succeeds; with the replica stopped, the acquire is rolled
// back and reported (X9), leaving nothing behind.
func testX9Replicas(t *testing.T, s *suite) {
	name := lockName(t)
	const wait = 300 * time.Millisecond
	p := s.newProc(t, lock.WithReplicaAcks(1, wait))
	m := p.mutex(t, name)
	observer := s.newProc(t).mutex(t, name)
	h, err := m.Lock(ctxFor(t, eventually))
	if errors.Is(err, backend.ErrNotSupported) {
		t.Skipf("the backend cannot WAIT after a script here: %v", err)
	}
	if err != nil {
		t.Fatalf("Lock with a live replica: %v", err)
	}
	if h.Token() <= 0 {
		t.Errorf("token %d", h.Token())
	}
	mustUnlock(t, m)

	s.cfg.replica.Pause(t)
	paused := true
	defer func() {
		if paused {
			s.cfg.replica.Resume(t)
		}
	}()
	start := time.Now()
	_, err = m.Lock(ctxFor(t, eventually))
	if !errors.Is(err, lock.ErrNotReplicated) {
		t.Fatalf("Lock with the replica stopped: %v, want ErrNotReplicated", err)
	}
	if d := time.Since(start); d < wait || d > wait+slack {
		t.Errorf("gave up after %v, want the replica timeout %v", d, wait)
	}
	if raw := readRaw(t, p.b, name); raw.hashExists || len(raw.queue) != 0 || raw.timeouts != 0 {
		t.Errorf("not rolled back: %+v", raw)
	}
	// A re-entry that is not replicated gives back only itself.
	s.cfg.replica.Resume(t)
	paused = false
	if _, err := m.Lock(ctxFor(t, eventually)); err != nil {
		t.Fatalf("Lock after the replica came back: %v", err)
	}
	s.cfg.replica.Pause(t)
	paused = true
	if _, err := m.Lock(ctxFor(t, eventually)); !errors.Is(err, lock.ErrNotReplicated) {
		t.Fatalf("re-entry with the replica stopped: %v, want ErrNotReplicated", err)
	}
	s.cfg.replica.Resume(t)
	paused = false
	if n, err := observer.HoldCount(ctxFor(t, eventually)); err != nil || n != 0 {
		t.Errorf("observer hold count %d, %v", n, err)
	}
	if held, _ := observer.IsHeldBy(ctxFor(t, eventually), m.Owner()); !held {
		t.Error("the first hold was rolled back with the re-entry")
	}
	if n, _ := m.HoldCount(ctxFor(t, eventually)); n != 1 {
		t.Errorf("hold count %d after a rolled-back re-entry, want 1", n)
	}
	mustUnlock(t, m)
}

// testX7RenewalFailing: with the server unreachable (paused), the
// watchdog's renewals fail; once they have failed for longer than the
// lease, the holder is told its lock is lost (X7), without waiting for
// the server to come back.
func testX7RenewalFailing(t *testing.T, s *suite) {
	const lease = 600 * time.Millisecond
	m := s.newProc(t, lock.WithLease(lease)).mutex(t, lockName(t))
	h := mustLock(t, m)
	s.cfg.server.Pause(t)
	paused := time.Now()
	resumed := false
	defer func() {
		if !resumed {
			s.cfg.server.Resume(t)
		}
	}()
	select {
	case <-h.Done():
	case <-time.After(eventually):
		t.Fatal("renewals failing past the lease were not reported")
	}
	if d := time.Since(paused); d < lease/3 {
		t.Errorf("loss reported %v after the pause, before renewals could fail", d)
	}
	s.cfg.server.Resume(t)
	resumed = true
	if !errors.Is(h.Err(), lock.ErrLockLost) {
		t.Errorf("Err = %v, want ErrLockLost", h.Err())
	}
}

// testNoLeaks runs contended locking, closes everything, and checks that
// the goroutine count returns to where it was: every goroutine the lock and
// the backend start has an owner that stops it.
func testNoLeaks(t *testing.T, s *suite) {
	before := runtime.NumGoroutine()
	t.Run("work", func(t *testing.T) {
		name := lockName(t)
		a, b := s.newProc(t, lock.WithLease(300*time.Millisecond)), s.newProc(t)
		ma, mb := a.mutex(t, name), b.mutex(t, name)
		h := mustLock(t, ma)
		hctx, cancel := h.Context(context.Background())
		ch := goAcquire(func() (*lock.Hold, error) { return mb.Lock(ctxFor(t, eventually)) })
		waitQueued(t, ma, 1)
		mustUnlock(t, ma)
		<-hctx.Done()
		cancel()
		if r := await(t, ch, eventually, "waiter"); r.err != nil {
			t.Fatal(r.err)
		}
		mustUnlock(t, mb)
	}) // cleanups close the clients and backends here
	waitUntil(t, eventually, fmt.Sprintf("goroutines to return to %d", before), func() bool {
		return runtime.NumGoroutine() <= before
	})
}

func testScriptFlush(t *testing.T, s *suite) {
	m := s.newProc(t).mutex(t, lockName(t))
	mustLock(t, m)
	s.cfg.server.Do(t, "SCRIPT", "FLUSH")
	mustUnlock(t, m)
	mustLock(t, m)
	mustUnlock(t, m)
}

func testServerRestart(t *testing.T, s *suite) {
	name := lockName(t)
	hp := s.newProc(t)
	wp := s.newProc(t, lock.WithWaiterTimeout(60*time.Second))
	holder, waiter := hp.mutex(t, name), wp.mutex(t, name)
	h := mustLock(t, holder)
	ch := goAcquire(func() (*lock.Hold, error) { return waiter.Lock(ctxFor(t, 60*time.Second)) })
	waitQueued(t, holder, 1)
	// The server goes away and comes back with an empty dataset and script
	// cache. The waiting call rides through (X14): its client reloads the
	// scripts on NOSCRIPT and re-dials the subscription connection. The
	// holder's lock is gone with the data: it learns so when its client
	// reconnects, not at its next renewal (X12).
	s.cfg.server.Stop(t)
	s.cfg.server.Restart(t)
	restarted := time.Now()
	r := await(t, ch, 60*time.Second, "waiter across the restart")
	if r.err != nil {
		t.Fatalf("waiter across a restart: %v, want the lock (X14)", r.err)
	}
	// Its next renewal is up to 10 s away; the reconnect tells it sooner.
	select {
	case <-h.Done():
	case <-time.After(slack):
		t.Fatalf("holder not told of its lock lost in the restart within %v of the restart", slack)
	}
	t.Logf("restart: waiter acquired %v, holder told %v after the server was back", r.at.Sub(restarted), time.Since(restarted))
	if !errors.Is(h.Err(), lock.ErrLockLost) {
		t.Errorf("holder's Err = %v, want ErrLockLost", h.Err())
	}
	// Wake-ups reach a waiter again after the restart.
	mustUnlock(t, waiter)
	h2 := mustLock(t, holder)
	base := wp.b.count("acquire" + doneSuffix)
	ch = goAcquire(func() (*lock.Hold, error) { return waiter.Lock(ctxFor(t, 60*time.Second)) })
	waitQueued(t, holder, 1)
	settledAfter(t, wp, base)
	released := time.Now()
	mustUnlock(t, holder)
	if h2.Err() == nil {
		t.Error("hold still live after its Unlock")
	}
	r = await(t, ch, 60*time.Second, "waiter after the restart")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if d := r.at.Sub(released); d > slack {
		t.Errorf("hand-over after the restart took %v: the wake-up did not arrive", d)
	}
}

// monitor is a raw MONITOR connection to the server under test.
type monitor struct {
	conn net.Conn
	r    *bufio.Reader
}

func startMonitor(t *testing.T, srv Server) *monitor {
	t.Helper()
	conn, err := net.DialTimeout("tcp", srv.Addr(), eventually)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(eventually))
	mon := &monitor{conn: conn, r: bufio.NewReader(conn)}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := mon.r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		t.Fatalf("MONITOR: %q, %v", line, err)
	}
	return mon
}

// collect returns the commands seen until a marker ECHO sent after the
// work: clients' commands (without connection handshakes) and commands
// run inside scripts ("[0 lua]").
func (mon *monitor) collect(t *testing.T, srv Server) (sent, inScripts []string) {
	t.Helper()
	marker := "conformance-end-" + lockName(t)
	srv.Do(t, "ECHO", marker)
	for {
		line, err := mon.r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading MONITOR: %v (so far %q)", err, sent)
		}
		switch {
		case strings.Contains(line, marker):
			return sent, inScripts
		case strings.Contains(line, " [0 lua] "):
			inScripts = append(inScripts, strings.TrimSpace(line))
		case !isHandshake(line):
			sent = append(sent, strings.TrimSpace(line))
		}
	}
}

// testTwoCommandsAtServer watches, with MONITOR at the server, the
// commands an uncontended Lock+Unlock sends: two script calls and nothing
// else (commands run inside scripts are marked "lua" and not counted).
func testTwoCommandsAtServer(t *testing.T, s *suite) {
	m := s.newProc(t).mutex(t, lockName(t))
	// Warm up: load the scripts and open the connections (clients may
	// open several pipelines lazily).
	for range 8 {
		mustLock(t, m)
		mustUnlock(t, m)
	}
	// After its first hold the client subscribes, once, to its own channel
	// to hear of reconnects; wait for that before counting.
	waitUntil(t, eventually, "the client's reconnect subscription", func() bool {
		chans, _ := s.cfg.server.Do(t, "PUBSUB", "CHANNELS", "fairlock_client:"+m.Owner().ClientID).([]any)
		return len(chans) == 1
	})
	mon := startMonitor(t, s.cfg.server)
	mustLock(t, m)
	mustUnlock(t, m)
	sent, _ := mon.collect(t, s.cfg.server)
	evalsha := 0
	for _, l := range sent {
		if strings.Contains(strings.ToLower(l), `"evalsha"`) {
			evalsha++
		}
	}
	if len(sent) != 2 || evalsha != 2 {
		t.Errorf("uncontended Lock+Unlock sent %d commands to the server, want 2 EVALSHA:\n%s", len(sent), strings.Join(sent, "\n"))
	}
}

// testX8ConstantWork counts, with MONITOR, the commands the scripts run
// for a waiter's heartbeat, a release and a waiter leaving, behind a short
// and a long queue: the work must not grow with the queue (X8).
func testX8ConstantWork(t *testing.T, s *suite) {
	work := func(queued int) (heartbeat, release, leave int) {
		name := lockName(t)
		p := s.newProc(t)
		holder := p.mutex(t, name)
		mustLock(t, holder)
		for i := range queued {
			injectWaiter(t, p.b, name, fmt.Sprintf("other-client:%d", i), time.Minute)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// Slow heartbeats (20 s), so none lands in a counting window.
		waiter := s.newProc(t, lock.WithWaiterTimeout(60*time.Second)).mutex(t, name)
		ch := goAcquire(func() (*lock.Hold, error) { return waiter.Lock(ctx) })
		waitQueued(t, holder, queued+1)
		count := func(do func()) int {
			mon := startMonitor(t, s.cfg.server)
			do()
			_, in := mon.collect(t, s.cfg.server)
			return len(in)
		}
		// A re-entry plus release of the holder exercises the purge and
		// the queue reads of acquire and unlock while others wait.
		release = count(func() { mustLock(t, holder); mustUnlock(t, holder) })
		leave = count(func() {
			cancel()
			if r := await(t, ch, eventually, "waiter"); !errors.Is(r.err, context.Canceled) {
				t.Fatalf("waiter: %v", r.err)
			}
		})
		// A heartbeat: the tail waiter's acquire while queued.
		tp := s.newProc(t, lock.WithWaiterTimeout(60*time.Second))
		tail := tp.mutex(t, name)
		tctx, tcancel := context.WithCancel(context.Background())
		defer tcancel()
		tch := goAcquire(func() (*lock.Hold, error) { return tail.Lock(tctx) })
		waitQueued(t, holder, queued+1)
		// Its first attempts (queue, then re-check after subscribing)
		// must be over before counting one more.
		waitUntil(t, eventually, "the waiter to settle", func() bool { return tp.b.count("acquire"+doneSuffix) >= 2 })
		heartbeat = count(func() {
			// Nudge the waiter to run acquire again: a wake-up message.
			done := tp.b.count("acquire" + doneSuffix)
			evalRaw(t, p.b, `return redis.call('publish', KEYS[1], '0')`, []string{"redisson_lock__channel:{" + name + "}:" + tail.Owner().String()})
			waitUntil(t, eventually, "the waiter's heartbeat", func() bool { return tp.b.count("acquire"+doneSuffix) > done })
		})
		tcancel()
		await(t, tch, eventually, "tail waiter")
		return heartbeat, release, leave
	}
	h1, r1, l1 := work(2)
	h2, r2, l2 := work(2000)
	t.Logf("commands run by scripts with 2 / 2000 waiters: heartbeat %d / %d, re-entry+release %d / %d, leave %d / %d", h1, h2, r1, r2, l1, l2)
	// A head waiter woken by its key watch (the holder's re-entry writes
	// the hash) may run acquire in a window, a few times at most; a loop
	// over the queue would add thousands.
	const noise = 30
	if h2 > h1+noise || r2 > r1+noise || l2 > l1+noise {
		t.Errorf("script commands grew with the queue (2 vs 2000 waiters): heartbeat %d vs %d, release %d vs %d, leave %d vs %d", h1, h2, r1, r2, l1, l2)
	}
}

// isHandshake reports a MONITOR line of a client setting up a new
// connection (HELLO, CLIENT ..., AUTH, SELECT): not a lock round trip.
func isHandshake(line string) bool {
	for _, cmd := range []string{`"HELLO"`, `"CLIENT"`, `"AUTH"`, `"SELECT"`} {
		if strings.Contains(strings.ToUpper(line), "] "+cmd) {
			return true
		}
	}
	return false
}
