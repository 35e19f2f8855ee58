package lock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
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

	mu        sync.Mutex
	hold      *Hold // current hold, nil when this Mutex holds nothing
	acquiring int   // acquire calls in flight
}

// Name returns the lock name (without the client's key prefix).
func (m *Mutex) Name() string { return m.name }

// Owner returns the owner this Mutex acts for.
func (m *Mutex) Owner() Owner { return m.owner }

// Key returns the Redis key of the lock hash (prefix and name).
func (m *Mutex) Key() string { return m.keys.hash }

// Lock waits as long as ctx allows for the lock, in arrival order (FIFO),
// and returns the Hold. The lease is the client's watchdog lease
// (WithLease, default 30 s), renewed while held. Lock re-enters when this
// owner already holds the lock. When ctx ends first, Lock leaves the queue
// and returns an error wrapping ctx.Err().
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
	if m.c.isClosed() {
		return nil, m.errorf(ErrClosed)
	}

	start := time.Now()
	var (
		tr     AcquireTracker
		result AcquireResult
		h      *Hold
	)
	if obs := m.c.cfg.observer; obs != nil {
		ctx, tr = obs.StartAcquire(ctx, m.call(op))
		defer func() {
			result.Wait = time.Since(start)
			result.Err = err
			switch {
			case err == nil:
				result.Outcome = OutcomeAcquired
				if result.HoldCount > 1 {
					result.Outcome = OutcomeReentered
				}
			case errors.Is(err, ErrNotAcquired):
				result.Outcome = OutcomeTimedOut
			case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
				result.Outcome = OutcomeCancelled
			default:
				result.Outcome = OutcomeError
			}
			tr.End(result)
		}()
	}

	m.mu.Lock()
	m.acquiring++
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.acquiring--
		m.mu.Unlock()
	}()

	parent := ctx
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, wait, errWaitExpired)
		defer cancel()
	}
	mode := "wait"
	if op == OpTryLockOnce {
		mode = "once"
	}
	args := []string{
		m.field, ms(lease), ms(m.c.cfg.waiterTimeout), mode,
		m.keys.channel, m.c.cfg.publish, ms(m.c.cfg.waiterTimeout / 3),
		ms(m.c.cfg.redissonSlack),
	}
	grant := func(r acquireReply, sent time.Time) (*Hold, error) {
		h, err := m.granted(r, sent, lease, watchdog)
		if h != nil {
			result.HoldCount, result.Token = h.countNow(), h.token
		}
		return h, err
	}

	sent := time.Now()
	r, err := m.tryAcquire(ctx, args)
	if err != nil {
		m.abandon(ctx, err)
		return nil, m.waitErr(parent, ctx, err)
	}
	if r.acquired {
		return grant(r, sent)
	}
	if op == OpTryLockOnce {
		return nil, m.errorf(ErrNotAcquired)
	}
	// queued records the first queue position (again after being dropped
	// as dead and re-queued); woke counts a wake-up.
	queued := func(position int) {
		if position > 0 && result.Position == 0 {
			result.Position = position
			if tr != nil {
				tr.Queued(position)
			}
		}
	}
	woke := func(e backend.Event) {
		result.Wakeups++
		if tr != nil {
			tr.Woken(e.Reconnect)
		}
	}
	queued(r.position)

	// Queued. Subscribe to this owner's channel, then check again: an
	// unlock between the first attempt and the subscription is not missed.
	sub, err := m.c.b.Subscribe(ctx, m.channel)
	if err != nil {
		m.abandon(ctx, nil)
		return nil, m.waitErr(parent, ctx, err)
	}
	defer sub.Close()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// The head also watches the lock hash where the backend can (client-side
	// caching invalidations), so a change that publishes nothing - a DEL
	// by hand, an expiry - wakes it at once rather than at its timer.
	var watch keyWatch
	defer watch.stop()
	for {
		sent = time.Now()
		r, err = m.tryAcquire(ctx, args)
		if err != nil {
			m.abandon(ctx, err)
			return nil, m.waitErr(parent, ctx, err)
		}
		if r.acquired {
			h, err = grant(r, sent)
			return h, err
		}
		queued(r.position)
		if r.head {
			watch.arm(ctx, m)
		}
		// Wait for a wake-up, or at most the hint: the heartbeat interval,
		// or the lease left when this owner is at the head (X3, X4). Since
		// Go 1.23 Reset also discards a tick nobody received.
		timer.Reset(max(time.Duration(r.hintMs)*time.Millisecond, time.Millisecond))
		select {
		case e := <-sub.Events():
			woke(e)
		case e := <-watch.events():
			watch.stop() // fired: arm again if still the head
			woke(e)
		case <-timer.C:
		case <-ctx.Done():
			m.abandon(ctx, nil)
			return nil, m.waitErr(parent, ctx, ctx.Err())
		case <-m.c.closing:
			m.abandon(ctx, nil)
			return nil, m.errorf(ErrClosed)
		}
	}
}

// waitErr turns a failed wait into the error the caller sees: ErrNotAcquired
// when TryLock's own wait ran out, the caller's context error when that
// ended, else err.
func (m *Mutex) waitErr(parent, ctx context.Context, err error) error {
	if parent.Err() != nil {
		return m.errorf(parent.Err())
	}
	if errors.Is(context.Cause(ctx), errWaitExpired) {
		return m.errorf(ErrNotAcquired)
	}
	if m.c.isClosed() {
		return m.errorf(ErrClosed)
	}
	return m.errorf(err)
}

// abandon takes the owner out of the queue after a wait ends without the
// lock (X5), best effort and bounded by cleanupTimeout. cause is the error
// that ended it, if any: after an acquire whose reply was lost, a hold that
// acquire may have granted is dropped too when this owner held nothing
// before; after ErrNotReplicated the granted hold is dropped (X9).
func (m *Mutex) abandon(ctx context.Context, cause error) {
	release := "0"
	switch {
	case errors.Is(cause, ErrNotReplicated):
		release = "1"
	case cause != nil:
		m.mu.Lock()
		if m.hold == nil && m.acquiring == 1 {
			release = "1"
		}
		m.mu.Unlock()
	}
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	_, _ = m.c.b.Eval(cctx, m.c.scripts.leave,
		[]string{m.keys.hash, m.keys.queue, m.keys.timeouts, m.keys.alive},
		[]string{m.field, m.keys.channel, m.c.cfg.publish, release})
}

type acquireReply struct {
	acquired bool
	token    int64 // acquired
	count    int   // acquired
	hintMs   int64 // waiting
	position int   // waiting: set when this call queued the owner
	head     bool  // waiting: the owner is first in line
}

// attemptTimeout bounds one acquire attempt. Attempts do not follow the
// caller's cancellation: a request abandoned in flight could still reach
// Redis on one of the client's pipelined connections after the cleanup
// sent on another, and queue (or grant) the owner after its call
// returned. Cancellation is honoured between attempts, one round trip
// later at most.
const attemptTimeout = 5 * time.Second

func (m *Mutex) tryAcquire(ctx context.Context, args []string) (acquireReply, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), attemptTimeout)
	defer cancel()
	keys := []string{m.keys.hash, m.keys.queue, m.keys.timeouts, m.keys.token, m.keys.alive}
	var (
		rep   backend.Reply
		err   error
		acked int
	)
	if m.c.cfg.replicas > 0 {
		rep, acked, err = m.c.b.(backend.ReplicaWaiter).EvalWait(ctx, m.c.scripts.acquire, keys, args, m.c.cfg.replicas, m.c.cfg.replicaWait)
	} else {
		rep, err = m.c.b.Eval(ctx, m.c.scripts.acquire, keys, args)
	}
	if err != nil {
		return acquireReply{}, err
	}
	if m.c.cfg.replicas > 0 && acked < m.c.cfg.replicas && rep.Kind == backend.Array && len(rep.Elems) == 3 && rep.Elems[0].Int == 1 {
		// Granted on the primary only: the caller's abandon gives the hold
		// back and takes the owner out of the queue (X9).
		return acquireReply{}, fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrNotReplicated, acked, m.c.cfg.replicas, m.c.cfg.replicaWait)
	}
	v, err := rep.AsInts()
	switch {
	case err == nil && len(v) == 3 && v[0] == 1:
		return acquireReply{acquired: true, token: v[1], count: int(v[2])}, nil
	case err == nil && len(v) == 3 && v[0] == 0: // TryLockOnce
		return acquireReply{hintMs: v[1]}, nil
	case err == nil && len(v) == 4 && v[0] == 0:
		return acquireReply{hintMs: v[1], position: int(v[2]), head: v[3] == 1}, nil
	}
	return acquireReply{}, fmt.Errorf("%w: acquire: %v", ErrUnexpectedReply, rep)
}

// granted records a successful acquire: a new Hold for a new acquisition,
// the same Hold with a higher count for a re-entry.
func (m *Mutex) granted(r acquireReply, sent time.Time, lease time.Duration, watchdog bool) (*Hold, error) {
	m.mu.Lock()
	h := m.hold
	var stale *Hold
	if h != nil && r.count == 1 {
		// The server granted a new hold, so the one we knew was lost
		// (its lease ran out before the watchdog noticed).
		stale, h = h, nil
		m.hold = nil
	}
	fresh := h == nil
	if fresh {
		h = &Hold{m: m, token: r.token, acquired: sent, done: make(chan struct{})}
		m.hold = h
	}
	h.count = r.count
	h.lease = lease
	h.watchdog = watchdog
	h.lastRenewed = sent
	if h.expiry != nil {
		h.expiry.Stop()
		h.expiry = nil
	}
	if !watchdog {
		h.expiry = time.AfterFunc(time.Until(sent.Add(lease)), func() {
			m.lose(h, fmt.Errorf("%w: lease of %v ran out", ErrLockLost, lease))
		})
	}
	m.mu.Unlock()
	if stale != nil {
		m.lose(stale, fmt.Errorf("%w: lease ran out before renewal", ErrLockLost))
	}
	if fresh && !m.c.register(h) {
		h.end(ErrClosed)
		return nil, m.errorf(ErrClosed)
	}
	return h, nil
}

// lose ends h as lost (X7) and tells the observer.
func (m *Mutex) lose(h *Hold, err error) {
	if !h.end(err) {
		return
	}
	m.c.unregister(h)
	if obs := m.c.cfg.observer; obs != nil {
		obs.HoldLost(m.call(""), h.token, time.Since(h.acquired), err)
	}
}

func (h *Hold) countNow() int {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	return h.count
}

// attempts bounds the retries of idempotent calls (reads, and Unlock,
// whose latch makes a retry of the same request return the first result,
// B10) after a network error.
const attempts = 3

// retryable reports whether an idempotent call that ended with err should
// be sent again: a network error (not a server's error reply, not the
// caller's context), and attempts left.
func retryable(ctx context.Context, err error, attempt int) bool {
	var se *backend.ServerError
	return err != nil && attempt < attempts && ctx.Err() == nil && !errors.As(err, &se) && !errors.Is(err, backend.ErrClosed)
}

// Unlock releases one hold of this owner (B2, B4): the lock is released when
// the count reaches 0, and the next waiter is woken. It returns ErrNotHeld,
// changing nothing, when this owner does not hold the lock.
func (m *Mutex) Unlock(ctx context.Context) (err error) {
	if ctx == nil {
		return m.errorf(ErrNilContext)
	}
	if err := ctx.Err(); err != nil {
		return m.errorf(err)
	}
	if m.c.isClosed() {
		return m.errorf(ErrClosed)
	}
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
	m.mu.Lock()
	h := m.hold
	lease := m.c.cfg.lease
	if h != nil {
		lease = h.lease
	}
	m.mu.Unlock()
	reqID, err := newRequestID()
	if err != nil {
		return m.errorf(err)
	}
	keys := []string{m.keys.hash, m.keys.queue, m.keys.timeouts, m.keys.latch + ":" + reqID, m.keys.alive}
	args := []string{m.field, ms(lease), m.keys.channel, m.c.cfg.publish, ms(unlockLatchTTL)}
	var rep backend.Reply
	for attempt := 1; ; attempt++ {
		rep, err = m.c.b.Eval(ctx, m.c.scripts.unlock, keys, args)
		if !retryable(ctx, err, attempt) {
			break
		}
	}
	if err != nil {
		return m.errorf(err)
	}
	left, err := rep.AsInt()
	if err != nil {
		return m.errorf(fmt.Errorf("%w: unlock: %v", ErrUnexpectedReply, err))
	}
	if left < 0 {
		if h != nil {
			m.lose(h, fmt.Errorf("%w: not held when unlocking (lease ran out or force-unlocked)", ErrLockLost))
		}
		return m.errorf(ErrNotHeld)
	}
	result.HoldCount = int(left)
	if h == nil {
		return nil
	}
	m.mu.Lock()
	h.count = int(left)
	ended := left == 0 && h.endLocked(ErrReleased)
	m.mu.Unlock()
	if ended {
		result.Held = time.Since(h.acquired)
		m.c.unregister(h)
	}
	return nil
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

// evict runs ForceUnlock's or Delete's script (same keys and arguments)
// and returns its count. The hold this Mutex had when the call was sent
// ends as lost; a hold granted while the call was in flight (the call
// woke this very owner) is a new one and stays.
func (m *Mutex) evict(ctx context.Context, script *backend.Script, how string) (int64, error) {
	m.mu.Lock()
	prev := m.hold
	m.mu.Unlock()
	rep, err := m.c.b.Eval(ctx, script,
		[]string{m.keys.hash, m.keys.queue, m.keys.timeouts, m.keys.alive},
		[]string{m.keys.channel, m.c.cfg.publish})
	if err != nil {
		return 0, m.errorf(err)
	}
	n, err := rep.AsInt()
	if err != nil {
		return 0, m.errorf(err)
	}
	if prev != nil {
		m.lose(prev, fmt.Errorf("%w: lock %s", ErrLockLost, how))
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

func (m *Mutex) call(op Op) Call { return Call{Op: op, Name: m.name, Owner: m.owner} }

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

// keyWatch is the head waiter's watch on the lock hash (backend.KeyWatcher).
type keyWatch struct {
	sub *backend.Subscription
}

// arm starts watching unless already watching or the backend cannot; a
// failure only costs the early wake-up, never the wait.
func (w *keyWatch) arm(ctx context.Context, m *Mutex) {
	kw, ok := m.c.b.(backend.KeyWatcher)
	if w.sub != nil || !ok || m.c.noKeyWatch.Load() {
		return
	}
	sub, err := kw.WatchKey(ctx, m.keys.hash)
	if errors.Is(err, backend.ErrNotSupported) {
		m.c.noKeyWatch.Store(true)
	}
	if err == nil {
		w.sub = sub
	}
}

// events returns the watch's events, or nil (blocks forever) when idle.
func (w *keyWatch) events() <-chan backend.Event {
	if w.sub == nil {
		return nil
	}
	return w.sub.Events()
}

func (w *keyWatch) stop() {
	if w.sub != nil {
		w.sub.Close()
		w.sub = nil
	}
}
