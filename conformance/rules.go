package conformance

// The parallel rule cases: the table of every B- and X-rule case that
// runs in parallel with the others, and the B-rule (reference behaviour)
// cases. The X-rule cases of the table are in rules_x.go.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
)

func ruleCases() []testCase {
	return []testCase{
		{name: "B1_AcquireFreeLock", run: testB1AcquireFreeLock},
		{name: "B1_UncontendedCostsTwoRoundTrips", run: testB1TwoRoundTrips},
		{name: "B2_Reentrancy", run: testB2Reentrancy},
		{name: "B3_FIFO16Owners", run: testB3FIFO16},
		{name: "B3_QueuedOnceWhenSharedOwnerWaitsTwice", run: testB3QueuedOnce},
		{name: "B3_SharedOwnerKeepsItsPlaceWhenOneCallFails", run: testB3FailedCallKeepsPlace},
		{name: "X5_SharedOwnerWhoseCallsAllFailHoldsNothing", run: testX5SharedOwnerCallsFail},
		{name: "B4_UnlockWakesNextWaiter", run: testB4UnlockWakes},
		{name: "B4_UnlockByNonHolderFails", run: testB4NonHolder},
		{name: "B5_StaleHeadsPurged", run: testB5StaleHeads},
		{name: "B6_WatchdogKeepsLockAlive", run: testB6Watchdog},
		{name: "B6_CrashedHolderFreesByLease", run: testB6CrashedHolder},
		{name: "B7_TryLockGivesUpAfterWaitAndLeavesQueue", run: testB7TryLockGivesUp},
		{name: "B7_OneAttemptNeverQueues", run: testB7TryLockOnce},
		{name: "B8_ForceUnlockWakesNext", run: testB8ForceUnlock},
		{name: "B8_DeleteRemovesKeysAndWakesHead", run: testB8Delete},
		{name: "B8_DeleteWakesTheLiveHeadPastDeadOnes", run: testB8DeleteDeadHead},
		{name: "B9_ReadsFromAnotherOwner", run: testB9Reads},
		{name: "B10_RetriedUnlockIsIdempotent", run: testB10RetriedUnlock},
		{name: "X1_DeadlinesUseServerTime", run: testX1ServerTime},
		{name: "X2_LongHoldKeepsLiveWaitersInOrder", run: testX2LongHold},
		{name: "X2_CrashedWaiterDelaysAtMostWaiterTimeout", run: testX2CrashedWaiter},
		{name: "X2_StalledKeyWatchKeepsTheHeadFirst", run: testX2StalledKeyWatch},
		{name: "X2_StalledSubscribeKeepsTheWaitersFirst", run: testX2StalledSubscribe},
		{name: "X3_LeaseExpiryWakesHead", run: testX3LeaseExpiry},
		{name: "X3_HashDeletedByHandWakesHead", run: testX3DeletedByHand},
		{name: "X3_HeadGivingUpWakesNext", run: testX3HeadGivesUp},
		{name: "X3_HashDeletedByHandWakesWatchingHead", run: testX3WatchedHash},
		{name: "X4_NoBusySpinWhileWaiting", run: testX4NoSpin},
		{name: "X5_CancelledWaiterLeavesNoTrace", run: testX5Cancel},
		{name: "X5_LostAcquireReplyLeavesNoHold", run: testX5LostReply},
		{name: "X6_FencingTokensIncrease", run: testX6Tokens},
		{name: "X7_LostLockIsSignalled", run: testX7LostLock},
		{name: "X7_ForceUnlockedHolderIsTold", run: testX7ForceUnlocked},
		{name: "X16_ForceUnlockedOrDeletedHolderIsToldAtOnce", run: testX16EvictedAtOnce},
		{name: "X16_HashChangedBehindTheHolderIsCheckedAtOnce", run: testX16HashChanged},
		{name: "X8_LeaveFromTheMiddleLeavesADeadEntry", run: testX8LeaveFromTheMiddle},
		{name: "X10_BadInputTouchesNothing", run: testX10BadInput},
		{name: "P2_500OwnersEachAcquireOnce", run: testManyOwners},
		{name: "X17_EveryPublishModeWakesItsWaiters", run: testX17EveryPublishMode},
		{name: "X17_ShardedWakeUpsStayInTheShard", run: testX17ShardedWakeUpsStayInTheShard},
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
	if len(st.Holders) != 1 || st.Holders[0].Owner != m.Owner() || st.Holders[0].Count != 1 {
		t.Errorf("holders %+v, want only %s with count 1", st.Holders, m.Owner())
	}
	if st.TTL <= (30*time.Second)-slack || st.TTL > (30*time.Second) {
		t.Errorf("TTL %v, want about the default lease %v", st.TTL, (30 * time.Second))
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
	// Beside the calls (the client's subscription to its own channel is
	// the client's, made as it starts): when the hold outlasts its first
	// 50 ms (a loaded machine), a watch on
	// the lock hash - armed again at most once, when the unlock's own
	// write reaches the watch before the hold has ended.
	// Each arming checks the hold once (a renew with no lease), and so
	// does the client's subscription to its notice channel when it comes
	// up while the acquire's reply is on its way: a loss notice published
	// before it was listening would be missed (X16).
	watches := p.b.count("WATCHKEY")
	checks := watches + p.b.count(clientSubscribe+doneSuffix)
	if n := p.b.total() - watches - min(p.b.count("renew"), checks); n != 2 {
		t.Errorf("uncontended Lock+Unlock made %d backend calls (%v), want 2", n, p.b.counts)
	}
	if n := p.b.count("WATCHKEY"); n > 2 {
		t.Errorf("uncontended Lock+Unlock armed %d watches, want at most 2", n)
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
	if ttl, _ := m.RemainTTL(ctxFor(t, eventually)); ttl <= 20*time.Second || ttl > (30*time.Second) {
		t.Errorf("re-entry with lease 20s left TTL %v, want the %v of the first hold", ttl, (30 * time.Second))
	}
	if _, err := m.LockWithLease(ctxFor(t, eventually), 2*(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if ttl, _ := m.RemainTTL(ctxFor(t, eventually)); ttl <= (30 * time.Second) {
		t.Errorf("re-entry with lease %v left TTL %v, want it extended", 2*(30*time.Second), ttl)
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

// testB3FailedCallKeepsPlace: an owner waits with two calls sharing one
// queue entry; one of them gives up while its attempts fail (replies
// lost). The entry, and the place, stay the other call's: it is granted
// the lock before an owner that queued after it.
func testB3FailedCallKeepsPlace(t *testing.T, s *suite) {
	name := lockName(t)
	holder := s.newProc(t).mutex(t, name)
	mustLock(t, holder)
	sp := s.newProc(t)
	shared := sp.mutex(t, name)
	first := goAcquire(func() (*lock.Hold, error) { return shared.Lock(ctxFor(t, 30*time.Second)) })
	waitQueued(t, holder, 1)
	later := s.newProc(t).mutex(t, name)
	behind := goAcquire(func() (*lock.Hold, error) { return later.Lock(ctxFor(t, 30*time.Second)) })
	waitQueued(t, holder, 2)

	tryLockLosingReplies(t, sp, shared)
	if n := queueLen(t, holder); n != 2 {
		t.Errorf("queue length %d after the shared owner's second call gave up, want 2 (its first call still waits, ahead)", n)
	}

	mustUnlock(t, holder)
	r := await(t, first, eventually, "the shared owner's first call")
	if r.err != nil {
		t.Fatal(r.err)
	}
	mustNotArrive(t, behind, 100*time.Millisecond, "the owner queued behind, while the shared owner holds")
	mustUnlock(t, shared)
	if rb := await(t, behind, eventually, "the owner queued behind"); rb.err != nil {
		t.Fatal(rb.err)
	}
	mustUnlock(t, later)
}

// testX5SharedOwnerCallsFail: one call of an owner is granted the lock
// while its replies are lost and it gives up, as another call of the owner
// still waits (it leaves the grant to that call); then that call is
// cancelled too. The grant is given back: the lock is free at once, not
// when its 30 s lease runs out.
func testX5SharedOwnerCallsFail(t *testing.T, s *suite) {
	name := lockName(t)
	sp := withoutKeyWatch(s.newProc(t, lock.WithWaiterTimeout(60*time.Second)))
	shared := sp.mutex(t, name)
	probe := s.newProc(t).mutex(t, name)
	// A waiter (not fairlock's) first in line; the owner's first call
	// queues behind it and sleeps (heartbeat 20 s); then the waiter ahead
	// dies (its deadline passes).
	const ahead = "00000000-0000-4000-8000-000000000000:1"
	injectWaiter(t, sp.b, name, ahead, time.Minute)
	ctx, cancel := context.WithCancel(ctxFor(t, eventually))
	defer cancel()
	sleeping := goAcquire(func() (*lock.Hold, error) { return shared.Lock(ctx) })
	waitQueued(t, probe, 2)
	settled(t, sp)
	expireWaiter(t, sp.b, name, ahead)
	// Once the waiter ahead is dead, a second call takes the lock at once
	// (the sleeping call is not told: it is the same owner) and releases it.
	redistest.Eventually(t, slack, "the waiter ahead to be dead", func() bool {
		st, err := probe.Inspect(ctxFor(t, time.Second), 1)
		return err == nil && len(st.Queue) == 1 && !st.Queue[0].Deadline.After(st.ServerTime)
	})
	mustLock(t, shared)
	mustUnlock(t, shared)
	// A third call is granted the free lock, but every reply is lost.
	tryLockLosingReplies(t, sp, shared)
	cancel()
	if r := await(t, sleeping, eventually, "the sleeping call, cancelled"); r.err == nil {
		t.Fatalf("the cancelled call acquired (token %d)", r.h.Token())
	}
	redistest.Eventually(t, slack, "the lock to be free once the owner's last call gave up", func() bool {
		locked, err := probe.IsLocked(ctxFor(t, time.Second))
		return err == nil && !locked
	})
}

// tryLockLosingReplies runs a TryLock of m (on p) that waits 300 ms while
// every acquire reply p gets is lost (the scripts run on the server), and
// fails the test if it acquires.
func tryLockLosingReplies(t *testing.T, p *proc, m *lock.Mutex) {
	t.Helper()
	p.b.mu.Lock()
	p.b.loseReply = func(script string) bool { return script == "acquire" }
	p.b.mu.Unlock()
	defer func() {
		p.b.mu.Lock()
		p.b.loseReply = nil
		p.b.mu.Unlock()
	}()
	if _, err := m.TryLock(ctxFor(t, eventually), 300*time.Millisecond); err == nil {
		t.Fatal("a call acquired while every acquire reply was lost")
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
	h, err := m.TryLock(ctxFor(t, eventually), 0)
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
	// A renewal or check already under way at the unlock may reach the
	// backend just after it (the holder's own renewal changes the hash,
	// which its loss watch then checks, X16); none may start later. A
	// watchdog that kept renewing would renew in every third of a lease.
	<-time.After(lease / 2)
	renewals := p.b.count("renew")
	<-time.After(lease) // a full watchdog period with nothing held
	if n := p.b.count("renew"); n != renewals {
		t.Errorf("watchdog renewed %d times after unlock (more than half a lease after it)", n-renewals)
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
	_, err := tryer.TryLockWithLease(ctxFor(t, eventually), wait, time.Second)
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
	if _, err := tryer.TryLockWithLease(ctxFor(t, eventually), 0, time.Second); err != nil {
		t.Errorf("TryLockOnce right after the holder left: %v", err)
	}
}

func testB7TryLockOnce(t *testing.T, s *suite) {
	name := lockName(t)
	p := s.newProc(t)
	holder := p.mutex(t, name)
	tryer := s.newProc(t).mutex(t, name)
	mustLock(t, holder)
	if _, err := tryer.TryLock(ctxFor(t, eventually), 0); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryLockOnce while held: %v", err)
	}
	if n := queueLen(t, holder); n != 0 {
		t.Errorf("TryLockOnce queued (length %d)", n)
	}
	mustUnlock(t, holder)
	// Free lock, but a live waiter is in line: TryLockOnce must not barge.
	injectWaiter(t, p.b, name, "live-client:1", time.Minute)
	if _, err := tryer.TryLock(ctxFor(t, eventually), 0); !errors.Is(err, lock.ErrNotAcquired) {
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

// testB8DeleteDeadHead: Delete wakes the first live waiter even when dead
// entries are ahead of it (B5): the waiter, whose own heartbeat is 20 s
// apart and which watches no key, takes the lock at once.
func testB8DeleteDeadHead(t *testing.T, s *suite) {
	name := lockName(t)
	p := s.newProc(t)
	holder := p.mutex(t, name)
	wp := withoutKeyWatch(s.newProc(t, lock.WithWaiterTimeout(60*time.Second)))
	waiter := wp.mutex(t, name)
	mustLock(t, holder)
	ch := goAcquire(func() (*lock.Hold, error) { return waiter.Lock(ctxFor(t, 30*time.Second)) })
	waitQueued(t, holder, 1)
	settled(t, wp)
	// A waiter that died, ahead of the live one.
	evalRaw(t, p.b, `
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('lpush', KEYS[2], ARGV[1])
redis.call('zadd', KEYS[3], now - 1000, ARGV[1])
return 1`, keysOf(name), "00000000-0000-4000-8000-000000000000:1")
	if ok, err := holder.Delete(ctxFor(t, eventually)); err != nil || !ok {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	if r := await(t, ch, slack, "the live waiter behind a dead head, after Delete"); r.err != nil {
		t.Fatal(r.err)
	}
	mustUnlock(t, waiter)
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
