package lock_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
)

// TestLocker_ExcludesAndPanicsAsDocumented: two Lockers of two owners
// exclude each other; Unlock without a hold panics with ErrNotHeld, and
// Lock after Close with ErrClosed.
func TestLocker_ExcludesAndPanicsAsDocumented(t *testing.T) {
	srv := realServer(t)
	c := realClient(t, srv)
	ctx := testCtx(t, 30*time.Second)
	const name = "locker"
	first := realMutex(t, c, name).Locker()
	secondMutex := realMutex(t, c, name)
	second := secondMutex.Locker()
	var _ sync.Locker = second

	first.Lock()
	entered := make(chan struct{})
	go func() {
		second.Lock()
		close(entered)
	}()
	probe := realMutex(t, c, name)
	redistest.Eventually(t, 10*time.Second, "the second Locker queued", func() bool {
		st, err := probe.Inspect(ctx, 0)
		return err == nil && st.QueueLength == 1
	})
	select {
	case <-entered:
		t.Fatal("the second Locker locked while the first held")
	default:
	}
	first.Unlock()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the second Locker did not lock after the first unlocked")
	}
	if held, err := secondMutex.IsHeldBy(ctx, secondMutex.Owner()); err != nil || !held {
		t.Fatalf("second owner holds = %v, %v", held, err)
	}
	second.Unlock()

	if err := panicOf(first.Unlock); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Unlock without a hold panicked with %v, want ErrNotHeld", err)
	}
	c.Close()
	if err := panicOf(first.Lock); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("Lock after Close panicked with %v, want ErrClosed", err)
	}
}

// panicOf runs f and returns the error it panicked with (nil: no panic).
func panicOf(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			var ok bool
			if err, ok = r.(error); !ok {
				err = errors.New("panic value is not an error")
			}
		}
	}()
	f()
	return nil
}
