package lock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
)

// TestExtend_KeepsTheHoldPastItsLease: an extended hold outlives the lease
// it was taken with, on the server and on the client (X12: the deadline
// moves with the acknowledged extension).
func TestExtend_KeepsTheHoldPastItsLease(t *testing.T) {
	srv := realServer(t)
	c := realClient(t, srv)
	ctx := testCtx(t, 30*time.Second)
	m := realMutex(t, c, "extend-keeps")

	const lease = 500 * time.Millisecond
	h, err := m.LockWithLease(ctx, lease)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Extend(ctx, h, 20*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if pttl := asInt(t, mustDo(t, srv, "PTTL", m.Keys()[0])); pttl < 10_000 {
		t.Fatalf("PTTL after Extend = %d ms, want about 20 s", pttl)
	}
	// Three times the original lease: the hold must not end meanwhile.
	select {
	case <-h.Done():
		t.Fatalf("hold ended after Extend: %v", h.Err())
	case <-time.After(3 * lease):
	}
	if held, err := m.IsHeldBy(ctx, m.Owner()); err != nil || !held {
		t.Fatalf("IsHeldBy after the original lease = %v, %v; want true", held, err)
	}
	// A second, shorter Extend never shortens the hold (X12).
	if err := m.Extend(ctx, h, time.Second); err != nil {
		t.Fatalf("second Extend: %v", err)
	}
	if pttl := asInt(t, mustDo(t, srv, "PTTL", m.Keys()[0])); pttl < 10_000 {
		t.Fatalf("PTTL after a shorter Extend = %d ms, want it unchanged (about 20 s)", pttl)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// TestExtend_GoneHoldIsLockLost: Extend of a hold that is gone fails with
// ErrLockLost and ends the hold (X7), whether the client noticed first
// (its deadline passed) or only the server knows (the lease ran out there,
// someone force-unlocked it, another owner holds it now).
func TestExtend_GoneHoldIsLockLost(t *testing.T) {
	tests := []struct {
		name  string
		lease time.Duration
		lose  func(t *testing.T, srv *redistest.Server, m, other *lock.Mutex, h *lock.Hold)
	}{
		{"expired on the client", 200 * time.Millisecond, func(t *testing.T, _ *redistest.Server, _, _ *lock.Mutex, h *lock.Hold) {
			select {
			case <-h.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("a 200ms hold did not end within 10s")
			}
		}},
		{"expired on the server", time.Minute, func(t *testing.T, srv *redistest.Server, m, _ *lock.Mutex, _ *lock.Hold) {
			mustDo(t, srv, "PEXPIRE", m.Keys()[0], "1")
			redistest.Eventually(t, 5*time.Second, "the lock hash to expire", func() bool {
				return asInt(t, mustDo(t, srv, "EXISTS", m.Keys()[0])) == 0
			})
		}},
		{"force-unlocked", time.Minute, func(t *testing.T, _ *redistest.Server, _, other *lock.Mutex, _ *lock.Hold) {
			if released, err := other.ForceUnlock(context.Background()); err != nil || !released {
				t.Fatalf("ForceUnlock = %v, %v", released, err)
			}
		}},
		{"taken by another owner", time.Minute, func(t *testing.T, srv *redistest.Server, m, other *lock.Mutex, _ *lock.Hold) {
			mustDo(t, srv, "PEXPIRE", m.Keys()[0], "1")
			if _, err := other.LockWithLease(testCtx(t, 10*time.Second), time.Minute); err != nil {
				t.Fatalf("other owner: %v", err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := realServer(t)
			c := realClient(t, srv)
			ctx := testCtx(t, 30*time.Second)
			m := realMutex(t, c, "extend-lost")
			other := realMutex(t, realClient(t, srv), "extend-lost")
			h, err := m.LockWithLease(ctx, tc.lease)
			if err != nil {
				t.Fatal(err)
			}
			tc.lose(t, srv, m, other, h)

			err = m.Extend(ctx, h, time.Minute)
			if !errors.Is(err, lock.ErrLockLost) {
				t.Fatalf("Extend = %v, want ErrLockLost", err)
			}
			select {
			case <-h.Done():
			default:
				t.Fatal("Done is open after Extend found the hold gone")
			}
			if !errors.Is(h.Err(), lock.ErrLockLost) {
				t.Fatalf("Err = %v, want ErrLockLost", h.Err())
			}
			// Nothing was brought back: the lock is (soon: the client's
			// deadline comes first, X12) free or the other's, not extended
			// by a minute.
			redistest.Eventually(t, 5*time.Second, "the lost owner's field gone", func() bool {
				st, err := m.Inspect(ctx, 0)
				if err != nil {
					t.Fatal(err)
				}
				return st.CountOf(m.Owner()) == 0
			})
		})
	}
}

// TestExtend_RacingUnlockNeverResurrects: an Extend racing the last Unlock
// runs before it (and the Unlock releases all the same) or after it (and
// finds the hold released); the lock is never left held (X13).
func TestExtend_RacingUnlockNeverResurrects(t *testing.T) {
	srv := realServer(t)
	c := realClient(t, srv)
	ctx := testCtx(t, 60*time.Second)
	m := realMutex(t, c, "extend-race")
	var before, after int // Extends that ran before and after the Unlock
	defer func() { t.Logf("Extend ran before Unlock %d times, after it %d times", before, after) }()
	for i := range 30 {
		h, err := m.LockWithLease(ctx, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var (
			wg                   sync.WaitGroup
			extendErr, unlockErr error
			start                = make(chan struct{})
		)
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			extendErr = m.Extend(ctx, h, time.Minute)
		}()
		go func() {
			defer wg.Done()
			<-start
			unlockErr = m.Unlock(ctx)
		}()
		close(start)
		wg.Wait()
		if unlockErr != nil {
			t.Fatalf("round %d: Unlock: %v", i, unlockErr)
		}
		switch {
		case extendErr == nil:
			before++
		case errors.Is(extendErr, lock.ErrNotHeld) && errors.Is(extendErr, lock.ErrReleased):
			after++
		default:
			t.Fatalf("round %d: Extend = %v, want nil or ErrNotHeld with ErrReleased", i, extendErr)
		}
		if !errors.Is(h.Err(), lock.ErrReleased) {
			t.Fatalf("round %d: hold Err = %v, want ErrReleased", i, h.Err())
		}
		if n := asInt(t, mustDo(t, srv, "EXISTS", m.Keys()[0])); n != 0 {
			t.Fatalf("round %d: the lock hash exists after Unlock (Extend resurrected it)", i)
		}
	}
}

// TestExtend_Rejects: bad input and holds Extend does not apply to get a
// sentinel error and change nothing (X10).
func TestExtend_Rejects(t *testing.T) {
	srv := realServer(t)
	c := realClient(t, srv)
	ctx := testCtx(t, 30*time.Second)
	m := realMutex(t, c, "extend-rejects")
	h, err := m.LockWithLease(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	wd := realMutex(t, c, "extend-rejects-watchdog")
	wdHold, err := wd.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := realMutex(t, c, "extend-rejects-released")
	doneHold, err := done.LockWithLease(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := done.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	before := asInt(t, mustDo(t, srv, "PTTL", m.Keys()[0]))

	tests := []struct {
		name  string
		m     *lock.Mutex
		ctx   context.Context
		h     *lock.Hold
		lease time.Duration
		want  []error
	}{
		{"nil context", m, nil, h, time.Minute, []error{lock.ErrInvalidArgument}},
		{"zero lease", m, ctx, h, 0, []error{lock.ErrInvalidArgument}},
		{"negative lease", m, ctx, h, -time.Second, []error{lock.ErrInvalidArgument}},
		{"sub-millisecond lease", m, ctx, h, 500 * time.Microsecond, []error{lock.ErrInvalidArgument}},
		{"lease over MaxDuration", m, ctx, h, (10 * 365 * 24 * time.Hour) + time.Hour, []error{lock.ErrInvalidArgument}},
		{"nil hold", m, ctx, nil, time.Minute, []error{lock.ErrNotHeld}},
		{"another owner's hold", realMutex(t, c, "extend-rejects"), ctx, h, time.Minute, []error{lock.ErrNotHeld}},
		{"watchdog hold", wd, ctx, wdHold, time.Minute, []error{lock.ErrInvalidArgument}},
		{"released hold", done, ctx, doneHold, time.Minute, []error{lock.ErrNotHeld, lock.ErrReleased}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.m.Extend(tc.ctx, tc.h, tc.lease)
			for _, want := range tc.want {
				if !errors.Is(err, want) {
					t.Errorf("Extend = %v, want %v", err, want)
				}
			}
		})
	}
	if h.Err() != nil || wdHold.Err() != nil {
		t.Fatalf("a rejected Extend ended a hold: %v, %v", h.Err(), wdHold.Err())
	}
	if after := asInt(t, mustDo(t, srv, "PTTL", m.Keys()[0])); after > before {
		t.Fatalf("PTTL grew from %d to %d ms: a rejected Extend changed the lock", before, after)
	}
	c.Close()
	if err := m.Extend(context.Background(), h, time.Minute); !errors.Is(err, lock.ErrClosed) {
		t.Fatalf("Extend after Close = %v, want ErrClosed", err)
	}
}
