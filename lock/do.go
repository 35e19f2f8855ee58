package lock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Do runs work while this owner holds the lock: it waits for the lock as
// Lock does (in arrival order, until ctx ends), runs work, and unlocks
// whatever work does - returns, fails or panics. It is the eight lines
// every caller of Lock writes, in one call:
//
//   - work gets a context derived from ctx that is cancelled when the
//     hold ends, with the hold's error as its cause (errors.Is(
//     context.Cause(ctx), ErrLockLost) once the lock is lost), and the
//     Hold, for its fencing token.
//   - The Unlock runs with ctx's values but not its cancellation
//     (context.WithoutCancel), so a caller that gives up while work runs
//     still releases the lock at once instead of leaving it held until
//     its lease runs out. Unlock retries connection errors for about two
//     seconds, so Do returns within that of work's end.
//   - When work panics (or calls runtime.Goexit), Do unlocks and lets the
//     panic go on, with its stack; the unlock's error is then dropped.
//
// Do returns Lock's error, and does not run work, when the lock could not
// be taken. Otherwise it returns work's error and the lock's, joined so
// that errors.Is and errors.As find either (nil when both are nil). The
// lock's error wraps ErrLockLost when the lock was lost before Unlock
// released it - while work ran, or found lost by Unlock: work may have run
// while another owner held the lock, and the error says so. It is
// Unlock's error otherwise: ErrClosed when the client was closed
// meanwhile, or, when Unlock's retries ran out, a connection error
// wrapping ErrLockLost (work ran under the hold; the lock frees itself
// within the lease). A nil work is ErrInvalidArgument, and nothing is
// sent.
//
// Like Lock, Do re-enters when this owner already holds the lock: its
// Unlock then takes back only its own count.
func (m *Mutex) Do(ctx context.Context, work func(ctx context.Context, hold *Hold) error) error {
	return m.do(ctx, work, func() (*Hold, error) { return m.Lock(ctx) })
}

// TryDo is Do that gives up as TryLock does: after waiting at most wait
// for the lock (with a wait of 0: one attempt, never queued) it returns
// TryLock's error - ErrNotAcquired when the lock stayed busy,
// ErrUnavailable when the server could not be reached - without running
// work.
func (m *Mutex) TryDo(ctx context.Context, wait time.Duration, work func(ctx context.Context, hold *Hold) error) error {
	return m.do(ctx, work, func() (*Hold, error) { return m.TryLock(ctx, wait) })
}

// do takes the lock with acquire, runs work under it and unlocks.
func (m *Mutex) do(ctx context.Context, work func(context.Context, *Hold) error, acquire func() (*Hold, error)) (err error) {
	if work == nil {
		return m.errorf(fmt.Errorf("%w: nil work function", ErrInvalidArgument))
	}
	hold, err := acquire()
	if err != nil {
		return err
	}
	wctx, cancel := hold.Context(ctx)
	var workErr error
	// Deferred, not run after work: a panic or Goexit in work still
	// unlocks (and goes on unrecovered, keeping its stack).
	defer func() {
		cancel()
		err = joinDo(workErr, m.finish(ctx, hold))
	}()
	workErr = work(wctx, hold)
	return nil
}

// finish unlocks after work and returns the lock's part of Do's error.
func (m *Mutex) finish(ctx context.Context, hold *Hold) error {
	lostDuringWork := errors.Is(hold.Err(), ErrLockLost)
	err := m.Unlock(context.WithoutCancel(ctx))
	if !lostDuringWork && !errors.Is(err, ErrNotHeld) {
		return err
	}
	// Unlock found nothing to release (ErrNotHeld): the hold ended, as
	// lost, before it - Hold.Err says how.
	why := hold.Err()
	if !errors.Is(why, ErrLockLost) {
		why = joinLine(ErrLockLost, err)
	}
	return m.errorf(fmt.Errorf("%w; the lock was lost before the work's end: another owner may have held it while the work ran", why))
}

// doError is Do's error when both the work and the lock failed: one line,
// as every error of the package, with either found by errors.Is and
// errors.As. (joinLine's "a: b" would read as the work's error wrapping
// the lock's.)
type doError struct{ work, lock error }

// joinDo returns the work's and the lock's errors as one, nil when both
// are nil.
func joinDo(work, lock error) error {
	switch {
	case lock == nil:
		return work
	case work == nil:
		return lock
	}
	return &doError{work: work, lock: lock}
}

func (e *doError) Error() string { return e.work.Error() + "; then " + e.lock.Error() }

func (e *doError) Unwrap() []error { return []error{e.work, e.lock} }
