package lock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fairlock/fairlock/lock"
)

// TestNilHoldIsSafe: a failed acquire returns a nil *Hold; code that uses
// it anyway (as the README's quick start once did) gets an ended hold,
// never a panic. Hold.Context(nil) works from context.Background.
func TestNilHoldIsSafe(t *testing.T) {
	var h *lock.Hold
	if h.Token() != 0 {
		t.Errorf("Token = %d, want 0", h.Token())
	}
	select {
	case <-h.Done():
	default:
		t.Error("Done of a nil Hold is not closed")
	}
	if !errors.Is(h.Err(), lock.ErrNotHeld) {
		t.Errorf("Err = %v, want ErrNotHeld", h.Err())
	}
	//lint:ignore SA1012 nil is the input under test
	ctx, cancel := h.Context(nil) //nolint:staticcheck // nil is the input under test
	defer cancel()
	<-ctx.Done()
	if !errors.Is(context.Cause(ctx), lock.ErrNotHeld) {
		t.Errorf("context cause %v, want ErrNotHeld", context.Cause(ctx))
	}
}
