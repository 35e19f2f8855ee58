package conformance

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/lock/inspect"
	"github.com/fairlock/fairlock/redistest"
)

// historyRegressionCases are interleavings the randomized cases found,
// where they depend on timing; each is pinned down here with a backend
// that holds back a request or a reply until the racing party has moved.
func historyRegressionCases() []testCase {
	return []testCase{
		{name: "X7_ForceUnlockRacingOwnGrantKeepsNewHold", run: testForceUnlockRacingOwnGrant},
		{name: "X5_AcquireLandingAfterCancelLeavesNoTrace", run: testAcquireLandingAfterCancel},
	}
}

// replyGate delays the reply of one script until a hook has run.
type replyGate struct {
	capable
	mu     sync.Mutex
	script string
	hook   func() // run once, after script ran and before its reply returns
}

func (g *replyGate) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	rep, err := g.capable.Eval(ctx, s, keys, args)
	g.mu.Lock()
	var hook func()
	if s.Name == g.script {
		hook, g.hook = g.hook, nil
	}
	g.mu.Unlock()
	if hook != nil {
		hook()
	}
	return rep, err
}

// WatchKey forwards to the backend under test (see linBackend.WatchKey).
func (g *replyGate) WatchKey(ctx context.Context, key string) (*backend.Subscription, error) {
	return watchKeyOf(ctx, g.capable, key)
}

// testForceUnlockRacingOwnGrant: an owner waits in Lock for a lock another
// owner holds, and the same Mutex (shared by two goroutines) force-unlocks
// it. The force unlock wakes the head - this very owner - whose Lock takes
// the lock and returns a new Hold. Only then does ForceUnlock get its
// reply and drop "the" local hold: it must drop the hold that existed when
// it was called, not the one granted after it. Otherwise the new Hold
// ends as lost (ErrLockLost, X7) while the owner holds the lock in Redis:
// a false loss signal, and since the owner stops (and need not unlock a
// lost hold) and the watchdog no longer renews it, the lock stays taken
// by nobody until its lease runs out. Delete drops the local hold the
// same way. The
// randomized differential workload found this (rueidis, seed 4, step 155:
// "released" where the model says "released, hold ended"); the gate makes
// the interleaving certain by holding ForceUnlock's reply until the
// waiting Lock has returned.
func testForceUnlockRacingOwnGrant(t *testing.T, s *suite) {
	name := historyLockName(t)
	gate := &replyGate{capable: s.newBackend(t), script: "force_unlock"}
	c, err := lock.NewClient(gate)
	if err != nil {
		t.Fatalf("lock.NewClient: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	waiter, err := c.NewMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	holder := s.newProc(t).mutex(t, name)
	mustLock(t, holder)

	ctx, cancel := context.WithTimeout(context.Background(), 2*eventually)
	defer cancel()
	ch := goAcquire(func() (*lock.Hold, error) { return waiter.Lock(ctx) })
	waitQueued(t, holder, 1)

	var granted result
	gate.mu.Lock()
	gate.hook = func() {
		select {
		case granted = <-ch:
		case <-time.After(eventually):
		}
	}
	gate.mu.Unlock()
	released, err := waiter.ForceUnlock(ctxFor(t, 2*eventually))
	if err != nil || !released {
		t.Fatalf("ForceUnlock = %t, %v; want true, nil", released, err)
	}
	if granted.h == nil && granted.err == nil {
		t.Fatal("the waiting Lock did not return within the force unlock's reply delay")
	}
	if granted.err != nil {
		t.Fatalf("waiting Lock after the force unlock: %v", granted.err)
	}
	st, err := waiter.Inspect(ctxFor(t, eventually), 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CountOf(waiter.Owner()); n != 1 {
		t.Fatalf("server: the waiter's hold count is %d, want 1", n)
	}
	if err := granted.h.Err(); err != nil {
		t.Fatalf("the Hold granted after ForceUnlock was sent ended with %q although its owner holds the lock in Redis; ForceUnlock must only drop the hold that existed when it was called", err)
	}
	if err := waiter.Unlock(ctxFor(t, eventually)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := granted.h.Err(); !errors.Is(err, lock.ErrReleased) {
		t.Errorf("hold after its Unlock: %v, want ErrReleased", err)
	}
}

// lateGate parks one acquire script call of one owner. When the call's
// context ends while it is parked, the caller gets the context's error, as
// from a real client that stops waiting for a reply, while the request
// itself stays parked until the test delivers it - as happens when the
// client had queued it on one of several pipelined connections (rueidis
// and valkey-go use four by default) and a later request went out on
// another. A call whose context does not end within lateGateHold is
// delivered in order.
type lateGate struct {
	capable
	owner  string
	nth    int           // which acquire call of owner to park
	parked chan struct{} // closed when the call is parked

	mu    sync.Mutex
	calls int
	late  *backend.Call // parked, not delivered
}

// lateGateHold is how long a parked call waits for its context to end.
const lateGateHold = 2 * time.Second

func (g *lateGate) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	if s.Name == "acquire" && len(args) > 0 && args[0] == g.owner {
		g.mu.Lock()
		g.calls++
		park := g.calls == g.nth
		if park {
			g.late = &backend.Call{Script: s, Keys: keys, Args: args}
		}
		g.mu.Unlock()
		if park {
			close(g.parked)
			timer := time.NewTimer(lateGateHold)
			defer timer.Stop()
			select {
			case <-ctx.Done():
				return backend.Reply{}, ctx.Err()
			case <-timer.C:
				g.mu.Lock()
				g.late = nil
				g.mu.Unlock()
			}
		}
	}
	return g.capable.Eval(ctx, s, keys, args)
}

// WatchKey forwards to the backend under test (see linBackend.WatchKey).
func (g *lateGate) WatchKey(ctx context.Context, key string) (*backend.Subscription, error) {
	return watchKeyOf(ctx, g.capable, key)
}

// deliver sends the parked request to the server now, if it is still
// parked.
func (g *lateGate) deliver(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	c := g.late
	g.late = nil
	g.mu.Unlock()
	if c == nil {
		return
	}
	if _, err := g.capable.Eval(ctxFor(t, eventually), c.Script, c.Keys, c.Args); err != nil {
		t.Fatalf("delivering the parked acquire: %v", err)
	}
}

// testAcquireLandingAfterCancel: a waiter's context ends while one of its
// acquire attempts is on its way to the server. The caller gives up on
// the reply, the Lock call cleans up (leave, which assumes the attempt has
// landed or never will) and returns the context's error - and then the
// attempt reaches the server. The linearizability case sees this with
// both adapters in most rounds when effects are confined to their calls:
// an owner back in the queue right after its leave, TryLock's short wait
// having ended during an attempt. Here the lock is free by the time the
// attempt lands, so it takes the lock: a hold nobody has a Hold for, which
// blocks every other owner until its lease runs out (or, if the owner
// acquires again meanwhile, a count one higher than it knows, renewed by
// the watchdog for as long as its Hold lives). X5 says a cancelled waiter
// leaves no trace; an attempt must not be able to take effect after the
// call that made it has cleaned up. (For example: leave could record the
// attempt ID as withdrawn for a while, and acquire with a withdrawn ID
// would do nothing; or attempts could be sent with a context the caller
// cannot cancel, bounded by its own timeout, so that their reply is
// always awaited before cleaning up.)
func testAcquireLandingAfterCancel(t *testing.T, s *suite) {
	name := historyLockName(t)
	holder := s.newProc(t).mutex(t, name)
	mustLock(t, holder)

	gate := &lateGate{capable: s.newBackend(t), nth: 2, parked: make(chan struct{})}
	c, err := lock.NewClient(gate)
	if err != nil {
		t.Fatalf("lock.NewClient: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	waiter, err := c.NewMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	gate.owner = waiter.Owner()

	// The first attempt queues the waiter; the second (after subscribing)
	// is parked, and the context ends while it is.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := goAcquire(func() (*lock.Hold, error) { return waiter.Lock(ctx) })
	select {
	case <-gate.parked:
	case <-time.After(eventually):
		t.Fatal("the waiter made no second acquire attempt")
	}
	cancel()
	if r := await(t, ch, eventually, "cancelled waiter"); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled Lock: %v, %v; want context.Canceled", r.h, r.err)
	}
	mustUnlock(t, holder)
	t.Cleanup(func() { _, _ = holder.ForceUnlock(context.Background()) })

	gate.deliver(t)
	// Lock returned at its cancellation; the attempt it had sent is awaited
	// in the background (X5), and whatever it brings is given back when
	// its reply arrives: by the end of the gate's hold at the latest.
	var st inspect.State
	clean := func() bool {
		var err error
		st, err = holder.Inspect(ctxFor(t, eventually), 10)
		return err == nil && st.CountOf(waiter.Owner()) == 0 && st.QueueLength == 0
	}
	deadline := time.Now().Add(lateGateHold + eventually)
	for !clean() && time.Now().Before(deadline) {
		time.Sleep(redistest.EventuallyInterval) // bounded polling, not synchronisation
	}
	if n := st.CountOf(waiter.Owner()); n > 0 || st.QueueLength > 0 {
		other := s.newProc(t).mutex(t, name)
		_, tryErr := other.TryLock(ctxFor(t, eventually), 0)
		t.Errorf("after its Lock returned context.Canceled, the waiter's late acquire attempt left it holding the lock %d time(s) (TTL %v) with %d queued; another owner's TryLockOnce: %v", n, st.TTL, st.QueueLength, tryErr)
	}
}
