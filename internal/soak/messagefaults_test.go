package soak

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/redistest"
	"github.com/redis/go-redis/v9"
)

// The checkers with faults on single messages: a lost reply, a request
// held back and a burst of notices cut nobody off, so they excuse no
// overtaking, and a burst excuses no late notice; the faults that do cut
// a client off still excuse both.

// TestCheckFIFOMessageFaultsExcuseNothing: a waiter overtaken while its
// client had a reply lost or a request held back is a violation (issue 46
// defect 1's shape: the owner's other call lost its grant to the waiter
// behind); a partition of its client still excuses it.
func TestCheckFIFOMessageFaultsExcuseNothing(t *testing.T) {
	for _, c := range []struct {
		kind FaultKind
		want int
	}{
		{FaultReplyLost, 1},
		{FaultHoldBack, 1},
		{FaultNoticeBurst, 1},
		{FaultPartition, 0},
	} {
		t.Run(string(c.kind), func(t *testing.T) {
			h := NewHistory(1)
			// S's Lock queued at 20 ms; X, called later, is granted at 200
			// ms, before S's grant (a later token).
			s := hold("L", "s", 6, 400*msec, 500*msec)
			s.Client = "cs"
			h.AddHold(s)
			s.Called = 10 * msec
			h.Add(&Op{Kind: KindLock, Lock: "L", Owner: "s", Client: "cs", Call: 10 * msec, Queued: 20 * msec, Return: 400 * msec, Hold: s, New: true})
			h.Add(&Op{Kind: KindTryWait, Lock: "L", Owner: "s", Client: "cs", Call: 30 * msec, Queued: 35 * msec, Return: 150 * msec, Wait: 100 * msec, Limit: time.Second,
				Err: "lock: server unavailable: read tcp: i/o timeout", Unavail: true})
			acquire(h, hold("L", "x", 5, 200*msec, 300*msec), 100*msec)
			h.AddFault(Fault{Kind: c.kind, Target: "cs", Start: 120 * msec, End: 150 * msec})
			if got := checks(h)["fifo"]; got != c.want {
				t.Errorf("%d FIFO violations, want %d", got, c.want)
			}
		})
	}
}

// TestCheckFIFOSharedOwnerCalls: two calls of one owner at once are one
// owner's: the second's grant is a re-entry, and neither overtakes the
// other, whichever returns first.
func TestCheckFIFOSharedOwnerCalls(t *testing.T) {
	h := NewHistory(1)
	s := hold("L", "s", 3, 40*msec, 300*msec)
	s.Called = 5 * msec
	h.AddHold(s)
	h.Add(&Op{Kind: KindTryWait, Lock: "L", Owner: "s", Client: s.Client, Call: 5 * msec, Queued: 8 * msec, Return: 40 * msec, Wait: 500 * msec, Limit: 2 * time.Second, Hold: s, New: true})
	h.Add(&Op{Kind: KindLock, Lock: "L", Owner: "s", Client: s.Client, Call: 2 * msec, Queued: 10 * msec, Return: 50 * msec, Limit: time.Second, Hold: s})
	h.Add(&Op{Kind: KindUnlock, Lock: "L", Owner: "s", Call: 200 * msec, Return: 210 * msec, Hold: s})
	releaseHold(h, s, 290*msec, 300*msec)
	acquire(h, hold("L", "x", 4, 310*msec, 400*msec), 20*msec)
	if got := checks(h); len(got) != 0 {
		t.Errorf("a shared owner's two calls: violations %v", got)
	}
	// The owner's Lock still waited when X was granted: X overtook it.
	h.Add(&Op{Kind: KindLock, Lock: "L", Owner: "s", Client: s.Client, Call: 250 * msec, Queued: 255 * msec, Return: 900 * msec, Limit: 600 * msec,
		Err: "context deadline exceeded", Canceled: true})
	if got := checks(h)["fifo"]; got != 0 {
		t.Errorf("X queued before the owner's third call: %d FIFO violations, want 0", got)
	}
}

// TestCheckNoticesBurstExcusesNothing: a hold told late of a ForceUnlock
// while its client's subscriptions were flooded is a violation (a burst
// summarises notices, it loses none); a partition of the client is not.
func TestCheckNoticesBurstExcusesNothing(t *testing.T) {
	for _, c := range []struct {
		kind FaultKind
		want int
	}{
		{FaultNoticeBurst, 1},
		{FaultPartition, 0},
	} {
		t.Run(string(c.kind), func(t *testing.T) {
			h := NewHistory(1)
			late := hold("L", "a", 1, 10*msec, 3*time.Second)
			acquire(h, late, 0)
			h.Add(&Op{Kind: KindForceUnlock, Lock: "L", Call: 100 * msec, Return: 110 * msec, Released: true})
			h.AddFault(Fault{Kind: c.kind, Target: late.Client, Start: 90 * msec, End: 120 * msec})
			if got := checks(h)["notice"]; got != c.want {
				t.Errorf("%d notice violations, want %d", got, c.want)
			}
		})
	}
}

// TestCheckExclusionBurstExcusesNothing: a grant reply in flight when
// every lock was force-unlocked, whose holder is told only at the
// watchdog's tick (issue 46 defect 2's shape), while another owner takes
// the lock: with a burst on the holder's client it is a violation.
func TestCheckExclusionBurstExcusesNothing(t *testing.T) {
	for _, c := range []struct {
		kind FaultKind
		want int
	}{
		{FaultNoticeBurst, 1},
		{FaultReset, 0},
	} {
		t.Run(string(c.kind), func(t *testing.T) {
			h := NewHistory(1)
			a := hold("L", "a", 1, 100*msec, 9*time.Second)
			acquire(h, a, 10*msec)
			h.Add(&Op{Kind: KindForceUnlock, Lock: "L", Call: 50 * msec, Return: 60 * msec, Released: true})
			acquire(h, hold("L", "b", 2, 300*msec, 400*msec), 200*msec)
			h.AddFault(Fault{Kind: c.kind, Target: a.Client, Start: 40 * msec, End: 70 * msec})
			if got := checks(h)["exclusion"]; got != c.want {
				t.Errorf("%d exclusion violations, want %d", got, c.want)
			}
		})
	}
}

// TestCheckErrorsOwnerWaitsSibling: a call of a shared owner that gave
// up while its sibling call's attempt was in flight may say the server
// was unavailable (the sibling holds the owner's gate) with no fault near;
// the same error with no sibling in flight, or after a long wait while
// the sibling had its reply, is a violation.
func TestCheckErrorsOwnerWaitsSibling(t *testing.T) {
	for _, c := range []struct {
		name        string
		sibling     bool
		call        time.Duration // the failing call's
		siblingSeen time.Duration // the sibling's first reply (queued)
		want        int
	}{
		{"sibling's attempt still in flight", true, 100 * msec, 1500 * msec, 0},
		{"a wait shorter than a round trip", true, 900 * msec, 20 * msec, 0},
		{"a long wait, the sibling answered", true, 100 * msec, 20 * msec, 1},
		{"no sibling", false, 100 * msec, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := NewHistory(1)
			if c.sibling {
				h.Add(&Op{Kind: KindLock, Lock: "L", Owner: "s", Client: "c", Call: 10 * msec, Queued: c.siblingSeen, Return: 3 * time.Second, Limit: 3 * time.Second,
					Err: "context deadline exceeded", Canceled: true})
			}
			h.Add(&Op{Kind: KindTryWait, Lock: "L", Owner: "s", Client: "c", Call: c.call, Return: time.Second, Wait: time.Second - c.call, Limit: 2 * time.Second,
				Unavail: true, Err: "lock: server unavailable: " + ownerWaits + " (wait ran out)"})
			if got := checks(h)["errors"]; got != c.want {
				t.Errorf("%d errors violations, want %d", got, c.want)
			}
		})
	}
}

// TestCheckFIFOSharedOwnerQueuePosition: a shared owner's call granted
// the lock from the queue entry its sibling call made is not an
// overtaking of a waiter that queued after the sibling (seed
// 48283508364424: a Lock that joined its TryLock's entry, and a pair
// granted one hold, where the call that queued was the re-entry); a call
// made after its sibling returned has no such entry.
func TestCheckFIFOSharedOwnerQueuePosition(t *testing.T) {
	for _, c := range []struct {
		name      string
		sibling   time.Duration // when S's first call returned
		reentered bool          // both of S's calls got the hold
		want      int
	}{
		{"sibling gave up while the other was in flight", 100 * msec, false, 0},
		{"sibling granted the same hold", 130 * msec, true, 0},
		{"sibling returned before the other began", 40 * msec, false, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := NewHistory(1)
			s := hold("L", "s", 5, 120*msec, 300*msec)
			first := &Op{Kind: KindTryWait, Lock: "L", Owner: "s", Client: s.Client, Call: 5 * msec, Queued: 10 * msec, Return: c.sibling, Wait: 90 * msec, Limit: time.Second}
			if c.reentered {
				first.Hold = s
			} else {
				first.Err, first.NotAcq = "lock: not acquired", true
			}
			h.Add(first)
			acquire(h, s, 50*msec) // S's Lock: no queueing of its own, the new hold at 120 ms
			waiterGranted(h, 20*msec, 400*msec)
			if got := checks(h)["fifo"]; got != c.want {
				t.Errorf("%d FIFO violations, want %d", got, c.want)
			}
		})
	}
}

// TestMessageFaultsOnARealClient: each message-level fault takes a real
// request of a working owner (or floods a real client's channels), is
// recorded with the request it took, and the history the owners made
// meanwhile keeps every promise.
func TestMessageFaultsOnARealClient(t *testing.T) {
	srv := redistest.Start(t)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer raw.Close()
	w := newWorkload(Config{Seed: 1, Lease: 15 * time.Second})
	c := w.addClient(t, Adapters[0], "rueidis#0", srv.Addr(), nil)
	for k := range 2 {
		o := &goOwner{id: int64(100 + k), name: sharedNames[0], c: c, h: w.h, lease: 15 * time.Second, rnd: rand.New(rand.NewPCG(1, uint64(k)))}
		w.owners = append(w.owners, o)
		w.loop(o.step)
	}
	n := w.messageFaults(t, raw, &adminActor{h: w.h, clients: w.clients, raw: raw, long: &w.long}, false)
	var got []Fault
	for _, kind := range []FaultKind{FaultReplyLost, FaultReplyLost, FaultHoldBack} {
		f, ok := n.armOne(c, kind)
		if !ok {
			t.Fatalf("no request took a %s fault in %v", kind, armWithin)
		}
		got = append(got, f)
	}
	got = append(got, n.burst(c))
	w.finish()
	for _, f := range got {
		if f.Target != c.label || f.Start <= 0 || f.End < f.Start || f.Detail == "" {
			t.Errorf("fault %+v: want its target, times and what it took", f)
		}
		t.Logf("%s: %s", f.Kind, f.Detail)
		w.h.AddFault(f)
	}
	if !strings.Contains(got[3].Detail, "fairlock_client:") || !strings.Contains(got[3].Detail, "held back") {
		t.Errorf("the burst %q: want the client's channel flooded across an acquire's held-back reply", got[3].Detail)
	}
	if r := Check(w.h, DefaultBounds(15*time.Second)); len(r.Violations) > 0 {
		t.Errorf("violations: %v", r.Violations)
	}
}

// TestCheckNoticesEndedInFlight: a hold whose grant a ForceUnlock
// overlapped (its reply on its way), which nothing else ended, must be
// told soon after its reply came: one that lived on until the watchdog's
// tick (issue 46 defect 2) is a violation; one told at once, one with a
// fault on its client, one released (the ForceUnlock ran before the
// grant) and one with a lease of its own are not.
func TestCheckNoticesEndedInFlight(t *testing.T) {
	lost := "lock: lock lost: no longer held (lease ran out, force-unlocked or deleted)"
	for _, c := range []struct {
		name  string
		done  time.Duration
		why   string
		lease time.Duration
		fault bool
		want  int
	}{
		{"told at the tick", 5 * time.Second, lost, 0, false, 1},
		{"told at once", 120 * msec, lost, 0, false, 0},
		{"a partition meanwhile", 5 * time.Second, lost, 0, true, 0},
		{"released", 5 * time.Second, "lock: released", 0, false, 0},
		// Another owner acquires the lock too: the ForceUnlock may have
		// removed another grant, and this hold run out by its lease.
		{"a lease of its own, a shared lock", 5 * time.Second, lost, 3 * time.Second, false, 0},
		// The lock's only owner, nothing of its held before: the
		// ForceUnlock removed this hold's grant, and its lease ran on
		// untold (seed 95953617200653: a notice burst's held-back
		// LockWithLease on a private lock, lost 435 ms after its reply).
		{"a lease of its own, the lock's only owner", 5 * time.Second, lost, 3 * time.Second, false, 1},
		{"the ForceUnlock ended an older hold", 5 * time.Second, lost, 0, false, 0},
		// Told at once of a ForceUnlock much later, whose reply was lost:
		// it may have run, and ended the hold (the simulation's seeds
		// 30859714442993 and 30859714442732).
		{"a failed ForceUnlock ended it later", 5 * time.Second, "lock: lock lost: lock force-unlocked or deleted by another client", 0, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := NewHistory(1)
			a := hold("L", "a", 1, 100*msec, 0)
			a.Lease = c.lease
			acquire(h, a, 10*msec)
			a.End(c.done, errors.New(c.why))
			h.Add(&Op{Kind: KindForceUnlock, Lock: "L", Call: 40 * msec, Return: 60 * msec, Released: true})
			if c.name == "the ForceUnlock ended an older hold" {
				// Its holder was told it was forced at once; a hold
				// handed over after it (a Redisson thread's, unrecorded
				// here) passed the lock on to a.
				old := hold("L", "z", 0, 5*msec, 0)
				old.Token = a.Token - 1
				acquire(h, old, 1*msec)
				old.End(61*msec, errors.New("lock: lock lost: lock force-unlocked or deleted by another client"))
			}
			if c.name == "a failed ForceUnlock ended it later" {
				h.Add(&Op{Kind: KindForceUnlock, Lock: "L", Call: c.done - msec, Return: c.done, Err: "lock: server unavailable: EOF", Unavail: true})
			}
			if strings.HasSuffix(c.name, "a shared lock") {
				h.Add(&Op{Kind: KindTryOnce, Lock: "L", Owner: "b", Client: "cb", Call: 5 * msec, Return: 6 * msec, Err: "lock: not acquired", NotAcq: true})
			}
			if c.fault {
				h.AddFault(Fault{Kind: FaultPartition, Target: a.Client, Start: 2 * time.Second, End: 3 * time.Second})
			}
			if got := checks(h)["notice"]; got != c.want {
				t.Errorf("%d notice violations, want %d", got, c.want)
			}
		})
	}
}

// TestSharedFaultAimsAtCallsAtOnce: while a shared owner's calls at once
// are in flight (another owner holding the lock meanwhile), the nemesis' shared fault loses the replies to that
// owner's attempts on its lock (and only that lock's), and records the
// grants among them. (The history is not judged here: on code with issue
// 46 defect 1 this very fault may make the overtaking it looks for.)
func TestSharedFaultAimsAtCallsAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer raw.Close()
	w := newWorkload(Config{Seed: 1, Lease: 15 * time.Second})
	c := w.addClient(t, Adapters[0], "rueidis#0", srv.Addr(), nil)
	s := &goOwner{id: 100, name: sharedNames[0], c: c, h: w.h, lease: 15 * time.Second, sharing: &w.sharing,
		rnd: rand.New(rand.NewPCG(1, 0))}
	// Another owner of the lock, so that the shared owner's calls wait
	// together.
	x := &goOwner{id: 101, name: sharedNames[0], c: c, h: w.h, lease: 15 * time.Second, rnd: rand.New(rand.NewPCG(1, 1))}
	w.owners = append(w.owners, s, x)
	w.loop(x.step)
	w.loop(func(ctx context.Context) {
		if m, err := s.mutex(); err == nil {
			s.sharedCalls(ctx, m)
			s.release(ctx)
		}
	})
	n := w.messageFaults(t, raw, &adminActor{h: w.h, clients: w.clients, raw: raw, long: &w.long}, false)
	var f Fault
	ok := false
	for end := time.Now().Add(20 * time.Second); !ok && time.Now().Before(end); {
		if f, ok = n.sharedFault(); !ok {
			time.Sleep(10 * time.Millisecond) // bounded polling: a turn of the seed's, or calls in flight
		}
	}
	w.finish()
	if !ok {
		t.Fatal("no shared fault in 20 s of calls at once")
	}
	t.Logf("%s: %s", f.Kind, f.Detail)
	if f.Kind != FaultReplyLost || f.Target != c.label || !strings.HasPrefix(f.Detail, "acquire "+sharedNames[0]+",") ||
		!strings.Contains(f.Detail, "aimed at a pair of calls at once") {
		t.Errorf("fault %+v: want the replies to the shared owner's acquires on %s lost", f, sharedNames[0])
	}
	for _, g := range f.Lost {
		if g.Lock != sharedNames[0] || g.Token <= 0 || g.Ran < g.Sent {
			t.Errorf("lost grant %+v", g)
		}
	}
}

// TestUnwatched: the notice burst's preferred client is one whose adapter
// watches no keys, when the run has one.
func TestUnwatched(t *testing.T) {
	watching := &goClient{label: "rueidis#0", adapter: Adapters[0]}
	blind := &goClient{label: "rueidis-nocache#1", adapter: Adapters[1]}
	if got := (&messageFaults{clients: []*goClient{watching, blind}}).unwatched(); got != blind {
		t.Errorf("unwatched: %v, want %s", got, blind.label)
	}
	if got := (&messageFaults{clients: []*goClient{watching}}).unwatched(); got != nil {
		t.Errorf("unwatched with every client watching: %v, want none", got.label)
	}
}

// TestFloodUntilForced: a flood goes on round after round until the
// force-unlocks end, and one round more, so their notices come in the
// middle of it; bounded when they never end.
func TestFloodUntilForced(t *testing.T) {
	srv := redistest.Start(t)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer raw.Close()
	n := &messageFaults{pub: raw}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan struct{})
	close(done)
	if rounds, err := n.flood(ctx, []channel{{name: "ch"}}, done); err != nil || rounds != 2 {
		t.Errorf("forced already: %d rounds (%v), want 2", rounds, err)
	}
	if rounds, err := n.flood(ctx, []channel{{name: "ch"}}, make(chan struct{})); err != nil || rounds != maxFloodRounds {
		t.Errorf("never forced: %d rounds (%v), want %d", rounds, err, maxFloodRounds)
	}
}

// TestCheckFIFOSharedOwnerEntryKeptByAnEarlierCall: a shared owner's
// TryLock that gave up while an earlier Lock of the owner still waited
// leaves the owner's entry to that Lock, and a third call of the owner
// granted from it overtakes no waiter that queued after the Lock (the
// simulation, seed 902 with -sim.shared: the check stopped at the TryLock's
// clean end and took the third call for a newcomer). When the first call
// too had ended cleanly before the third began, the owner's entry went
// with it.
func TestCheckFIFOSharedOwnerEntryKeptByAnEarlierCall(t *testing.T) {
	for _, c := range []struct {
		name  string
		first *Op
		want  int
	}{
		{"the Lock still waited", &Op{Kind: KindLock, Return: 200 * msec, Limit: 195 * msec, Err: "context deadline exceeded", Canceled: true}, 0},
		{"the Lock's outcome unknown, after the TryLock's end", &Op{Kind: KindLock, Return: 70 * msec, Limit: 65 * msec, Err: "context deadline exceeded", Canceled: true}, 0},
		{"a TryLock that had given up", &Op{Kind: KindTryWait, Return: 70 * msec, Wait: 65 * msec, Limit: time.Second, Err: "lock: not acquired", NotAcq: true}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := NewHistory(1)
			first := c.first
			first.Lock, first.Owner, first.Client, first.Call, first.Queued = "L", "s", "cs", 5*msec, 10*msec
			h.Add(first)
			h.Add(&Op{Kind: KindTryWait, Lock: "L", Owner: "s", Client: "cs", Call: 30 * msec, Return: 60 * msec, Wait: 30 * msec, Limit: time.Second,
				Err: "lock: not acquired", NotAcq: true})
			s := hold("L", "s", 5, 120*msec, 300*msec)
			s.Client = "cs"
			acquire(h, s, 80*msec) // the owner's third call: granted at 120 ms, no queueing of its own
			waiterGranted(h, 20*msec, 400*msec)
			if got := checks(h)["fifo"]; got != c.want {
				t.Errorf("%d FIFO violations, want %d", got, c.want)
			}
		})
	}
}

// TestCheckFIFOSharedOwnerChainPastAGiveUp: the chain of a shared owner's
// calls reaches back past a sibling's clean give-up through calls still in
// flight when the chain began, however long ago they were made (the
// simulation, seed 501 with -sim.shared: a search bounded by the give-up
// stopped short of the owner's first Lock, which had queued before the
// waiter).
func TestCheckFIFOSharedOwnerChainPastAGiveUp(t *testing.T) {
	h := NewHistory(1)
	h.Add(&Op{Kind: KindLock, Lock: "L", Owner: "s", Client: "cs", Call: 5 * msec, Queued: 6 * msec, Return: 70 * msec, Limit: 65 * msec,
		Err: "context deadline exceeded", Canceled: true})
	s := hold("L", "s", 5, 110*msec, 300*msec)
	s.Client, s.Called = "cs", 100*msec
	h.AddHold(s)
	h.Add(&Op{Kind: KindLockLease, Lock: "L", Owner: "s", Client: "cs", Call: 30 * msec, Return: 111 * msec, Limit: time.Second, Hold: s}) // the re-entry
	h.Add(&Op{Kind: KindTryWait, Lock: "L", Owner: "s", Client: "cs", Call: 85 * msec, Return: 95 * msec, Wait: 10 * msec, Limit: time.Second,
		Err: "lock: not acquired", NotAcq: true})
	h.Add(&Op{Kind: KindLockLease, Lock: "L", Owner: "s", Client: "cs", Call: 100 * msec, Return: 110 * msec, Limit: time.Second, Hold: s, New: true})
	waiterGranted(h, 20*msec, 400*msec)
	if got := checks(h)["fifo"]; got != 0 {
		t.Errorf("%d FIFO violations, want 0: the owner's first Lock queued before w", got)
	}
}

// TestCheckFIFOSharedOwnerQueuedAfterItsOwnHold: a shared owner's Lock
// made before its sibling was granted a hold, kept back meanwhile (the
// owner's gate), queues anew after that hold's release; a third call of
// the owner granted from that entry overtakes no waiter that queued after
// it, however early the Lock was made (the simulation with -sim.shared,
// seed 666) - and does overtake one that queued before the owner's hold.
func TestCheckFIFOSharedOwnerQueuedAfterItsOwnHold(t *testing.T) {
	for _, c := range []struct {
		name   string
		queued time.Duration // when w queued
		want   int
	}{
		{"w queued after the owner's entry", 120 * msec, 0},
		{"w queued before the owner's hold", 20 * msec, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := NewHistory(1)
			first := hold("L", "s", 4, 50*msec, 100*msec)
			first.Client = "cs"
			acquire(h, first, 10*msec)
			releaseHold(h, first, 95*msec, 100*msec)
			second := hold("L", "s", 5, 250*msec, 400*msec)
			second.Client, second.Called = "cs", 150*msec
			h.AddHold(second)
			h.Add(&Op{Kind: KindLock, Lock: "L", Owner: "s", Client: "cs", Call: 5 * msec, Queued: 101 * msec, Return: 251 * msec, Limit: time.Second, Hold: second})
			h.Add(&Op{Kind: KindLockLease, Lock: "L", Owner: "s", Client: "cs", Call: 150 * msec, Return: 250 * msec, Limit: time.Second, Hold: second, New: true})
			waiterGranted(h, c.queued, 500*msec)
			if got := checks(h)["fifo"]; got != c.want {
				t.Errorf("%d FIFO violations, want %d", got, c.want)
			}
		})
	}
}

// waiterGranted records w's Lock of L, called 5 ms before it queued at
// queued and granted at granted (token 6), its hold released 100 ms later.
func waiterGranted(h *History, queued, granted time.Duration) {
	w := hold("L", "w", 6, granted, granted+100*msec)
	w.Called = queued - 5*msec
	h.AddHold(w)
	h.Add(&Op{Kind: KindLock, Lock: "L", Owner: "w", Client: "cw", Call: w.Called, Queued: queued, Return: granted, Limit: time.Second, Hold: w, New: true})
}

// TestCheckFIFOLeaveHeldBackKeepsThePlace: an owner's TryLock told "not
// acquired" after it queued, its leave's request failing as it returned (a
// reset of its client's connections), leaves its entry in the queue; the
// owner's next call, within the waiter timeout, is granted from that entry
// and overtakes no waiter that queued after it (the simulation with
// -sim.shared, seeds 1214, 2040, 2138). With no fault, the entry went with
// the give-up.
func TestCheckFIFOLeaveHeldBackKeepsThePlace(t *testing.T) {
	for _, c := range []struct {
		name  string
		fault bool
		want  int
	}{
		{"the leave failed as the TryLock returned", true, 0},
		{"no fault", false, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := NewHistory(1)
			h.Add(&Op{Kind: KindTryWait, Lock: "L", Owner: "s", Client: "cs", Call: 5 * msec, Queued: 10 * msec, Return: 100 * msec, Wait: 95 * msec, Limit: time.Second,
				Err: "lock: not acquired", NotAcq: true})
			if c.fault {
				h.AddFault(Fault{Kind: FaultReset, Target: "cs", Start: 99 * msec, End: 99 * msec})
			}
			s := hold("L", "s", 5, 250*msec, 300*msec)
			s.Client = "cs"
			acquire(h, s, 150*msec) // the owner's next call: no queueing of its own
			waiterGranted(h, 50*msec, 400*msec)
			if got := checks(h)["fifo"]; got != c.want {
				t.Errorf("%d FIFO violations, want %d", got, c.want)
			}
		})
	}
}
