package conformance

import (
	"fmt"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
)

// One-message hand-over (B4): a release grants the lock to a fairlock
// waiter at the head and says so in the wake-up, so the waiter holds
// without another round trip; a grant message from the past never makes
// anyone believe it holds.
func handOverCases() []testCase {
	return []testCase{
		{name: "B4_HandOverInOneMessage", run: testB4OneMessage},
		{name: "X12_StaleGrantMessageGrantsNothing", run: testX12StaleGrant},
		{name: "X12_SpentGrantMessageGrantsNothing", run: testX12SpentGrant},
		{name: "B6_HandedOverLeaseRunsOutOnTime", run: testB6HandedOverLease},
		{name: "X12_ShortExtendOfAHandOverKeepsTheLease", run: testX12ShortExtendOfHandOver},
	}
}

// testB4OneMessage: the waiter (without the key watch, whose invalidation
// races the message) is granted the lock by the holder's Unlock and
// returns without sending an acquire of its own; its client then takes the
// grant up with a renewal, and the hold lasts. On a loaded machine a
// hand-over may still go through an attempt (a heartbeat due at that
// moment), so up to five hand-overs are tried and one must be a single
// message.
func testB4OneMessage(t *testing.T, s *suite) {
	name := lockName(t)
	holder := s.newProc(t).mutex(t, name)
	wp := withoutKeyWatch(s.newProc(t))
	waiter := wp.mutex(t, name)
	var attempts []int
	for range 5 {
		mustLock(t, holder)
		var before int
		renews := wp.b.count("renew")
		h := handOver(t, holder, wp, waiter, slack, "waiter after unlock", func() {
			before = wp.b.count("acquire")
			mustUnlock(t, holder)
		})
		n := wp.b.count("acquire") - before
		attempts = append(attempts, n)
		if n == 0 {
			redistest.Eventually(t, eventually, "the grant to be taken up (renewed)", func() bool {
				return wp.b.count("renew") > renews
			})
			if c, _ := waiter.HoldCount(ctxFor(t, eventually)); c != 1 {
				t.Errorf("hold count %d after the hand-over, want 1", c)
			}
			stillHeld(t, h, "after the hand-over")
			mustUnlock(t, waiter)
			return
		}
		mustUnlock(t, waiter)
	}
	t.Errorf("acquire calls by the waiter after each unlock: %v, want 0 at least once: the grant never came in the wake-up", attempts)
}

// testX12StaleGrant: a grant message for this owner that is older than the
// attempt that queued it (an earlier call's, delivered late) is ignored:
// the waiter keeps waiting instead of believing it holds a lock the server
// gives to someone else.
func testX12StaleGrant(t *testing.T, s *suite) {
	name := lockName(t)
	holder := s.newProc(t).mutex(t, name)
	wp := withoutKeyWatch(s.newProc(t))
	waiter := wp.mutex(t, name)
	mustLock(t, holder)
	// A grant "from the past": server time 1 ms after the epoch.
	r := fakeGrantIgnored(t, holder, wp, waiter, `return redis.call('`+wakeCmd(wp.b)+`', KEYS[1], ARGV[1])`,
		"grant:999999999:1", "the waiter", "a stale grant message")
	if r.h.Token() == 999999999 {
		t.Error("the waiter holds with the stale grant's token")
	}
	mustUnlock(t, waiter)
}

// testX12SpentGrant: a grant message for a token this owner has already
// taken up and released - what another call of the same owner (a Mutex
// shared by goroutines) sees when the message reaches it late - is
// ignored, however recent its server time: that call keeps waiting
// instead of believing it holds a lock the server has given to someone
// else since.
func testX12SpentGrant(t *testing.T, s *suite) {
	name := lockName(t)
	holder := s.newProc(t).mutex(t, name)
	wp := withoutKeyWatch(s.newProc(t))
	waiter := wp.mutex(t, name)
	mustLock(t, holder)
	h := handOver(t, holder, wp, waiter, slack, "the owner's first call after unlock", func() { mustUnlock(t, holder) })
	spent := h.Token()
	mustUnlock(t, waiter)

	mustLock(t, holder)
	// The spent grant announced again, with the server's time now: newer
	// than the call's latest attempt, so only the token tells it is spent.
	r := fakeGrantIgnored(t, holder, wp, waiter, `local t = redis.call('time')
return redis.call('`+wakeCmd(wp.b)+`', KEYS[1], ARGV[1] .. ':' .. string.format('%.0f', t[1] * 1000000 + t[2]))`,
		fmt.Sprintf("grant:%d", spent), "the owner's second call", fmt.Sprintf("the spent grant %d while another owner holds", spent))
	if r.h.Token() <= spent {
		t.Errorf("the second call holds with token %d, not newer than the spent grant's %d", r.h.Token(), spent)
	}
	mustUnlock(t, waiter)
}

// fakeGrantIgnored queues waiter (on wp) behind holder, which holds the
// lock, publishes payload on the waiter's channel with the script src
// (KEYS[1] the channel, ARGV[1] payload), and fails the test if the
// waiter returns on it; then holder unlocks, and it returns the waiter's
// real acquisition. who and what name the waiter and the message in
// failures.
func fakeGrantIgnored(t *testing.T, holder *lock.Mutex, wp *proc, waiter *lock.Mutex, src, payload, who, what string) result {
	t.Helper()
	ch := goAcquire(func() (*lock.Hold, error) { return waiter.Lock(ctxFor(t, eventually)) })
	waitQueued(t, holder, 1)
	settled(t, wp)
	channel := fmt.Sprintf("redisson_lock__channel:{%s}:%s", waiter.Keys()[0], waiter.Owner())
	evalRaw(t, wp.b, src, []string{channel}, payload)
	select {
	case r := <-ch:
		t.Fatalf("%s returned (token %v, %v) on %s", who, r.h.Token(), r.err, what)
	case <-time.After(200 * time.Millisecond): // the message had time to arrive and be judged
	}
	mustUnlock(t, holder)
	r := await(t, ch, eventually, who+" after the real hand-over")
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r
}

// testB6HandedOverLeaseRunsOutOnTime: a waiter handed the lock holds it for
// the lease it asked for, not for the hand-over's provisional expiry
// (twice its liveness left: 6.7 to 10 s with the default waiter timeout) -
// also when it extends the hold before its client confirmed the grant.
// When it never unlocks, its hold ends at the lease, the server frees the
// lock about then, and the next waiter, told the new expiry (its own
// heartbeat is 10 s apart, and it has no key watch), takes it at once.
func testB6HandedOverLease(t *testing.T, s *suite) {
	const lease = 500 * time.Millisecond
	for _, extend := range []bool{false, true} {
		name := lockName(t)
		holder := s.newProc(t).mutex(t, name)
		wp := s.newProc(t)
		waiter := wp.mutex(t, name)
		np := withoutKeyWatch(s.newProc(t, lock.WithWaiterTimeout(30*time.Second)))
		next := np.mutex(t, name)
		mustLock(t, holder)
		ch := goAcquire(func() (*lock.Hold, error) { return waiter.TryLockWithLease(ctxFor(t, eventually), eventually, lease) })
		waitQueued(t, holder, 1)
		settled(t, wp)
		nch := goAcquire(func() (*lock.Hold, error) { return next.Lock(ctxFor(t, 30*time.Second)) })
		waitQueued(t, holder, 2)
		settled(t, np)
		mustUnlock(t, holder)
		r := await(t, ch, eventually, "the waiter after unlock")
		if r.err != nil {
			t.Fatal(r.err)
		}
		granted := time.Now()
		if extend {
			if err := waiter.Extend(ctxFor(t, eventually), r.h, lease); err != nil {
				t.Fatalf("Extend right after the hand-over: %v", err)
			}
		}
		ended := awaitDone(t, r.h, lease+slack, "the waiter's hold, never unlocked, at its lease")
		rn := await(t, nch, slack, "the next waiter once the lease ran out")
		if rn.err != nil {
			t.Fatal(rn.err)
		}
		t.Logf("lease %v, extend %t: hold ended %v after the hand-over, next waiter holds %v after it", lease, extend,
			ended.Sub(granted).Round(time.Millisecond), time.Since(granted).Round(time.Millisecond))
		mustUnlock(t, next)
	}
}

// testX12ShortExtendOfHandOver: a waiter handed the lock with a 10 s lease
// extends it by 200 ms at once, before its client confirmed the grant.
// The server takes the grant up with the longer lease (B6), and the hold
// counts it too: it does not end as lost while the server still holds
// the lock for it (its firm deadline alone, a waiter timeout of 1 s, has
// long passed).
func testX12ShortExtendOfHandOver(t *testing.T, s *suite) {
	name := lockName(t)
	holder := s.newProc(t).mutex(t, name)
	wp := s.newProc(t, lock.WithWaiterTimeout(time.Second))
	waiter := wp.mutex(t, name)
	mustLock(t, holder)
	ch := goAcquire(func() (*lock.Hold, error) { return waiter.LockWithLease(ctxFor(t, eventually), 10*time.Second) })
	waitQueued(t, holder, 1)
	settled(t, wp)
	mustUnlock(t, holder)
	r := await(t, ch, eventually, "the waiter after unlock")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := waiter.Extend(ctxFor(t, eventually), r.h, 200*time.Millisecond); err != nil {
		t.Fatalf("Extend right after the hand-over: %v", err)
	}
	select {
	case <-r.h.Done():
		ttl, _ := holder.RemainTTL(ctxFor(t, eventually))
		t.Fatalf("the hold ended (%v) while the server keeps the lock %v more", r.h.Err(), ttl)
	case <-time.After(1500 * time.Millisecond): // past the firm deadline and the extension
	}
	mustUnlock(t, waiter)
}
