package lock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fairlock/fairlock/backend"
)

// Mutex is one owner's handle on one fair lock. Create it with
// Client.NewMutex. Its methods are safe for concurrent use.
//
// A Mutex is one owner (Go has no thread IDs, so ownership is explicit):
// goroutines that share a Mutex share its holds, so a second Lock from
// another goroutine re-enters (hold count 2) instead of excluding it. For
// mutual exclusion between goroutines give each its own Mutex; NewMutex is
// cheap and sends nothing to Redis.
type Mutex struct {
	c       *Client
	name    string
	keys    keyset
	owner   Owner
	field   string // owner.String(), the hash field and queue entry
	channel string // this owner's wake-up channel

	ownerKey string // the Client's registry key of this owner on this lock
}

// Name returns the lock name (without the client's key prefix).
func (m *Mutex) Name() string { return m.name }

// Owner returns the owner this Mutex acts for.
func (m *Mutex) Owner() Owner { return m.owner }

// Key returns the Redis key of the lock hash (prefix and name).
func (m *Mutex) Key() string { return m.keys.hash }

// Keys returns the Redis keys that hold the lock's state, in this order:
// the lock hash (Key), the queue, Redisson's timeouts zset, fairlock's
// liveness zset and the fencing-token counter (RULES.md, keyspace). They
// share one hash slot. Unlock latches, one short-lived key per release
// request, are not among them.
func (m *Mutex) Keys() []string { return m.keys.scriptKeys() }

// Lock waits as long as ctx allows for the lock, in arrival order (FIFO),
// and returns the Hold. The lease is the client's watchdog lease
// (WithLease, default 30 s), renewed while held. Lock re-enters when this
// owner already holds the lock. When ctx ends first, Lock leaves the queue
// and returns an error wrapping ctx.Err(). Connection errors and a server
// that is restarting do not end the wait: Lock retries with back-off,
// keeping its queue place where its entry survived, until ctx ends, and
// then returns an error wrapping both ctx.Err() and the last error (X14).
// An attempt in flight when ctx ends finishes first (at most 5 s).
func (m *Mutex) Lock(ctx context.Context) (*Hold, error) {
	return m.acquire(ctx, OpLock, 0, WatchdogLease)
}

// LockWithLease is Lock with an explicit lease and no watchdog: the lock
// frees itself lease after it is granted unless released earlier, and the
// Hold ends then with ErrLockLost.
func (m *Mutex) LockWithLease(ctx context.Context, lease time.Duration) (*Hold, error) {
	return m.acquire(ctx, OpLock, 0, lease)
}

// TryLock is Lock that gives up after wait, returning ErrNotAcquired; giving
// up leaves the queue at once (B7). lease is an explicit lease, or
// WatchdogLease for the renewed client lease.
func (m *Mutex) TryLock(ctx context.Context, wait, lease time.Duration) (*Hold, error) {
	if err := checkDuration("wait", wait); err != nil {
		return nil, m.errorf(err)
	}
	return m.acquire(ctx, OpTryLock, wait, lease)
}

// TryLockOnce makes one attempt and never queues: it returns ErrNotAcquired
// while the lock is held or anyone is queued (B7). lease as for TryLock.
// It does not retry: a connection error is returned at once (after
// undoing whatever the attempt may have done).
func (m *Mutex) TryLockOnce(ctx context.Context, lease time.Duration) (*Hold, error) {
	return m.acquire(ctx, OpTryLockOnce, 0, lease)
}

// errWaitExpired is the cause of TryLock's wait budget running out.
var errWaitExpired = errors.New("wait expired")

func (m *Mutex) acquire(ctx context.Context, op Op, wait, lease time.Duration) (_ *Hold, err error) {
	if ctx == nil {
		return nil, m.errorf(ErrNilContext)
	}
	watchdog := lease == WatchdogLease
	if watchdog {
		lease = m.c.cfg.lease
	} else if err := checkDuration("lease", lease); err != nil {
		return nil, m.errorf(err)
	}
	if err := ctx.Err(); err != nil {
		return nil, m.errorf(err)
	}
	end, err := m.c.begin()
	if err != nil {
		return nil, m.errorf(err)
	}
	defer end()

	start := time.Now()
	var (
		tr     AcquireTracker
		result AcquireResult
	)
	if obs := m.c.cfg.observer; obs != nil {
		ctx, tr = obs.StartAcquire(ctx, m.call(op))
		defer func() {
			result.Wait = time.Since(start)
			result.Err = err
			result.Outcome = acquireOutcome(err, result.HoldCount)
			tr.End(result)
		}()
	}
	o := m.c.ownerOf(m)
	defer m.c.release(o)

	parent := ctx
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, wait, errWaitExpired)
		defer cancel()
	}
	cfg := &m.c.cfg
	w := &waiter{
		m: m, o: o, lease: lease, watchdog: watchdog, tr: tr, result: &result,
		retry: newRetrier(m.c.closing),
		call: acquireCall{
			owner: m.field, lease: lease, waiterTimeout: cfg.waiterTimeout, once: op == OpTryLockOnce,
			wake: m.wake(), maxHint: cfg.waiterTimeout / 3, slack: cfg.redissonSlack,
		},
	}
	h, err := w.run(ctx)
	if err != nil {
		return nil, m.waitErr(parent, ctx, err)
	}
	view := h.view()
	result.HoldCount, result.Token = view.count, view.token
	return h, nil
}

func acquireOutcome(err error, count int) Outcome {
	switch {
	case err == nil && count > 1:
		return OutcomeReentered
	case err == nil:
		return OutcomeAcquired
	case errors.Is(err, ErrNotAcquired):
		return OutcomeTimedOut
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return OutcomeCancelled
	}
	return OutcomeError
}

// waitErr turns a failed wait into the error the caller sees: ErrNotAcquired
// when TryLock's own wait ran out, the caller's context error (with the
// last transient error, if any) when that ended, else err.
func (m *Mutex) waitErr(parent, ctx context.Context, err error) error {
	switch {
	case parent.Err() != nil && errors.Is(err, parent.Err()):
		return m.errorf(err)
	case parent.Err() != nil:
		return m.errorf(errors.Join(parent.Err(), err))
	case errors.Is(context.Cause(ctx), errWaitExpired):
		return m.errorf(ErrNotAcquired)
	case m.c.isClosed() && !errors.Is(err, ErrClosed):
		return m.errorf(errors.Join(ErrClosed, err))
	}
	return m.errorf(err)
}

func (m *Mutex) wake() wakeArgs {
	return wakeArgs{channelPrefix: m.keys.channel, publish: m.c.cfg.publish}
}

// holdEnded is told when a hold of this Mutex ends: the watchdog forgets
// it and the observer hears of a loss (X7).
func (m *Mutex) holdEnded(h *Hold, err error) {
	m.c.untrack(h)
	if obs := m.c.cfg.observer; obs != nil && errors.Is(err, ErrLockLost) {
		obs.HoldLost(m.call(""), h.token, time.Since(h.acquired), err)
	}
}

// leaveQueue runs leave.lua, bounded by cleanupTimeout whatever ctx says;
// known is the token of the hold the client knows (0: none).
func (m *Mutex) leaveQueue(ctx context.Context, known int64) (leaveReply, error) {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	rep, err := m.c.b.Eval(ctx, m.c.scripts.leave, m.keys.scriptKeys(), leaveCall{owner: m.field, wake: m.wake(), known: known}.args())
	if err != nil {
		return leaveReply{}, err
	}
	return decodeLeave(rep)
}

// Unlock releases one hold of this owner (B2, B4): the lock is released when
// the count reaches 0, and the next waiter is woken. It returns ErrNotHeld,
// changing nothing, when this owner does not hold the lock.
//
// Connection errors are retried with back-off for up to 2 s (within the
// unlock latch's lifetime, and never applied twice). When Unlock fails all
// the same, the Hold ends (Err wraps ErrLockLost) and is no longer renewed,
// so the lock frees itself within one lease whatever happened on the
// server (X13); when those 2 s ran out before ctx did, Unlock's error wraps
// ErrLockLost too, and the last connection error. So does a ctx that has
// ended before the release could be sent - already, or while Unlock
// waited for its turn behind another call of the owner (an acquire
// attempt of a goroutine sharing the Mutex, which may take seconds on a
// slow connection): Unlock returns ctx's error, and the Hold ends.
func (m *Mutex) Unlock(ctx context.Context) (err error) {
	if err := m.checkCall(ctx); err != nil {
		if ctx != nil && ctx.Err() != nil {
			m.endUnsent(ctx.Err())
		}
		return err
	}
	end, err := m.c.begin()
	if err != nil {
		return m.errorf(err)
	}
	defer end()
	var result ReleaseResult
	if obs := m.c.cfg.observer; obs != nil {
		var tr ReleaseTracker
		ctx, tr = obs.StartRelease(ctx, m.call(OpUnlock))
		defer func() {
			result.Err = err
			switch {
			case err == nil:
				result.Outcome = OutcomeReleased
			case errors.Is(err, ErrNotHeld):
				result.Outcome = OutcomeNotHeld
			default:
				result.Outcome = OutcomeError
			}
			tr.End(result)
		}()
	}
	o := m.c.ownerOf(m)
	defer m.c.release(o)
	if err := o.enter(ctx); err != nil {
		m.endUnsent(err)
		return m.errorf(err)
	}
	defer o.exit()

	h := o.current()
	h.releasing(true)
	left, sent, err := m.release(ctx, h.view(), h.leaseOr(m.c.cfg.lease))
	h.releasing(false)
	switch {
	case err != nil:
		if h != nil {
			h.end(fmt.Errorf("%w: unlock failed (%v); no longer renewed, it frees itself within the lease", ErrLockLost, err))
		}
		return m.errorf(err)
	case left < 0:
		if h != nil {
			h.end(fmt.Errorf("%w: not held when unlocking (lease ran out, force-unlocked or deleted)", ErrLockLost))
		}
		return m.errorf(ErrNotHeld)
	}
	result.HoldCount = left
	if h == nil {
		return nil
	}
	if left > 0 {
		h.released(left, sent)
		return nil
	}
	if h.end(ErrReleased) {
		result.Held = time.Since(h.acquired)
	}
	return nil
}

// endUnsent ends the owner's hold, if it has a live one, for an Unlock
// that gives up (for the reason err) before it could send its release, so
// that nothing renews it again and the lock frees itself within the lease
// (X13). It needs no gate: an attempt of the owner in flight meanwhile
// that re-enters the hold finds it ended and gives its counts back
// (waiter.giveBackEnded).
func (m *Mutex) endUnsent(err error) {
	m.c.mu.Lock()
	o := m.c.owners[m.ownerKey]
	m.c.mu.Unlock()
	if o == nil {
		return
	}
	if h := o.current(); h != nil {
		h.end(fmt.Errorf("%w: unlock gave up before its release was sent (%v); no longer renewed, it frees itself within the lease", ErrLockLost, err))
	}
}

// release runs unlock.lua for the hold view describes (the lock lives at
// least lease more while holds remain), retrying transient
// errors with back-off for at most unlockRetryWindow: every retry reaches
// the server while the first attempt's latch lives (B10), and a later one
// finds the count already taken down. It returns the count left (-1: not
// held) and when the request that answered was sent.
func (m *Mutex) release(ctx context.Context, view holdView, lease time.Duration) (int, time.Time, error) {
	reqID, err := newRequestID()
	if err != nil {
		return 0, time.Time{}, err
	}
	call := unlockCall{owner: m.field, lease: lease, wake: m.wake(), latch: unlockLatchTTL, view: view}
	keys := call.keys(m.keys, reqID)
	wctx, cancel := context.WithTimeout(ctx, unlockRetryWindow)
	defer cancel()
	retry := newRetrier(m.c.closing)
	for {
		sent := time.Now()
		rep, err := m.c.b.Eval(wctx, m.c.scripts.unlock, keys, call.args())
		call.retry = true
		if err == nil {
			left, err := decodeUnlock(rep)
			return left, sent, err
		}
		if transient(err) && wctx.Err() == nil {
			err = retry.pause(wctx, err)
			if err == nil {
				continue
			}
		}
		if ctx.Err() == nil && wctx.Err() != nil {
			// The retry window ran out, not the caller's context: the hold
			// is lost to the client (X13), for the last connection error.
			if retry.last != nil && !errors.Is(retry.last, context.DeadlineExceeded) {
				return 0, sent, fmt.Errorf("%w: unlock not acknowledged within %v: %w", ErrLockLost, unlockRetryWindow, retry.last)
			}
			return 0, sent, fmt.Errorf("%w: unlock not acknowledged within %v", ErrLockLost, unlockRetryWindow)
		}
		return 0, sent, err
	}
}

// ForceUnlock releases the lock whoever holds it and wakes the next waiter
// (B8). It reports whether a holder was removed.
func (m *Mutex) ForceUnlock(ctx context.Context) (released bool, err error) {
	if err := m.checkCall(ctx); err != nil {
		return false, err
	}
	if obs := m.c.cfg.observer; obs != nil {
		var tr ReleaseTracker
		ctx, tr = obs.StartRelease(ctx, m.call(OpForceUnlock))
		defer func() {
			res := ReleaseResult{Err: err, Outcome: OutcomeReleased}
			if err != nil {
				res.Outcome = OutcomeError
			} else if !released {
				res.Outcome = OutcomeNotHeld
			}
			tr.End(res)
		}()
	}
	n, err := m.evict(ctx, m.c.scripts.forceUnlock, "force-unlocked")
	return n == 1, err
}

// Delete removes the lock's state - the lock hash, queue and timeouts -
// whoever holds it, and wakes the head waiter, which takes the lock; other
// waiters queue again at their next heartbeat (B8, X3). The fencing counter
// is kept so tokens never go backwards. It reports whether anything existed.
func (m *Mutex) Delete(ctx context.Context) (bool, error) {
	if err := m.checkCall(ctx); err != nil {
		return false, err
	}
	n, err := m.evict(ctx, m.c.scripts.delete, "deleted")
	return n > 0, err
}

// evict runs ForceUnlock's or Delete's script and returns its count. The
// hold this owner had when the call was sent ends as lost; a hold granted
// while the call was in flight (the call woke this very owner) is a newer
// one and stays.
func (m *Mutex) evict(ctx context.Context, script *backend.Script, how string) (int64, error) {
	end, err := m.c.begin()
	if err != nil {
		return 0, m.errorf(err)
	}
	defer end()
	o := m.c.ownerOf(m)
	defer m.c.release(o)
	if err := o.enter(ctx); err != nil {
		return 0, m.errorf(err)
	}
	prev := o.current()
	o.exit()
	rep, err := m.c.b.Eval(ctx, script, m.keys.scriptKeys(), evictArgs(m.wake()))
	if err != nil {
		return 0, m.errorf(err)
	}
	n, err := decodeCount(script.Name, rep)
	if err != nil {
		return 0, m.errorf(err)
	}
	if prev != nil {
		prev.end(fmt.Errorf("%w: lock %s", ErrLockLost, how))
	}
	return n, nil
}

func (m *Mutex) checkCall(ctx context.Context) error {
	if ctx == nil {
		return m.errorf(ErrNilContext)
	}
	if err := ctx.Err(); err != nil {
		return m.errorf(err)
	}
	if m.c.isClosed() {
		return m.errorf(ErrClosed)
	}
	return nil
}

func (m *Mutex) call(op Op) Call {
	return Call{Op: op, Name: m.name, Owner: m.owner, Client: m.c.cfg.description}
}

func (m *Mutex) errorf(err error) error {
	return fmt.Errorf("lock %q (owner %s): %w", m.name, m.field, err)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// ParseOwner parses an owner field "<clientID>:<ownerID>" as found in the
// lock hash and queue (Redisson writes "<uuid>:<threadId>").
func ParseOwner(field string) (Owner, error) {
	i := strings.LastIndexByte(field, ':')
	if i <= 0 {
		return Owner{}, fmt.Errorf("lock: owner field %q has no \"<client>:<id>\" form", field)
	}
	id, err := strconv.ParseInt(field[i+1:], 10, 64)
	if err != nil {
		return Owner{}, fmt.Errorf("lock: owner field %q: %w", field, err)
	}
	return Owner{ClientID: field[:i], ID: id}, nil
}
