package conformance

// Regression cases for defects found in the scripts after release: each
// failed on the scripts as they were, and names the rule it checks.

import (
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
)

func defectCases() []testCase {
	return []testCase{
		{name: "B6_ReenteredHandOverRunsOutOnTime", run: testB6ReenteredHandOver},
	}
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
