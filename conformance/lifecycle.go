package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
)

// The hold's life seen from the client (X12-X14): what the holder believes
// must never be more than the server grants, whatever fails in between.
// Each case guards one way that went wrong before.
func lifecycleCases() []testCase {
	return []testCase{
		{name: "X12_PartitionedHolderKnowsBeforeTheServerExpires", run: testX12Partitioned},
		{name: "X12_InnerUnlockKeepsTheHoldAsLongAsTheServer", run: testX12InnerUnlock},
		{name: "X12_LeftoverCountIsNeverReentered", run: testX12Leftover},
		{name: "B3_LeftoverOfAFailedUnlockQueuesBehindTheWaiters", run: testB3LeftoverQueues},
		{name: "B3_LeftoverQueuesBehindTheWaitersEvenToARetry", run: testB3LeftoverQueuesToARetry},
		{name: "X12_ReentryWithLeaseKeepsTheWatchdog", run: testX12ReentryWithLease},
		{name: "X12_SharedMutexNoFalseLoss", run: testX12SharedMutex},
		{name: "X13_FailedUnlockFreesWithinOneLease", run: testX13FailedUnlock},
		{name: "X13_UnlockRetryAfterTheLatchNeverReleasesTwice", run: testX13LateRetry},
		{name: "X13_UnlockGivingUpItsTurnEndsTheHold", run: testX13UnlockGivesUpItsTurn},
		{name: "X14_LostAcquireReplyIsRetriedNotDoubled", run: testX14LostReplyRetried},
		{name: "X5_CloseDuringAcquireGivesTheGrantBack", run: testX5CloseDuringAcquire},
	}
}

// errInjected is a connection error a faultyBackend makes up.
var errInjected = errors.New("conformance: injected connection error")

// faultyBackend wraps the backend under test with faults switched on and
// off by the test: scripts that fail before they are sent (every call, or
// the next few, with an error that does not say they were not), replies
// lost after their scripts ran, a partition in
// which every call waits for its context and fails, and a hook run before
// a script is sent.
type faultyBackend struct {
	capable
	partitioned atomic.Bool

	mu       sync.Mutex
	failed   map[string]bool // script name -> fail without sending
	loseNext map[string]int  // script name -> replies still to lose (run, then fail)
	dropNext map[string]int  // script name -> requests still to drop (fail without sending)
	before   func(s *backend.Script, keys, args []string)
}

func newFaulty(t *testing.T, s *suite) *faultyBackend {
	return &faultyBackend{capable: s.newBackend(t), failed: map[string]bool{}, loseNext: map[string]int{}, dropNext: map[string]int{}}
}

// drop makes the next n calls of the named script fail without being
// sent, with a connection error that cannot tell: to the client they may
// have run.
func (b *faultyBackend) drop(script string, n int) {
	b.mu.Lock()
	b.dropNext[script] = n
	b.mu.Unlock()
}

// toDrop returns how many calls of the named script drop has still to
// drop.
func (b *faultyBackend) toDrop(script string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropNext[script]
}

// lose makes the next n calls of the named script run on the server and
// then report a connection error, as when the reply is lost.
func (b *faultyBackend) lose(script string, n int) {
	b.mu.Lock()
	b.loseNext[script] = n
	b.mu.Unlock()
}

// fail makes every call of the named script fail (on true) or go through.
func (b *faultyBackend) fail(script string, on bool) {
	b.mu.Lock()
	b.failed[script] = on
	b.mu.Unlock()
}

func (b *faultyBackend) cut(ctx context.Context) error {
	<-ctx.Done()
	return errors.Join(errInjected, ctx.Err())
}

func (b *faultyBackend) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	if b.partitioned.Load() {
		return backend.Reply{}, b.cut(ctx)
	}
	b.mu.Lock()
	failed, before := b.failed[s.Name], b.before
	lose := b.loseNext[s.Name] > 0
	if lose {
		b.loseNext[s.Name]--
	}
	if b.dropNext[s.Name] > 0 {
		b.dropNext[s.Name]--
		failed = true
	}
	b.mu.Unlock()
	if failed {
		return backend.Reply{}, errInjected
	}
	if before != nil {
		before(s, keys, args)
	}
	rep, err := b.capable.Eval(ctx, s, keys, args)
	if lose && err == nil {
		return backend.Reply{}, errInjected
	}
	return rep, err
}

func (b *faultyBackend) EvalBatch(ctx context.Context, calls []backend.Call) []backend.Result {
	if b.partitioned.Load() {
		err := b.cut(ctx)
		out := make([]backend.Result, len(calls))
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	return b.capable.EvalBatch(ctx, calls)
}

func (b *faultyBackend) Subscribe(ctx context.Context, channel string) (*backend.Subscription, error) {
	if b.partitioned.Load() {
		return nil, b.cut(ctx)
	}
	return b.capable.Subscribe(ctx, channel)
}

func (b *faultyBackend) SSubscribe(ctx context.Context, channel string) (*backend.Subscription, error) {
	if b.partitioned.Load() {
		return nil, b.cut(ctx)
	}
	return b.capable.SSubscribe(ctx, channel)
}

// client returns a lock client on b, closed at cleanup.
func clientOn(t *testing.T, b backend.Backend, opts ...lock.Option) *lock.Client {
	t.Helper()
	c, err := lock.NewClient(b, opts...)
	if err != nil {
		t.Fatalf("lock.NewClient: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func mutexOf(t *testing.T, c *lock.Client, name string, opts ...lock.MutexOption) *lock.Mutex {
	t.Helper()
	m, err := c.NewMutex(name, opts...)
	if err != nil {
		t.Fatalf("NewMutex(%q): %v", name, err)
	}
	return m
}

func awaitDone(t *testing.T, h *lock.Hold, within time.Duration, what string) time.Time {
	t.Helper()
	select {
	case <-h.Done():
		return time.Now()
	case <-time.After(within):
		t.Fatalf("%s: hold not ended within %v", what, within)
	}
	return time.Time{}
}

func stillHeld(t *testing.T, h *lock.Hold, what string) {
	t.Helper()
	select {
	case <-h.Done():
		t.Fatalf("%s: hold ended: %v", what, h.Err())
	default:
	}
}

// testX12Partitioned: the holder is cut off (every call waits for its
// context); a waiter on another client takes over when the server expires
// the lease. The holder's Done must close before that expiry, measured by
// the server's own PTTL read from a third client: each read sent at t
// answering p proves the expiry is no earlier than t+p.
func testX12Partitioned(t *testing.T, s *suite) {
	const lease = 2 * time.Second
	name := lockName(t)
	fb := newFaulty(t, s)
	holder := mutexOf(t, clientOn(t, fb, lock.WithLease(lease)), name)
	spy := s.newProc(t).mutex(t, name)
	waiter := s.newProc(t, lock.WithWaiterTimeout(time.Minute)).mutex(t, name)
	h := mustLock(t, holder)
	ch := goAcquire(func() (*lock.Hold, error) { return waiter.Lock(ctxFor(t, eventually)) })
	waitQueued(t, spy, 1)
	done := make(chan time.Time, 1)
	go func() {
		<-h.Done()
		done <- time.Now()
	}()
	fb.partitioned.Store(true)
	var (
		expiry time.Time // the latest lower bound of the server's expiry
		doneAt time.Time
	)
	for doneAt.IsZero() {
		sent := time.Now()
		ttl, err := spy.RemainTTL(ctxFor(t, eventually))
		if err != nil {
			t.Fatal(err)
		}
		if ttl > 0 && sent.Add(ttl).After(expiry) {
			expiry = sent.Add(ttl)
		}
		select {
		case doneAt = <-done:
		case <-time.After(20 * time.Millisecond):
		}
		if time.Since(sent) > lease+eventually {
			t.Fatal("partitioned holder never told")
		}
	}
	r := await(t, ch, eventually, "waiter after the holder's lease")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !errors.Is(h.Err(), lock.ErrLockLost) {
		t.Errorf("Err = %v, want ErrLockLost", h.Err())
	}
	if margin := expiry.Sub(doneAt); margin < 0 {
		t.Errorf("holder told %v after the server's expiry (X12)", -margin)
	} else {
		t.Logf("holder told %v before the server's expiry; the waiter acquired %v after", margin, r.at.Sub(doneAt))
	}
	if r.at.Before(doneAt) {
		t.Errorf("waiter acquired %v before the holder was told", doneAt.Sub(r.at))
	}
}

// testX12InnerUnlock: an inner Unlock restores the server's lease, so the
// hold lasts as long as the server keeps it - not until the first grant's
// lease.
func testX12InnerUnlock(t *testing.T, s *suite) {
	const lease = 600 * time.Millisecond
	name := lockName(t)
	m := s.newProc(t).mutex(t, name)
	h, err := m.LockWithLease(ctxFor(t, eventually), lease)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := m.LockWithLease(ctxFor(t, eventually), lease); err != nil {
		t.Fatal(err)
	}
	time.Sleep(lease / 2) // the scenario: an inner unlock half-way through the lease
	mustUnlock(t, m)
	if wait := lease + lease/4 - time.Since(start); wait > 0 {
		time.Sleep(wait) // past the first grant's lease, before the renewed one
	}
	locked, err := m.IsLocked(ctxFor(t, eventually))
	if err != nil {
		t.Fatal(err)
	}
	if !locked {
		t.Skipf("the server's lease ran out already (%v after the start): the machine is too slow for this case", time.Since(start))
	}
	stillHeld(t, h, "after the inner unlock restored the lease")
	mustUnlock(t, m)
	if locked, _ := m.IsLocked(ctxFor(t, eventually)); locked {
		t.Error("lock still held after the last Unlock")
	}
}

// testX12Leftover: a hold the client ended (an Unlock that failed) while
// the server still has the owner's field at count 2. The owner's next Lock
// must start a new hold at count 1 with a new token, so that one Unlock
// frees the lock - not re-enter the leftover and strand a count.
func testX12Leftover(t *testing.T, s *suite) {
	name := lockName(t)
	fb := newFaulty(t, s)
	m := mutexOf(t, clientOn(t, fb), name)
	h := mustLock(t, m)
	mustLock(t, m)
	fb.fail("unlock", true)
	if err := m.Unlock(ctxFor(t, eventually)); err == nil {
		t.Fatal("Unlock succeeded through a failing backend")
	}
	fb.fail("unlock", false)
	awaitDone(t, h, eventually, "after a failed Unlock")
	h2 := mustLock(t, m)
	if h2 == h || h2.Token() <= h.Token() {
		t.Errorf("Lock after the leftover: token %d (old %d), want a new hold", h2.Token(), h.Token())
	}
	if n, _ := m.HoldCount(ctxFor(t, eventually)); n != 1 {
		t.Errorf("hold count %d after a new Lock, want 1", n)
	}
	mustUnlock(t, m)
	if locked, _ := m.IsLocked(ctxFor(t, eventually)); locked {
		t.Error("lock still held after the one Unlock of the new hold")
	}
}

// testB3LeftoverQueues: a waiter is queued when the holder's Unlock fails
// (not acknowledged: across a failover, say), so the server still has the
// holder's field. The holder's next Lock must not take the lock from that
// leftover ahead of the waiter: the leftover is released, the waiter
// holds, and the old holder queues behind it - FIFO as if the Unlock had
// gone through.
func testB3LeftoverQueues(t *testing.T, s *suite) { leftoverQueues(t, s, false) }

// testB3LeftoverQueuesToARetry: as testB3LeftoverQueues, but the first
// request of the holder's next Lock is lost on its way with an error that
// cannot tell whether it ran, so the attempt is sent again saying it may
// have run before - and may find its own grant. The leftover is still
// the ended hold's, and still goes: the simulation's seed 138878139966714,
// where the retry took it for its own grant, a new hold ahead of the
// waiters.
func testB3LeftoverQueuesToARetry(t *testing.T, s *suite) { leftoverQueues(t, s, true) }

func leftoverQueues(t *testing.T, s *suite, retried bool) {
	name := lockName(t)
	fb := newFaulty(t, s)
	m := mutexOf(t, clientOn(t, fb), name)
	h := mustLock(t, m)
	wp := s.newProc(t, lock.WithWaiterTimeout(60*time.Second))
	waiter := wp.mutex(t, name)
	got := goAcquire(func() (*lock.Hold, error) { return waiter.Lock(ctxFor(t, eventually)) })
	waitQueued(t, m, 1)
	fb.fail("unlock", true)
	if err := m.Unlock(ctxFor(t, eventually)); err == nil {
		t.Fatal("Unlock succeeded through a failing backend")
	}
	fb.fail("unlock", false)
	awaitDone(t, h, eventually, "after a failed Unlock")
	if retried {
		fb.drop("acquire", 1)
	}
	again := goAcquire(func() (*lock.Hold, error) { return m.Lock(ctxFor(t, eventually)) })
	r := await(t, got, eventually, "the waiter, once the leftover went")
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	if n := fb.toDrop("acquire"); retried && n > 0 {
		t.Fatalf("%d acquire requests of the old holder still to drop: its Lock was not retried", n)
	}
	select {
	case a := <-again:
		t.Fatalf("the old holder's Lock returned (%v) while the waiter holds: it took the lock from its leftover", a.err)
	case <-time.After(100 * time.Millisecond): // it had time to overtake
	}
	mustUnlock(t, waiter)
	a := await(t, again, eventually, "the old holder, behind the waiter")
	if a.err != nil {
		t.Fatalf("old holder after the waiter: %v", a.err)
	}
	if a.h.Token() <= r.h.Token() {
		t.Errorf("old holder's token %d is not after the waiter's %d", a.h.Token(), r.h.Token())
	}
	mustUnlock(t, m)
}

// testX12ReentryWithLease: Lock (watchdog), then a re-entry with a short
// explicit lease and its Unlock: the outer hold stays renewed.
func testX12ReentryWithLease(t *testing.T, s *suite) {
	const lease = 600 * time.Millisecond
	name := lockName(t)
	m := s.newProc(t, lock.WithLease(lease)).mutex(t, name)
	h := mustLock(t, m)
	if _, err := m.TryLockWithLease(ctxFor(t, eventually), time.Second, lease/3); err != nil {
		t.Fatal(err)
	}
	mustUnlock(t, m)
	deadline := time.Now().Add(3 * lease)
	for time.Now().Before(deadline) {
		stillHeld(t, h, "outer watchdog hold after a re-entry with a short lease")
		time.Sleep(lease / 10) // polling the hold's state
	}
	if n, _ := m.HoldCount(ctxFor(t, eventually)); n != 1 {
		t.Errorf("hold count %d on the server, want 1", n)
	}
	mustUnlock(t, m)
}

// sharedMutexDuration is how long testX12SharedMutex runs (the fault suite
// runs longer).
const sharedMutexDuration = 2 * time.Second

// testX12SharedMutex: goroutines sharing one Mutex (one owner) lock and
// unlock it over and over; no hold may end as lost while the server held
// it.
func testX12SharedMutex(t *testing.T, s *suite) {
	holds, lost, ops := sharedMutexStorm(t, s.newProc(t).mutex(t, lockName(t)), 8, sharedMutexDuration)
	if lost > 0 {
		t.Errorf("%d of %d holds ended as lost in %d operations by goroutines sharing a Mutex", lost, holds, ops)
	}
	t.Logf("%d holds, %d operations, %d false losses", holds, ops, lost)
}

// sharedMutexStorm makes workers goroutines lock and unlock m (one owner)
// for d, and returns how many distinct holds they saw, how many ended as
// lost (ErrLockLost: none should, nothing took the lock away) and how many
// Lock and Unlock calls completed.
func sharedMutexStorm(t testing.TB, m *lock.Mutex, workers int, d time.Duration) (holds, lost, ops int) {
	var (
		mu   sync.Mutex
		seen = map[*lock.Hold]bool{}
		wg   sync.WaitGroup
		errs = make(chan error, workers)
		n    atomic.Int64
	)
	stop := time.Now().Add(d)
	for range workers {
		wg.Go(func() {
			for time.Now().Before(stop) {
				ctx, cancel := context.WithTimeout(context.Background(), eventually)
				h, err := m.Lock(ctx)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("Lock: %w", err)
					return
				}
				mu.Lock()
				seen[h] = true
				mu.Unlock()
				ctx, cancel = context.WithTimeout(context.Background(), eventually)
				err = m.Unlock(ctx)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("Unlock: %w", err)
					return
				}
				n.Add(2)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for h := range seen {
		if errors.Is(h.Err(), lock.ErrLockLost) {
			lost++
		}
	}
	return len(seen), lost, int(n.Load())
}

// testX13FailedUnlock: an Unlock that fails (every attempt) ends the hold
// and its renewals, so the lock frees itself within one lease - it used to
// stay renewed as long as the process lived.
func testX13FailedUnlock(t *testing.T, s *suite) {
	const lease = 600 * time.Millisecond
	name := lockName(t)
	fb := newFaulty(t, s)
	m := mutexOf(t, clientOn(t, fb, lock.WithLease(lease)), name)
	h := mustLock(t, m)
	fb.fail("unlock", true)
	err := m.Unlock(ctxFor(t, eventually))
	failed := time.Now()
	if !errors.Is(err, errInjected) {
		t.Fatalf("Unlock through a failing backend: %v, want the injected error", err)
	}
	awaitDone(t, h, slack, "after a failed Unlock")
	if !errors.Is(h.Err(), lock.ErrLockLost) {
		t.Errorf("Err = %v, want ErrLockLost", h.Err())
	}
	other := s.newProc(t).mutex(t, name)
	redistest.Eventually(t, lease+slack, "the lock to free itself after a failed Unlock", func() bool {
		locked, err := other.IsLocked(ctxFor(t, eventually))
		return err == nil && !locked
	})
	t.Logf("lock free %v after the failed Unlock returned (lease %v)", time.Since(failed), lease)
}

// testX13LateRetry: the first unlock runs but its reply is lost; the
// retry reaches the server after the latch is gone (deleted here, as if it
// had expired). The retry must not release a second hold.
func testX13LateRetry(t *testing.T, s *suite) {
	name := lockName(t)
	fb := newFaulty(t, s)
	m := mutexOf(t, clientOn(t, fb), name)
	mustLock(t, m)
	mustLock(t, m)
	var calls atomic.Int32
	fb.mu.Lock()
	fb.before = func(sc *backend.Script, keys, args []string) {
		if sc.Name == "unlock" && calls.Add(1) == 2 {
			for _, k := range keys {
				if strings.HasPrefix(k, "redisson_unlock_latch:") {
					evalRaw(t, fb.capable, `return redis.call('del', KEYS[1])`, []string{k})
				}
			}
		}
	}
	fb.mu.Unlock()
	fb.lose("unlock", 1)
	if err := m.Unlock(ctxFor(t, eventually)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d unlock calls, want 2 (one retry)", n)
	}
	if n, _ := m.HoldCount(ctxFor(t, eventually)); n != 1 {
		t.Errorf("hold count %d after one Unlock of two holds whose retry came after the latch, want 1", n)
	}
}

// testX13UnlockGivesUpItsTurn: goroutines share one Mutex (one owner).
// One re-enters, and its acquire stalls on the way to the server, holding
// the owner's turn (one script of the owner at a time); another's Unlock
// gives up waiting for that turn when its context ends. Whatever Unlock
// returns, the hold must end (ErrLockLost) and no longer be renewed, and
// the re-entry, landing afterwards, must not bring it back: the lock is
// free within one lease of the Unlock call, and the owner's next Lock is a
// new hold. The Unlock used to return before ending the hold, which stayed
// held and renewed for as long as the process lived.
func testX13UnlockGivesUpItsTurn(t *testing.T, s *suite) {
	const lease = 600 * time.Millisecond
	name := lockName(t)
	fb := newFaulty(t, s)
	m := mutexOf(t, clientOn(t, fb, lock.WithLease(lease)), name)
	h := mustLock(t, m)
	stalled, resume := make(chan struct{}), make(chan struct{})
	var stallOnce, resumeOnce sync.Once
	resumeAll := func() { resumeOnce.Do(func() { close(resume) }) }
	t.Cleanup(resumeAll) // registered after the client's Close: runs first
	fb.mu.Lock()
	fb.before = func(sc *backend.Script, keys, args []string) {
		if sc.Name != "acquire" {
			return
		}
		stallOnce.Do(func() {
			close(stalled)
			select { // the stalled connection, until the test resumes it
			case <-resume:
			case <-time.After(eventually):
			}
		})
	}
	fb.mu.Unlock()
	reentry := goAcquire(func() (*lock.Hold, error) { return m.Lock(ctxFor(t, eventually)) })
	select {
	case <-stalled:
	case <-time.After(eventually):
		t.Fatal("the re-entry's acquire was never sent")
	}
	ctx, cancel := context.WithTimeout(context.Background(), lease/2)
	defer cancel()
	call := time.Now()
	err := m.Unlock(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Unlock while another call of the owner holds its turn: %v, want the context's deadline", err)
	}
	awaitDone(t, h, slack, "after an Unlock that gave up waiting for the owner's turn")
	if !errors.Is(h.Err(), lock.ErrLockLost) {
		t.Errorf("Err = %v, want ErrLockLost", h.Err())
	}
	// The re-entry reaches the server now, after the Unlock gave up.
	resumeAll()
	r := await(t, reentry, eventually, "the re-entry in flight")
	switch {
	case r.err == nil && r.h.Err() == nil:
		t.Errorf("the re-entry landing after the Unlock gave up returned a live hold (token %d, old %d): the ended hold came back", r.h.Token(), h.Token())
	case r.err != nil && !errors.Is(r.err, lock.ErrLockLost):
		t.Errorf("the re-entry landing after the Unlock gave up: %v, want ErrLockLost", r.err)
	}
	other := s.newProc(t).mutex(t, name)
	redistest.Eventually(t, lease+slack, "the lock to be free within one lease of the Unlock that gave up", func() bool {
		locked, err := other.IsLocked(ctxFor(t, eventually))
		return err == nil && !locked
	})
	t.Logf("lock free %v after the Unlock call (lease %v)", time.Since(call), lease)
	h2 := mustLock(t, m)
	if h2 == h || h2.Token() <= h.Token() {
		t.Errorf("Lock after the ended hold: token %d (old %d), want a new hold", h2.Token(), h.Token())
	}
	if n, _ := m.HoldCount(ctxFor(t, eventually)); n != 1 {
		t.Errorf("hold count %d after a new Lock, want 1", n)
	}
	mustUnlock(t, m)
	if locked, _ := other.IsLocked(ctxFor(t, eventually)); locked {
		t.Error("lock still held after the one Unlock of the new hold")
	}
}

// testX14LostReplyRetried: an acquire whose reply is lost is sent again
// (X14) and the retry does not apply twice: a new hold has count 1, a
// re-entry adds one.
func testX14LostReplyRetried(t *testing.T, s *suite) {
	name := lockName(t)
	fb := newFaulty(t, s)
	m := mutexOf(t, clientOn(t, fb), name)
	fb.lose("acquire", 1)
	h := mustLock(t, m)
	if n, _ := m.HoldCount(ctxFor(t, eventually)); n != 1 {
		t.Errorf("hold count %d after a Lock whose first reply was lost, want 1", n)
	}
	fb.lose("acquire", 1)
	if again := mustLock(t, m); again != h {
		t.Error("re-entry after a lost reply returned another hold")
	}
	if n, _ := m.HoldCount(ctxFor(t, eventually)); n != 2 {
		t.Errorf("hold count %d after a re-entry whose first reply was lost, want 2", n)
	}
	mustUnlock(t, m)
	mustUnlock(t, m)
	if locked, _ := m.IsLocked(ctxFor(t, eventually)); locked {
		t.Error("lock held after two Unlocks of two holds")
	}
}

// parkBackend holds the reply of the first acquire script call until
// release is closed, after the script ran on the server.
type parkBackend struct {
	capable
	parked  chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *parkBackend) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	rep, err := b.capable.Eval(ctx, s, keys, args)
	if s.Name == "acquire" {
		b.once.Do(func() {
			close(b.parked)
			<-b.release
		})
	}
	return rep, err
}

// testX5CloseDuringAcquire: Close while an acquire is in flight that the
// server grants. The caller gets ErrClosed, and the grant is given back -
// it used to stay held, by nobody, for the whole lease.
func testX5CloseDuringAcquire(t *testing.T, s *suite) {
	name := lockName(t)
	pb := &parkBackend{capable: s.newBackend(t), parked: make(chan struct{}), release: make(chan struct{})}
	c, err := lock.NewClient(pb)
	if err != nil {
		t.Fatal(err)
	}
	m := mutexOf(t, c, name)
	ch := goAcquire(func() (*lock.Hold, error) { return m.Lock(ctxFor(t, eventually)) })
	select {
	case <-pb.parked:
	case <-time.After(eventually):
		t.Fatal("acquire never sent")
	}
	closed := make(chan struct{})
	go func() {
		c.Close()
		close(closed)
	}()
	redistest.Eventually(t, eventually, "Close to begin", func() bool {
		_, err := m.IsLocked(ctxFor(t, eventually))
		return errors.Is(err, lock.ErrClosed)
	})
	close(pb.release)
	r := await(t, ch, eventually, "Lock during Close")
	if !errors.Is(r.err, lock.ErrClosed) {
		t.Fatalf("Lock during Close: %v, want ErrClosed", r.err)
	}
	select {
	case <-closed:
	case <-time.After(eventually):
		t.Fatal("Close did not return")
	}
	if raw := readRaw(t, s.newProc(t).b, name); raw.hashExists || len(raw.queue) != 0 {
		t.Errorf("left in Redis after Close during an acquire: %+v", raw)
	}
}
