package faultsuite

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
)

// Slot migration under a held lock (TestClusterSlotMigration).
const (
	migLease         = 2 * time.Second         // the holder's; renewed every third of it, so during the migration
	migWaiterTimeout = 1500 * time.Millisecond // waiters heartbeat every 500 ms, so during the migration
	migWaiters       = 4
	migMarked        = 300 * time.Millisecond // MIGRATING/IMPORTING set, every key still on the source
	migSplit         = 600 * time.Millisecond // one key moved: every script on the lock meets TRYAGAIN
	migBound         = 10 * time.Second       // every waiter holds within this of the migration's end
	migWork          = 20 * time.Millisecond  // each waiter's hold
)

// TestClusterSlotMigration: on a 3-primary cluster with a replica each,
// per adapter, a holder holds (2 s lease) and 4 waiters queue (1.5 s
// waiter timeout); the lock's slot is moved to another primary as Redis
// documents it: IMPORTING on the target and MIGRATING on the source for
// 300 ms, then one of the lock's keys MIGRATEd, so for 600 ms its keys
// are split between the nodes and every script on the lock - the
// holder's renewals, the waiters' heartbeats, and the holder's Unlock,
// called at the split - meets TRYAGAIN (or ASK); then the other keys and
// CLUSTER SETSLOT NODE everywhere, after which the clients meet MOVED.
// What must hold: the hold survives the migration; the Unlock and every
// Lock succeed (no cluster error reaches the caller); the waiters hold in
// their queue order, each within 10 s of the migration's end; no two
// owners ever believe they hold at once (client beliefs) and no sample of
// the lock hash (every 2 ms) names two owners; tokens grow; the lock ends
// free with an empty queue. Figures: from the migration's end (the last
// key moved: the keys are together again) to the holder's Unlock
// returning and to the head's hold.
func TestClusterSlotMigration(t *testing.T) {
	start := time.Now()
	c := redistest.StartCluster(t, 3, redistest.WithReplicas(1))
	var figures []string
	for _, a := range dialersFor(c.Addrs(), true) {
		t.Run(a.name, func(t *testing.T) {
			figures = append(figures, a.name+": "+migrateUnderLock(t, c, a))
		})
	}
	report(t, 18, fmt.Sprintf("3-primary cluster with a replica each; per adapter a holder (%v lease) and %d queued waiters (%v waiter timeout) while the lock's slot moves to another primary: IMPORTING/MIGRATING for %v, one key MIGRATEd and the holder's Unlock called (%v with the keys split: TRYAGAIN), the rest MIGRATEd, SETSLOT NODE (then MOVED)",
		migLease, migWaiters, migWaiterTimeout, migMarked, migSplit),
		"the hold survives; Unlock and every Lock succeed (no MOVED/ASK/TRYAGAIN/CLUSTERDOWN reaches the caller); waiters hold in queue order, each within 10 s; never two holders (client beliefs, and the lock hash sampled every 2 ms); tokens grow; lock free and queue empty after",
		strings.Join(figures, "; ")+fmt.Sprintf("; test took %s", msf(time.Since(start))))
}

// migrateUnderLock runs the scenario for one adapter and returns its
// figures.
func migrateUnderLock(t *testing.T, c *redistest.Cluster, a dialer) string {
	name := "fault:migration:" + a.name
	slot := redistest.SlotOf(name)
	errs := &errorTally{}
	sampler := sampleHolders(t, c.Addrs(), name)
	holder := newMutex(t, clientOf(t, a, lock.WithLease(migLease)), name)
	spy := newMutex(t, clientOf(t, a), name)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	hold0, err := holder.Lock(ctx)
	if err != nil {
		t.Fatalf("holder's Lock: %v", err)
	}
	acquired0 := time.Now()
	done0 := watchDone(hold0)

	type grant struct {
		i      int
		belief belief
		err    error
	}
	grants := make(chan grant, migWaiters)
	for i := range migWaiters {
		m := newMutex(t, clientOf(t, a, lock.WithWaiterTimeout(migWaiterTimeout)), name)
		go func() {
			h, err := m.Lock(ctx)
			if err != nil {
				errs.add("Lock", err)
				grants <- grant{i: i, err: err}
				return
			}
			b := belief{worker: i + 1, from: time.Now(), token: h.Token()}
			timer := time.NewTimer(migWork)
			defer timer.Stop()
			select {
			case <-h.Done():
				b.to = time.Now()
				grants <- grant{i: i, belief: b, err: fmt.Errorf("hold lost: %w", h.Err())}
				return
			case <-timer.C:
			}
			b.to = time.Now()
			if err := m.Unlock(ctx); err != nil {
				errs.add("Unlock", err)
				grants <- grant{i: i, belief: b, err: err}
				return
			}
			grants <- grant{i: i, belief: b}
		}()
		waitQueue(t, spy, i+1)
	}

	to := otherPrimary(t, c, c.PrimaryForSlot(t, slot))
	stats := errorStats(t, c.Nodes())
	mig := c.BeginMigration(t, slot, to)
	// Hold the MIGRATING/IMPORTING state for migMarked: the fault's
	// length, not a synchronisation.
	time.Sleep(migMarked)
	if n := mig.MoveKeys(t, 1); n != 1 {
		t.Fatalf("MoveKeys moved %d keys, want 1", n)
	}
	type unlocked struct {
		call, at time.Time
		err      error
	}
	unlock0 := make(chan unlocked, 1)
	go func() {
		call := time.Now()
		err := holder.Unlock(ctx)
		unlock0 <- unlocked{call, time.Now(), err}
	}()
	// Hold the split state (one key moved) for migSplit: the fault's
	// length, not a synchronisation.
	time.Sleep(migSplit)
	mig.MoveAll(t)
	// The keys are together again, on the target: the source answers ASK,
	// the target serves them to clients that say ASKING.
	migEnd := time.Now()
	mig.Assign(t)
	assigned := time.Now()

	var u unlocked
	select {
	case u = <-unlock0:
	case <-time.After(migBound):
		t.Fatalf("the holder's Unlock did not return within %v of the migration's end", migBound)
	}
	if u.err != nil {
		errs.add("Unlock", u.err)
		t.Errorf("the holder's Unlock across the migration: %v", u.err)
	}
	lost0 := ""
	select {
	case at := <-done0:
		if at.Before(u.call) {
			lost0 = fmt.Sprintf("the holder's hold ended %v before its Unlock: %v", u.call.Sub(at), hold0.Err())
			t.Error(lost0)
		}
	case <-time.After(time.Second):
		t.Error("the holder's Done did not close after its Unlock")
	}
	beliefs := []belief{{worker: 0, from: acquired0, to: u.call, token: hold0.Token()}}

	var (
		order   []int
		first   time.Time
		stuck   int
		timeout = time.After(time.Until(migEnd.Add(migBound)))
	)
	for got := 0; got < migWaiters; got++ {
		var g grant
		select {
		case g = <-grants:
		case <-timeout:
			stuck = migWaiters - got
			got = migWaiters
			continue
		}
		if g.err != nil {
			t.Errorf("waiter %d: %v", g.i, g.err)
		}
		if g.belief.from.IsZero() {
			continue
		}
		if first.IsZero() || g.belief.from.Before(first) {
			first = g.belief.from
		}
		order = append(order, g.i)
		beliefs = append(beliefs, g.belief)
	}
	if stuck > 0 {
		t.Errorf("%d of %d waiters did not hold within %v of the migration's end", stuck, migWaiters, migBound)
	}
	if !slices.Equal(order, []int{0, 1, 2, 3}[:len(order)]) {
		t.Errorf("waiters held in order %v, want their queue order", order)
	}
	doubles, worst := doubleBeliefs(beliefs)
	if doubles > 0 {
		t.Errorf("%d pairs of owners believed they held at once (longest %v)", doubles, worst)
	}
	if n := tokenRegressions(beliefs); n > 0 {
		t.Errorf("%d holds had a token not above the previous ones", n)
	}
	sampler.end()
	if sampler.doubles > 0 {
		t.Errorf("%s; e.g. %v", sampler, sampler.example)
	}
	errs.checkNoRedirections(t)
	st, err := spy.Inspect(ctx, 0)
	if err != nil {
		t.Errorf("Inspect after the migration: %v", err)
	} else if st.Locked() || st.QueueLength != 0 {
		t.Errorf("after the hand-overs: locked %t, queue %d; want free and empty", st.Locked(), st.QueueLength)
	}
	c.WaitSettled(t)
	served := redirectionsSince(t, c.Nodes(), stats)
	if owner := c.PrimaryForSlot(t, slot); owner != to {
		t.Errorf("slot %d served by %s, want %s", slot, owner.Addr(), to.Addr())
	}
	return fmt.Sprintf("holder's Unlock returned %s and the head held %s after the last key moved (Unlock called %s before it; slot assigned %s after it); order %v; stuck %d; double holders: %d by client beliefs, %s; hold lost %t; the servers answered %s; errors to callers: %s",
		msf(u.at.Sub(migEnd)), msf(first.Sub(migEnd)), msf(migEnd.Sub(u.call)), msf(assigned.Sub(migEnd)), order, stuck, doubles, sampler, lost0 != "", formatRedirections(served), errs)
}
