package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fairlock/fairlock/lock/internal/wire"
	"github.com/fairlock/fairlock/lock/observe"
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
	keys    wire.Keys
	field   string // "<clientID>:<ownerID>", the hash field and queue entry
	channel string // this owner's wake-up channel

	ownerKey string // the owner registry's key of this owner on this lock (owners.go)
}

// Name returns the lock name (without the client's key prefix).
func (m *Mutex) Name() string { return m.name }

// Owner returns the owner this Mutex acts for, "<clientID>:<ownerID>": the
// field it holds in the lock hash, as Redisson writes "<uuid>:<threadId>".
func (m *Mutex) Owner() string { return m.field }

// Keys returns the Redis keys that hold the lock's state, in this order:
// the lock hash (the key prefix and the name), the queue, Redisson's
// timeouts zset, fairlock's liveness zset and the fencing-token counter.
// They share one hash slot. Unlock latches, one short-lived key per
// release request, are not among them.
func (m *Mutex) Keys() []string { return m.keys.Script() }

// Lock waits as long as ctx allows for the lock, in arrival order (first
// come, first served), and returns the Hold. The lease is the client's
// (WithLease, 30 s by default), renewed by the client's watchdog every
// third of it while held. Lock re-enters when this owner already holds the
// lock. When ctx ends first, Lock leaves the queue and returns an error
// wrapping ctx.Err(). Connection errors and a server that is restarting do
// not end the wait: Lock retries with back-off, keeping its place in the
// queue where its entry survived, until ctx ends, and then returns an
// error wrapping ctx.Err(), ErrUnavailable and the last connection error.
// Lock returns within 250 ms of ctx's deadline whatever the server does: an
// attempt still in flight then, and leaving the queue, finish in the
// background (Close waits for them). It returns an error wrapping
// ErrLockLost when the lock was granted but someone force-unlocked or
// deleted it before the grant's reply arrived.
func (m *Mutex) Lock(ctx context.Context) (*Hold, error) {
	return m.acquire(ctx, acquireSpec{op: observe.OpLock, watchdog: true})
}

// LockWithLease is Lock with a fixed lease and no watchdog: the lock frees
// itself lease after it is granted unless released (or extended, Extend)
// earlier, and the Hold ends then with ErrLockLost. lease must be at least
// a millisecond and at most ten years (ErrInvalidArgument).
func (m *Mutex) LockWithLease(ctx context.Context, lease time.Duration) (*Hold, error) {
	return m.acquire(ctx, acquireSpec{op: observe.OpLock, lease: lease})
}

// TryLock is Lock that gives up after wait and returns ErrNotAcquired, or
// ErrUnavailable when its last attempt could not reach the server. Giving
// up leaves the queue at once. With a wait of 0 it makes one attempt and
// never queues: ErrNotAcquired while the lock is held or anyone is queued;
// ErrUnavailable, without a second attempt, as soon as the client reports
// a connection error (after undoing whatever the attempt may have done).
// With nothing listening at the server's address that is within
// milliseconds on every adapter; a go-redis client given to
// goredisbackend.New first dials as often as its DialerRetries say.
func (m *Mutex) TryLock(ctx context.Context, wait time.Duration) (*Hold, error) {
	return m.acquire(ctx, acquireSpec{op: observe.OpTryLock, wait: wait, watchdog: true, try: true})
}

// TryLockWithLease is TryLock with a fixed lease and no watchdog, as
// LockWithLease.
func (m *Mutex) TryLockWithLease(ctx context.Context, wait, lease time.Duration) (*Hold, error) {
	return m.acquire(ctx, acquireSpec{op: observe.OpTryLock, wait: wait, lease: lease, try: true})
}

// acquireSpec is what an acquire call asks for.
type acquireSpec struct {
	op       observe.Op
	wait     time.Duration // TryLock: how long to wait (0: one attempt)
	lease    time.Duration // the fixed lease; with watchdog, the client's
	watchdog bool
	try      bool // gives up after wait
}

// check validates the spec (nothing is sent for a bad one) and fills in
// the watchdog lease.
func (s *acquireSpec) check(c *Client) error {
	if s.try && s.wait != 0 {
		if err := checkDuration("wait", s.wait); err != nil {
			return err
		}
	}
	if s.watchdog {
		s.lease = c.cfg.lease
		return nil
	}
	return checkDuration("lease", s.lease)
}

// errWaitExpired is the cause of TryLock's wait budget running out.
var errWaitExpired = errors.New("wait expired")

func (m *Mutex) acquire(ctx context.Context, spec acquireSpec) (*Hold, error) {
	if ctx == nil {
		return nil, m.errorf(fmt.Errorf("%w: nil context", ErrInvalidArgument))
	}
	if err := spec.check(m.c); err != nil {
		return nil, m.errorf(err)
	}
	if err := m.c.memory.err(); err != nil {
		return nil, m.errorf(err)
	}
	if err := m.c.listener.err(); err != nil {
		return nil, m.errorf(err)
	}
	if err := ctx.Err(); err != nil {
		return nil, m.errorf(err)
	}
	if err := m.c.life.begin(); err != nil {
		return nil, m.errorf(err)
	}
	defer m.c.life.end()
	var result observe.AcquireResult
	start := time.Now()
	ctx, tr := m.observeAcquire(ctx, spec.op)
	h, err := m.wait(ctx, spec, tr, &result)
	if tr != nil {
		result.Wait, result.Err = time.Since(start), err
		result.Outcome = acquireOutcome(err, result.HoldCount)
		tr.End(result)
	}
	return h, err
}

// observeAcquire tells the observer, if any, of an acquire call starting.
func (m *Mutex) observeAcquire(ctx context.Context, op observe.Op) (context.Context, observe.AcquireTracker) {
	if obs := m.c.cfg.observer; obs != nil {
		return obs.StartAcquire(ctx, m.call(op))
	}
	return ctx, nil
}

// attemptRetrier paces an acquire call's attempts: one only, for TryLock with
// no wait. A value, kept in the waiter, so it costs no allocation.
func attemptRetrier(closing <-chan struct{}, spec acquireSpec) retrier {
	r := newRetrier(closing)
	if spec.try && spec.wait == 0 {
		r.limit = 1
	}
	return *r
}

// wait runs one acquire call and records its result.
func (m *Mutex) wait(ctx context.Context, spec acquireSpec, tr observe.AcquireTracker, result *observe.AcquireResult) (*Hold, error) {
	o := m.c.owners.acquire(m)
	defer m.c.owners.release(o)
	parent := ctx
	if spec.wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, spec.wait, errWaitExpired)
		defer cancel()
	}
	cfg := &m.c.cfg
	w := &waiter{
		m: m, o: o, lease: spec.lease, watchdog: spec.watchdog, tr: tr,
		retry: attemptRetrier(m.c.life.closing, spec),
		call: wire.Acquire{
			Owner: m.field, Lease: spec.lease, WaiterTimeout: cfg.waiterTimeout, Once: spec.try && spec.wait == 0,
			Wake: m.wake(), MaxHint: cfg.waiterTimeout / 3, Slack: cfg.redissonSlack,
		},
	}
	h, err, late := m.runBounded(ctx, w)
	if !late {
		*result = w.result
	}
	if err != nil {
		return nil, m.waitErr(parent, ctx, err)
	}
	if view := o.view(); view.Token == h.token {
		result.HoldCount, result.Token = view.Count, view.Token
	}
	return h, nil
}

func acquireOutcome(err error, count int) observe.Outcome {
	switch {
	case err == nil && count > 1:
		return observe.OutcomeReentered
	case err == nil:
		return observe.OutcomeAcquired
	case errors.Is(err, ErrNotAcquired):
		return observe.OutcomeTimedOut
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return observe.OutcomeCancelled
	}
	return observe.OutcomeError
}

// waitErr turns a failed wait into the error the caller sees: the
// caller's context error (with the last connection error, if any) when
// that ended; ErrClosed when the client was closed under the call; when
// TryLock's own wait ran out, ErrNotAcquired - or ErrUnavailable with the
// last connection error, when the last attempt could not reach the
// server, or the call's own error when it ended on one; else err, marked
// ErrUnavailable when it is a connection error.
//
// A closed client comes before the wait: a call whose grant came back
// while its client was being closed gives that grant back, and its wait
// may run out meanwhile, with the give-back still on its way - which says
// nothing of another owner holding the lock (soak seed 36725175219644,
// TestTryLock_ClientClosedUnderIt_NotBusy).
func (m *Mutex) waitErr(parent, ctx context.Context, err error) error {
	switch {
	case parent.Err() != nil && errors.Is(err, parent.Err()):
		return m.errorf(err)
	case parent.Err() != nil && ctx != parent && errors.Is(err, ctx.Err()) && !errors.Is(err, ErrUnavailable):
		// TryLock's wait ran out, and the caller's context ended before
		// the call returned: the wait's end is no server error.
		return m.errorf(parent.Err())
	case parent.Err() != nil:
		return m.errorf(joinLine(parent.Err(), unavailable(err)))
	case m.c.life.isClosed() && !errors.Is(err, ErrClosed):
		if ctx != parent && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// TryLock's own wait ran out: no error of the caller's context.
			return m.errorf(ErrClosed)
		}
		return m.errorf(joinLine(ErrClosed, err))
	case errors.Is(context.Cause(ctx), errWaitExpired) && errors.Is(err, ErrUnavailable):
		return m.errorf(fmt.Errorf("%w (wait ran out)", lastCause(err)))
	case errors.Is(context.Cause(ctx), errWaitExpired) && errors.Is(err, ctx.Err()):
		// The wait ran out with the owner queued. An error of its own -
		// a grant fewer replicas acknowledged (ErrNotReplicated), say,
		// whose reply came after the wait's end - says more than "busy".
		return m.errorf(ErrNotAcquired)
	}
	return m.errorf(unavailable(err))
}

// lastCause drops the context error that a retry pause put in front of
// the connection error: TryLock's wait running out is no context error of
// the caller's.
func lastCause(err error) error {
	var le *lineError
	if errors.As(err, &le) && len(le.errs) > 1 && (errors.Is(le.errs[0], context.DeadlineExceeded) || errors.Is(le.errs[0], context.Canceled)) {
		return joinLine(le.errs[1:]...)
	}
	return err
}

func (m *Mutex) wake() wire.Wake {
	return wire.Wake{ChannelPrefix: m.keys.Channel, Publish: m.c.cfg.publish}
}

// holdEnded is told when a hold of this Mutex ends: the watchdog forgets
// it and the observer hears of a loss (X7). A hold that ends otherwise
// than by an acknowledged Unlock may still be in the lock hash, its token
// the same: for its lease at most, or, a hand-over grant never taken up,
// twice the waiter timeout (B4). The owner, and the tokens it has spent,
// are remembered that long, so that its next acquire does not take that
// field for a new hold (spentGrant, and acquire.lua's leftover, which a
// retry tells by the tokens spent).
func (m *Mutex) holdEnded(h *Hold, err error, grant bool, lease time.Duration) {
	if !errors.Is(err, ErrReleased) {
		keep := lease
		if grant {
			keep = max(keep, 2*m.c.cfg.waiterTimeout)
		}
		m.c.owners.remember(m, keep)
	}
	m.c.untrack(h)
	if obs := m.c.cfg.observer; obs != nil && errors.Is(err, ErrLockLost) {
		obs.HoldLost(m.call(""), h.token, time.Since(h.acquired), err)
	}
}

// leaveQueue runs leave.lua, bounded by cleanupTimeout whatever ctx says;
// known is the token of the hold the client knows (0: none). The leave
// does nothing from the server's time the client gives up on it (X5):
// came later, it could take out the owner's next queue entry, or pass on
// its grant. Its error is a leaveUnsettled when the leave did not settle
// - it may still reach the server - and the owner must not queue again
// before its end.
func (m *Mutex) leaveQueue(ctx context.Context, known int64) (wire.LeaveReply, error) {
	sent := time.Now()
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	// The client gives up at ctx's deadline, at sent+cleanupTimeout or
	// later: the leave does nothing from the server's time then, or
	// earlier (floor).
	end, _ := ctx.Deadline()
	r, err := m.sendLeave(ctx, known, sent)
	switch {
	case err != nil && (notRun(err) || errors.Is(err, errLeaveExpired)):
		// Refused, never sent (connection refused), or run and too late:
		// it cannot run later.
		return wire.LeaveReply{}, err
	case err != nil:
		return wire.LeaveReply{}, leaveUnsettled{end: end, err: err}
	}
	return r, nil
}

// maxLeaveSends bounds how many times leaveQueue sends a leave that came
// too late by the client's floor of the server's clock.
const maxLeaveSends = 4

// sendLeave sends the leave until the server answers it in time by its
// clock, maxLeaveSends times at most. A leave that came at its limit or
// later did nothing, and ran; its reply tells the server's time then - a
// better floor than the client's (one taken from a reply long on its way
// bounds the clock low), from which the next send's limit is dated.
func (m *Mutex) sendLeave(ctx context.Context, known int64, sent time.Time) (r wire.LeaveReply, err error) {
	for range maxLeaveSends {
		leave := wire.Leave{Owner: m.field, Wake: m.wake(), Known: known, Until: m.c.floor.at(sent.Add(cleanupTimeout))}
		call := leave.Call(m.c.scripts, m.keys)
		rep, err := m.c.b.Eval(ctx, call.Script, call.Keys, call.Args)
		if err == nil {
			r, err = wire.DecodeLeave(rep)
		}
		if err != nil || !r.Expired {
			return r, err
		}
		m.c.floor.observe(max(r.Now, leave.Until*1000), time.Now())
	}
	return wire.LeaveReply{}, errLeaveExpired
}

// errLeaveExpired is why a leave did nothing: it reached the server after
// its client had given up on it.
var errLeaveExpired = errors.New("the leave reached the server after its client had given up on it, and did nothing")

// leaveUnsettled is the error of a leave that did not settle: it may
// still reach the server until end, the time its client gives up on it.
type leaveUnsettled struct {
	end time.Time
	err error
}

func (e leaveUnsettled) Error() string { return e.err.Error() }
func (e leaveUnsettled) Unwrap() error { return e.err }

func (m *Mutex) checkCall(ctx context.Context) error {
	if ctx == nil {
		return m.errorf(fmt.Errorf("%w: nil context", ErrInvalidArgument))
	}
	if err := ctx.Err(); err != nil {
		return m.errorf(err)
	}
	if m.c.life.isClosed() {
		return m.errorf(ErrClosed)
	}
	return nil
}

func (m *Mutex) call(op observe.Op) observe.Call {
	return observe.Call{Op: op, Name: m.name, Owner: m.field, Client: m.c.cfg.description}
}

func (m *Mutex) errorf(err error) error {
	return fmt.Errorf("lock %q (owner %s): %w", m.name, m.field, outOfMemory(err))
}
