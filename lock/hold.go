package lock

import (
	"context"
	"time"
)

// Hold is a held lock, returned by every successful acquire. Re-entering
// returns the same Hold; the Hold ends when the owner's last Unlock
// releases the lock (Err: ErrReleased) or when the lock is lost (Err wraps
// ErrLockLost). It is a read-only view, safe for concurrent use: nothing
// you call on a Hold changes it; the client ends it, once, when the
// owner's last Unlock releases the lock or when it learns that the lock is
// lost. A nil *Hold (what a failed acquire returns) behaves as a hold that
// has ended with ErrNotHeld.
//
// The client keeps a deadline for every hold: the send time of the latest
// grant, re-entry or renewal the server acknowledged, plus the lease, less
// a guard (5% of the lease, at most 100 ms) for timer lateness. The server
// cannot expire the lock before that instant, so when the deadline passes
// without a newer acknowledgement - a partition, a paused server,
// renewals failing - Done closes before anyone else can be granted the
// lock.
type Hold struct {
	token    int64
	acquired time.Time // when the client got the grant: hold durations count from here
	asked    time.Time // when the request that granted it was sent (a hand-over: the attempt that queued the owner)
	done     chan struct{}
	err      error // written once, before done is closed
}

// leaseGuard is how much earlier than the lease allows the client ends a
// hold: room for a late timer on a loaded machine.
func leaseGuard(lease time.Duration) time.Duration {
	return min(lease/20, 100*time.Millisecond)
}

// Token returns the fencing token: it is larger than the token of every
// earlier hold of this lock by any fairlock client. Pass it to the storage
// you guard and reject writes carrying an older one. 0 for a nil Hold.
func (h *Hold) Token() int64 {
	if h == nil {
		return 0
	}
	return h.token
}

// Done returns a channel that is closed when the hold ends: released by the
// last Unlock, or lost. Stop working on the guarded resource when it
// closes without your Unlock. When the lease runs out or renewals fail, it
// closes before the server can let anyone else in. When another fairlock
// client force-unlocks or deletes the lock, it closes within about one
// network delay (the script tells the holder's client on its own
// channel). When the lock hash is deleted by hand, expires or is evicted,
// or a Redisson client force-unlocks it, it closes within about two
// network delays where the backend can watch keys (backend.KeyWatcher:
// the client watches the hash of each lock it holds and checks its hold
// when the hash changes), else at the watchdog's next check, a third of
// the client's lease later. For a nil Hold it is closed already.
func (h *Hold) Done() <-chan struct{} {
	if h == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return h.done
}

// Err returns nil while the hold lasts; afterwards ErrReleased, ErrClosed,
// or an error wrapping ErrLockLost that says how it was lost. For a nil
// Hold it returns ErrNotHeld.
func (h *Hold) Err() error {
	if h == nil {
		return ErrNotHeld
	}
	select {
	case <-h.done:
		return h.err
	default:
		return nil
	}
}

// Context returns a context derived from parent (context.Background when
// parent is nil) that is cancelled, with Err as its cause, when the hold
// ends - the idiom for "stop now". Call the CancelFunc when done with it.
func (h *Hold) Context(parent context.Context) (context.Context, context.CancelFunc) {
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithCancelCause(parent)
	if h == nil {
		cancel(ErrNotHeld)
		return ctx, func() {}
	}
	// The goroutine ends when the hold ends or the context is cancelled,
	// whichever comes first; the returned CancelFunc guarantees the latter.
	go func() {
		select {
		case <-h.done:
			cancel(h.Err())
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}
