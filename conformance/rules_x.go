package conformance

// The parallel X-rule (beyond Redisson) cases of ruleCases, and P2.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
)

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
	// Long enough that a heartbeat (a third of it) late on a loaded
	// machine under the race detector is not a dead waiter: at 300 ms a
	// go-redis waiter through Sentinel missed its liveness deadline in CI
	// while the next one queued, and rejoined behind it.
	const waiterTimeout = 600 * time.Millisecond
	holder := s.newProc(t).mutex(t, name)
	mustLock(t, holder)
	ms := []*lock.Mutex{
		s.newProc(t, lock.WithWaiterTimeout(waiterTimeout)).mutex(t, name),
		s.newProc(t, lock.WithWaiterTimeout(waiterTimeout)).mutex(t, name),
		s.newProc(t, lock.WithWaiterTimeout(waiterTimeout)).mutex(t, name),
	}
	var want []string
	for _, m := range ms {
		want = append(want, m.Owner())
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
	redistest.Eventually(t, eventually, "the head to watch the lock hash", func() bool { return wp.b.count("WATCHKEY") >= 2 })
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
		{name: "cancel", acquire: func(m *lock.Mutex) <-chan result {
			ctx, cancel := context.WithCancel(context.Background())
			ch := goAcquire(func() (*lock.Hold, error) { return m.Lock(ctx) })
			waitQueued(t, holder, 1)
			cancel()
			return ch
		}, want: context.Canceled},
		{name: "deadline", acquire: func(m *lock.Mutex) <-chan result {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			t.Cleanup(cancel)
			return goAcquire(func() (*lock.Hold, error) { return m.Lock(ctx) })
		}, want: context.DeadlineExceeded},
		{name: "trylock wait", acquire: func(m *lock.Mutex) <-chan result {
			return goAcquire(func() (*lock.Hold, error) {
				return m.TryLockWithLease(ctxFor(t, eventually), 300*time.Millisecond, time.Second)
			})
		}, want: lock.ErrNotAcquired},
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
	// Long enough for retries on a loaded machine (back-off from 10 ms).
	_, err := m.Lock(ctxFor(t, 1500*time.Millisecond))
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
	redistest.Eventually(t, eventually, "the key to expire", func() bool {
		locked, err := m.IsLocked(ctxFor(t, eventually))
		return err == nil && !locked
	})
	if err := m.Unlock(ctxFor(t, eventually)); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Unlock after losing the lock: %v, want ErrNotHeld", err)
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

// testX16EvictedAtOnce: a hold that another client force-unlocks or
// deletes ends at once - its client is told on its own channel - not at
// its next renewal, a third of the default 30 s lease away.
func testX16EvictedAtOnce(t *testing.T, s *suite) {
	for _, how := range []string{"force_unlock", "delete"} {
		t.Run(how, func(t *testing.T) {
			name := lockName(t)
			hp := s.newProc(t) // the default lease: the next renewal is 10 s away
			holder := hp.mutex(t, name)
			admin := s.newProc(t).mutex(t, name)
			h := mustLock(t, holder)
			// The client listens on its own channel from its first hold on.
			redistest.Eventually(t, eventually, "the holder's client to listen on its channel", func() bool {
				return hp.b.count(clientSubscribe+doneSuffix) > 0
			})
			start := time.Now()
			var err error
			if how == "force_unlock" {
				_, err = admin.ForceUnlock(ctxFor(t, eventually))
			} else {
				_, err = admin.Delete(ctxFor(t, eventually))
			}
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-h.Done():
			case <-time.After(5 * time.Second):
				t.Fatalf("the holder was not told within 5s of the %s (its next renewal is 10 s away)", how)
			}
			if !errors.Is(h.Err(), lock.ErrLockLost) {
				t.Errorf("holder's error %v, want ErrLockLost", h.Err())
			}
			t.Logf("holder told %v after the %s returned", time.Since(start), how)
		})
	}
}

// testX16HashChanged: a hold ended behind its client's back without a
// word - the lock hash deleted by hand, or a Redisson client's
// forceUnlock() - ends at once where the backend can watch keys
// (backend.KeyWatcher): the change of the hash makes the client check its
// hold. Elsewhere it ends at the watchdog's next check, a third of the
// lease, which is then the floor this case holds the backend to.
func testX16HashChanged(t *testing.T, s *suite) {
	for _, how := range []string{"DEL by hand", "Redisson forceUnlock"} {
		t.Run(strings.ReplaceAll(how, " ", "_"), func(t *testing.T) {
			name := lockName(t)
			lease := 30 * time.Second // the next renewal is 10 s away
			hp := s.newProc(t)
			probe, err := hp.b.WatchKey(ctxFor(t, eventually), name+":probe")
			watches := err == nil
			if watches {
				probe.Close()
			} else {
				// The floor: the watchdog's check, every third of a short lease.
				lease = 3 * time.Second
				hp = s.newProc(t, lock.WithLease(lease))
			}
			holder := hp.mutex(t, name)
			h := mustLock(t, holder)
			if watches {
				redistest.Eventually(t, eventually, "the holder's client to watch the lock hash", func() bool {
					return hp.b.count("WATCHKEY") >= 2
				})
			}
			start := time.Now()
			if how == "DEL by hand" {
				evalRaw(t, hp.b, `return redis.call('del', KEYS[1])`, []string{name})
			} else {
				rc := s.newRedisson(t)
				if ok, err := rc.Lock(name, 1).ForceUnlock(ctxFor(t, eventually)); err != nil || !ok {
					t.Fatalf("Redisson forceUnlock = %v, %v", ok, err)
				}
			}
			bound := lease/3 + slack
			if watches {
				bound = 5 * time.Second
			}
			select {
			case <-h.Done():
			case <-time.After(bound):
				t.Fatalf("the holder was not told within %v of the %s (watching keys: %v)", bound, how, watches)
			}
			if !errors.Is(h.Err(), lock.ErrLockLost) {
				t.Errorf("holder's error %v, want ErrLockLost", h.Err())
			}
			t.Logf("holder told %v after the %s returned (watching keys: %v)", time.Since(start), how, watches)
		})
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
		{name: "Lock nil ctx", call: func() error { _, err := good.Lock(nilCtx); return err }, want: lock.ErrInvalidArgument},
		{name: "Lock cancelled ctx", call: func() error { _, err := good.Lock(cancelled); return err }, want: context.Canceled},
		{name: "LockWithLease zero", call: func() error { _, err := good.LockWithLease(ctx, 0); return err }, want: lock.ErrInvalidArgument},
		{name: "LockWithLease negative", call: func() error { _, err := good.LockWithLease(ctx, -time.Second); return err }, want: lock.ErrInvalidArgument},
		{name: "LockWithLease sub-ms", call: func() error { _, err := good.LockWithLease(ctx, time.Microsecond); return err }, want: lock.ErrInvalidArgument},
		{name: "LockWithLease overflow", call: func() error { _, err := good.LockWithLease(ctx, time.Duration(1<<62)); return err }, want: lock.ErrInvalidArgument},
		{name: "TryLock sub-ms wait", call: func() error { _, err := good.TryLock(ctx, 500*time.Microsecond); return err }, want: lock.ErrInvalidArgument},
		{name: "TryLock negative wait", call: func() error { _, err := good.TryLockWithLease(ctx, -1, time.Second); return err }, want: lock.ErrInvalidArgument},
		{name: "TryLock zero lease", call: func() error { _, err := good.TryLockWithLease(ctx, time.Second, 0); return err }, want: lock.ErrInvalidArgument},
		{name: "TryLock one attempt, negative lease", call: func() error { _, err := good.TryLockWithLease(ctx, 0, -2); return err }, want: lock.ErrInvalidArgument},
		{name: "Unlock nil ctx", call: func() error { return good.Unlock(nilCtx) }, want: lock.ErrInvalidArgument},
		{name: "Unlock cancelled", call: func() error { return good.Unlock(cancelled) }, want: context.Canceled},
		{name: "ForceUnlock nil ctx", call: func() error { _, err := good.ForceUnlock(nilCtx); return err }, want: lock.ErrInvalidArgument},
		{name: "Delete cancelled", call: func() error { _, err := good.Delete(cancelled); return err }, want: context.Canceled},
		{name: "IsLocked nil ctx", call: func() error { _, err := good.IsLocked(nilCtx); return err }, want: lock.ErrInvalidArgument},
		{name: "Inspect negative limit", call: func() error { _, err := good.Inspect(ctx, -1); return err }, want: lock.ErrInvalidArgument},
	}
	for _, tc := range cases {
		if err := tc.call(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	for _, o := range []lock.Option{lock.WithLease(0), lock.WithLease(time.Millisecond), lock.WithWaiterTimeout(-1), lock.WithLease((10 * 365 * 24 * time.Hour) + 1)} {
		if _, err := lock.NewClient(p.b, o); !errors.Is(err, lock.ErrInvalidArgument) {
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
			got[m.Owner()]++
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

// testX17EveryPublishMode: in each WithPublish mode, a holder's unlock
// wakes a waiter of the same mode; PublishSharded needs a cluster backend
// and is refused elsewhere; a PublishBoth holder also wakes a plain
// waiter.
func testX17EveryPublishMode(t *testing.T, s *suite) {
	cluster := s.newBackend(t).Sharded()
	for _, mode := range []struct {
		name string
		p    lock.Publish
	}{{"auto", lock.PublishAuto}, {"plain", lock.PublishPlain}, {"sharded", lock.PublishSharded}, {"both", lock.PublishBoth}} {
		t.Run(mode.name, func(t *testing.T) {
			name := lockName(t)
			if mode.p == lock.PublishSharded && !cluster {
				if _, err := lock.NewClient(s.newBackend(t), lock.WithPublish(mode.p)); !errors.Is(err, lock.ErrInvalidArgument) {
					t.Fatalf("PublishSharded without a cluster backend: %v, want ErrInvalidArgument", err)
				}
				return
			}
			holder := s.newProc(t, lock.WithPublish(mode.p)).mutex(t, name)
			wp := s.newProc(t, lock.WithPublish(mode.p), lock.WithWaiterTimeout(60*time.Second))
			mustLock(t, holder)
			handOver(t, holder, wp, wp.mutex(t, name), slack, "waiter after unlock, "+mode.name, func() { mustUnlock(t, holder) })
		})
	}
	t.Run("both wakes plain", func(t *testing.T) {
		name := lockName(t)
		holder := s.newProc(t, lock.WithPublish(lock.PublishBoth)).mutex(t, name)
		wp := s.newProc(t, lock.WithPublish(lock.PublishPlain), lock.WithWaiterTimeout(60*time.Second))
		mustLock(t, holder)
		handOver(t, holder, wp, wp.mutex(t, name), slack, "plain waiter after unlock by both", func() { mustUnlock(t, holder) })
	})
}

// testX17ShardedWakeUpsStayInTheShard: on a cluster, a hand-over with the
// default options wakes the waiter without PUBLISH - a plain subscriber
// of the waiter's channel, which a PUBLISH on any node would reach over
// the cluster bus, hears nothing - while a plain waiter of a PublishPlain
// client is woken through the same kind of subscriber.
func testX17ShardedWakeUpsStayInTheShard(t *testing.T, s *suite) {
	if !s.newBackend(t).Sharded() {
		t.Skip("a cluster case: the backend under test talks to one server")
	}
	name := lockName(t)
	holder := s.newProc(t).mutex(t, name)
	wp := s.newProc(t, lock.WithWaiterTimeout(60*time.Second))
	waiter := wp.mutex(t, name)
	channel := "redisson_lock__channel:{" + name + "}:" + waiter.Owner()
	ear, err := s.newBackend(t).Subscribe(ctxFor(t, eventually), channel)
	if err != nil {
		t.Fatalf("SUBSCRIBE %s: %v", channel, err)
	}
	defer ear.Close()
	for range 3 {
		mustLock(t, holder)
		handOver(t, holder, wp, waiter, slack, "sharded waiter after unlock", func() { mustUnlock(t, holder) })
		mustUnlock(t, waiter)
	}
	select {
	case e := <-ear.Events():
		if !e.Reconnect {
			t.Errorf("a plain subscriber heard %q: a wake-up crossed the cluster bus", e.Payload)
		}
	case <-time.After(100 * time.Millisecond): // any PUBLISH had time to arrive
	}
}
