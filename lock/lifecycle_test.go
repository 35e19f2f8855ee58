package lock

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock/internal/wire"
)

// The owner's lifecycle, transition by transition, without a server:
// each test feeds decoded replies and events to an owner and checks the
// state it ends in and what it tells the caller.

// endings records the holds an owner ended, in order.
type endings struct {
	mu   sync.Mutex
	errs map[*Hold][]error
}

func newTestOwner() (*owner, *endings) {
	e := &endings{errs: map[*Hold][]error{}}
	o := &owner{}
	o.init("test", e)
	return o, e
}

func (e *endings) holdEnded(h *Hold, err error, _ bool, _ time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.errs[h] = append(e.errs[h], err)
}

func (e *endings) of(h *Hold) []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.errs[h]
}

// phase names the owner's state, as the design note does.
type phase string

const (
	phaseIdle        phase = "idle"
	phaseQueued      phase = "queued"
	phaseUnconfirmed phase = "held (unconfirmed grant)"
	phaseHeld        phase = "held"
	phaseReleasing   phase = "releasing"
)

func (o *owner) phase() phase {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case o.hold != nil && o.releases > 0:
		return phaseReleasing
	case o.hold != nil && o.unconfirmed:
		return phaseUnconfirmed
	case o.hold != nil:
		return phaseHeld
	case o.queued:
		return phaseQueued
	}
	return phaseIdle
}

const testLease = 30 * time.Second

func grantedReply(token int64, count int) wire.AcquireReply {
	return wire.AcquireReply{Acquired: true, Token: token, Count: count}
}

// hold starts a watchdog hold of token on o, sent now.
func hold(t *testing.T, o *owner, token int64) *Hold {
	t.Helper()
	h, err := o.granted(grantedReply(token, 1), time.Now(), wire.View{}, testLease, true)
	if err != nil || h == nil {
		t.Fatalf("granted: %v, %v", h, err)
	}
	return h
}

func TestOwner_QueueAndLeave(t *testing.T) {
	o, _ := newTestOwner()
	if p := o.phase(); p != phaseIdle {
		t.Fatalf("new owner: %s", p)
	}
	w := &waiter{}
	o.startWaiting(w)
	o.queuedBy()
	if p := o.phase(); p != phaseQueued {
		t.Fatalf("after a queueing attempt: %s", p)
	}
	if o.mustLeave() {
		t.Fatal("must leave while its call still waits")
	}
	if !o.stopWaiting(w, false) {
		t.Fatal("the last waiting call of a queued owner must leave")
	}
	if give := o.left(wire.LeaveReply{Queued: true, Held: wire.View{Token: 9}}, wire.View{}); give != (wire.View{}) {
		t.Fatalf("left: gave back %+v with nothing held", give)
	}
	if p := o.phase(); p != phaseIdle {
		t.Fatalf("after leaving: %s", p)
	}
	if h := o.adopt(9, time.Now(), testLease, testLease, true); h != nil {
		t.Fatal("a grant at or below the token the leave reported is spent, yet adopted")
	}
}

// A grant of unknown outcome that the leave finds is given back.
func TestOwner_LeaveFindsAGrant(t *testing.T) {
	o, _ := newTestOwner()
	o.queuedBy()
	give := o.left(wire.LeaveReply{Queued: true, Held: wire.View{Token: 5, Count: 1}}, wire.View{})
	if give != (wire.View{Token: 5, Count: 1}) {
		t.Fatalf("left = %+v, want the grant to give back", give)
	}
}

// A shared owner whose call fails while a sibling call waits keeps its
// place: only the last waiting call leaves.
func TestOwner_SharedOwnerKeepsItsPlace(t *testing.T) {
	o, _ := newTestOwner()
	first, second := &waiter{}, &waiter{}
	o.startWaiting(first)
	o.startWaiting(second)
	o.queuedBy()
	if !o.othersWaiting(first) {
		t.Fatal("a sibling waits")
	}
	if o.stopWaiting(first, true) {
		t.Fatal("the first call to fail left the queue its sibling still waits in")
	}
	if o.othersWaiting(second) || !o.stopWaiting(second, true) {
		t.Fatal("the last call must leave")
	}
}

// A call whose caller returned without it (runBounded: its attempt still
// in flight) holds the owner's entry for nobody: the owner's next call
// finds it a leftover to leave (soak seed 137617542961740), while a
// sibling that waits still shares it - the abandoned call's undo leaves
// it in place for the sibling - and the last call waiting for a caller
// leaves the queue when it ends.
func TestOwner_AbandonedCallHoldsNoPlace(t *testing.T) {
	o, _ := newTestOwner()
	gone, next := &waiter{}, &waiter{}
	once := &waiter{call: wire.Acquire{Once: true}}
	o.startWaiting(gone)
	o.queuedBy()
	o.abandon(gone)
	o.abandon(gone) // counted once
	if !o.leftover(once) {
		t.Fatal("a TryLock(0) finds the abandoned call's entry held")
	}
	o.startWaiting(next) // a Lock called after
	if !o.leftover(next) {
		t.Fatal("the owner's next Lock finds the abandoned call's entry held")
	}
	if !o.othersWaiting(gone) {
		t.Fatal("the abandoned call finds no other call waiting: its undo would take the entry from next")
	}
	if o.othersWaiting(next) {
		t.Fatal("next finds another call waiting: the abandoned one")
	}
	if !o.stopWaiting(next, true) {
		t.Fatal("the last call waiting for a caller ended without leaving the queue")
	}
	o.stopWaiting(gone, true)
	if o.waiting != 0 || o.abandoned != 0 {
		t.Fatalf("after both ended: waiting %d, abandoned %d; want 0, 0", o.waiting, o.abandoned)
	}
	if o.abandon(once); o.abandoned != 0 {
		t.Fatal("a single attempt, never counted as waiting, counted as abandoned")
	}
	// A call abandoned in its leave, after it stopped waiting, is not
	// counted again (the late-leave tests: the next call then took the
	// entry for a live call's and did not leave it).
	if o.abandon(gone); o.abandoned != 0 {
		t.Fatalf("a call abandoned after it stopped waiting: abandoned %d, want 0", o.abandoned)
	}
}

func TestOwner_GrantReentryAndRelease(t *testing.T) {
	o, e := newTestOwner()
	o.queuedBy()
	h := hold(t, o, 7)
	if p := o.phase(); p != phaseHeld {
		t.Fatalf("after a grant: %s", p)
	}
	if v := o.view(); v != (wire.View{Token: 7, Count: 1}) {
		t.Fatalf("view %+v", v)
	}
	again, err := o.granted(grantedReply(7, 2), time.Now(), wire.View{Token: 7, Count: 1}, time.Second, false)
	if err != nil || again != h || o.view().Count != 2 {
		t.Fatalf("re-entry: %v, %v, %+v", again, err, o.view())
	}
	got, view, _ := o.releasing(testLease)
	if got != h || view.Count != 2 || o.phase() != phaseReleasing {
		t.Fatalf("releasing: %v %+v %s", got, view, o.phase())
	}
	if o.released(h, 1, time.Now(), nil) || h.Err() != nil || o.view().Count != 1 {
		t.Fatal("a release that leaves a count must not end the hold")
	}
	o.releasing(testLease)
	if !o.released(h, 0, time.Now(), nil) || !errors.Is(h.Err(), ErrReleased) {
		t.Fatalf("last release: %v", h.Err())
	}
	if p := o.phase(); p != phaseIdle {
		t.Fatalf("after the last release: %s", p)
	}
	if n := len(e.of(h)); n != 1 {
		t.Fatalf("told of the end %d times", n)
	}
}

// An unlock whose reply is lost ends the hold as lost: nothing renews it
// again, and the lock frees itself within the lease. So does an unlock
// that finds the hold gone.
func TestOwner_UnlockFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		left int
		err  error
	}{
		{"reply lost", 0, errors.New("i/o timeout")},
		{"not held", -1, nil},
	} {
		o, _ := newTestOwner()
		h := hold(t, o, 3)
		o.releasing(testLease)
		if !o.released(h, tc.left, time.Now(), tc.err) || !errors.Is(h.Err(), ErrLockLost) {
			t.Errorf("%s: %v, want ErrLockLost", tc.name, h.Err())
		}
	}
}

// A grant for another token while a hold lives: the server replaced it,
// so the old hold was lost already.
func TestOwner_ServerReplacedTheHold(t *testing.T) {
	o, _ := newTestOwner()
	old := hold(t, o, 3)
	h := hold(t, o, 4)
	if !errors.Is(old.Err(), ErrLockLost) || h.Err() != nil || o.current() != h {
		t.Fatalf("old %v, new %v", old.Err(), h.Err())
	}
}

// A re-entry whose reply comes after the hold it re-entered ended is no
// hold, old or new: the caller gives its counts back.
func TestOwner_ReentryOfAnEndedHold(t *testing.T) {
	o, _ := newTestOwner()
	h := hold(t, o, 3)
	o.endLive(errors.New("unlock gave up"))
	got, err := o.granted(grantedReply(3, 2), time.Now(), wire.View{Token: 3, Count: 1}, testLease, true)
	if got != nil || !errors.Is(err, errEndedReentry) || o.current() != nil {
		t.Fatalf("granted = %v, %v", got, err)
	}
	if h.Err() == nil {
		t.Fatal("the ended hold came back")
	}
}

// A grant whose reply comes after its lease is no hold.
func TestOwner_GrantSlowerThanLease(t *testing.T) {
	o, e := newTestOwner()
	got, err := o.granted(grantedReply(3, 1), time.Now().Add(-time.Second), wire.View{}, 500*time.Millisecond, false)
	if got != nil || !errors.Is(err, ErrLockLost) || o.current() != nil {
		t.Fatalf("granted = %v, %v", got, err)
	}
	if len(e.errs) != 0 {
		t.Fatal("a hold that never started was told as ended")
	}
}

func TestOwner_AdoptAGrantMessage(t *testing.T) {
	o, _ := newTestOwner()
	firm := 5 * time.Second
	if h := o.adopt(3, time.Now().Add(-4*time.Second), firm, testLease, true); h != nil {
		t.Fatal("adopted a grant with less than a third of its firm deadline left")
	}
	h := o.adopt(3, time.Now(), firm, testLease, true)
	if h == nil || o.phase() != phaseUnconfirmed {
		t.Fatalf("adopt: %v, %s", h, o.phase())
	}
	if o.adopt(4, time.Now(), firm, testLease, true) != nil {
		t.Fatal("adopted a second grant while holding")
	}
	call, ok := o.renewal(h)
	if !ok || call.Lease != testLease || call.HoldLease != testLease || call.Token != 3 {
		t.Fatalf("renewal of an unconfirmed grant: %+v, %v", call, ok)
	}
	if !o.renewed(h, call, wire.RenewTookUp, time.Now()) || o.phase() != phaseHeld {
		t.Fatalf("after the renewal took it up: %s", o.phase())
	}
	o.endLive(ErrClosed)
	if o.adopt(3, time.Now(), firm, testLease, true) != nil {
		t.Fatal("a spent grant message was adopted again")
	}
}

func TestOwner_Renewals(t *testing.T) {
	o, _ := newTestOwner()
	h, _ := o.granted(grantedReply(3, 1), time.Now(), wire.View{}, testLease, false)
	if call, _ := o.renewal(h); call.Lease != 0 {
		t.Fatalf("an explicit-lease hold is only checked, got lease %v", call.Lease)
	}
	o2, _ := newTestOwner()
	h2 := hold(t, o2, 4)
	call, ok := o2.renewal(h2)
	if !ok || call.Lease != testLease {
		t.Fatalf("watchdog renewal %+v", call)
	}
	o2.releasing(testLease)
	if c, _ := o2.renewal(h2); c.Lease != 0 {
		t.Fatal("a hold being released is renewed, not only checked")
	}
	if !o2.renewed(h2, c0(), wire.RenewLost, time.Now()) || h2.Err() != nil {
		t.Fatal("a check that finds a hold gone during its Unlock ended it; the Unlock decides")
	}
	o2.released(h2, 0, time.Now(), nil)
	if o.renewed(h, call, wire.RenewLost, time.Now()) || !errors.Is(h.Err(), ErrLockLost) {
		t.Fatalf("lost renewal: %v", h.Err())
	}
	if _, ok := o.renewal(h); ok {
		t.Fatal("an ended hold is renewed")
	}
}

func c0() wire.Renew { return wire.Renew{} }

// The deadline ends a hold nobody acknowledged again in time, and a
// renewal moves it.
func TestOwner_Deadline(t *testing.T) {
	o, e := newTestOwner()
	lease := 60 * time.Millisecond
	h, err := o.granted(grantedReply(3, 1), time.Now(), wire.View{}, lease, true)
	if err != nil {
		t.Fatal(err)
	}
	call, _ := o.renewal(h)
	o.renewed(h, call, wire.RenewHeld, time.Now().Add(lease)) // acknowledged later: deadline moves
	select {
	case <-h.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the deadline never ended the hold")
	}
	// The owner's onEnd runs after Done closes, outside its lock.
	told := time.Now().Add(10 * time.Second)
	for len(e.of(h)) == 0 && time.Now().Before(told) {
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(h.Err(), ErrLockLost) || len(e.of(h)) != 1 {
		t.Fatalf("ended with %v, told %d times", h.Err(), len(e.of(h)))
	}
}

func TestOwner_Extension(t *testing.T) {
	o, _ := newTestOwner()
	h := hold(t, o, 3)
	if _, _, err := o.extension(h); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("watchdog hold: %v", err)
	}
	o.releasing(testLease)
	o.released(h, 0, time.Now(), nil)
	if _, _, err := o.extension(h); !errors.Is(err, ErrNotHeld) || !errors.Is(err, ErrReleased) {
		t.Fatalf("released hold: %v", err)
	}
	h2, _ := o.granted(grantedReply(4, 1), time.Now(), wire.View{}, time.Second, false)
	other, _ := newTestOwner()
	if _, _, err := other.extension(h2); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("another owner's hold: %v", err)
	}
	if call, view, err := o.extension(h2); err != nil || call.Token != 4 || view.Count != 1 {
		t.Fatalf("extension: %+v %+v %v", call, view, err)
	}
}

// A reconnect while a hand-over grant is held unconfirmed: the watchdog
// checks every hold at once. A server that kept its data answers that
// the check took the grant up (the hold is confirmed, its deadline the
// lease's); one that came back empty answers lost, and the hold ends
// before anyone else can be granted the lock.
func TestOwner_ReconnectDuringAGrant(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply wire.RenewReply
		lasts bool
		phase phase
	}{
		{"server kept its data", wire.RenewTookUp, true, phaseHeld},
		{"server came back empty", wire.RenewLost, false, phaseIdle},
	} {
		o, _ := newTestOwner()
		h := o.adopt(7, time.Now(), 5*time.Second, testLease, true)
		if h == nil || o.phase() != phaseUnconfirmed {
			t.Fatalf("%s: adopt: %v %s", tc.name, h, o.phase())
		}
		call, ok := o.renewal(h)
		if !ok || call.Lease == 0 {
			t.Fatalf("%s: an unconfirmed grant must be renewed, not only checked: %+v", tc.name, call)
		}
		if got := o.renewed(h, call, tc.reply, time.Now()); got != tc.lasts || o.phase() != tc.phase {
			t.Errorf("%s: renewed = %v, phase %s; want %v, %s", tc.name, got, o.phase(), tc.lasts, tc.phase)
		}
		if tc.lasts && time.Until(o.deadline) < testLease/2 {
			t.Errorf("%s: deadline %v away, want about the lease", tc.name, time.Until(o.deadline))
		}
	}
}

// A re-entry of a hold taken from a hand-over message confirms it:
// acquire.lua takes the grant up when it re-enters it, so the watchdog
// must not renew an explicit-lease hold for it.
func TestOwner_ReentryConfirmsAGrant(t *testing.T) {
	o, _ := newTestOwner()
	h := o.adopt(7, time.Now(), 5*time.Second, time.Second, false)
	if h == nil || o.phase() != phaseUnconfirmed {
		t.Fatalf("adopt: %v %s", h, o.phase())
	}
	if _, err := o.granted(grantedReply(7, 2), time.Now(), wire.View{Token: 7, Count: 1}, time.Second, false); err != nil {
		t.Fatal(err)
	}
	if call, _ := o.renewal(h); o.phase() != phaseHeld || call.Lease != 0 {
		t.Fatalf("after the re-entry: %s, renewal lease %v; want held, only checked", o.phase(), call.Lease)
	}
}
