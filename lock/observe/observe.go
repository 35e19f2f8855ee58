// Package observe is what package lock tells an observer of its calls,
// for tracing and metrics (package otel implements it with
// OpenTelemetry). Package lock imports no telemetry library, and with no
// observer it does no tracing work at all.
package observe

import (
	"context"
	"time"

	"github.com/fairlock/fairlock/lock/inspect"
)

// Op names a Mutex operation for an Observer.
type Op string

// Operations reported to an Observer.
const (
	OpLock        Op = "Lock"
	OpTryLock     Op = "TryLock" // TryLock and TryLockWithLease
	OpUnlock      Op = "Unlock"
	OpForceUnlock Op = "ForceUnlock"
)

// Outcome is how an acquire or release ended.
type Outcome string

// Outcomes reported to an Observer.
const (
	OutcomeAcquired  Outcome = "acquired"  // a new hold
	OutcomeReentered Outcome = "reentered" // the holder acquired again
	OutcomeTimedOut  Outcome = "timed_out" // TryLock's wait ran out, or one attempt found it taken
	OutcomeCancelled Outcome = "cancelled" // the caller's context ended
	OutcomeReleased  Outcome = "released"  // Unlock or ForceUnlock did its work
	OutcomeNotHeld   Outcome = "not_held"  // Unlock by a non-holder; ForceUnlock of a free lock
	OutcomeError     Outcome = "error"     // anything else: see Err
)

// Call identifies the operation an Observer is told about.
type Call struct {
	Op    Op
	Name  string // the lock name, without the key prefix
	Owner string // the owner field, "<clientID>:<ownerID>"
	// Client describes the calling client (lock.WithDescription); nil
	// without a description. Observers must not modify it.
	Client *inspect.Description
}

// AcquireResult is what an acquire call ended with.
type AcquireResult struct {
	Outcome Outcome
	Err     error         // nil unless Outcome is OutcomeError, OutcomeCancelled or OutcomeTimedOut
	Wait    time.Duration // time from the call to its end
	// Position is the 1-based queue position when the owner first queued,
	// 0 if it never queued.
	Position  int
	Wakeups   int   // wake-ups while waiting: messages, reconnects, and holds of the same client ending
	HoldCount int   // hold count after the call (0 unless acquired)
	Token     int64 // fencing token of the hold (0 unless acquired)
}

// ReleaseResult is what a release call ended with.
type ReleaseResult struct {
	Outcome   Outcome
	Err       error
	HoldCount int // the owner's hold count left (Unlock)
	// Held is how long the hold lasted, from its grant (not from the
	// call that waited for it), when this call ended it.
	Held time.Duration
}

// Observer receives lock events for tracing and metrics. Package otel
// implements it with OpenTelemetry. Methods are called synchronously and
// must be quick and safe for concurrent use.
type Observer interface {
	// StartAcquire is called when an acquire call (Lock, TryLock, ...) starts. The
	// returned context carries on to the Redis calls the acquire makes (so
	// client spans nest under it), and the tracker hears the rest.
	StartAcquire(ctx context.Context, c Call) (context.Context, AcquireTracker)
	// StartRelease is called when Unlock or ForceUnlock starts.
	StartRelease(ctx context.Context, c Call) (context.Context, ReleaseTracker)
	// HoldLost is called once when a hold ends without Unlock; held is
	// how long it lasted, from the grant; err wraps lock.ErrLockLost and
	// says why.
	HoldLost(c Call, token int64, held time.Duration, err error)
	// Renewed is called for every watchdog renewal; err is nil on success.
	Renewed(c Call, err error)
}

// AcquireTracker follows one acquire call.
type AcquireTracker interface {
	// Queued: the owner joined the queue at this 1-based position.
	Queued(position int)
	// Woken: a wake-up arrived while waiting; reconnect tells a reconnect
	// of the subscription apart from an unlock message or, in process, the
	// end of a hold of the same client on the lock.
	Woken(reconnect bool)
	// End: the call returns.
	End(AcquireResult)
}

// ReleaseTracker follows one release call.
type ReleaseTracker interface {
	End(ReleaseResult)
}
