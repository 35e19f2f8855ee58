package lock

import (
	"errors"
	"strings"

	"github.com/fairlock/fairlock/backend"
)

// Sentinel errors. Every error the package returns wraps one of these (or a
// context error, or a backend error) with the lock name and owner, on one
// line; test with errors.Is.
var (
	// ErrInvalidName: the name is empty, or its keys would not share one
	// cluster slot (for example "a{}b" or an unbalanced "{"). Nothing was
	// sent to Redis.
	ErrInvalidName = errors.New("lock: invalid lock name")
	// ErrInvalidArgument: a nil context, a duration that is not positive,
	// shorter than a millisecond or longer than ten years, an option value
	// the client cannot use, or Extend of a hold the watchdog renews.
	// Nothing was sent to Redis.
	ErrInvalidArgument = errors.New("lock: invalid argument")
	// ErrNotAcquired: TryLock's wait ran out, or its one attempt found the
	// lock taken or others queued: the lock is busy. The owner is not left
	// in the queue.
	ErrNotAcquired = errors.New("lock: not acquired")
	// ErrUnavailable: the server could not be reached, or could not
	// answer yet (loading, failing over), on the call's last attempt, so
	// the call could not tell whether the lock is busy. The error also
	// wraps the last connection error. A TryLock whose wait ran out that
	// way returns it instead of ErrNotAcquired.
	ErrUnavailable = errors.New("lock: server unavailable")
	// ErrNotHeld: Unlock by an owner that does not hold the lock. Nothing
	// was changed.
	ErrNotHeld = errors.New("lock: not held by this owner")
	// ErrLockLost: a Hold ended without Unlock: its lease ran out, someone
	// force-unlocked or deleted the lock, or renewal kept failing for longer
	// than the lease. Reported by Hold.Err; see Hold.Done for how soon.
	ErrLockLost = errors.New("lock: lock lost")
	// ErrReleased: Hold.Err after the owner's last Unlock.
	ErrReleased = errors.New("lock: released")
	// ErrNotReplicated: with WithReplicaAcks, an acquire that fewer
	// replicas than asked acknowledged in time. It was rolled back (the hold
	// given up, the owner out of the queue) before the error was returned.
	ErrNotReplicated = errors.New("lock: acquire not replicated")
	// ErrEvictionPolicy: the server has a memory limit and a
	// maxmemory-policy that may evict lock keys (anything but noeviction:
	// every lock key carries a TTL), so a held lock could vanish and be
	// granted to the next waiter. Returned by NewClient, and by acquires
	// after a reconnect found such a policy, unless WithEvictionRisk
	// accepts it.
	ErrEvictionPolicy = errors.New("lock: server may evict lock keys")
	// ErrOutOfMemory: the server refused a write because its memory is full
	// (maxmemory reached under noeviction). The script changed nothing; it
	// is not retried. Renewals keep working (they only move expiries).
	ErrOutOfMemory = errors.New("lock: server out of memory")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("lock: client closed")
	// ErrUnexpectedReply: the server answered in a shape this version does
	// not know (a misbehaving backend or proxy). It is
	// backend.ErrUnexpectedReply, so either name matches.
	ErrUnexpectedReply = backend.ErrUnexpectedReply
)

// lineError is several errors in one line, each usable with errors.Is
// and errors.As: errors.Join would put each on a line of its own, which
// breaks one-line logs.
type lineError struct{ errs []error }

// joinLine joins the non-nil errs as errors.Join does, on one line:
// "a: b: c".
func joinLine(errs ...error) error {
	var kept []error
	for _, err := range errs {
		if err != nil {
			kept = append(kept, err)
		}
	}
	switch len(kept) {
	case 0:
		return nil
	case 1:
		return kept[0]
	}
	return &lineError{errs: kept}
}

func (e *lineError) Error() string {
	var b strings.Builder
	for i, err := range e.errs {
		if i > 0 {
			b.WriteString(": ")
		}
		b.WriteString(err.Error())
	}
	return b.String()
}

func (e *lineError) Unwrap() []error { return e.errs }

// unavailable marks err, a transient error, as the server being
// unavailable; other errors are returned as they are.
func unavailable(err error) error {
	if err == nil || !transient(err) || errors.Is(err, ErrUnavailable) {
		return err
	}
	return joinLine(ErrUnavailable, err)
}
