package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
)

// parityCases are the upstream parity scenarios (P: Redisson's own fair-lock
// tests and regressions, adapted to Go) and the mixed-client cases (X11: a
// Redisson model client, redisson.go, and fairlock clients on one lock).
func parityCases() []testCase {
	return []testCase{
		{name: "P1_EightOwnersHandOverByLeaseExpiry", run: testP1LeaseHandOver},
		{name: "P3_ShortTryLockLoopsKeepDeadlinesBounded", run: testP3NoDrift},
		{name: "P4_GivenUpTryLockLeavesQueueAtOnce", run: testP4GiveUpLeaves},
		{name: "P5_TryLockWaitsItsWholeBudget", run: testP5TryLockBudget},
		{name: "P6_SharedOwnerReentrancyAndForeignUnlock", run: testP6SharedOwner},
		{name: "P6_ForceUnlockWithSeveralWaitersKeepsOrder", run: testP6ForceUnlockOrder},
		{name: "P6_DeleteWithSeveralWaitersAllAcquire", run: testP6DeleteWaiters},
		{name: "P7_StrictFIFO12OwnersOn4Clients", run: testP7StrictFIFO},
		{name: "P8_PausedHolderPastLease", run: testP8PausedHolder},
		{name: "P9_3004_LongHoldKeepsGoAndRedissonWaitersInOrder", run: testP9LongHoldMixed},
		{name: "P9_3730_RedissonLeaseExpiryWakesGoHead", run: testP9RedissonLeaseExpiry},
		{name: "P9_3730_PurgedHeadWhileHeldWakesNewHead", run: testP9PurgedHeadWhileHeld},
		{name: "P9_3829_HashDeletedByHandWakesHeadBehindRedisson", run: testP9DeletedByHand},
		{name: "P9_4595_CrashedWaiterDelaysAtMostWaiterTimeout", run: testP9CrashedWaiter},
		{name: "P9_5503_NoZeroOrNegativeHintBehindStuckHead", run: testP9NoZeroHint},
		{name: "X11_RedissonModelMatchesUpstream", run: testX11Model},
		{name: "X11_ReadsAndUnlockAcrossClients", run: testX11Reads},
		{name: "X11_GoUnlockWakesRedissonWaiter", run: testX11GoWakesRedisson},
		{name: "X11_RedissonUnlockWakesGoWaiter", run: testX11RedissonWakesGo},
		{name: "X11_MutualExclusionGoAndRedisson", run: testX11MutualExclusion},
		{name: "X11_FIFOAcrossGoAndRedisson", run: testX11FIFO},
	}
}

// queueOwners returns the queued owners, head first (at most 100).
func queueOwners(t *testing.T, m *lock.Mutex) []string {
	t.Helper()
	st, err := m.Inspect(context.Background(), 100)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	var out []string
	for _, w := range st.Queue {
		out = append(out, w.Owner)
	}
	return out
}

// waitVisible waits until owner is queued or holds the lock.
func waitVisible(t *testing.T, probe *lock.Mutex, owner string) {
	t.Helper()
	redistest.Eventually(t, eventually, owner+" queued or holding", func() bool {
		st, err := probe.Inspect(context.Background(), 100)
		if err != nil {
			t.Fatalf("Inspect: %v", err)
		}
		if st.CountOf(owner) > 0 {
			return true
		}
		for _, w := range st.Queue {
			if w.Owner == owner {
				return true
			}
		}
		return false
	})
}

// holderFields reads the lock hash's fields. It takes no *testing.T, so
// critical sections in goroutines can call it.
func holderFields(ctx context.Context, b backend.Backend, name string) (map[string]int64, error) {
	rep, err := b.Eval(ctx, backend.NewScript("conformance_hgetall",
		`return redis.call('hgetall', KEYS[1])`), []string{name}, nil)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for i := 0; i+1 < len(rep.Elems); i += 2 {
		n, err := rep.Elems[i+1].AsInt()
		if err != nil {
			return nil, err
		}
		out[rep.Elems[i].Str] = n
	}
	return out, nil
}

// exclusion checks mutual exclusion from inside critical sections: at most
// one goroutine inside at a time, the lock hash naming exactly the owner
// inside, and a read-modify-write counter that loses updates if two
// holders overlap. Atomics keep the race detector out of it: Redis, not Go,
// is what orders the holders.
type exclusion struct {
	b       backend.Backend
	name    string
	inside  atomic.Int32
	counter atomic.Int64
}

func (e *exclusion) critical(ctx context.Context, owner string) error {
	n := e.inside.Add(1)
	defer e.inside.Add(-1)
	if n != 1 {
		return fmt.Errorf("%d holders inside the critical section at once (%s one of them)", n, owner)
	}
	f, err := holderFields(ctx, e.b, e.name)
	if err != nil {
		return err
	}
	// Its field may be 0: a hand-over grant not taken up yet, one hold.
	if _, ok := f[owner]; len(f) != 1 || !ok {
		return fmt.Errorf("lock hash %v while %s holds, want only its field", f, owner)
	}
	v := e.counter.Load()
	time.Sleep(time.Millisecond) // hold a little, so an overlap would lose an update
	e.counter.Store(v + 1)
	return nil
}

// crashableBackend simulates a process crash under a lock client: after
// crash, nothing reaches Redis any more (no leave, no cleanup).
type crashableBackend struct {
	capable
	crashed atomic.Bool
}

// errCrashed is what a crashed process's backend answers: final (it wraps
// backend.ErrClosed), so a lock call there ends instead of retrying as it
// would through a connection error (X14).
var errCrashed = fmt.Errorf("conformance: simulated process crash: %w", backend.ErrClosed)

func (b *crashableBackend) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	if b.crashed.Load() {
		return backend.Reply{}, errCrashed
	}
	return b.capable.Eval(ctx, s, keys, args)
}

func (b *crashableBackend) EvalBatch(ctx context.Context, calls []backend.Call) []backend.Result {
	if b.crashed.Load() {
		out := make([]backend.Result, len(calls))
		for i := range out {
			out[i].Err = errCrashed
		}
		return out
	}
	return b.capable.EvalBatch(ctx, calls)
}

func (b *crashableBackend) Subscribe(ctx context.Context, channel string) (*backend.Subscription, error) {
	if b.crashed.Load() {
		return nil, errCrashed
	}
	return b.capable.Subscribe(ctx, channel)
}

func (b *crashableBackend) SSubscribe(ctx context.Context, channel string) (*backend.Subscription, error) {
	if b.crashed.Load() {
		return nil, errCrashed
	}
	return b.capable.SSubscribe(ctx, channel)
}

// P1 (upstream testLockAcquiredBooleanTimeoutDrift_Descrete): eight owners
// start 100 ms apart, each TryLock(wait 10 s, lease 1 s) and never unlock.
// Only lease expiries hand the lock over, so all eight must acquire, in
// start order, each about one lease after the previous. The owners'
// waiter timeout is long (heartbeat every 6.7 s), so no heartbeat can
// rescue a waiter that missed its turn: whoever is at the head must be
// waiting no longer than the lease left (X3).
func testP1LeaseHandOver(t *testing.T, s *suite) {
	const (
		owners  = 8
		lease   = time.Second
		wait    = 10 * time.Second
		spacing = 100 * time.Millisecond
	)
	name := lockName(t)
	probe := s.newProc(t).mutex(t, name)
	procs := make([]*proc, 4)
	for i := range procs {
		procs[i] = s.newProc(t, lock.WithWaiterTimeout(20*time.Second))
	}
	ms := make([]*lock.Mutex, owners)
	ctxs := make([]context.Context, owners)
	for i := range ms {
		ms[i] = procs[i%len(procs)].mutex(t, name)
		ctxs[i] = ctxFor(t, 2*wait)
	}
	chans := make([]<-chan result, owners)
	start := time.Now()
	for i, m := range ms {
		// The scenario's 100 ms spacing (not a synchronisation: the
		// previous owner is already visibly queued or holding).
		<-time.After(time.Until(start.Add(time.Duration(i) * spacing)))
		chans[i] = goAcquire(func() (*lock.Hold, error) { return m.TryLockWithLease(ctxs[i], wait, lease) })
		waitVisible(t, probe, m.Owner())
	}
	res := make([]result, owners)
	for i, ch := range chans {
		res[i] = await(t, ch, wait+slack, fmt.Sprintf("owner %d", i))
	}
	failed := false
	for i, r := range res {
		if r.err != nil {
			failed = true
			t.Errorf("owner %d (started at +%v): %v after +%v", i, time.Duration(i)*spacing, r.err, r.at.Sub(start).Round(time.Millisecond))
		}
	}
	if failed {
		t.Fatal("not every owner acquired within its 10 s wait although one lease expiry per owner (8 s in all) was enough")
	}
	for i := 1; i < owners; i++ {
		prev, cur := res[i-1], res[i]
		if cur.h.Token() <= prev.h.Token() {
			t.Errorf("owner %d got token %d after owner %d's %d: not start order", i, cur.h.Token(), i-1, prev.h.Token())
		}
		gap := cur.at.Sub(prev.at)
		if gap < lease/2 {
			t.Errorf("owner %d acquired %v after owner %d: before its lease (%v) ran out", i, gap, i-1, lease)
		}
		if gap > lease+slack {
			t.Errorf("owner %d acquired %v after owner %d, want about one lease (%v): the hand-over waited for something else than the lease expiry", i, gap, i-1, lease)
		}
	}
	for i, r := range res {
		select {
		case <-r.h.Done():
		case <-time.After(lease + slack):
			t.Fatalf("owner %d's hold did not end after its lease", i)
		}
		if !errors.Is(r.h.Err(), lock.ErrLockLost) {
			t.Errorf("owner %d's hold ended with %v, want ErrLockLost (lease ran out)", i, r.h.Err())
		}
	}
}

// P3 (upstream testAcquireFailedTimeoutDrift): owners loop on short-wait
// TryLock against a long holder. Each gives up and leaves; none may shift
// another's deadline (upstream's O(N) fix-ups drift them), so every queued
// deadline stays within (server now + waiter timeout/2, server now +
// waiter timeout], and nothing is left behind.
func testP3NoDrift(t *testing.T, s *suite) {
	const (
		tryers = 4
		runFor = 2 * time.Second
		wt     = (5 * time.Second)
	)
	name := lockName(t)
	holder := s.newProc(t).mutex(t, name)
	mustLock(t, holder)
	procs := []*proc{s.newProc(t), s.newProc(t)}
	var (
		wg       sync.WaitGroup
		attempts atomic.Int64
		errs     = make(chan error, tryers)
	)
	stop := time.Now().Add(runFor)
	for i := range tryers {
		m := procs[i%len(procs)].mutex(t, name)
		ctx := ctxFor(t, runFor+eventually)
		wait := 80*time.Millisecond + time.Duration(i)*30*time.Millisecond
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				_, err := m.TryLockWithLease(ctx, wait, time.Second)
				attempts.Add(1)
				if !errors.Is(err, lock.ErrNotAcquired) {
					errs <- fmt.Errorf("TryLock(%v) against a holder: %v, want ErrNotAcquired", wait, err)
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	samples, bad := 0, 0
sample:
	for {
		select {
		case <-done:
			break sample
		case <-tick.C:
		}
		st, err := holder.Inspect(ctxFor(t, eventually), 10)
		if err != nil {
			t.Fatal(err)
		}
		samples++
		if st.QueueLength > tryers {
			t.Errorf("queue length %d with %d owners trying: entries left behind", st.QueueLength, tryers)
			bad++
		}
		for _, w := range st.Queue {
			left := w.Deadline.Sub(st.ServerTime)
			if left <= wt/2 || left > wt+5*time.Millisecond {
				t.Errorf("waiter %s deadline is %v after the server's now, want within (%v, %v]", w.Owner, left, wt/2, wt)
				bad++
			}
		}
		if bad > 5 {
			break
		}
	}
	<-done
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := attempts.Load(); n < tryers*4 || samples < 10 {
		t.Errorf("%d TryLock attempts and %d samples in %v: the scenario did not run", n, samples, runFor)
	}
	if raw := readRaw(t, procs[0].b, name); len(raw.queue) != 0 || raw.timeouts != 0 {
		t.Errorf("after the loops: %+v, want an empty queue and zset", raw)
	}
	mustUnlock(t, holder)
	if _, err := s.newProc(t).mutex(t, name).TryLockWithLease(ctxFor(t, eventually), 0, time.Second); err != nil {
		t.Errorf("TryLockOnce after the holder left: %v (something still queued)", err)
	}
}

// P4 (upstream testTryLockNonDelayed / abandoned entries): a TryLock that
// gives up leaves the queue before it returns, without touching the
// deadline of anyone behind it (no fix-up), and leaves no trace: once the
// holder is gone a TryLockOnce succeeds at once. Waiter timeouts are long
// (60 s), so a left-over entry would block that TryLockOnce for a minute.
func testP4GiveUpLeaves(t *testing.T, s *suite) {
	name := lockName(t)
	p := s.newProc(t)
	holder := p.mutex(t, name)
	mustLock(t, holder)
	slow := s.newProc(t, lock.WithWaiterTimeout(60*time.Second))
	quitter, behind := slow.mutex(t, name), slow.mutex(t, name)
	qch := goAcquire(func() (*lock.Hold, error) {
		return quitter.TryLockWithLease(ctxFor(t, eventually), 300*time.Millisecond, time.Second)
	})
	waitQueued(t, holder, 1)
	bch := goAcquire(func() (*lock.Hold, error) { return behind.Lock(ctxFor(t, 60*time.Second)) })
	waitQueued(t, holder, 2)
	before, err := holder.Inspect(ctxFor(t, eventually), 10)
	if err != nil {
		t.Fatal(err)
	}
	if r := await(t, qch, eventually, "quitter"); !errors.Is(r.err, lock.ErrNotAcquired) {
		t.Fatalf("TryLock against a holder: %v, want ErrNotAcquired", r.err)
	}
	after, err := holder.Inspect(ctxFor(t, eventually), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Queue) != 1 || after.Queue[0].Owner != behind.Owner() {
		t.Fatalf("queue right after the head gave up: %+v, want only %s", after.Queue, behind.Owner())
	}
	// Its own heartbeat may only move it later; upstream's fix-up would
	// take the quitter's wait off it.
	if len(before.Queue) == 2 && after.Queue[0].Deadline.Before(before.Queue[1].Deadline) {
		t.Errorf("giving up moved the next waiter's deadline back from %v to %v", before.Queue[1].Deadline, after.Queue[0].Deadline)
	}
	released := time.Now()
	mustUnlock(t, holder)
	rb := await(t, bch, eventually, "waiter behind the quitter")
	if rb.err != nil {
		t.Fatal(rb.err)
	}
	if d := rb.at.Sub(released); d > slack {
		t.Errorf("waiter behind the quitter took %v after the unlock, want a wake-up", d)
	}
	mustUnlock(t, behind)
	if _, err := s.newProc(t).mutex(t, name).TryLockWithLease(ctxFor(t, eventually), 0, time.Second); err != nil {
		t.Errorf("TryLockOnce once holder and waiter were gone: %v", err)
	}
}

// P5 (upstream testTryLockWait): TryLock(3 s) against a holder returns
// ErrNotAcquired after 3 s, not earlier - a wake-up while waiting (here a
// stray "0" on its channel) only makes it check again - and not much later.
func testP5TryLockBudget(t *testing.T, s *suite) {
	const wait = 3 * time.Second
	name := lockName(t)
	p := s.newProc(t)
	holder := p.mutex(t, name)
	mustLock(t, holder)
	tryer := s.newProc(t).mutex(t, name)
	start := time.Now()
	ch := goAcquire(func() (*lock.Hold, error) { return tryer.TryLockWithLease(ctxFor(t, eventually), wait, time.Second) })
	waitQueued(t, holder, 1)
	channel := "redisson_lock__channel:{" + name + "}:" + tryer.Owner()
	evalRaw(t, p.b, `return redis.call('`+wakeCmd(p.b)+`', ARGV[1], '0')`, []string{name}, channel)
	r := await(t, ch, wait+eventually, "TryLock")
	took := r.at.Sub(start)
	if !errors.Is(r.err, lock.ErrNotAcquired) {
		t.Fatalf("TryLock(%v) against a holder: %v after %v, want ErrNotAcquired", wait, r.err, took)
	}
	if took < wait || took > wait+slack {
		t.Errorf("TryLock(%v) returned after %v, want %v to %v", wait, took, wait, wait+slack)
	}
	if held, _ := holder.IsHeldBy(ctxFor(t, eventually), holder.Owner()); !held {
		t.Error("holder lost the lock")
	}
	if n := queueLen(t, holder); n != 0 {
		t.Errorf("queue length %d after the TryLock gave up", n)
	}
}

// P6 (upstream testReentrancy / testIsHeldByCurrentThread): two Mutexes of
// one client acting for one owner share holds (counts add up), while
// another owner of the same client can neither unlock nor barge, and a
// reader on another client sees who holds.
func testP6SharedOwner(t *testing.T, s *suite) {
	name := lockName(t)
	p := s.newProc(t)
	a := p.mutex(t, name, lock.WithOwnerID(7))
	b := p.mutex(t, name, lock.WithOwnerID(7))
	c := p.mutex(t, name, lock.WithOwnerID(8))
	reader := s.newProc(t).mutex(t, name)
	ctx := ctxFor(t, eventually)
	ha := mustLock(t, a)
	hb, err := b.TryLock(ctx, 0)
	if err != nil {
		t.Fatalf("TryLockOnce by the same owner through another Mutex: %v, want a re-entry", err)
	}
	if hb.Token() != ha.Token() {
		t.Errorf("re-entry token %d, want %d", hb.Token(), ha.Token())
	}
	for _, m := range []*lock.Mutex{a, b} {
		if n, err := m.HoldCount(ctx); err != nil || n != 2 {
			t.Errorf("HoldCount = %d, %v; want 2", n, err)
		}
	}
	if err := c.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Unlock by another owner of the same client: %v, want ErrNotHeld", err)
	}
	if _, err := c.TryLock(ctx, 0); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("TryLockOnce by another owner of the same client: %v, want ErrNotAcquired", err)
	}
	if n, _ := a.HoldCount(ctx); n != 2 {
		t.Errorf("hold count %d after a foreign unlock, want 2", n)
	}
	if held, err := reader.IsHeldBy(ctx, a.Owner()); err != nil || !held {
		t.Errorf("IsHeldBy(owner 7) from another client = %v, %v", held, err)
	}
	if held, err := reader.IsHeldBy(ctx, c.Owner()); err != nil || held {
		t.Errorf("IsHeldBy(owner 8) from another client = %v, %v", held, err)
	}
	mustUnlock(t, b)
	if locked, _ := reader.IsLocked(ctx); !locked {
		t.Fatal("free after one of two unlocks")
	}
	mustUnlock(t, a)
	if locked, _ := reader.IsLocked(ctx); locked {
		t.Error("still locked after both unlocks")
	}
	if err := a.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("third unlock: %v, want ErrNotHeld", err)
	}
}

// P6 (upstream testForceUnlock with waiters): ForceUnlock wakes the head,
// and the queue behind it carries on in order, each hand-over by a
// wake-up (waiter heartbeats are 20 s away).
func testP6ForceUnlockOrder(t *testing.T, s *suite) {
	const n = 3
	name := lockName(t)
	// The holder's watchdog checks every 300 ms, so it learns soon that
	// it was force-unlocked (X7).
	holder := s.newProc(t, lock.WithLease(900*time.Millisecond)).mutex(t, name)
	h := mustLock(t, holder)
	wp := s.newProc(t, lock.WithWaiterTimeout(60*time.Second))
	ms := make([]*lock.Mutex, n)
	for i := range ms {
		ms[i] = wp.mutex(t, name)
	}
	chans := queueInOrder(t, holder, 0, ms, func(m *lock.Mutex) (*lock.Hold, error) {
		return m.Lock(ctxFor(t, 60*time.Second))
	})
	admin := s.newProc(t).mutex(t, name)
	last := time.Now()
	if ok, err := admin.ForceUnlock(ctxFor(t, eventually)); err != nil || !ok {
		t.Fatalf("ForceUnlock = %v, %v", ok, err)
	}
	for i, ch := range chans {
		r := await(t, ch, eventually, fmt.Sprintf("waiter %d", i))
		if r.err != nil {
			t.Fatal(r.err)
		}
		if d := r.at.Sub(last); d > slack {
			t.Errorf("waiter %d took %v after the previous release, want a wake-up", i, d)
		}
		for j, other := range chans[i+1:] {
			select {
			case r := <-other:
				t.Fatalf("waiter %d acquired (%v) while waiter %d holds", i+1+j, r.err, i)
			default:
			}
		}
		last = time.Now()
		mustUnlock(t, ms[i])
	}
	select {
	case <-h.Done():
	case <-time.After(eventually):
		t.Fatal("force-unlocked hold not ended")
	}
	if !errors.Is(h.Err(), lock.ErrLockLost) {
		t.Errorf("force-unlocked hold: %v, want ErrLockLost", h.Err())
	}
}

// P6 (upstream testDelete with waiters, X3): Delete drops the queue too;
// the head is woken and the others queue again at their next heartbeat,
// so every waiter still acquires, one at a time.
func testP6DeleteWaiters(t *testing.T, s *suite) {
	const n = 4
	name := lockName(t)
	p := s.newProc(t)
	holder := p.mutex(t, name)
	h := mustLock(t, holder)
	procs := []*proc{
		s.newProc(t, lock.WithWaiterTimeout(1500*time.Millisecond)),
		s.newProc(t, lock.WithWaiterTimeout(1500*time.Millisecond)),
	}
	ex := &exclusion{b: p.b, name: name}
	ms := make([]*lock.Mutex, n)
	for i := range ms {
		ms[i] = procs[i%len(procs)].mutex(t, name)
	}
	chans := queueInOrder(t, holder, 0, ms, func(m *lock.Mutex) (*lock.Hold, error) {
		ctx := ctxFor(t, 60*time.Second)
		h, err := m.Lock(ctx)
		if err != nil {
			return nil, err
		}
		if err := ex.critical(ctx, m.Owner()); err != nil {
			return h, err
		}
		return h, m.Unlock(ctx)
	})
	if ok, err := holder.Delete(ctxFor(t, eventually)); err != nil || !ok {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	for i, ch := range chans {
		if r := await(t, ch, eventually, fmt.Sprintf("waiter %d after Delete", i)); r.err != nil {
			t.Errorf("waiter %d: %v", i, r.err)
		}
	}
	if got := ex.counter.Load(); got != n {
		t.Errorf("%d critical sections counted, want %d", got, n)
	}
	select {
	case <-h.Done():
	case <-time.After(eventually):
		t.Fatal("deleted hold not ended")
	}
	if !errors.Is(h.Err(), lock.ErrLockLost) {
		t.Errorf("deleted hold: %v, want ErrLockLost", h.Err())
	}
	if raw := readRaw(t, p.b, name); raw.hashExists || len(raw.queue) != 0 || raw.timeouts != 0 {
		t.Errorf("left after all waiters: %+v", raw)
	}
}

// P7 (upstream testFairness): twelve owners on four clients, queued about
// 10 ms apart, half with Lock and half with TryLock, acquire in arrival
// order.
func testP7StrictFIFO(t *testing.T, s *suite) {
	const (
		n       = 12
		spacing = 10 * time.Millisecond
	)
	name := lockName(t)
	holder := s.newProc(t).mutex(t, name)
	mustLock(t, holder)
	procs := []*proc{s.newProc(t), s.newProc(t), s.newProc(t), s.newProc(t)}
	var (
		mu    sync.Mutex
		order []int
	)
	chans := make([]<-chan result, n)
	var want []string
	start := time.Now()
	for i := range n {
		m := procs[i%len(procs)].mutex(t, name)
		want = append(want, m.Owner())
		ctx := ctxFor(t, 60*time.Second)
		<-time.After(time.Until(start.Add(time.Duration(i) * spacing))) // the scenario's spacing
		chans[i] = goAcquire(func() (*lock.Hold, error) {
			var h *lock.Hold
			var err error
			if i%2 == 0 {
				h, err = m.Lock(ctx)
			} else {
				h, err = m.TryLockWithLease(ctx, 50*time.Second, 30*time.Second)
			}
			if err != nil {
				return nil, err
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			return h, m.Unlock(ctx)
		})
		waitQueued(t, holder, i+1)
	}
	if got := queueOwners(t, holder); !slices.Equal(got, want) {
		t.Fatalf("queue %v, want arrival order %v", got, want)
	}
	mustUnlock(t, holder)
	for i, ch := range chans {
		if r := await(t, ch, 60*time.Second, fmt.Sprintf("owner %d", i)); r.err != nil {
			t.Fatalf("owner %d: %v", i, r.err)
		}
	}
	wantOrder := make([]int, n)
	for i := range wantOrder {
		wantOrder[i] = i
	}
	if !slices.Equal(order, wantOrder) {
		t.Errorf("acquisition order %v, want arrival order %v", order, wantOrder)
	}
}

// P8 (upstream testAbandonedTimeoutDrift / a holder paused past its
// lease, #3004 family): the holder takes a 2 s lease and never
// unlocks, as if its process were paused. Queued behind it: a TryLock that
// gives up after 300 ms (the head), then a Lock. Afterwards the quitter is
// gone, the live waiter holds - taken at the lease expiry, because once the
// head left it was the head and must wait no longer than the lease left
// (X3; its own heartbeat is 10 s away) - the paused holder was told (X7),
// its token is older (X6), and its late Unlock changes nothing.
func testP8PausedHolder(t *testing.T, s *suite) {
	// The lease outlasts the quitter's wait by 1.7 s: room for queueing
	// both waiters on a loaded machine (at 800 ms, a cluster run with
	// eight rules at once saw the lease run out before the quitter gave
	// up, and the quitter acquire).
	const lease = 2 * time.Second
	name := lockName(t)
	p := s.newProc(t)
	holder := p.mutex(t, name)
	acquired := time.Now()
	h, err := holder.LockWithLease(ctxFor(t, eventually), lease)
	if err != nil {
		t.Fatal(err)
	}
	quitter := s.newProc(t).mutex(t, name)
	live := s.newProc(t, lock.WithWaiterTimeout(30*time.Second)).mutex(t, name)
	qch := goAcquire(func() (*lock.Hold, error) {
		return quitter.TryLockWithLease(ctxFor(t, eventually), 300*time.Millisecond, time.Second)
	})
	waitQueued(t, holder, 1)
	lch := goAcquire(func() (*lock.Hold, error) { return live.Lock(ctxFor(t, 60*time.Second)) })
	waitQueued(t, holder, 2)
	if r := await(t, qch, eventually, "quitter"); !errors.Is(r.err, lock.ErrNotAcquired) {
		t.Fatalf("quitter: %v, want ErrNotAcquired", r.err)
	}
	if q := readRaw(t, p.b, name).queue; slices.Contains(q, quitter.Owner()) {
		t.Errorf("quitter still queued after giving up: %v", q)
	}
	rl := await(t, lch, 30*time.Second, "live waiter")
	if rl.err != nil {
		t.Fatal(rl.err)
	}
	if d := rl.at.Sub(acquired); d > lease+slack {
		t.Errorf("live waiter took over %v after the paused holder's %v lease began, want about the lease: "+
			"it became the head when the quitter left, but was not woken and kept waiting for its heartbeat", d, lease)
	}
	select {
	case <-h.Done():
	case <-time.After(eventually):
		t.Fatal("paused holder's hold did not end")
	}
	if !errors.Is(h.Err(), lock.ErrLockLost) {
		t.Errorf("paused holder's hold: %v, want ErrLockLost", h.Err())
	}
	if h.Token() >= rl.h.Token() {
		t.Errorf("paused holder's token %d, new holder's %d: want older < newer", h.Token(), rl.h.Token())
	}
	if err := holder.Unlock(ctxFor(t, eventually)); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("late Unlock by the paused holder: %v, want ErrNotHeld", err)
	}
	if held, _ := live.IsHeldBy(ctxFor(t, eventually), live.Owner()); !held {
		t.Error("the paused holder's late Unlock released the new holder's lock")
	}
	if raw := readRaw(t, p.b, name); len(raw.queue) != 0 || raw.timeouts != 0 {
		t.Errorf("queue left: %+v", raw)
	}
}
