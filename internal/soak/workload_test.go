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
