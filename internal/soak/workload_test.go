package soak

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fairlock/fairlock/redistest"
)

// TestOwnerWaitsForItsNewClient: an owner whose client was closed waits
// for the client that replaces it rather than trying again at once. Six
// owners that spun on NewMutex (ErrClosed) while their client closed and
// reopened kept both cores busy for up to seconds, and every client of
// the run was late with them: the late notices of mass evictions in the
// 30-minute run of seed 222134185089388 (RELIABILITY.md, track record).
func TestOwnerWaitsForItsNewClient(t *testing.T) {
	srv := redistest.Start(t)
	c := &goClient{label: "c", adapter: Adapters[0], addr: srv.Addr(), rec: &recorder{}}
	if err := c.open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.client().Close() })
	o := &goOwner{id: 100, name: sharedNames[0], c: c, h: NewHistory(1), rnd: rand.New(rand.NewPCG(1, 1))}
	if err := c.client().Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stepped := make(chan struct{})
	go func() {
		defer close(stepped)
		o.step(ctx)
	}()
	// A step on the closed client must still be waiting a while later (a
	// spinning one returns within microseconds).
	select {
	case <-stepped:
		t.Fatal("the owner's step returned at once on its closed client: it would spin")
	case <-time.After(200 * time.Millisecond):
	}
	reopened := time.Now()
	if err := c.open(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stepped:
	case <-ctx.Done():
		t.Fatal("the owner's step did not return after its client was replaced")
	}
	t.Logf("the step returned %v after the new client opened", time.Since(reopened).Round(time.Microsecond))
}

// TestNewAcquireOp_CancelIsTheLimit: a call cancelled before its deadline
// gives up at the cancel, and its record's Limit says so; one of the
// owner's calls at once cancelled then, overtaken after it, overtook
// nobody (seed 42781790588260).
func TestNewAcquireOp_CancelIsTheLimit(t *testing.T) {
	op := newAcquireOp(KindTryWait, "L", "w", "cw", 500*time.Millisecond, 2*time.Second, 120*time.Millisecond)
	if op.Limit != 120*time.Millisecond || op.Wait != 500*time.Millisecond {
		t.Errorf("cancelled after 120 ms: Limit %v, Wait %v; want 120ms, 500ms", op.Limit, op.Wait)
	}
	if op := newAcquireOp(KindLock, "L", "w", "cw", 0, time.Second, 0); op.Limit != time.Second {
		t.Errorf("not cancelled: Limit %v, want 1s", op.Limit)
	}
	if op := newAcquireOp(KindTryOnce, "L", "w", "cw", 0, time.Second, 50*time.Millisecond); op.Limit != 0 {
		t.Errorf("TryLock(0): Limit %v, want 0", op.Limit)
	}
	// The history of seed 42781790588260, in short: w cancelled 126 ms
	// after its call, a granted 1 ms after that and 0.1 ms before w
	// returned.
	h := NewHistory(1)
	w := newAcquireOp(KindTryWait, "L", "w", "cw", 500*time.Millisecond, 2*time.Second, 126*time.Millisecond)
	w.Call, w.Queued, w.Return, w.Err, w.Canceled = 38353900*time.Microsecond, 38355500*time.Microsecond, 38481000*time.Microsecond, "context canceled", true
	h.Add(w)
	ah := hold("L", "a", 80, 38480900*time.Microsecond, 39418600*time.Microsecond)
	ah.Client, ah.Called = "ca", 38369600*time.Microsecond
	h.AddHold(ah)
	h.Add(&Op{Kind: KindLockLease, Lock: "L", Owner: "a", Client: "ca", Call: 38369600 * time.Microsecond, Queued: 38371000 * time.Microsecond,
		Return: 38480900 * time.Microsecond, Limit: 2 * time.Second, Hold: ah, New: true})
	if got := checks(h)["fifo"]; got != 0 {
		t.Errorf("%d FIFO violations, want 0: w had given up before a's grant", got)
	}
}
