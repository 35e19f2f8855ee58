package lock

import (
	"context"
	"time"
)

// Owner identifies a lock owner: the client's ID and an owner number within
// that client. Its String form "<ClientID>:<ID>" is the field in the lock
// hash, as Redisson writes "<uuid>:<threadId>".
type Owner struct {
	ClientID string
	ID       int64
}

// String returns "<ClientID>:<ID>".
func (o Owner) String() string { return o.ClientID + ":" + itoa(o.ID) }

// Hold is a held lock, returned by every successful acquire. Re-entering
// returns the same Hold with its count raised; the Hold ends when the
// owner's last Unlock releases the lock (Err: ErrReleased) or when the lock
// is lost (Err wraps ErrLockLost). It is safe for concurrent use.
type Hold struct {
	m        *Mutex
	token    int64
	acquired time.Time
	done     chan struct{}

	// guarded by m.mu
	count       int
	lease       time.Duration // the lease sent with the latest acquire
	watchdog    bool          // renewed by the client's watchdog
	lastRenewed time.Time     // when the latest successful renewal (or acquire) was sent
	expiry      *time.Timer   // explicit lease: ends the hold when the lease runs out
	err         error
}

// Token returns the fencing token (X6): it is larger than the token of every
// earlier hold of this lock by any fairlock client. Pass it to the storage
// you guard and reject writes carrying an older one.
func (h *Hold) Token() int64 { return h.token }

// Done returns a channel that is closed when the hold ends: released by the
// last Unlock, or lost (X7). Stop working on the guarded resource when it
// closes without your Unlock.
func (h *Hold) Done() <-chan struct{} { return h.done }

// Err returns nil while the hold lasts; afterwards ErrReleased, ErrClosed,
// or an error wrapping ErrLockLost that says how it was lost.
func (h *Hold) Err() error {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	return h.err
}

// Context returns a context derived from parent that is cancelled, with
// Err as its cause, when the hold ends - the idiom for "stop now". Call the
// CancelFunc when done with it.
func (h *Hold) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
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

// end closes the hold with err; later calls do nothing. It reports whether
// this call ended it.
func (h *Hold) end(err error) bool {
	h.m.mu.Lock()
	ended := h.endLocked(err)
	h.m.mu.Unlock()
	return ended
}

func (h *Hold) endLocked(err error) bool {
	if h.err != nil {
		return false
	}
	h.err = err
	if h.expiry != nil {
		h.expiry.Stop()
	}
	if h.m.hold == h {
		h.m.hold = nil
	}
	close(h.done)
	return true
}
