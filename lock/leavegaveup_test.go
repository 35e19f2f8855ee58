package lock

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/redistest"
)

// refuseLeaveKey marks the context of a call whose leave a refusedLeaves
// backend never sends.
type refuseLeaveKey struct{}

// refusedLeaves is a backend that fails the leave.lua request of a call
// whose context carries refuseLeaveKey without sending it, as a leave
// that gives up at its bound (X5) while it waits behind thousands of
// others in the client's queue does.
type refusedLeaves struct {
	backend.Backend
	refused atomic.Int64
}

func (b *refusedLeaves) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	if s.Name == "leave" && ctx.Value(refuseLeaveKey{}) != nil {
		b.refused.Add(1)
		return backend.Reply{}, context.DeadlineExceeded
	}
	return b.Backend.Eval(ctx, s, keys, args)
}

// TestLeaveThatGaveUp_EntryIsHarmless: a cancelled waiter whose leave gave
// up (issue 46, defect 4: 5,000 Locks of one valkey-go client cancelled at
// once under the race detector, 1,976 leaves past their 2 s bound, one
// never sent) leaves its entry in the queue, live until its liveness
// deadline, a waiter timeout after its last heartbeat. What X5 promises of
// it: the lock, released meanwhile, is handed to that entry, and the grant
// lapses within twice the waiter timeout; the owner queued behind it then
// acquires, and nothing is left of either afterwards.
func TestLeaveThatGaveUp_EntryIsHarmless(t *testing.T) {
	const waiterTimeout = 600 * time.Millisecond
	srv, w, x, holder, gotX := leaveGaveUp(t, waiterTimeout)
	bg, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()

	// Released while W's entry is live: handed to W, which nobody takes up.
	if err := holder.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	handed := time.Now()
	if v := srv.Do(t, "HGET", w.keys.Hash, w.field); v != "0" {
		t.Logf("the release found W's entry dead already (HGET %v): no grant to lapse", v)
	}
	r := <-gotX
	if r.err != nil {
		t.Fatalf("X's Lock: %v", r.err)
	}
	waited := time.Since(handed)
	// The grant lapses within twice the waiter timeout; X's heartbeat (a
	// third of its client's 5 s waiter timeout) finds the lock free.
	if bound := 2*waiterTimeout + defaultWaiterTimeout/3 + 2*time.Second; waited > bound {
		t.Errorf("X acquired %v after the release, want within %v (the grant to W lapsing, then X's heartbeat)", waited, bound)
	}
	if err := x.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{w.keys.Queue, w.keys.Timeouts, w.keys.Alive, w.keys.Hash} {
		if n, _ := srv.Do(t, "EXISTS", k).(int64); n != 0 {
			t.Errorf("%s still exists after X's Unlock: %v", k, srv.Do(t, "TYPE", k))
		}
	}
	t.Logf("figures: X acquired %v after the release (W's waiter timeout %v)", waited, waiterTimeout)
}

// leaveGaveUp sets up a leave that gave up: holder (on a client of its
// own, with x) holds the lock; W (on a client whose waiter timeout is
// waiterTimeout) queues, X queues behind it, and W's Lock is cancelled
// and its leave refused, so W's entry stays first in line, live. It
// returns X's Lock in flight.
func leaveGaveUp(t *testing.T, waiterTimeout time.Duration) (srv *redistest.Server, w, x, holder *Mutex, gotX <-chan lockResult) {
	t.Helper()
	b := &refusedLeaves{}
	srv = redistest.Start(t)
	cx := clientOn(t, srv)
	b.Backend = rueidisOn(t, srv)
	cw := clientOver(t, b, WithWaiterTimeout(waiterTimeout))
	const name = "leave-gave-up"
	w, x, holder = newTestMutex(t, cw, name), newTestMutex(t, cx, name), newTestMutex(t, cx, name)
	bg, stop := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(stop)
	if _, err := holder.Lock(bg); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(context.WithValue(bg, refuseLeaveKey{}, true))
	gotW := goLockIn(wctx, w)
	redistest.Eventually(t, 5*time.Second, "W queued", func() bool { return len(queueOf(t, srv, w)) == 1 })
	gotX = goLockIn(bg, x)
	redistest.Eventually(t, 5*time.Second, "X queued behind W", func() bool { return len(queueOf(t, srv, w)) == 2 })
	cancel()
	if r := <-gotW; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("W's cancelled Lock = %v, want context.Canceled", r.err)
	}
	if b.refused.Load() == 0 {
		t.Fatal("W's leave was not refused: the scenario did not happen")
	}
	if q := queueOf(t, srv, w); len(q) != 2 || q[0] != w.field {
		t.Fatalf("after W's leave gave up the queue is %q, want W's entry still first", q)
	}
	return srv, w, x, holder, gotX
}

// TestLeaveThatGaveUp_NextCallQueuesAtTheTail: W's Lock is cancelled and
// its leave gives up (a connection reset as the call ends, in the
// simulation), so W's entry stays first in line, live, ahead of X, who
// queued after it. W's next Lock found the owner still marked queued,
// and its attempt heartbeat that entry (X2): the new call kept the
// abandoned call's place and was granted the lock before X, who had
// queued first (the simulation's FIFO finding, seeds 901 and 2000). A
// new call that finds the owner queued by no waiting call leaves that
// entry first: W queues behind X, and X acquires first (B3, X5). The
// client remembers the owner's entry while it may be live, also after the
// subscription the call parked is gone.
func TestLeaveThatGaveUp_NextCallQueuesAtTheTail(t *testing.T) {
	srv, w, x, holder, gotX := leaveGaveUp(t, defaultWaiterTimeout)
	bg, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	alive := func() float64 {
		v, _ := srv.Do(t, "ZSCORE", w.keys.Alive, w.field).(string)
		f, _ := strconv.ParseFloat(v, 64)
		return f
	}
	before := alive()
	// W's next call comes after its parked subscription is gone (1 s), so
	// that nothing else keeps what the client knows of W's owner.
	redistest.Eventually(t, 5*time.Second, "W's parked subscription dropped", func() bool {
		w.c.owners.mu.Lock()
		defer w.c.owners.mu.Unlock()
		e := w.c.owners.byKey[w.ownerKey]
		return e == nil || e.parked == nil
	})
	gotW := goLockIn(bg, w)
	// W's new call has queued once W is no longer first, or once its
	// attempt heartbeat the old entry (its liveness deadline moved on).
	redistest.Eventually(t, 5*time.Second, "W's new call queued", func() bool {
		q := queueOf(t, srv, w)
		return len(q) == 2 && q[0] == x.field || alive() > before
	})
	if q := queueOf(t, srv, w); len(q) != 2 || q[0] != x.field || q[1] != w.field {
		t.Fatalf("queue after W's new Lock = %q, want [X W]: the new call kept the place of W's abandoned call", q)
	}
	if err := holder.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	var hx *Hold
	select {
	case r := <-gotX:
		if r.err != nil {
			t.Fatalf("X's Lock: %v", r.err)
		}
		hx = r.h
	case r := <-gotW:
		t.Fatalf("W's new Lock (%v, token %d) was granted before X, who had queued first", r.err, tokenOf(r.h))
	}
	select {
	case r := <-gotW:
		t.Fatalf("W's Lock returned (%v) while X holds", r.err)
	default:
	}
	if err := x.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	r := <-gotW
	if r.err != nil {
		t.Fatalf("W's Lock after X's Unlock: %v", r.err)
	}
	if r.h.Token() <= hx.Token() {
		t.Errorf("W's token %d, X's %d: want W's later", r.h.Token(), hx.Token())
	}
	if err := w.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{w.keys.Queue, w.keys.Timeouts, w.keys.Alive, w.keys.Hash} {
		if n, _ := srv.Do(t, "EXISTS", k).(int64); n != 0 {
			t.Errorf("%s still exists after W's Unlock: %v", k, srv.Do(t, "TYPE", k))
		}
	}
}

// tokenOf is h's token, 0 for no hold.
func tokenOf(h *Hold) int64 {
	if h == nil {
		return 0
	}
	return h.Token()
}
