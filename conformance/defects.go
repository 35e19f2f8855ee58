package conformance

// Regression cases for defects found in the scripts after release: each
// failed on the scripts as they were, and names the rule it checks.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
)

func defectCases() []testCase {
	return []testCase{
		{name: "B6_ReenteredHandOverRunsOutOnTime", run: testB6ReenteredHandOver},
		{name: "B9_QueueLengthAfterRedissonDropsALeftEntry", run: testB9LeftEntryDroppedByRedisson},
		{name: "X11_RedissonWaiterBehindALeftEntryIsNotStranded", run: testX11BehindLeftEntry},
		{name: "X11_GoWaiterQueuedLateBehindARedissonHeadKeepsItsPlace", run: testX11LateBehindRedissonHead},
		{name: "X11_MixedSoakKeepsRedissonDeadlinesBounded", run: testX11MixedSoakDeadlines},
		{name: "X11_StaleLivenessEntryDoesNotHideJavaWaiters", run: testX11StaleLivenessEntry},
		{name: "X5_LeaveAfterRedissonDeleteLeavesNoLivenessEntry", run: testX5LeaveAfterRedissonDelete},
	}
}

// heldByRedisson has thread 1 of a new Redisson client hold lock name for a
// minute, and returns the client.
func heldByRedisson(t *testing.T, s *suite, name string) *redissonClient {
	t.Helper()
	rc := s.newRedisson(t)
	if err := rc.Lock(name, 1).LockWithLease(ctxFor(t, eventually), time.Minute); err != nil {
		t.Fatal(err)
	}
	return rc
}

// testX5LeaveAfterRedissonDelete: a fairlock waiter second in line when
// Redisson's delete() removes the queue, and that gives up before its
// next heartbeat would queue it again, leaves no liveness entry behind:
// delete() does not know fairlock's liveness zset, and leave.lua, finding
// the owner queued nowhere, left its entry there, live, until the zset
// expired (the soak found five, seed 203821236997882).
func testX5LeaveAfterRedissonDelete(t *testing.T, s *suite) {
	for try := range 5 {
		if leaveAfterRedissonDelete(t, s) {
			return
		}
		t.Logf("try %d: a wake-up from delete() reached the second waiter first, which took the free lock; again", try)
	}
	t.Fatal("in 5 tries the second waiter never gave up after delete()")
}

// leaveAfterRedissonDelete runs the case once; it reports false when the
// second waiter took the lock delete() freed before it could give up (a
// wake-up reached it first: legitimate, but not the case).
func leaveAfterRedissonDelete(t *testing.T, s *suite) bool {
	name := lockName(t)
	rc := heldByRedisson(t, s, name)
	sp := s.newProc(t)
	spy := sp.mutex(t, name)
	head := withoutKeyWatch(s.newProc(t, lock.WithWaiterTimeout(30*time.Second))).mutex(t, name)
	headCh := goAcquire(func() (*lock.Hold, error) { return head.Lock(ctxFor(t, 45*time.Second)) })
	waitQueued(t, spy, 1)
	second := withoutKeyWatch(s.newProc(t, lock.WithWaiterTimeout(30*time.Second))).mutex(t, name)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	secondCh := goAcquire(func() (*lock.Hold, error) { return second.Lock(ctx) })
	waitQueued(t, spy, 2)
	if err := rc.Lock(name, 1).Delete(ctxFor(t, eventually)); err != nil {
		t.Fatal(err)
	}
	if _, score := serverNowAndScore(t, sp, name, second.Owner()); score != 0 {
		t.Fatalf("delete() left the Redisson deadline of the second waiter: %d", score)
	}
	cancel() // before its heartbeat (10 s) queues it again
	gaveUp := await(t, secondCh, eventually, "the second waiter, cancelled").err != nil
	if gaveUp {
		rep := evalRaw(t, sp.b, `return redis.call('zscore', KEYS[4], ARGV[1]) or false`, keysOf(name), second.Owner())
		if rep.Str != "" && rep.Str != "0" {
			t.Errorf("the waiter that gave up after delete() left its liveness entry, live: %q", rep.Str)
		}
	} else {
		mustUnlock(t, second)
	}
	// The head still takes the lock (at its heartbeat at the latest).
	if r := await(t, headCh, 30*time.Second, "the head after delete()"); r.err != nil {
		t.Fatal(r.err)
	}
	mustUnlock(t, head)
	return gaveUp
}

// testB6ReenteredHandOver: a waiter handed the lock by message re-enters
// it at once, before its client has confirmed the grant. The re-entry
// takes the grant up: the lock lives for the hold's lease, not for the
// hand-over's provisional expiry (twice the waiter's liveness left, 4 to
// 6 s here), so when the hold, never unlocked, runs out, the next waiter
// takes the lock at once instead of waiting seconds for a lock nobody
// holds.
func testB6ReenteredHandOver(t *testing.T, s *suite) {
	const (
		lease         = time.Second
		waiterTimeout = 3 * time.Second // a heartbeat a second: the grant is adopted from the message
	)
	name := lockName(t)
	holder := s.newProc(t).mutex(t, name)
	wp := withoutKeyWatch(s.newProc(t, lock.WithWaiterTimeout(waiterTimeout)))
	waiter := wp.mutex(t, name)
	np := withoutKeyWatch(s.newProc(t, lock.WithWaiterTimeout(30*time.Second)))
	next := np.mutex(t, name)
	for try := range 5 {
		mustLock(t, holder)
		ch := goAcquire(func() (*lock.Hold, error) { return waiter.LockWithLease(ctxFor(t, eventually), lease) })
		waitQueued(t, holder, 1)
		settled(t, wp)
		nch := goAcquire(func() (*lock.Hold, error) { return next.Lock(ctxFor(t, 30*time.Second)) })
		waitQueued(t, holder, 2)
		settled(t, np)
		// Release just after a heartbeat of the waiter, so that its client
		// trusts the grant message (its liveness is fresh) and holds
		// without an acquire of its own.
		beats := wp.b.count("acquire" + doneSuffix)
		redistest.Eventually(t, waiterTimeout, "a heartbeat of the waiter", func() bool { return wp.b.count("acquire"+doneSuffix) > beats })
		before := wp.b.count("acquire")
		mustUnlock(t, holder)
		r := await(t, ch, eventually, "the waiter after unlock")
		if r.err != nil {
			t.Fatal(r.err)
		}
		granted := time.Now()
		if wp.b.count("acquire") != before {
			// Taken up by an attempt, not adopted from the message: the
			// case needs the latter. Clear the lock and try again.
			mustUnlock(t, waiter)
			if rn := await(t, nch, eventually, "the next waiter"); rn.err != nil {
				t.Fatal(rn.err)
			}
			mustUnlock(t, next)
			t.Logf("try %d: the grant was taken up by an attempt; again", try)
			continue
		}
		// The re-entry, before the client's confirming renewal (a third
		// of the lease after its latest heartbeat).
		if h, err := waiter.LockWithLease(ctxFor(t, eventually), lease); err != nil || h != r.h {
			t.Fatalf("re-entry: %v (same hold: %t)", err, h == r.h)
		}
		ttl, err := holder.RemainTTL(ctxFor(t, eventually))
		if err != nil {
			t.Fatal(err)
		}
		if ttl > lease+100*time.Millisecond {
			t.Errorf("the lock lives %v after the handed-over hold (lease %v) was re-entered, want at most the lease: the grant's provisional expiry outlives the hold", ttl, lease)
		}
		ended := awaitDone(t, r.h, lease+slack, "the re-entered hold, never unlocked, at its lease")
		rn := await(t, nch, eventually, "the next waiter once the hold's lease ran out")
		if rn.err != nil {
			t.Fatal(rn.err)
		}
		if d := rn.at.Sub(ended); d > slack {
			t.Errorf("the next waiter took the lock %v after the hold ended (%v after the grant), want within %v: nobody held it meanwhile", d.Round(time.Millisecond), ended.Sub(granted).Round(time.Millisecond), slack)
		}
		t.Logf("lock TTL %v after the re-entry; hold ended %v after the grant, next waiter holds %v after that",
			ttl, ended.Sub(granted).Round(time.Millisecond), rn.at.Sub(ended).Round(time.Millisecond))
		mustUnlock(t, next)
		return
	}
	t.Errorf("in 5 hand-overs the waiter never held by the grant message alone")
}

// testB9LeftEntryDroppedByRedisson: a fairlock waiter gives up behind a
// Redisson waiter, leaving its entry in the list, dead (X8); the Redisson
// waiter gives up too, so the dead entry is first in line, and a Redisson
// script's purge drops it - from the list and Redisson's zset only, as
// upstream's scripts know nothing else. Inspect's queue length still
// counts the live fairlock waiter behind it, and the next fairlock script
// forgets the dropped entry's mark.
func testB9LeftEntryDroppedByRedisson(t *testing.T, s *suite) {
	name := lockName(t)
	rc := heldByRedisson(t, s, name)
	sp := s.newProc(t)
	spy := sp.mutex(t, name)
	jx := goAcquire(func() (*lock.Hold, error) {
		_, err := rc.Lock(name, 2).TryLock(ctxFor(t, eventually), 2*time.Second, time.Minute)
		return nil, err
	})
	waitQueued(t, spy, 1)
	// A heartbeat 10 s apart: the waiters run no script in the window.
	opts := []lock.Option{lock.WithWaiterTimeout(30 * time.Second)}
	left := s.newProc(t, opts...).mutex(t, name)
	lctx, lcancel := context.WithCancel(context.Background())
	defer lcancel()
	lch := goAcquire(func() (*lock.Hold, error) { return left.Lock(lctx) })
	waitQueued(t, spy, 2)
	live := s.newProc(t, opts...).mutex(t, name)
	wch := goAcquire(func() (*lock.Hold, error) { return live.Lock(ctxFor(t, 30*time.Second)) })
	waitQueued(t, spy, 3)
	giveUp(t, lcancel, lch, "the fairlock waiter in the middle")
	if r := await(t, jx, eventually, "the Redisson waiter giving up"); r.err != nil {
		t.Fatal(r.err)
	}
	if raw := readRaw(t, sp.b, name); !slices.Equal(raw.queue, []string{left.Owner(), live.Owner()}) {
		t.Fatalf("raw queue %v, want the left entry first, then the live waiter", raw.queue)
	}
	// Any Redisson script purges the dead head: here a barging tryLock().
	if held, err := rc.Lock(name, 3).TryLockOnce(ctxFor(t, eventually), time.Second); err != nil || held {
		t.Fatalf("Redisson tryLock() = %t, %v; want false (held)", held, err)
	}
	if raw := readRaw(t, sp.b, name); !slices.Equal(raw.queue, []string{live.Owner()}) {
		t.Fatalf("raw queue %v after Redisson's purge, want only the live waiter", raw.queue)
	}
	st, err := spy.Inspect(ctxFor(t, eventually), 10)
	if err != nil {
		t.Fatal(err)
	}
	if st.QueueLength != 1 || len(st.Queue) != 1 || st.Queue[0].Owner != live.Owner() {
		t.Errorf("Inspect after Redisson dropped the left entry: queue length %d, queue %+v; want 1, the live waiter", st.QueueLength, st.Queue)
	}
	// A fairlock script forgets the left entry's mark once its entry is
	// gone: a second fairlock waiter queues.
	other := s.newProc(t, opts...).mutex(t, name)
	och := goAcquire(func() (*lock.Hold, error) { return other.Lock(ctxFor(t, 30*time.Second)) })
	waitQueued(t, spy, 2)
	rep := evalRaw(t, sp.b, `return redis.call('zscore', KEYS[4], ARGV[1])`, keysOf(name), left.Owner())
	if rep.Str != "" {
		t.Errorf("fairlock's liveness zset still marks the dropped left entry (score %q) after a fairlock script ran", rep.Str)
	}
	if err := rc.Lock(name, 1).Unlock(ctxFor(t, eventually)); err != nil {
		t.Fatal(err)
	}
	for i, ch := range []<-chan result{wch, och} {
		r := await(t, ch, eventually, "waiter")
		if r.err != nil {
			t.Fatal(r.err)
		}
		mustUnlock(t, []*lock.Mutex{live, other}[i])
	}
}

// serverNowAndScore reads the server's clock (ms) and owner's Redisson
// deadline (ms; 0 when it has none).
func serverNowAndScore(t *testing.T, p *proc, name, owner string) (now, score int64) {
	t.Helper()
	rep := evalRaw(t, p.b, `local t = redis.call('time')
local s = redis.call('zscore', KEYS[3], ARGV[1]) or '0'
return {tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), string.format('%.0f', tonumber(s))}`, keysOf(name), owner)
	if len(rep.Elems) != 2 {
		t.Fatalf("clock and score: %+v", rep)
	}
	score, err := strconv.ParseInt(rep.Elems[1].Str, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return rep.Elems[0].Int, score
}

// testX11BehindLeftEntry: a fairlock waiter gives up in the middle of the
// queue, leaving its entry dead in the list with the Redisson deadline of
// that moment (X8); the Redisson waiter behind it gives up too, so the dead
// entry is the tail, and no fairlock code ran when it became so.
//
// by_the_hand_over: a Redisson lock() that queues a while later chains on
// it: it gets a negative wait (upstream then waits for a message,
// unbounded) and a deadline already past. The next hand-over - a fairlock
// release - drops it as dead with the dead entry. It must be told, and
// queue again: once the lock is free it takes it, instead of waiting for
// its timer (the lease it last saw) or for ever.
//
// by_a_heartbeat: the next heartbeat of a fairlock waiter drops the dead
// tail, so a Redisson lock() that queues after it chains on a live waiter.
func testX11BehindLeftEntry(t *testing.T, s *suite) {
	t.Run("by_the_hand_over", func(t *testing.T) { behindLeftEntry(t, s, false) })
	t.Run("by_a_heartbeat", func(t *testing.T) { behindLeftEntry(t, s, true) })
}

func behindLeftEntry(t *testing.T, s *suite, heartbeat bool) {
	const javaWait = 500 * time.Millisecond // the late lock()'s fairLockWaitTimeout
	name := lockName(t)
	hp := s.newProc(t)
	holder := hp.mutex(t, name)
	mustLock(t, holder)
	// Heartbeats 10 s apart: no fairlock waiter runs a script meanwhile,
	// but the first one when it is to heartbeat.
	opts := []lock.Option{lock.WithWaiterTimeout(30 * time.Second)}
	fp := s.newProc(t, opts...)
	if heartbeat {
		fp = s.newProc(t, lock.WithWaiterTimeout(1500*time.Millisecond))
	}
	first := fp.mutex(t, name)
	fch := goAcquire(func() (*lock.Hold, error) { return first.Lock(ctxFor(t, 30*time.Second)) })
	waitQueued(t, holder, 1)
	left := s.newProc(t, opts...).mutex(t, name)
	lctx, lcancel := context.WithCancel(context.Background())
	defer lcancel()
	lch := goAcquire(func() (*lock.Hold, error) { return left.Lock(lctx) })
	waitQueued(t, holder, 2)
	rc := s.newRedisson(t)
	jch := goAcquire(func() (*lock.Hold, error) {
		_, err := rc.Lock(name, 1).TryLock(ctxFor(t, eventually), 2*time.Second, time.Minute)
		return nil, err
	})
	waitQueued(t, holder, 3)
	giveUp(t, lcancel, lch, "the fairlock waiter in the middle")
	if r := await(t, jch, eventually, "the Redisson waiter giving up"); r.err != nil {
		t.Fatal(r.err)
	}
	lateC := s.newRedisson(t, withRedissonSlack(javaWait))
	late := lateC.Lock(name, 2)
	if heartbeat {
		// Two heartbeats: one may have run before the Redisson waiter left
		// and be counted only now; the waiter sends the next after it.
		beats := fp.b.count("acquire" + doneSuffix)
		redistest.Eventually(t, eventually, "a heartbeat of the first waiter", func() bool { return fp.b.count("acquire"+doneSuffix) > beats+1 })
		if raw := readRaw(t, hp.b, name); !slices.Equal(raw.queue, []string{first.Owner()}) {
			t.Fatalf("raw queue %v after a heartbeat, want the left entry at the tail dropped", raw.queue)
		}
	} else {
		if raw := readRaw(t, hp.b, name); !slices.Equal(raw.queue, []string{first.Owner(), left.Owner()}) {
			t.Fatalf("raw queue %v, want the first waiter, then the left entry at the tail", raw.queue)
		}
		// Late: the left entry's Redisson deadline is more than the
		// lock()'s wait in the past, so chaining on it gives a deadline
		// already past.
		redistest.Eventually(t, eventually, "the left entry to be older than the Java wait", func() bool {
			now, score := serverNowAndScore(t, hp, name, left.Owner())
			return score > 0 && now > score+javaWait.Milliseconds()+100
		})
	}
	lateCh := goAcquire(func() (*lock.Hold, error) { return nil, late.LockWithLease(ctxFor(t, 90*time.Second), 10*time.Second) })
	// Its first acquire queues it; the second, once subscribed, finds it
	// queued and returns the lock's PTTL: it then waits for a message or
	// that long.
	redistest.Eventually(t, eventually, "the late Redisson waiter to queue and subscribe", func() bool {
		return lateC.Count("redisson_acquire"+doneSuffix) >= 2
	})
	raw := readRaw(t, hp.b, name)
	if !slices.Contains(raw.queue, late.Field) {
		t.Fatalf("raw queue %v, want the late Redisson waiter in it", raw.queue)
	}
	now, score := serverNowAndScore(t, hp, name, late.Field)
	t.Logf("queue %v; the late Redisson waiter's deadline is %v from now", raw.queue, time.Duration(score-now)*time.Millisecond)
	if heartbeat && score <= now {
		t.Errorf("the late Redisson waiter queued behind a live fairlock waiter with a deadline %v in the past", time.Duration(now-score)*time.Millisecond)
	}

	mustUnlock(t, holder) // grants the first waiter; the dead entries behind it go
	r := await(t, fch, eventually, "the first waiter")
	if r.err != nil {
		t.Fatal(r.err)
	}
	released := time.Now()
	mustUnlock(t, first)
	rl := await(t, lateCh, eventually, fmt.Sprintf("the late Redisson waiter, the lock free since %v", released.Format(time.StampMilli)))
	if rl.err != nil {
		t.Fatal(rl.err)
	}
	t.Logf("the late Redisson waiter took the lock %v after it was freed", rl.at.Sub(released).Round(time.Millisecond))
	if err := late.Unlock(ctxFor(t, eventually)); err != nil {
		t.Fatal(err)
	}
}

// testX11LateBehindRedissonHead: during a long hold, renewed by the
// watchdog, a Redisson lock() queues first; a fairlock waiter queues behind
// it more than the lock's expiry then (the wait Redisson's chain gave the
// Redisson waiter) plus the waiter timeout later; then another Redisson
// lock() queues. When the hold ends, the Redisson head acquires, and
// Redisson's acquire takes its whole wait (300 s) off every deadline: the
// fairlock waiter's must keep room for it, or the head's release purges
// the fairlock waiter as dead and the later Redisson waiter overtakes it.
func testX11LateBehindRedissonHead(t *testing.T, s *suite) {
	const waiterTimeout = 1500 * time.Millisecond
	name := lockName(t)
	// A lease long enough that the watchdog keeps the hold on a loaded
	// machine (the head's deadline counts the lock's TTL when it queued).
	hp := s.newProc(t, lock.WithLease(3*time.Second))
	holder := hp.mutex(t, name)
	mustLock(t, holder)
	var turns turnLog
	java := func(rc *redissonClient, thread int64, who string) <-chan result {
		return turns.java(t, rc.Lock(name, thread), who)
	}
	head := s.newRedisson(t)
	hch := java(head, 1, "Redisson head")
	waitQueued(t, holder, 1)
	headField := head.Lock(name, 1).Field
	// The head's Redisson deadline is its queueing time, plus the lock's
	// TTL then, plus its 300 s wait: queue after that base and a waiter
	// timeout.
	redistest.Eventually(t, eventually, "a waiter timeout past the Redisson head's expected start", func() bool {
		now, score := serverNowAndScore(t, hp, name, headField)
		return score > 0 && now > score-redissonSlack.Milliseconds()+waiterTimeout.Milliseconds()+300
	})
	gm := s.newProc(t, lock.WithWaiterTimeout(waiterTimeout)).mutex(t, name)
	gch := turns.fairlock(t, gm, "fairlock waiter")
	waitQueued(t, holder, 2)
	lch := java(s.newRedisson(t), 2, "later Redisson waiter")
	waitQueued(t, holder, 3)
	mustUnlock(t, holder)
	for _, ch := range []<-chan result{hch, gch, lch} {
		if r := await(t, ch, 30*time.Second, "waiter"); r.err != nil {
			t.Fatal(r.err)
		}
	}
	if want, order := []string{"Redisson head", "fairlock waiter", "later Redisson waiter"}, turns.order(); !slices.Equal(order, want) {
		t.Errorf("acquired in the order %q, want %q: the fairlock waiter was dropped or overtaken", order, want)
	}
}

// turnLog records the order in which owners took the lock.
type turnLog struct {
	mu    sync.Mutex
	names []string
}

// record notes that who took the lock.
func (l *turnLog) record(who string) {
	l.mu.Lock()
	l.names = append(l.names, who)
	l.mu.Unlock()
}

// order returns the owners in the order they took the lock.
func (l *turnLog) order() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.names)
}

// java runs Redisson's lock() (10 s lease) for j in a goroutine: once it
// holds, its turn is recorded as who and it unlocks at once.
func (l *turnLog) java(t *testing.T, j *redissonLock, who string) <-chan result {
	return goAcquire(func() (*lock.Hold, error) {
		ctx := ctxFor(t, 60*time.Second)
		if err := j.LockWithLease(ctx, 10*time.Second); err != nil {
			return nil, err
		}
		l.record(who)
		return nil, j.Unlock(ctx)
	})
}

// fairlock is java for a fairlock Mutex's Lock.
func (l *turnLog) fairlock(t *testing.T, m *lock.Mutex, who string) <-chan result {
	return goAcquire(func() (*lock.Hold, error) {
		ctx := ctxFor(t, 60*time.Second)
		if _, err := m.Lock(ctx); err != nil {
			return nil, err
		}
		l.record(who)
		return nil, m.Unlock(ctx)
	})
}

// testX11MixedSoakDeadlines: three fairlock and three Redisson owners (a
// 1 s wait, the fairlock clients' WithRedissonSlack too) take turns on one
// lock for a few seconds. No waiter's Redisson deadline may run away: each
// waiter's room for the ones ahead is their waits, so the latest deadline
// stays within (queue length + 1) waits of now. Deadlines that drift with
// every turn would keep a Java waiter that died judged alive for as long,
// blocking everyone behind it, and the queue keys alive (X15).
func testX11MixedSoakDeadlines(t *testing.T, s *suite) {
	const (
		soak          = 6 * time.Second
		javaWait      = time.Second
		waiterTimeout = time.Second
	)
	bound := func(queued int64) int64 {
		return (queued+1)*max(javaWait, waiterTimeout).Milliseconds() + slack.Milliseconds()
	}
	name := lockName(t)
	opts := []lock.Option{lock.WithWaiterTimeout(waiterTimeout), lock.WithRedissonSlack(javaWait), lock.WithLease(time.Second)}
	spy := s.newProc(t)
	end := time.Now().Add(soak)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		runs int
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	turn := func() {
		mu.Lock()
		runs++
		mu.Unlock()
	}
	for i := range 3 {
		m := s.newProc(t, opts...).mutex(t, name)
		j := s.newRedisson(t, withRedissonSlack(javaWait)).Lock(name, int64(i+1))
		wg.Add(2)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := m.Lock(ctx)
				if err == nil {
					turn()
					err = m.Unlock(ctx)
				}
				cancel()
				if err != nil {
					fail(fmt.Errorf("fairlock owner: %w", err))
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := j.LockWithLease(ctx, time.Second)
				if err == nil {
					turn()
					err = j.Unlock(ctx)
				}
				cancel()
				if err != nil {
					fail(fmt.Errorf("Redisson owner: %w", err))
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var worst, latest, queued, samples int64
	worst = -1 << 62
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-tick.C:
			if time.Since(end) > 45*time.Second {
				t.Fatal("the soak's owners did not finish")
			}
		}
		rep := evalRaw(t, spy.b, `local t = redis.call('time')
local top = redis.call('zrevrange', KEYS[3], 0, 0, 'WITHSCORES')
return {tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), redis.call('llen', KEYS[2]), string.format('%.0f', tonumber(top[2] or '0'))}`, keysOf(name))
		now, n := rep.Elems[0].Int, rep.Elems[1].Int
		top, err := strconv.ParseInt(rep.Elems[2].Str, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		samples++
		if top == 0 {
			continue
		}
		if excess := top - now - bound(n); excess > worst {
			worst, latest, queued = excess, top-now, n
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, err := range errs {
		t.Error(err)
	}
	t.Logf("%d turns; %d samples; the worst: latest deadline %v from now with %d queued (%v over the bound)",
		runs, samples, time.Duration(latest)*time.Millisecond, queued, time.Duration(worst)*time.Millisecond)
	if worst > 0 {
		t.Errorf("a Redisson deadline ran %v from now with %d queued, %v past (queue length + 1) x %v + %v",
			time.Duration(latest)*time.Millisecond, queued, time.Duration(worst)*time.Millisecond, max(javaWait, waiterTimeout), slack)
	}
}

// testX11StaleLivenessEntry: a fairlock waiter joins with room for every
// Redisson waiter ahead of it, counted from Redisson's deadlines and
// fairlock's liveness entries. Redisson's own scripts remove a fairlock
// owner's queue entry and Redisson deadline but not its liveness entry:
// Redisson's delete() while it waits, or Redisson's purge of it when it
// died first in line. Such a stale liveness entry must not hide a
// Redisson waiter: a fairlock waiter G joining behind Redisson
// waiter J1 (whose Redisson deadline was chained on a time now past) with
// no room for J1 comes out dead to Redisson the moment J1 acquires, since
// J1's acquire takes its whole wait off G's deadline; J1's release then
// purges G, alive, and Redisson waiter J2, queued behind G, takes the lock
// before it.
//
// by_delete: Redisson's delete() while fairlock waiter G0 is queued; G0
// then takes the lock delete() freed (a free lock with no queue: its
// liveness entry is not looked at), J1 queues behind G0's hold of a
// second, and G0's release wakes J1.
//
// by_a_purge: fairlock waiter D, first in line behind a Redisson holder,
// crashes with J1 queued behind it (J1's deadline chained on D's, a
// second ahead); a Redisson script's purge drops D, and the Redisson
// holder's release wakes J1.
func testX11StaleLivenessEntry(t *testing.T, s *suite) {
	t.Run("by_delete", func(t *testing.T) { staleLivenessEntry(t, s, staleByDelete) })
	t.Run("by_a_purge", func(t *testing.T) { staleLivenessEntry(t, s, staleByPurge) })
}

// staleSetup leaves a stale liveness entry on lock name and Redisson
// waiter j1 queued, first in line, and returns the release that wakes j1.
type staleSetup func(t *testing.T, s *suite, name string, spy *lock.Mutex, rc *redissonClient, j1 func()) (release func())

func staleLivenessEntry(t *testing.T, s *suite, setup staleSetup) {
	name := lockName(t)
	sp := s.newProc(t)
	spy := sp.mutex(t, name)
	var (
		turns turnLog
		chans []<-chan result
	)
	rc := s.newRedisson(t)
	release := setup(t, s, name, spy, rc, func() { chans = append(chans, turns.java(t, rc.Lock(name, 2), "J1")) })
	// J1's Redisson deadline is its queueing time plus the wait Redisson's
	// chain gave it (the lock's TTL, or the deadline of the waiter it
	// queued behind) plus its 300 s: G joins once that base has passed, so
	// that without room for J1, J1's acquire makes G dead to Redisson.
	j1 := rc.Lock(name, 2).Field
	redistest.Eventually(t, eventually, "J1's chained wait to pass", func() bool {
		now, score := serverNowAndScore(t, sp, name, j1)
		return score > 0 && now > score-redissonSlack.Milliseconds()+100
	})
	// A heartbeat 10 s apart: G runs no script in the window, which would
	// make its deadline its liveness deadline once first in line.
	const gWaiterTimeout = 30 * time.Second
	gp := s.newProc(t, lock.WithWaiterTimeout(gWaiterTimeout))
	g := gp.mutex(t, name)
	chans = append(chans, turns.fairlock(t, g, "G"))
	waitQueued(t, spy, 2)
	now, score := serverNowAndScore(t, sp, name, g.Owner())
	if left := time.Duration(score-now) * time.Millisecond; left < redissonSlack+gWaiterTimeout-slack {
		t.Errorf("G joined behind Redisson waiter J1 with a Redisson deadline %v from now, want its waiter timeout (%v) plus room for J1's wait (%v)", left, gWaiterTimeout, redissonSlack)
	}
	chans = append(chans, turns.java(t, s.newRedisson(t).Lock(name, 3), "J2"))
	waitQueued(t, spy, 3)
	release()
	for _, ch := range chans {
		if r := await(t, ch, 45*time.Second, "waiter"); r.err != nil {
			t.Fatal(r.err)
		}
	}
	if want, order := []string{"J1", "G", "J2"}, turns.order(); !slices.Equal(order, want) {
		t.Errorf("acquired in the order %q, want %q: J2, queued behind G, overtook it", order, want)
	}
}

// staleByDelete: Redisson's delete() while fairlock waiter G0 is queued
// behind a Redisson holder; G0 takes the lock delete() freed, with a 1 s
// lease, and J1 queues behind it.
func staleByDelete(t *testing.T, s *suite, name string, spy *lock.Mutex, rc *redissonClient, j1 func()) func() {
	if err := rc.Lock(name, 1).LockWithLease(ctxFor(t, eventually), time.Minute); err != nil {
		t.Fatal(err)
	}
	g0 := s.newProc(t, lock.WithWaiterTimeout(30*time.Second), lock.WithLease(time.Second)).mutex(t, name)
	ch := goAcquire(func() (*lock.Hold, error) { return g0.Lock(ctxFor(t, 30*time.Second)) })
	waitQueued(t, spy, 1)
	if err := rc.Lock(name, 1).Delete(ctxFor(t, eventually)); err != nil {
		t.Fatal(err)
	}
	// The head notices the hash gone by its key watch, or at its next
	// heartbeat (10 s).
	if r := await(t, ch, 30*time.Second, "G0 after Redisson's delete()"); r.err != nil {
		t.Fatal(r.err)
	}
	j1()
	waitQueued(t, spy, 1)
	return func() { mustUnlock(t, g0) }
}

// staleByPurge: fairlock waiter D queues behind a Redisson holder, J1
// behind D; D crashes, and once its deadline has passed a Redisson
// tryLock() purges it.
func staleByPurge(t *testing.T, s *suite, name string, spy *lock.Mutex, rc *redissonClient, j1 func()) func() {
	holder := rc.Lock(name, 1)
	if err := holder.LockWithLease(ctxFor(t, eventually), time.Minute); err != nil {
		t.Fatal(err)
	}
	cb := &crashableBackend{capable: s.newBackend(t)}
	d := mutexOf(t, clientOn(t, cb, lock.WithWaiterTimeout(time.Second)), name)
	goAcquire(func() (*lock.Hold, error) { return d.Lock(ctxFor(t, eventually)) })
	waitQueued(t, spy, 1)
	j1()
	waitQueued(t, spy, 2)
	cb.crashed.Store(true)
	sp := s.newProc(t)
	redistest.Eventually(t, eventually, "D's deadline to pass", func() bool {
		now, score := serverNowAndScore(t, sp, name, d.Owner())
		return score > 0 && now > score
	})
	if held, err := rc.Lock(name, 9).TryLockOnce(ctxFor(t, eventually), time.Second); err != nil || held {
		t.Fatalf("Redisson tryLock() = %t, %v; want false (held)", held, err)
	}
	if raw := readRaw(t, sp.b, name); slices.Contains(raw.queue, d.Owner()) {
		t.Fatalf("raw queue %v after Redisson's purge, want D dropped", raw.queue)
	}
	return func() {
		if err := holder.Unlock(ctxFor(t, eventually)); err != nil {
			t.Fatal(err)
		}
	}
}
