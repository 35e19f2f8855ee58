package lock

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

// TestSharedBoundShares: requests sent within one grain share a context
// that ends between d and d+grain after each of them; a later one gets a
// new context.
func TestSharedBoundShares(t *testing.T) {
	const d, grain = time.Hour, time.Minute
	b := newSharedBound(d, grain)
	defer b.close()
	t0 := time.Now()
	first := b.at(t0)
	if got := b.at(t0.Add(grain / 2)); got != first {
		t.Error("a request half a grain later got a context of its own")
	}
	end, ok := first.Deadline()
	if !ok || end.Before(t0.Add(grain/2).Add(d)) || end.After(t0.Add(d+grain)) {
		t.Errorf("deadline %v after the first request, want between %v and %v", end.Sub(t0), d+grain/2, d+grain)
	}
	later := t0.Add(grain + time.Millisecond)
	next := b.at(later)
	if next == first {
		t.Fatal("a request over a grain later shares a context that ends less than d after it")
	}
	if end, _ := next.Deadline(); end.Before(later.Add(d)) {
		t.Errorf("the new context ends %v after its request, want at least %v", end.Sub(later), d)
	}
	if first.Err() != nil {
		t.Error("the replaced context ended early: requests in flight still use it")
	}
	b.close()
	if next.Err() == nil {
		t.Error("close left the current context running")
	}
}

type boundKey struct{}

// TestBoundedDropsCancellation: a bounded request keeps the caller's
// values, not its cancellation, and ends with its bound - as do contexts a
// backend derives from it.
func TestBoundedDropsCancellation(t *testing.T) {
	b := newSharedBound(50*time.Millisecond, 10*time.Millisecond)
	defer b.close()
	caller, cancel := context.WithCancel(context.WithValue(context.Background(), boundKey{}, "span"))
	ctx := b.bound(caller, time.Now())
	cancel()
	if ctx.Value(boundKey{}) != "span" {
		t.Error("the caller's values are lost")
	}
	if ctx.Err() != nil {
		t.Errorf("the caller's cancellation ended the request: %v", ctx.Err())
	}
	child, stop := context.WithCancel(ctx)
	defer stop()
	select {
	case <-child.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a context derived from the request did not end with its bound")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		t.Errorf("request ended with %v (cause %v), want context.DeadlineExceeded", ctx.Err(), context.Cause(ctx))
	}
}

// TestUnlockContext: an Unlock's attempts end with its retry window, keep
// the caller's values, and follow a cancellation of the caller only when
// the caller's deadline comes before the window ends; no timer is made.
func TestUnlockContext(t *testing.T) {
	b := newSharedBound(unlockRetryWindow, unlockRetryGrain)
	defer b.close()
	sent := time.Now()
	window := b.at(sent)

	ctx := unlockContext(context.Background(), window)
	end, ok := ctx.Deadline()
	if wend, _ := window.Deadline(); !ok || !end.Equal(wend) {
		t.Errorf("without a deadline of the caller's: attempts end at %v (ok %v), want the window's end %v", end, ok, wend)
	}
	if end.Before(sent.Add(unlockRetryWindow)) || end.After(time.Now().Add(unlockRetryWindow+unlockRetryGrain)) {
		t.Errorf("window ends %v after the call, want between %v and %v", end.Sub(sent), unlockRetryWindow, unlockRetryWindow+unlockRetryGrain)
	}

	type key struct{}
	caller, cancel := context.WithTimeout(context.WithValue(context.Background(), key{}, "span"), time.Hour)
	ctx = unlockContext(caller, window)
	cancel()
	if ctx.Err() != nil {
		t.Errorf("a caller with a later deadline, cancelled: the attempt's context ended (%v); the attempt in flight should finish", ctx.Err())
	}
	if ctx.Value(key{}) != "span" {
		t.Error("the caller's values are lost")
	}

	soon, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if got := unlockContext(soon, window); got != soon {
		t.Errorf("a caller whose deadline comes before the window ends: got %v, want the caller's context itself", got)
	}
}

// TestBoundedChildrenNeedNoGoroutine: a context a backend derives from a
// bounded request follows the bound through its AfterFunc; without it the
// context package would start a goroutine per derived context.
func TestBoundedChildrenNeedNoGoroutine(t *testing.T) {
	b := newSharedBound(time.Hour, time.Minute)
	defer b.close()
	ctx := b.bound(context.Background(), time.Now())
	const n = 200
	before := runtime.NumGoroutine()
	stops := make([]context.CancelFunc, 0, n)
	for range n {
		_, stop := context.WithCancel(ctx)
		stops = append(stops, stop)
	}
	after := runtime.NumGoroutine()
	for _, stop := range stops {
		stop()
	}
	if after-before >= n/2 {
		t.Errorf("%d contexts derived from a bounded request started %d goroutines", n, after-before)
	}
}
