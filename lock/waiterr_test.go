package lock

import (
	"context"
	"errors"
	"fmt"
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

// A TryLock whose attempt was granted and rolled back for too few replica
// acknowledgements, the reply coming after the wait had run out, said
// "not acquired" with nobody holding the lock (cluster soak seed
// 82645767136765, 272.7 s: a TryLock with a 500 ms wait just after a
// failover, while WAIT found no replica). It says ErrNotReplicated.
func TestWaitErr_WaitRanOutOnItsOwnError_SaysThatError(t *testing.T) {
	m := &Mutex{name: "l", field: "o:1", c: &Client{}} // a client that is not closed
	ctx, cancel := context.WithTimeoutCause(context.Background(), time.Nanosecond, errWaitExpired)
	defer cancel()
	<-ctx.Done()

	notReplicated := fmt.Errorf("%w: 0 of 1 replicas acknowledged within 1s", ErrNotReplicated)
	if err := m.waitErr(context.Background(), ctx, notReplicated); !errors.Is(err, ErrNotReplicated) || errors.Is(err, ErrNotAcquired) {
		t.Fatalf("a grant rolled back after the wait ran out: got %v, want ErrNotReplicated and not ErrNotAcquired", err)
	}
	// The wait's own end, with the owner queued, is "busy".
	if err := m.waitErr(context.Background(), ctx, ctx.Err()); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("the wait ran out: got %v, want ErrNotAcquired", err)
	}
}
