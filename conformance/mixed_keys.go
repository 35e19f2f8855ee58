package conformance

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
)

// Java and Go on one lock without surprises (X11), and no key that
// outlives its use (X15).
func mixedKeyCases() []testCase {
	return []testCase{
		{name: "X11_AnySlackAndJavaWaitKeepGoWaitersInLine", run: testX11AnySlack},
		{name: "X11_DeadGoHeadDelaysRedissonAtMostWaiterTimeout", run: testX11DeadGoHead},
		{name: "X11_DeadGoHeadBehindRedissonHolderIsDroppedByRedisson", run: testX11DeadGoHeadAfterJava},
		{name: "X11_RedissonDropsTheEntryAGoWaiterLeft", run: testX11RedissonDropsLeftEntry},
		{name: "X15_KeysDisappearAfterTheLastOwner", run: testX15Keys},
		{name: "X15_LatchesLiveSeconds", run: testX15Latches},
	}
}

// testX11AnySlack: a queue J G J G J G (Redisson and fairlock waiters
// alternating) behind a hold of a few heartbeats, for every combination of
// the Java side's wait (100 ms, 1 s, Redisson's 300 s default) and
// fairlock's WithRedissonSlack (100 ms, 1 s, default). Every Redisson
// acquisition takes its wait off every queued score, and Redisson purges a
// head whose score has passed: no fairlock waiter may be dropped, demoted or
// overtaken by that. Redisson waiters that Redisson's own rules evict (their
// score spent by the others' fix-ups) are counted, not failed.
func testX11AnySlack(t *testing.T, s *suite) {
	for _, javaWait := range []time.Duration{100 * time.Millisecond, time.Second, redissonSlack} {
		for _, slackOpt := range []time.Duration{100 * time.Millisecond, time.Second, 0} {
			t.Run(fmt.Sprintf("java_wait_%v_slack_%v", javaWait, slackOpt), func(t *testing.T) {
				t.Parallel()
				mixedQueue(t, s, javaWait, slackOpt)
			})
		}
	}
}

func mixedQueue(t *testing.T, s *suite, javaWait, slackOpt time.Duration) {
	const (
		pairs         = 3
		waiterTimeout = 1500 * time.Millisecond // heartbeats every 500 ms
		hold          = 2 * time.Second         // several heartbeats
	)
	name := lockName(t)
	opts := []lock.Option{lock.WithLease(time.Second), lock.WithWaiterTimeout(waiterTimeout)}
	if slackOpt > 0 {
		opts = append(opts, lock.WithRedissonSlack(slackOpt))
	}
	holder := s.newProc(t, opts...).mutex(t, name)
	mustLock(t, holder)
	gps := []*proc{s.newProc(t, opts...), s.newProc(t, opts...)}
	rcs := []*redissonClient{s.newRedisson(t, withRedissonSlack(javaWait)), s.newRedisson(t, withRedissonSlack(javaWait))}
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
		label string
		run   func(ctx context.Context) error
	}
	var waiters []waiter
	for i := range pairs {
		j := rcs[i%2].Lock(name, int64(100+i))
		jl := fmt.Sprint("J", i)
		waiters = append(waiters, waiter{jl, func(ctx context.Context) error {
			if err := j.LockWithLease(ctx, time.Second); err != nil {
				return err
			}
			record(jl)
			return j.Unlock(ctx)
		}})
		m := gps[i%2].mutex(t, name)
		gl := fmt.Sprint("G", i)
		waiters = append(waiters, waiter{gl, func(ctx context.Context) error {
			if _, err := m.Lock(ctx); err != nil {
				return err
			}
			record(gl)
			return m.Unlock(ctx)
		}})
	}
	chans := make([]<-chan result, len(waiters))
	for i, w := range waiters {
		ctx := ctxFor(t, 90*time.Second)
		chans[i] = goAcquire(func() (*lock.Hold, error) { return nil, w.run(ctx) })
		waitQueued(t, holder, i+1)
	}
	time.Sleep(hold) // the scenario: the holder keeps the lock for a while
	mustUnlock(t, holder)
	for i, ch := range chans {
		if r := await(t, ch, 60*time.Second, waiters[i].label); r.err != nil {
			t.Fatalf("%s: %v", waiters[i].label, r.err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	pos := func(label string) int { return slices.Index(order, label) }
	javaOutOfOrder := 0
	for i, w := range waiters {
		for _, later := range waiters[i+1:] {
			if pos(later.label) < pos(w.label) {
				if w.label[0] == 'G' {
					t.Errorf("%s, queued before %s, acquired after it (order %v): a fairlock waiter was dropped or overtaken", w.label, later.label, order)
				} else {
					javaOutOfOrder++
				}
			}
		}
	}
	t.Logf("order %v; pairs with a Redisson waiter overtaken by Redisson's own rules: %d", order, javaOutOfOrder)
}

// testX11DeadGoHead: a fairlock waiter first in line dies; only Redisson
// waiters are behind it. When the holder releases, the lock is handed to
// the dead head and lapses within twice its liveness left: the Redisson
// waiter behind waits for that TTL (no spin) and then takes the lock.
func testX11DeadGoHead(t *testing.T, s *suite) {
	const waiterTimeout = time.Second
	name := lockName(t)
	holder := s.newProc(t).mutex(t, name)
	mustLock(t, holder)
	cb := &crashableBackend{capable: s.newBackend(t)}
	dead := mutexOf(t, clientOn(t, cb, lock.WithWaiterTimeout(waiterTimeout)), name)
	goAcquire(func() (*lock.Hold, error) { return dead.Lock(ctxFor(t, eventually)) })
	waitQueued(t, holder, 1)
	rc := s.newRedisson(t)
	j := rc.Lock(name, 7)
	jch := goAcquire(func() (*lock.Hold, error) { return nil, j.LockWithLease(ctxFor(t, 60*time.Second), 10*time.Second) })
	waitQueued(t, holder, 2)
	cb.crashed.Store(true)
	before := rc.Count("redisson_acquire")
	released := time.Now()
	mustUnlock(t, holder)
	r := await(t, jch, waiterTimeout+eventually, "Redisson waiter behind a dead fairlock head")
	if r.err != nil {
		t.Fatal(r.err)
	}
	delay := r.at.Sub(released)
	attempts := rc.Count("redisson_acquire") - before
	rate := float64(attempts) / max(delay.Seconds(), 0.001)
	if delay > 2*waiterTimeout+slack {
		t.Errorf("the Redisson waiter acquired %v after the release, want within twice the waiter timeout (%v)", delay, waiterTimeout)
	}
	if rate >= 10 {
		t.Errorf("the Redisson waiter made %d acquire attempts in %v (%.0f/s): it spun behind the dead head", attempts, delay, rate)
	}
	t.Logf("Redisson waiter acquired %v after the release, %d attempts (%.1f/s)", delay, attempts, rate)
}

// testX11DeadGoHeadAfterJava: as testX11DeadGoHead, but a Redisson holder
// (2 s lease) releases, with Redisson's own unlock: it deletes the hash and
// wakes only the dead head, so no fairlock code runs and the Redisson waiter
// behind re-checks at its own timer - the lease it last saw (upstream's
// behaviour). It must then find the dead head gone: first in line, a
// fairlock waiter's Redisson deadline is its liveness deadline, so
// Redisson's purge drops it, instead of it blocking the queue for
// Redisson's 5-minute slack.
func testX11DeadGoHeadAfterJava(t *testing.T, s *suite) { deadGoHeadAfterJava(t, s, false) }

// deadGoHeadAfterJava: a Redisson holder, a fairlock head that crashes,
// a Redisson waiter; after the Redisson release the Redisson waiter
// acquires through Redisson's purge alone, within its timer and the
// waiter timeout. withLeft puts between them a fairlock waiter that gives
// up first, leaving its entry in the list, dead (X8), which Redisson's
// purge must drop as well.
func deadGoHeadAfterJava(t *testing.T, s *suite, withLeft bool) {
	const (
		waiterTimeout = time.Second
		javaLease     = 2 * time.Second
	)
	name := lockName(t)
	rc := s.newRedisson(t)
	jh := rc.Lock(name, 1)
	if err := jh.LockWithLease(ctxFor(t, eventually), javaLease); err != nil {
		t.Fatal(err)
	}
	spy := s.newProc(t).mutex(t, name)
	cb := &crashableBackend{capable: s.newBackend(t)}
	// A heartbeat the head sent just before it crashed can reach the
	// server just after the release and take the lock (a real crash can
	// do that too); its lease, no longer renewed, then bounds the wait
	// like the Java holder's.
	dead := mutexOf(t, clientOn(t, cb, lock.WithWaiterTimeout(waiterTimeout), lock.WithLease(javaLease)), name)
	goAcquire(func() (*lock.Hold, error) { return dead.Lock(ctxFor(t, eventually)) })
	waitQueued(t, spy, 1)
	queued := 1
	var giveUpLeft func()
	if withLeft {
		left := s.newProc(t, lock.WithWaiterTimeout(waiterTimeout)).mutex(t, name)
		lctx, lcancel := context.WithCancel(context.Background())
		defer lcancel()
		lch := goAcquire(func() (*lock.Hold, error) { return left.Lock(lctx) })
		queued++
		waitQueued(t, spy, queued)
		giveUpLeft = func() { giveUp(t, lcancel, lch, "the fairlock waiter in the middle") }
	}
	j := rc.Lock(name, 2)
	jch := goAcquire(func() (*lock.Hold, error) { return nil, j.LockWithLease(ctxFor(t, eventually), 10*time.Second) })
	waitQueued(t, spy, queued+1)
	if withLeft {
		giveUpLeft()
		if raw := readRaw(t, s.newProc(t).b, name); len(raw.queue) != 3 {
			t.Fatalf("raw queue after the middle waiter left: %v, want its dead entry still in it", raw.queue)
		}
	}
	cb.crashed.Store(true)
	released := time.Now()
	if err := jh.Unlock(ctxFor(t, eventually)); err != nil {
		t.Fatal(err)
	}
	r := await(t, jch, javaLease+eventually, "Redisson waiter behind a dead fairlock head")
	if r.err != nil {
		st, err := spy.Inspect(ctxFor(t, eventually), 10)
		t.Fatalf("Redisson waiter: %v (%v after the release); the lock now: %+v (%v)", r.err, time.Since(released), st, err)
	}
	if delay := r.at.Sub(released); delay > javaLease+waiterTimeout+slack {
		t.Errorf("the Redisson waiter acquired %v after the release, want within its timer (%v) and the waiter timeout (%v)", delay, javaLease, waiterTimeout)
	} else {
		t.Logf("Redisson waiter acquired %v after a Redisson release", delay)
	}
}

// x15Bound is how long after its last owner is gone every key of a lock
// is gone, with the settings testX15Keys uses: the unlock latch (3 s)
// outlives the rest (lease + 1 s for the token counter; latest waiter
// deadline + Redisson slack for the queue and zsets).
const x15Bound = 3*time.Second + slack

// lockKeysLua lists every key of lock KEYS[1] (any key with its hash tag,
// and the hash itself).
const lockKeysLua = `
local keys = redis.call('keys', '*{' .. ARGV[1] .. '}*')
if redis.call('exists', KEYS[1]) == 1 then
  keys[#keys + 1] = KEYS[1]
end
return keys`

func lockKeys(t *testing.T, p *proc, name string) []string {
	rep := evalRaw(t, p.b, lockKeysLua, []string{name}, name)
	var keys []string
	for _, e := range rep.Elems {
		keys = append(keys, e.Str)
	}
	return keys
}

// testX15Keys: after the last owner of a lock is gone - released; crashed
// while holding and while queued; or queued (and crashed) when Redisson's
// delete() removed the lock - every key of the lock disappears within
// x15Bound, and a later acquisition still gets a larger token.
func testX15Keys(t *testing.T, s *suite) {
	opts := []lock.Option{lock.WithLease(300 * time.Millisecond), lock.WithWaiterTimeout(300 * time.Millisecond), lock.WithRedissonSlack(200 * time.Millisecond)}
	spy := s.newProc(t)
	gone := func(t *testing.T, name, how string) {
		start := time.Now()
		redistest.Eventually(t, x15Bound+slack, "every key of the lock to go ("+how+")", func() bool { return len(lockKeys(t, spy, name)) == 0 })
		t.Logf("%s: every key gone %v after the last owner", how, time.Since(start).Round(time.Millisecond))
	}
	t.Run("released", func(t *testing.T) {
		name := lockName(t)
		a, b := s.newProc(t, opts...).mutex(t, name), s.newProc(t, opts...).mutex(t, name)
		h1 := mustLock(t, a)
		ch := goAcquire(func() (*lock.Hold, error) { return b.Lock(ctxFor(t, eventually)) })
		waitQueued(t, a, 1)
		mustUnlock(t, a)
		if r := await(t, ch, eventually, "waiter"); r.err != nil {
			t.Fatal(r.err)
		}
		mustUnlock(t, b)
		gone(t, name, "released")
		h2 := mustLock(t, a)
		if h2.Token() <= h1.Token() {
			t.Errorf("token %d after every key expired, want more than %d (tokens never go backwards)", h2.Token(), h1.Token())
		}
		mustUnlock(t, a)
	})
	t.Run("crashed", func(t *testing.T) {
		name := lockName(t)
		hb := &crashableBackend{capable: s.newBackend(t)}
		holder := mutexOf(t, clientOn(t, hb, opts...), name)
		h1 := mustLock(t, holder)
		wb := &crashableBackend{capable: s.newBackend(t)}
		waiter := mutexOf(t, clientOn(t, wb, opts...), name)
		goAcquire(func() (*lock.Hold, error) { return waiter.Lock(ctxFor(t, eventually)) })
		waitQueued(t, spy.mutex(t, name), 1)
		hb.crashed.Store(true)
		wb.crashed.Store(true)
		gone(t, name, "holder and waiter crashed")
		h2 := mustLock(t, s.newProc(t, opts...).mutex(t, name))
		if h2.Token() <= h1.Token() {
			t.Errorf("token %d after every key expired, want more than %d", h2.Token(), h1.Token())
		}
	})
	t.Run("redisson_delete", func(t *testing.T) {
		name := lockName(t)
		holder := s.newProc(t, opts...).mutex(t, name)
		mustLock(t, holder)
		wb := &crashableBackend{capable: s.newBackend(t)}
		waiter := mutexOf(t, clientOn(t, wb, opts...), name)
		goAcquire(func() (*lock.Hold, error) { return waiter.Lock(ctxFor(t, eventually)) })
		waitQueued(t, holder, 1)
		wb.crashed.Store(true)
		if err := s.newRedisson(t).Lock(name, 1).Delete(ctxFor(t, eventually)); err != nil {
			t.Fatal(err)
		}
		gone(t, name, "Redisson's delete() with a fairlock waiter queued")
	})
}

// testX15Latches: every Unlock leaves a latch for 3 s (B10), so the latches
// alive at any moment are the unlock rate times 3 s, and none outlives it.
func testX15Latches(t *testing.T, s *suite) {
	const unlocks = 200
	name := lockName(t)
	p := s.newProc(t)
	m := p.mutex(t, name)
	start := time.Now()
	for range unlocks {
		mustLock(t, m)
		mustUnlock(t, m)
	}
	took := time.Since(start)
	latches := func() int {
		n := 0
		for _, k := range lockKeys(t, p, name) {
			if strings.HasPrefix(k, "redisson_unlock_latch:") {
				n++
			}
		}
		return n
	}
	n := latches()
	if n > unlocks {
		t.Errorf("%d latches after %d unlocks", n, unlocks)
	}
	redistest.Eventually(t, 3*time.Second+slack, "the latches to expire", func() bool { return latches() == 0 })
	t.Logf("%d unlocks in %v left %d keys (latches), none %v later", unlocks, took.Round(time.Millisecond), n, time.Since(start).Round(time.Millisecond))
}
