package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
)

// Mixed clients (X11 in RULES.md): the Redisson model of redisson.go and fairlock
// clients on one lock.

// testX11Model checks the model itself against upstream behaviour, so that a
// failing mixed case points at fairlock, not at the model: keys and
// fields, the score chain (ttl + wait + now), the fix-up on acquire, the
// hints (negative behind a stale entry, 0 while the lock is free but
// someone else is at the head), re-entry, wake-ups between its own
// waiters, unlock of a free lock reporting success, the configurable slack
// and force unlock.
func testX11Model(t *testing.T, s *suite) {
	name := lockName(t)
	p := s.newProc(t)
	probe := p.mutex(t, name)
	rc := s.newRedisson(t)
	j1, j2, j3 := rc.Lock(name, 1), rc.Lock(name, 2), rc.Lock(name, 3)
	ctx := ctxFor(t, eventually)
	if err := j1.LockWithLease(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := j1.LockWithLease(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	st, err := probe.Inspect(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Holders) != 1 || st.Holders[0].Owner != j1.Field || st.Holders[0].Count != 2 {
		t.Fatalf("holders %+v, want %s with count 2", st.Holders, j1.Field)
	}
	if ok, err := j2.TryLockOnce(ctx, 5*time.Second); err != nil || ok {
		t.Fatalf("tryLock() while held = %v, %v", ok, err)
	}
	if n := queueLen(t, probe); n != 0 {
		t.Fatalf("tryLock() queued (%d)", n)
	}
	jctx := ctxFor(t, 60*time.Second)
	ch2 := goAcquire(func() (*lock.Hold, error) { return nil, j2.LockWithLease(jctx, 5*time.Second) })
	waitQueued(t, probe, 1)
	ch3 := goAcquire(func() (*lock.Hold, error) {
		ok, err := j3.TryLock(jctx, 20*time.Second, 5*time.Second)
		if err == nil && !ok {
			err = errors.New("tryLock gave up")
		}
		return nil, err
	})
	waitQueued(t, probe, 2)
	st, err = probe.Inspect(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	// Score chain: j2 = PTTL + 300 s + now; j3 = j2's score + 20 s.
	if len(st.Queue) != 2 || st.Queue[0].Owner != j2.Field || st.Queue[1].Owner != j3.Field {
		t.Fatalf("queue %+v, want %s then %s", st.Queue, j2.Field, j3.Field)
	}
	if left := st.Queue[0].Deadline.Sub(st.ServerTime); left < redissonSlack || left > redissonSlack+5*time.Second {
		t.Errorf("lock() waiter's score is now + %v, want the lease left + 300 s", left)
	}
	if d := st.Queue[1].Deadline.Sub(st.Queue[0].Deadline); d != 20*time.Second {
		t.Errorf("tryLock(20 s) waiter's score is the previous one + %v, want + 20 s", d)
	}
	j3Before := st.Queue[1].Deadline
	if err := j1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	mustNotArrive(t, ch2, 50*time.Millisecond, "waiter after the first of two unlocks")
	released := time.Now()
	if err := j1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if r := await(t, ch2, eventually, "j2"); r.err != nil {
		t.Fatal(r.err)
	} else if d := r.at.Sub(released); d > slack {
		t.Errorf("j2 took %v after the unlock, want a wake-up", d)
	}
	// j2's acquire took its wait (300 s) off every other waiter's score.
	if q := queueOwners(t, probe); len(q) != 1 {
		t.Fatalf("queue %v after j2 acquired", q)
	}
	st, _ = probe.Inspect(ctx, 1)
	if d := j3Before.Sub(st.Queue[0].Deadline); d != redissonSlack {
		t.Errorf("j3's score went down by %v when j2 acquired, want 300 s", d)
	}
	if err := j2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if r := await(t, ch3, eventually, "j3"); r.err != nil {
		t.Fatal(r.err)
	}
	// Hints (#5503): queued behind a stale entry -> negative ttl; queued
	// while the hash is gone and someone else is first -> 0.
	injectWaiter(t, p.b, name, "live-client:1", 10*time.Second)
	injectWaiter(t, p.b, name, "stale-client:2", -time.Second)
	j4 := rc.Lock(name, 4)
	if _, ttl, err := j4.TryAcquire(ctx, -1, time.Second); err != nil || ttl >= 0 {
		t.Errorf("enqueue behind a stale entry returned ttl %d, %v; want negative", ttl, err)
	}
	if err := j3.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ttl, err := j4.TryAcquire(ctx, -1, time.Second); err != nil || ttl != 0 {
		t.Errorf("queued, lock free, someone else first: ttl %d, %v; want 0", ttl, err)
	}
	if err := j1.Unlock(ctx); err != nil {
		t.Errorf("unlock of a free lock by a non-holder: %v, want success (upstream quirk)", err)
	}
	if err := j4.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	// A configured slack (fairLockWaitTimeout) is the wait of lock().
	short := s.newRedisson(t, withRedissonSlack(5*time.Second)).Lock(name, 5)
	if err := j1.LockWithLease(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if held, _, err := short.TryAcquire(ctx, -1, time.Second); err != nil || held {
		t.Fatalf("enqueue = %v, %v", held, err)
	}
	st, _ = probe.Inspect(ctx, 1)
	if left := st.Queue[0].Deadline.Sub(st.ServerTime); left <= 5*time.Second || left > 7*time.Second {
		t.Errorf("with a 5 s slack the score is now + %v, want the lease left (2 s) + 5 s", left)
	}
	if ok, err := short.ForceUnlock(ctx); err != nil || !ok {
		t.Errorf("forceUnlock = %v, %v", ok, err)
	}
	if ok, err := short.ForceUnlock(ctx); err != nil || ok {
		t.Errorf("forceUnlock of a free lock = %v, %v", ok, err)
	}
	if err := short.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if raw := readRaw(t, p.b, name); raw.hashExists || len(raw.queue) != 0 || raw.timeouts != 0 {
		t.Errorf("after delete: %+v", raw)
	}
}

// testX11Reads: each client sees the other's hold and cannot release or
// barge into it; counts and TTLs read the same from both sides.
func testX11Reads(t *testing.T, s *suite) {
	name := lockName(t)
	g := s.newProc(t).mutex(t, name)
	j := s.newRedisson(t).Lock(name, 7)
	ctx := ctxFor(t, eventually)
	h, err := g.LockWithLease(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.LockWithLease(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	rs, err := j.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !rs.Locked || rs.HoldCount != 0 || rs.PTTL <= 0 || rs.PTTL > 10000 {
		t.Errorf("redisson reads a Go hold as %+v, want locked, own count 0, pttl in (0, 10 s]", rs)
	}
	if ok, err := j.TryLockOnce(ctx, time.Second); err != nil || ok {
		t.Errorf("redisson tryLock() on a Go hold = %v, %v", ok, err)
	}
	if err := j.Unlock(ctx); !errors.Is(err, errRedissonNotHeld) {
		t.Errorf("redisson unlock of a Go hold: %v, want IllegalMonitorState", err)
	}
	if n, _ := g.HoldCount(ctx); n != 2 {
		t.Errorf("Go hold count %d after redisson's attempts, want 2", n)
	}
	mustUnlock(t, g)
	mustUnlock(t, g)
	if !errors.Is(h.Err(), lock.ErrReleased) {
		t.Errorf("Go hold: %v, want released", h.Err())
	}

	if err := j.LockWithLease(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := j.LockWithLease(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if held, err := g.IsHeldBy(ctx, j.Field); err != nil || !held {
		t.Errorf("Go IsHeldBy(redisson thread) = %v, %v", held, err)
	}
	if st, err := g.Inspect(ctx, 0); err != nil || st.CountOf(j.Field) != 2 || st.TTL <= 0 || st.TTL > 10*time.Second {
		t.Errorf("Go reads a redisson hold as %+v, %v; want count 2, TTL in (0, 10 s]", st, err)
	}
	if _, err := g.TryLockWithLease(ctx, 0, time.Second); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("Go TryLockOnce on a redisson hold: %v", err)
	}
	if err := g.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Go Unlock of a redisson hold: %v, want ErrNotHeld", err)
	}
	if rs, _ := j.Read(ctx); rs.HoldCount != 2 {
		t.Errorf("redisson hold count %d after Go's attempts, want 2", rs.HoldCount)
	}
	for range 2 {
		if err := j.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if locked, _ := g.IsLocked(ctx); locked {
		t.Error("locked after redisson's two unlocks")
	}
}

// testX11GoWakesRedisson: a Go unlock wakes the Redisson head at once; it
// would otherwise sleep up to the Go lease left (60 s).
func testX11GoWakesRedisson(t *testing.T, s *suite) {
	name := lockName(t)
	holder := s.newProc(t).mutex(t, name)
	if _, err := holder.LockWithLease(ctxFor(t, eventually), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	rc := s.newRedisson(t)
	j := rc.Lock(name, 1)
	jctx := ctxFor(t, 90*time.Second)
	ch := goAcquire(func() (*lock.Hold, error) { return nil, j.LockWithLease(jctx, 10*time.Second) })
	waitQueued(t, holder, 1)
	released := time.Now()
	mustUnlock(t, holder)
	r := await(t, ch, eventually, "redisson waiter")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if d := r.at.Sub(released); d > slack {
		t.Errorf("redisson waiter took %v after the Go unlock, want a wake-up", d)
	}
	if n := rc.Count("redisson_acquire"); n > 5 {
		t.Errorf("redisson waiter ran its acquire script %d times: it polled instead of being woken", n)
	}
	if held, _ := holder.IsHeldBy(ctxFor(t, eventually), j.Field); !held {
		t.Error("redisson waiter does not hold after acquiring")
	}
}

// testX11RedissonWakesGo: a Redisson unlock wakes the Go head at once; its
// heartbeat is 20 s away, the Redisson lease 60 s, and its backend cannot
// watch the lock hash, so only the Redisson unlock's message can do it.
func testX11RedissonWakesGo(t *testing.T, s *suite) {
	name := lockName(t)
	j := s.newRedisson(t).Lock(name, 1)
	if err := j.LockWithLease(ctxFor(t, eventually), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	wp := s.newMessageOnlyProc(t, lock.WithWaiterTimeout(60*time.Second))
	w := wp.mutex(t, name)
	ch := goAcquire(func() (*lock.Hold, error) { return w.Lock(ctxFor(t, 90*time.Second)) })
	waitQueued(t, w, 1)
	released := time.Now()
	if err := j.Unlock(ctxFor(t, eventually)); err != nil {
		t.Fatal(err)
	}
	r := await(t, ch, eventually, "go waiter")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if d := r.at.Sub(released); d > slack {
		t.Errorf("go waiter took %v after the redisson unlock, want a wake-up", d)
	}
	if n := wp.b.count("acquire"); n > 4 {
		t.Errorf("go waiter ran acquire %d times: it polled instead of being woken", n)
	}
}

// messageOnly hides a backend's optional capabilities (backend.KeyWatcher):
// a waiter on it learns of a release only by a wake-up message or a timer.
type messageOnly struct{ capable }

// newMessageOnlyProc is newProc on a messageOnly backend.
func (s *suite) newMessageOnlyProc(t *testing.T, opts ...lock.Option) *proc {
	t.Helper()
	b := &countingBackend{capable: messageOnly{s.newBackend(t)}, counts: map[string]int{}}
	c, err := lock.NewClient(b, opts...)
	if err != nil {
		t.Fatalf("lock.NewClient: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &proc{b: b, c: c}
}

// testX11MutualExclusion: three Go owners and three Redisson threads, on
// two clients each, take the lock three times each with every acquire
// flavour: never two holders (checked inside every critical section), no
// lost counter update, nothing left in Redis.
func testX11MutualExclusion(t *testing.T, s *suite) {
	const rounds = 3
	name := lockName(t)
	// Short leases and waiter timeouts bound the stalls of the FIFO defect
	// (see testX11FIFO); this case checks exclusion only.
	gps := []*proc{
		s.newProc(t, lock.WithWaiterTimeout(900*time.Millisecond), lock.WithLease(3*time.Second)),
		s.newProc(t, lock.WithWaiterTimeout(900*time.Millisecond), lock.WithLease(3*time.Second)),
	}
	rcs := []*redissonClient{s.newRedisson(t), s.newRedisson(t)}
	ex := &exclusion{b: gps[0].b, name: name}
	ctx := ctxFor(t, 120*time.Second)
	var workers []func() error
	for i := range 3 {
		m := gps[i%2].mutex(t, name)
		workers = append(workers, func() error {
			for r := range rounds {
				var err error
				switch i {
				case 0:
					_, err = m.Lock(ctx)
				case 1:
					_, err = m.LockWithLease(ctx, 3*time.Second)
				default:
					_, err = m.TryLockWithLease(ctx, 60*time.Second, 3*time.Second)
				}
				if err != nil {
					return fmt.Errorf("go owner %d round %d: %w", i, r, err)
				}
				if err := ex.critical(ctx, m.Owner()); err != nil {
					return err
				}
				if err := m.Unlock(ctx); err != nil {
					return fmt.Errorf("go owner %d unlock: %w", i, err)
				}
			}
			return nil
		})
		j := rcs[i%2].Lock(name, int64(10+i))
		workers = append(workers, func() error {
			for r := range rounds {
				var err error
				if i < 2 {
					err = j.LockWithLease(ctx, 3*time.Second)
				} else if ok, terr := j.TryLock(ctx, 60*time.Second, 3*time.Second); terr != nil || !ok {
					err = fmt.Errorf("tryLock = %v, %v", ok, terr)
				}
				if err != nil {
					return fmt.Errorf("redisson thread %d round %d: %w", i, r, err)
				}
				if err := ex.critical(ctx, j.Field); err != nil {
					return err
				}
				if err := j.Unlock(ctx); err != nil {
					return fmt.Errorf("redisson thread %d unlock: %w", i, err)
				}
			}
			return nil
		})
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(workers))
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- w()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if got, want := ex.counter.Load(), int64(len(workers)*rounds); got != want {
		t.Errorf("counter %d after %d critical sections: overlapping holders lost updates", got, want)
	}
	if raw := readRaw(t, gps[0].b, name); raw.hashExists || len(raw.queue) != 0 || raw.timeouts != 0 {
		t.Errorf("left in Redis: %+v", raw)
	}
}

// testX11FIFO: Redisson and Go waiters queued alternately behind a Go
// holder acquire in arrival order. The Redisson waiters use lock(), whose
// acquire takes 300 s (fairLockWaitTimeout) off every other waiter's score
// (upstream's acquire script) - which must not throw the Go waiters out of
// line.
func testX11FIFO(t *testing.T, s *suite) {
	const pairs = 3
	name := lockName(t)
	// 10 s leases everywhere: a Redisson waiter that lost its entry sleeps
	// up to the lease left before it queues again, and nothing wakes it,
	// so this bounds how long a failure takes.
	holder := s.newProc(t, lock.WithLease(10*time.Second)).mutex(t, name)
	mustLock(t, holder)
	gps := []*proc{s.newProc(t, lock.WithLease(10*time.Second)), s.newProc(t, lock.WithLease(10*time.Second))}
	rcs := []*redissonClient{s.newRedisson(t), s.newRedisson(t)}
	var (
		mu    sync.Mutex
		order []string
	)
	record := func(who string) {
		mu.Lock()
		order = append(order, who)
		mu.Unlock()
	}
	type waiter struct {
		label, owner string
		run          func(ctx context.Context) error
	}
	var waiters []waiter
	for i := range pairs {
		j := rcs[i%2].Lock(name, int64(100+i))
		label := fmt.Sprint("redisson", i)
		waiters = append(waiters, waiter{label, j.Field, func(ctx context.Context) error {
			if err := j.LockWithLease(ctx, 10*time.Second); err != nil {
				return err
			}
			record(label)
			return j.Unlock(ctx)
		}})
		m := gps[i%2].mutex(t, name)
		glabel := fmt.Sprint("go", i)
		waiters = append(waiters, waiter{glabel, m.Owner(), func(ctx context.Context) error {
			if _, err := m.Lock(ctx); err != nil {
				return err
			}
			record(glabel)
			return m.Unlock(ctx)
		}})
	}
	var want, wantOwners []string
	chans := make([]<-chan result, len(waiters))
	for i, w := range waiters {
		ctx := ctxFor(t, 90*time.Second)
		chans[i] = goAcquire(func() (*lock.Hold, error) { return nil, w.run(ctx) })
		waitQueued(t, holder, i+1)
		want = append(want, w.label)
		wantOwners = append(wantOwners, w.owner)
	}
	if got := queueOwners(t, holder); !slices.Equal(got, wantOwners) {
		t.Fatalf("queue %v, want %v", got, wantOwners)
	}
	released := time.Now()
	mustUnlock(t, holder)
	var last time.Time
	for i, ch := range chans {
		r := await(t, ch, 60*time.Second, waiters[i].label)
		if r.err != nil {
			t.Fatalf("%s: %v", waiters[i].label, r.err)
		}
		if r.at.After(last) {
			last = r.at
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(order, want) {
		t.Errorf("acquisition order %v, want arrival order %v: a Redisson acquire (which takes its 300 s wait off "+
			"every other waiter's score) made the Go waiters' deadlines (server now + waiter timeout) look expired, "+
			"so they were purged and queued again at the tail", order, want)
	}
	// Every hand-over is an unlock with a wake-up, so the queue drains
	// at once. A Redisson waiter whose entry was purged (its score, chained
	// on a Go waiter's short deadline, spent by two 300 s fix-ups) is woken
	// by nobody and sleeps until the lease it last saw runs out.
	if d := last.Sub(released); d > slack {
		t.Errorf("the queue of %d took %v to drain after the holder's unlock, want a chain of wake-ups (within %v)", len(waiters), d, slack)
	}
}
