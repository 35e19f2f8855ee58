package otel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/fairlock/fairlock/redistest"
)

// TestHoldDurationStartsAtTheGrant: fairlock.hold.duration, on the release
// span and in the histogram, runs from the grant to the release. A waiter
// that queued for about 400 ms and then held the lock for about 50 ms held
// it for about 50 ms: the wait is the acquire's (fairlock.wait.duration),
// not the hold's.
func TestHoldDurationStartsAtTheGrant(t *testing.T) {
	const (
		waitFor = 400 * time.Millisecond
		holdFor = 50 * time.Millisecond
	)
	forEachAdapter(t, func(t *testing.T, a adapter) {
		e := newEnv(t, a)
		holder := e.mutex(e.client(), "orders")
		waiter := e.mutex(e.client(), "orders")
		if _, err := holder.Lock(context.Background()); err != nil {
			t.Fatalf("holder Lock: %v", err)
		}
		ctx, req := e.request()
		locked := goLock(t, ctx, waiter)
		redistest.Eventually(t, 5*time.Second, "the waiter to queue", func() bool { return e.waiters() == 1 })
		time.Sleep(waitFor) // the holder's work, which the waiter waits for
		if err := holder.Unlock(context.Background()); err != nil {
			t.Fatalf("holder Unlock: %v", err)
		}
		locked()
		before := e.heldReleased()
		time.Sleep(holdFor) // the waiter's work under the lock
		if err := waiter.Unlock(ctx); err != nil {
			t.Fatalf("waiter Unlock: %v", err)
		}
		req.End()

		acq := e.one("fairlock.acquire", req.SpanContext())
		if wait := attrs(acq)["fairlock.wait.duration"].AsFloat64(); wait < waitFor.Seconds() {
			t.Errorf("fairlock.wait.duration = %.3f s, want at least the holder's %v", wait, waitFor)
		}
		rel := e.one("fairlock.release", req.SpanContext())
		after := e.heldReleased()
		for _, got := range []struct {
			what string
			held float64
		}{
			{"the release span's fairlock.hold.duration", attrs(rel)["fairlock.hold.duration"].AsFloat64()},
			{"the fairlock.hold.duration{released} histogram's new value", after.sum - before.sum},
		} {
			if got.held < 0.8*holdFor.Seconds() || got.held >= 0.3 {
				t.Errorf("%s = %.3f s, want about %v (the hold, not the %v wait before it)", got.what, got.held, holdFor, waitFor)
			}
		}
		if after.count != before.count+1 {
			t.Errorf("fairlock.hold.duration{released} count %d after the waiter's Unlock, want %d", after.count, before.count+1)
		}
	})
}

// heldReleased returns the fairlock.hold.duration{released} data point
// recorded so far (the reader is cumulative).
func (e *env) heldReleased() point {
	e.t.Helper()
	p, ok := e.find("fairlock.hold.duration", attribute.String("fairlock.outcome", "released"))
	if !ok {
		e.t.Fatal("no fairlock.hold.duration{released} data point")
	}
	return p
}
