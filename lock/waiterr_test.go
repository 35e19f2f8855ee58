package lock

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"
)

// A TryLock whose wait ran out while the caller's context was ending:
// soak seed 147382580202382 saw "context canceled: lock: server
// unavailable: context deadline exceeded" at a run's end, with no fault
// near the call. The wait's own deadline is no server error.
func TestWaitErr_WaitRanOutThenCallerCancelled_NotUnavailable(t *testing.T) {
	m := &Mutex{name: "l", field: "o:1"}
	parent, cancelParent := context.WithCancel(context.Background())
	ctx, cancel := context.WithTimeoutCause(parent, time.Nanosecond, errWaitExpired)
	defer cancel()
	<-ctx.Done()
	cancelParent()

	err := m.waitErr(parent, ctx, ctx.Err())
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("wait ran out, then the caller cancelled: got %v, want context.Canceled and not ErrUnavailable", err)
	}

	// A connection error met before the caller's context ended still says
	// the server was unavailable.
	err = m.waitErr(parent, ctx, joinLine(context.DeadlineExceeded, unavailable(io.ErrUnexpectedEOF)))
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("connection error, then the caller cancelled: got %v, want context.Canceled and ErrUnavailable", err)
	}
}
