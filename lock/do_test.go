package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
)

// Tests of Mutex.Do and TryDo, against a real redis-server.

var errWork = errors.New("the work failed")

// assertFree fails the test unless the lock m names is free now: with the
// client's 30 s lease, a lock Do left held would still be held.
func assertFree(t *testing.T, ctx context.Context, m *lock.Mutex) {
	t.Helper()
	locked, err := m.IsLocked(ctx)
	if err != nil {
		t.Fatalf("IsLocked: %v", err)
	}
	if locked {
		t.Fatal("the lock is still held after Do returned")
	}
}

func TestDoRunsTheWorkUnderTheHold(t *testing.T) {
	srv := realServer(t)
	c := realClient(t, srv)
	ctx := testCtx(t, 30*time.Second)
	m, other := realMutex(t, c, "do-runs"), realMutex(t, c, "do-runs")
	var held *lock.Hold
	err := m.Do(ctx, func(wctx context.Context, hold *lock.Hold) error {
		held = hold
		if hold.Token() <= 0 || hold.Err() != nil {
			t.Errorf("work got hold token %d, Err %v: want a live hold", hold.Token(), hold.Err())
		}
		if wctx.Err() != nil {
			t.Errorf("work's context has ended already: %v", wctx.Err())
		}
		if _, err := other.TryLock(ctx, 0); !errors.Is(err, lock.ErrNotAcquired) {
			t.Errorf("another owner's TryLock during the work: %v, want ErrNotAcquired", err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if held == nil {
		t.Fatal("Do returned nil without running the work")
	}
	if !errors.Is(held.Err(), lock.ErrReleased) {
		t.Errorf("after Do the hold's Err is %v, want ErrReleased", held.Err())
	}
	assertFree(t, ctx, m)
}

func TestDoUnlocksAfterAWorkError(t *testing.T) {
	srv := realServer(t)
	c := realClient(t, srv)
	ctx := testCtx(t, 30*time.Second)
	m := realMutex(t, c, "do-error")
	err := m.Do(ctx, func(context.Context, *lock.Hold) error { return errWork })
	if !errors.Is(err, errWork) || errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("Do = %v, want the work's error alone", err)
	}
	assertFree(t, ctx, m)
}

func TestDoUnlocksAfterAPanicAndPanicsOn(t *testing.T) {
	srv := realServer(t)
	c := realClient(t, srv)
	ctx := testCtx(t, 30*time.Second)
	m := realMutex(t, c, "do-panic")
	value := errors.New("the panic value")
	func() {
		defer func() {
			if got := recover(); got != value {
				t.Errorf("recovered %v, want the work's panic value", got)
			}
		}()
		_ = m.Do(ctx, func(context.Context, *lock.Hold) error { panic(value) })
		t.Error("Do returned after the work panicked")
	}()
	assertFree(t, ctx, m)
}

// TestDoUnlocksAfterTheCallerGivesUp cancels the caller's context while
// the work runs: the work's context ends with it, and Do still releases
// the lock (it would otherwise stay held for the 30 s lease).
func TestDoUnlocksAfterTheCallerGivesUp(t *testing.T) {
	srv := realServer(t)
	c := realClient(t, srv)
	ctx := testCtx(t, 30*time.Second)
	m := realMutex(t, c, "do-cancel")
	callerCtx, cancel := context.WithCancel(ctx)
	err := m.Do(callerCtx, func(wctx context.Context, _ *lock.Hold) error {
		cancel()
		select {
		case <-wctx.Done():
			return wctx.Err()
		case <-ctx.Done():
			return errors.New("the work's context did not end with the caller's")
		}
	})
	if !errors.Is(err, context.Canceled) || errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("Do = %v, want context.Canceled alone", err)
	}
	assertFree(t, ctx, m)
}

// TestDoSaysTheLockWasLost force-unlocks the lock while the work runs:
// the work's context ends with ErrLockLost as its cause, and Do's error
// wraps both the work's error and ErrLockLost, and says the work may have
// overlapped another holder.
func TestDoSaysTheLockWasLost(t *testing.T) {
	srv := realServer(t)
	c := realClient(t, srv)
	ctx := testCtx(t, 30*time.Second)
	m, admin := realMutex(t, c, "do-lost"), realMutex(t, c, "do-lost")
	err := m.Do(ctx, func(wctx context.Context, _ *lock.Hold) error {
		if _, err := admin.ForceUnlock(ctx); err != nil {
			return err
		}
		select {
		case <-wctx.Done():
		case <-ctx.Done():
			return errors.New("the work's context did not end when the lock was lost")
		}
		if cause := context.Cause(wctx); !errors.Is(cause, lock.ErrLockLost) {
			t.Errorf("the work's context's cause is %v, want ErrLockLost", cause)
		}
		return errWork
	})
	if !errors.Is(err, errWork) || !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("Do = %v, want the work's error and ErrLockLost", err)
	}
	if !strings.Contains(err.Error(), "another owner may have held it") {
		t.Errorf("Do's error does not say the work may have overlapped another holder: %v", err)
	}
	t.Logf("Do: %v", err)
}

// TestDoSaysTheLockWasLostWhenUnlockFindsIt deletes the lock hash by hand
// and returns at once: whether the client hears of the deletion before
// Unlock runs or Unlock finds the lock gone (ErrNotHeld), Do says
// ErrLockLost, not ErrNotHeld alone.
func TestDoSaysTheLockWasLostWhenUnlockFindsIt(t *testing.T) {
	srv := realServer(t)
	c := realClient(t, srv)
	ctx := testCtx(t, 30*time.Second)
	m := realMutex(t, c, "do-deleted")
	err := m.Do(ctx, func(context.Context, *lock.Hold) error {
		mustDo(t, srv, "DEL", m.Keys()[0])
		return nil
	})
	if !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("Do = %v, want ErrLockLost", err)
	}
	t.Logf("Do: %v", err)
}

// TestDoJoinsTheUnlocksError closes the client while the work runs: the
// hold ends (ErrClosed), Unlock fails with ErrClosed, and Do's error
// wraps both that and the work's error.
func TestDoJoinsTheUnlocksError(t *testing.T) {
	srv := realServer(t)
	c := realClient(t, srv)
	ctx := testCtx(t, 30*time.Second)
	m := realMutex(t, c, "do-closed")
	err := m.Do(ctx, func(wctx context.Context, _ *lock.Hold) error {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		select {
		case <-wctx.Done():
		case <-ctx.Done():
			return errors.New("the work's context did not end when the client closed")
		}
		if cause := context.Cause(wctx); !errors.Is(cause, lock.ErrClosed) {
			t.Errorf("the work's context's cause after Close is %v, want ErrClosed", cause)
		}
		return errWork
	})
	if !errors.Is(err, errWork) || !errors.Is(err, lock.ErrClosed) {
		t.Fatalf("Do = %v, want the work's error and ErrClosed", err)
	}
}

func TestDoReentersAndGivesBackOnlyItsCount(t *testing.T) {
	srv := realServer(t)
	c := realClient(t, srv)
	ctx := testCtx(t, 30*time.Second)
	m := realMutex(t, c, "do-reenter")
	err := m.Do(ctx, func(ctx context.Context, outer *lock.Hold) error {
		if err := m.Do(ctx, func(context.Context, *lock.Hold) error { return nil }); err != nil {
			return err
		}
		if n, err := m.HoldCount(ctx); err != nil || n != 1 || outer.Err() != nil {
			t.Errorf("after the inner Do: hold count %d (%v), outer hold Err %v; want 1 and a live hold", n, err, outer.Err())
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	assertFree(t, ctx, m)
}

func TestTryDoGivesUpOnABusyLock(t *testing.T) {
	srv := realServer(t)
	c := realClient(t, srv)
	ctx := testCtx(t, 30*time.Second)
	m, holder := realMutex(t, c, "do-busy"), realMutex(t, c, "do-busy")
	if _, err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	ran := false
	work := func(context.Context, *lock.Hold) error { ran = true; return nil }
	for _, wait := range []time.Duration{0, 50 * time.Millisecond} {
		if err := m.TryDo(ctx, wait, work); !errors.Is(err, lock.ErrNotAcquired) {
			t.Errorf("TryDo(wait %v) on a held lock = %v, want ErrNotAcquired", wait, err)
		}
	}
	if ran {
		t.Error("TryDo ran the work without the lock")
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.TryDo(ctx, 0, work); err != nil || !ran {
		t.Fatalf("TryDo on a free lock = %v (work ran: %v)", err, ran)
	}
	assertFree(t, ctx, m)
}

func TestDoRejectsANilWork(t *testing.T) {
	srv := realServer(t)
	c := realClient(t, srv)
	ctx := testCtx(t, 30*time.Second)
	m := realMutex(t, c, "do-nil")
	if err := m.Do(ctx, nil); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("Do(nil work) = %v, want ErrInvalidArgument", err)
	}
	if n := asInt(t, mustDo(t, srv, "DBSIZE")); n != 0 {
		t.Errorf("Do(nil work) left %d keys", n)
	}
}
