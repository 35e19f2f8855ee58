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
	ch := goAcquire(func() (*lock.Hold, error) { return waiter.Lock(ctxFor(t, eventually)) })
	waitQueued(t, holder, 1)
	settled(t, wp)
	// A grant "from the past": server time 1 ms after the epoch.
	channel := fmt.Sprintf("redisson_lock__channel:{%s}:%s", name, waiter.Owner())
	evalRaw(t, wp.b, `return redis.call('publish', KEYS[1], ARGV[1])`, []string{channel}, "grant:999999999:1")
	select {
	case r := <-ch:
		t.Fatalf("the waiter returned (%v, %v) on a stale grant message", r.h.Token(), r.err)
	case <-time.After(200 * time.Millisecond): // the message had time to arrive and be judged
	}
	mustUnlock(t, holder)
	r := await(t, ch, eventually, "waiter after the real hand-over")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.h.Token() == 999999999 {
		t.Error("the waiter holds with the stale grant's token")
	}
	mustUnlock(t, waiter)
}
