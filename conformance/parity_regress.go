package conformance

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
)

// Upstream regressions (P9), named after the Redisson issues.

// #3004: a hold much longer than the waiter timeout evicts upstream's
// waiters, which rejoin at the tail. Here two fairlock waiters with a
// 300 ms waiter timeout and a Redisson waiter behind them wait out a hold
// of ten waiter timeouts: the queue never changes, and they acquire in
// order, the last hand-over (Go to Redisson) by a wake-up.
func testP9LongHoldMixed(t *testing.T, s *suite) {
	const waiterTimeout = 300 * time.Millisecond
	name := lockName(t)
	holder := s.newProc(t).mutex(t, name)
	mustLock(t, holder)
	goWaiters := []*lock.Mutex{
		s.newProc(t, lock.WithWaiterTimeout(waiterTimeout)).mutex(t, name),
		s.newProc(t, lock.WithWaiterTimeout(waiterTimeout)).mutex(t, name),
	}
	j := s.newRedisson(t).Lock(name, 1)
	var (
		mu    sync.Mutex
		order []string
	)
	record := func(who string) {
		mu.Lock()
		order = append(order, who)
		mu.Unlock()
	}
	var want []string
	var chans []<-chan result
	for i, m := range goWaiters {
		ctx := ctxFor(t, 60*time.Second)
		chans = append(chans, goAcquire(func() (*lock.Hold, error) {
			h, err := m.Lock(ctx)
			if err == nil {
				record(fmt.Sprint("go", i))
				err = m.Unlock(ctx)
			}
			return h, err
		}))
		want = append(want, m.Owner())
		waitQueued(t, holder, i+1)
	}
	jctx := ctxFor(t, 60*time.Second)
	jch := goAcquire(func() (*lock.Hold, error) {
		if err := j.LockWithLease(jctx, 30*time.Second); err != nil {
			return nil, err
		}
		record("redisson")
		return nil, j.Unlock(jctx)
	})
	want = append(want, j.Field)
	waitQueued(t, holder, 3)
	end := time.Now().Add(10 * waiterTimeout)
	for time.Now().Before(end) {
		if got := queueOwners(t, holder); !slices.Equal(got, want) {
			t.Fatalf("queue changed during a long hold: %v, want %v", got, want)
		}
		<-time.After(waiterTimeout / 3) // polling pace
	}
	mustUnlock(t, holder)
	var goReleased time.Time // when the last Go waiter's Unlock had returned
	for i, ch := range chans {
		r := await(t, ch, eventually, fmt.Sprint("go waiter ", i))
		if r.err != nil {
			t.Fatal(r.err)
		}
		goReleased = r.at
	}
	r := await(t, jch, eventually, "redisson waiter")
	if r.err != nil {
		t.Fatal(r.err)
	}
	// The Redisson waiter sleeps up to the last Go holder's lease (30 s)
	// unless the Go unlock's message wakes it.
	if d := r.at.Sub(goReleased); d > slack {
		t.Errorf("redisson waiter took %v after the last Go unlock, want a wake-up", d)
	}
	if wantOrder := []string{"go0", "go1", "redisson"}; !slices.Equal(order, wantOrder) {
		t.Errorf("acquisition order %v, want %v", order, wantOrder)
	}
}

// #3730: a Redisson holder that dies (no unlock, no watchdog) frees the
// lock at its lease expiry, and the fairlock head takes it then without
// any message (its heartbeat is 20 s away).
func testP9RedissonLeaseExpiry(t *testing.T, s *suite) {
	const lease = 800 * time.Millisecond
	name := lockName(t)
	j := s.newRedisson(t).Lock(name, 1)
	taken := time.Now()
	if err := j.LockWithLease(ctxFor(t, eventually), lease); err != nil {
		t.Fatal(err)
	}
	waiter := s.newProc(t, lock.WithWaiterTimeout(60*time.Second)).mutex(t, name)
	r := await(t, goAcquire(func() (*lock.Hold, error) { return waiter.Lock(ctxFor(t, 60*time.Second)) }),
		60*time.Second, "go waiter")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if d := r.at.Sub(taken); d > lease+slack {
		t.Errorf("go waiter took over %v after the Redisson holder's %v lease began, want about the lease", d, lease)
	}
}

// #3730, purge flavour: the head is a crashed waiter whose deadline passes
// while the lock is held with a 1.5 s lease that nobody releases. Another
// owner's TryLockOnce purges the dead head; the live waiter behind it is
// now the head and must take the lock at the lease expiry - its own
// heartbeat is 10 s away, so it must have been told (X3: "whenever the head
// changes ... stale-head purge ... the new head is woken").
func testP9PurgedHeadWhileHeld(t *testing.T, s *suite) {
	const lease = 1500 * time.Millisecond
	name := lockName(t)
	p := s.newProc(t)
	holder := p.mutex(t, name)
	acquired := time.Now()
	if _, err := holder.LockWithLease(ctxFor(t, eventually), lease); err != nil {
		t.Fatal(err)
	}
	injectWaiter(t, p.b, name, "crashed-client:1", 500*time.Millisecond)
	live := s.newProc(t, lock.WithWaiterTimeout(30*time.Second)).mutex(t, name)
	ch := goAcquire(func() (*lock.Hold, error) { return live.Lock(ctxFor(t, 60*time.Second)) })
	waitQueued(t, holder, 2)
	redistest.Eventually(t, eventually, "the crashed head's deadline to pass", func() bool {
		st, err := holder.Inspect(ctxFor(t, eventually), 1)
		return err == nil && len(st.Queue) == 1 && st.ServerTime.After(st.Queue[0].Deadline)
	})
	if _, err := s.newProc(t).mutex(t, name).TryLockWithLease(ctxFor(t, eventually), 0, time.Second); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryLockOnce while held: %v, want ErrNotAcquired", err)
	}
	if q := queueOwners(t, holder); !slices.Equal(q, []string{live.Owner()}) {
		t.Fatalf("queue %v after the purge, want only the live waiter", q)
	}
	r := await(t, ch, 30*time.Second, "live waiter")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if d := r.at.Sub(acquired); d > lease+slack {
		t.Errorf("live waiter took over %v after the %v lease began, want about the lease: "+
			"it became the head when the dead head was purged, but was not woken and kept waiting for its heartbeat", d, lease)
	}
}

// #3829: the lock hash deleted by hand (no script, no message) while a
// fairlock head waits behind a Redisson holder with a long lease: the head
// notices within its heartbeat. A Redisson waiter behind it is then woken
// by the Go unlock (it sleeps up to the Go lease, 30 s, otherwise).
func testP9DeletedByHand(t *testing.T, s *suite) {
	const waiterTimeout = 900 * time.Millisecond
	name := lockName(t)
	rc := s.newRedisson(t)
	holder, behind := rc.Lock(name, 1), rc.Lock(name, 2)
	if err := holder.LockWithLease(ctxFor(t, eventually), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	p := s.newProc(t, lock.WithWaiterTimeout(waiterTimeout))
	head := p.mutex(t, name)
	hch := goAcquire(func() (*lock.Hold, error) { return head.Lock(ctxFor(t, 60*time.Second)) })
	waitQueued(t, head, 1)
	bctx := ctxFor(t, 60*time.Second)
	bch := goAcquire(func() (*lock.Hold, error) { return nil, behind.LockWithLease(bctx, 30*time.Second) })
	waitQueued(t, head, 2)
	deleted := time.Now()
	evalRaw(t, p.b, `return redis.call('del', KEYS[1])`, []string{name})
	rh := await(t, hch, eventually, "go head after DEL by hand")
	if rh.err != nil {
		t.Fatal(rh.err)
	}
	if d := rh.at.Sub(deleted); d > waiterTimeout/3+slack {
		t.Errorf("go head took %v to notice the deleted hash, want within a heartbeat (%v)", d, waiterTimeout/3)
	}
	mustNotArrive(t, bch, 100*time.Millisecond, "redisson waiter while the go head holds")
	released := time.Now()
	mustUnlock(t, head)
	rb := await(t, bch, eventually, "redisson waiter")
	if rb.err != nil {
		t.Fatal(rb.err)
	}
	if d := rb.at.Sub(released); d > slack {
		t.Errorf("redisson waiter took %v after the go unlock, want a wake-up", d)
	}
}

// #4595 / #6150: a fairlock waiter that queued and then crashed (its
// process stops sending anything; no leave) delays the next owner by at
// most the waiter timeout.
func testP9CrashedWaiter(t *testing.T, s *suite) {
	const waiterTimeout = 1500 * time.Millisecond
	name := lockName(t)
	p := s.newProc(t)
	holder := p.mutex(t, name)
	mustLock(t, holder)
	cb := &crashableBackend{capable: s.newBackend(t)}
	cc, err := lock.NewClient(cb, lock.WithWaiterTimeout(waiterTimeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	crasher, err := cc.NewMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	cch := goAcquire(func() (*lock.Hold, error) { return crasher.Lock(ctxFor(t, 60*time.Second)) })
	waitQueued(t, holder, 1)
	next := s.newProc(t, lock.WithWaiterTimeout(waiterTimeout)).mutex(t, name)
	nch := goAcquire(func() (*lock.Hold, error) { return next.Lock(ctxFor(t, 60*time.Second)) })
	waitQueued(t, holder, 2)
	cb.crashed.Store(true)
	crashed := time.Now()
	st, err := holder.Inspect(ctxFor(t, eventually), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Queue) != 2 || st.Queue[0].Owner != crasher.Owner() {
		t.Fatalf("queue %+v, want the crashed waiter at the head", st.Queue)
	}
	deadline := st.Queue[0].Deadline // a heartbeat in flight may still push it later
	mustUnlock(t, holder)            // wakes the crashed head, which can no longer act
	rc := await(t, cch, eventually, "crashed waiter")
	switch {
	case rc.err == nil:
		// Its subscription still delivered the hand-over grant, which it
		// cannot take up (renew) any more: the hold ends by its deadline,
		// a waiter timeout after the grant (twice the slack: at the end of
		// a CI run on 2 loaded cores one slack was once 50 ms short).
		awaitDone(t, rc.h, waiterTimeout+2*slack, "the crashed waiter's hand-over grant")
	case !errors.Is(rc.err, errCrashed):
		t.Fatalf("crashed waiter's call ended with %v, want the crash error", rc.err)
	}
	rn := await(t, nch, waiterTimeout+eventually, "waiter behind the crashed one")
	if rn.err != nil {
		t.Fatal(rn.err)
	}
	// Not before the crashed head's deadline: nothing told the others it
	// was gone (it could not leave), so only its deadline frees the queue.
	if rn.at.Before(deadline.Add(-50 * time.Millisecond)) {
		t.Errorf("next owner acquired at %v, before the crashed head's deadline %v: the crash was not a crash",
			rn.at.Format("15:04:05.000"), deadline.Format("15:04:05.000"))
	}
	if d := rn.at.Sub(crashed); d > waiterTimeout+slack {
		t.Errorf("the crashed waiter delayed the next owner by %v, want at most about the waiter timeout %v", d, waiterTimeout)
	}
}

// #5503 (and the spin with a 0 hint): behind a head that never takes the
// free lock (its process froze after queueing; deadline 2 s away) and a
// stale entry, upstream tells a new waiter a negative ttl (wait for a
// message that never comes) and then 0 (spin). A fairlock waiter instead
// checks again at its heartbeat - a handful of calls, not thousands - and
// takes the lock once the frozen head's deadline has passed, not before.
func testP9NoZeroHint(t *testing.T, s *suite) {
	const (
		waiterTimeout = 1500 * time.Millisecond // heartbeat every 500 ms
		stuck         = 2 * time.Second
	)
	name := lockName(t)
	p := s.newProc(t, lock.WithWaiterTimeout(waiterTimeout))
	injectWaiter(t, p.b, name, "frozen-client:1", stuck)
	injected := time.Now()
	injectWaiter(t, p.b, name, "stale-client:2", -time.Second)
	w := p.mutex(t, name)
	before := p.b.count("acquire")
	r := await(t, goAcquire(func() (*lock.Hold, error) { return w.Lock(ctxFor(t, 60*time.Second)) }),
		stuck+waiterTimeout+eventually, "waiter behind a frozen head")
	calls := p.b.count("acquire") - before
	if r.err != nil {
		t.Fatal(r.err)
	}
	d := r.at.Sub(injected)
	if d < stuck-50*time.Millisecond {
		t.Errorf("acquired %v after the frozen head queued, before its deadline (%v): FIFO broken", d, stuck)
	}
	if d > stuck+waiterTimeout/3+slack {
		t.Errorf("acquired %v after the frozen head queued, want soon after its deadline (%v)", d, stuck)
	}
	if calls > 15 {
		t.Errorf("%d acquire calls while waiting %v with a %v heartbeat: spinning", calls, d, waiterTimeout/3)
	}
	if calls < 3 {
		t.Errorf("%d acquire calls while waiting %v: the waiter did not re-check at its heartbeat", calls, d)
	}
}
