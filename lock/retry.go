package lock

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/fairlock/fairlock/backend"
)

// Back-off between retries of a request that failed with a transient error
// (X14): exponential from 10 ms to at most 500 ms, each interval drawn at
// random within ±50% so clients that lost the same server do not return in
// step.
const (
	retryInitial = 10 * time.Millisecond
	retryMax     = 500 * time.Millisecond
)

// retrier paces the retries of one call. It is not safe for concurrent use.
type retrier struct {
	b       backoff.ExponentialBackOff
	closing <-chan struct{}
	last    error // the latest transient error, for the caller's final error
	limit   int   // the most calls do makes; 0: no limit
	// wake, when set, ends a pause early: a queued waiter's wake-ups,
	// since a grant or a "you are first" that arrives while its attempt
	// backs off from a cluster's TRYAGAIN is worth the next try at once.
	wake <-chan backend.Event
	// window, when set, closes when retrying must stop (an Unlock's retry
	// window): the pause that finds it closed - at once, when it closed
	// during the attempt - returns context.DeadlineExceeded wrapping the
	// last transient error, as for a context that ran out.
	window <-chan struct{}
}

// do calls op until it returns nil, an error retrying cannot fix (not
// transient, or marked final), or its limit of calls is reached; between
// calls it pauses (pause). When ctx ends or the client closes after a
// transient error, it returns ctx's error (or ErrClosed) wrapping that
// one and ErrUnavailable, as pause does. It is the one retry loop of
// every request the lock repeats.
func (r *retrier) do(ctx context.Context, op func() error) error {
	for n := 1; ; n++ {
		err := op()
		switch {
		case err == nil || !transient(err) || n == r.limit:
			return err
		case ctx.Err() != nil:
			r.last = err
			return joinLine(ctx.Err(), unavailable(err))
		}
		if err := r.pause(ctx, err); err != nil {
			return err
		}
	}
}

// final marks an error do must not retry, whatever it wraps.
type final struct{ error }

func (f final) Unwrap() error { return f.error }

// unwrapFinal returns the error a final mark carries.
func unwrapFinal(err error) error {
	if f, ok := err.(final); ok {
		return f.error
	}
	return err
}

func newRetrier(closing <-chan struct{}) *retrier {
	return &retrier{
		b: backoff.ExponentialBackOff{
			InitialInterval:     retryInitial,
			RandomizationFactor: 0.5,
			Multiplier:          2,
			MaxInterval:         retryMax,
		},
		closing: closing,
	}
}

// pause waits the next back-off interval after the transient error err. It
// returns ctx's error, or ErrClosed when the client closes, wrapping err
// (and ErrUnavailable) either way so the caller sees what kept failing.
func (r *retrier) pause(ctx context.Context, err error) error {
	r.last = err
	t := time.NewTimer(r.b.NextBackOff())
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-r.wake:
		return nil
	case <-ctx.Done():
		return joinLine(ctx.Err(), unavailable(err))
	case <-r.window:
		return joinLine(context.DeadlineExceeded, unavailable(err))
	case <-r.closing:
		return joinLine(ErrClosed, unavailable(err))
	}
}

// transient reports whether a request that failed with err may succeed
// when sent again: a network error or timeout, or a server that is
// loading, busy or failing over. A script error, a closed backend or a
// reply of the wrong shape is final.
func transient(err error) bool {
	var f final
	switch {
	case err == nil,
		errors.As(err, &f),
		errors.Is(err, backend.ErrClosed),
		errors.Is(err, backend.ErrNotSupported),
		errors.Is(err, backend.ErrUnexpectedReply),
		errors.Is(err, ErrUnexpectedReply),
		errors.Is(err, ErrNotReplicated),
		errors.Is(err, ErrLockLost),
		errors.Is(err, ErrNotHeld),
		errors.Is(err, ErrNotAcquired), // the server answered: the lock is busy
		errors.Is(err, ErrClosed),
		errors.Is(err, ErrInvalidArgument),
		errors.Is(err, context.Canceled):
		return false
	}
	var se *backend.ServerError
	if errors.As(err, &se) {
		return transientServerError(se.Message)
	}
	return true
}

// notRun reports whether a request that failed with err certainly did
// not run its script: the server answered with an error instead (a
// cluster redirection, a server loading or failing over), or no
// connection could be opened. Any other failure may have come after the
// script ran.
func notRun(err error) bool {
	var se *backend.ServerError
	return errors.As(err, &se) || errors.Is(err, syscall.ECONNREFUSED)
}

// transientServerError reports whether an error reply comes from a server
// that cannot answer now but will: still loading its data after a restart,
// running a long script, in a cluster reconfiguration (a slot moving or
// moved, which the client library did not follow, or no quorum), or a
// former primary after a failover. None of these ran the script.
func transientServerError(msg string) bool {
	code, _, _ := strings.Cut(msg, " ")
	switch code {
	case "LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "MOVED", "ASK":
		return true
	}
	return false
}
