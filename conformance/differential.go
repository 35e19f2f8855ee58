package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/lock/inspect"
)

// The differential workload: one driver goroutine issues a seeded sequence
// of operations by traceOwners owners (spread over two lock.Clients) on
// traceLocks locks, and records one line per step: what the operation
// returned and the lock's state afterwards. Operations are chosen so that
// every outcome is determined by the sequence alone, never by timing:
//
//   - a Lock that must wait runs in its own goroutine; the step ends when
//     Inspect shows the owner queued, and the Lock is awaited at the step
//     that frees the lock for it (the grant is part of that step's line) or
//     cancelled by a later cancel step;
//   - TryLock gets a short wait only when the lock is held by another owner
//     (it must give up), else a long one (it must succeed at once);
//   - between steps the lock is never free while owners wait: each step
//     ends only once a woken head has taken the lock;
//   - two interleavings whose outcome the lock leaves to timing today are
//     avoided, each pinned down by a failing case in history_regress.go: a
//     waiting Lock is cancelled only between its acquire attempts, and the
//     head waiter never force-unlocks the lock it waits for.
//
// The same plan also drives a reference model of a fair reentrant lock
// (planTrace), which yields the trace a correct implementation records, so
// one backend is checked against the model and two backends against each
// other (recordTrace).

const (
	traceOwners = 4
	traceLocks  = 2
	// traceRefusedWait is TryLock's wait when the lock is held by another
	// owner: long enough to queue, short enough to keep traces quick.
	traceRefusedWait = 100 * time.Millisecond
	// traceLongWait bounds calls that must succeed at once (TryLock on a
	// free or own lock, Lock calls that are awaited).
	traceLongWait = 2 * time.Minute
)

// traceOp is one kind of step of the differential workload.
type traceOp uint8

const (
	traceLock          traceOp = iota // Lock with a live context
	traceLockCancelled                // Lock with an already cancelled context (X10)
	traceTryLock                      // TryLock(wait)
	traceTryLockOnce                  // TryLock(0): one attempt
	traceUnlock                       // Unlock
	traceForceUnlock                  // ForceUnlock
	traceCancel                       // cancel the owner's waiting Lock (X5)
)

func (op traceOp) String() string {
	switch op {
	case traceLock:
		return "lock"
	case traceLockCancelled:
		return "lock(cancelled ctx)"
	case traceTryLock:
		return "trylock"
	case traceTryLockOnce:
		return "trylockonce"
	case traceUnlock:
		return "unlock"
	case traceForceUnlock:
		return "forceunlock"
	case traceCancel:
		return "cancel"
	}
	return fmt.Sprintf("op(%d)", uint8(op))
}

// traceStep is one planned step: an operation by an owner on a lock.
type traceStep struct {
	op    traceOp
	owner int
	lock  int
	// wait is TryLock's wait: traceRefusedWait when the model says the
	// lock is held by another owner, else traceLongWait.
	wait time.Duration
}

func (s traceStep) String() string { return fmt.Sprintf("o%d L%d %s", s.owner, s.lock, s.op) }

// traceLine formats one step of a trace. Model and recorder share it so
// that equal behaviour gives equal strings.
func traceLine(i int, s traceStep, result string, grants []string, state string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%03d %s -> %s", i, s, result)
	for _, g := range grants {
		b.WriteString("; grant ")
		b.WriteString(g)
	}
	b.WriteString(" | L")
	fmt.Fprintf(&b, "%d %s", s.lock, state)
	return b.String()
}

// Result strings shared by model and recorder.
const (
	traceNotAcquired = "not acquired"
	traceNotHeld     = "not held"
	traceCancelled   = "cancelled"
	traceReleased    = "released"
	traceHoldEnded   = "released, hold ended"
)

func traceAcquired(reentered bool, token int64) string {
	if reentered {
		return fmt.Sprintf("reentered token=%d", token)
	}
	return fmt.Sprintf("acquired token=%d", token)
}

func traceQueued(pos int) string { return fmt.Sprintf("queued at %d", pos) }

func traceForced(released bool) string { return fmt.Sprintf("force-unlocked released=%t", released) }

func traceGrant(owner int, token int64) string {
	return fmt.Sprintf("o%d %s", owner, traceAcquired(false, token))
}

// traceState formats a lock's state: holders with counts, the queue as
// owner indexes, and the latest fencing token relative to the trace start.
func traceState(holders []string, queue []string, token int64) string {
	h := "free"
	if len(holders) > 0 {
		h = "held by " + strings.Join(holders, "+")
	}
	return fmt.Sprintf("%s, queue [%s], token %d", h, strings.Join(queue, " "), token)
}

// traceModel is the reference model: one fair reentrant lock per trace lock.
type traceModel [traceLocks]traceModelLock

// traceModelLock is the reference model of one fair reentrant lock.
type traceModelLock struct {
	holder int   // owner index, -1 when free
	count  int   // holder's hold count
	queue  []int // owners with a waiting Lock, head first
	token  int64 // latest fencing token issued
}

func (l *traceModelLock) queued(o int) bool { return slices.Contains(l.queue, o) }

func (l *traceModelLock) state() string {
	var holders, queue []string
	if l.holder >= 0 {
		holders = []string{fmt.Sprintf("o%dx%d", l.holder, l.count)}
	}
	for _, o := range l.queue {
		queue = append(queue, fmt.Sprintf("o%d", o))
	}
	return traceState(holders, queue, l.token)
}

// acquire applies an acquire that does not wait: a new hold when free,
// a re-entry when held by o. It reports false when o would have to wait.
func (l *traceModelLock) acquire(o int) (string, bool) {
	switch {
	case l.holder == o:
		l.count++
		return traceAcquired(true, l.token), true
	case l.holder < 0 && len(l.queue) == 0:
		l.holder, l.count = o, 1
		l.token++
		return traceAcquired(false, l.token), true
	}
	return "", false
}

// free releases the lock and grants it to the head waiter, if any.
func (l *traceModelLock) free() []string {
	l.holder, l.count = -1, 0
	if len(l.queue) == 0 {
		return nil
	}
	head := l.queue[0]
	l.queue = l.queue[1:]
	l.holder, l.count = head, 1
	l.token++
	return []string{traceGrant(head, l.token)}
}

// apply runs step s on the model and returns its result and grants.
func (m *traceModel) apply(s traceStep) (string, []string) {
	l := &m[s.lock]
	switch s.op {
	case traceLock:
		if r, ok := l.acquire(s.owner); ok {
			return r, nil
		}
		l.queue = append(l.queue, s.owner)
		return traceQueued(len(l.queue)), nil
	case traceLockCancelled:
		return traceCancelled, nil
	case traceTryLock, traceTryLockOnce:
		if r, ok := l.acquire(s.owner); ok {
			return r, nil
		}
		return traceNotAcquired, nil
	case traceUnlock:
		if l.holder != s.owner {
			return traceNotHeld, nil
		}
		l.count--
		if l.count > 0 {
			return traceReleased, nil
		}
		return traceHoldEnded, l.free()
	case traceForceUnlock:
		if l.holder < 0 {
			return traceForced(false), nil
		}
		return traceForced(true), l.free()
	case traceCancel:
		l.queue = slices.DeleteFunc(l.queue, func(o int) bool { return o == s.owner })
		return traceCancelled, nil
	}
	panic("conformance: unknown trace op " + s.op.String())
}

// planTrace draws steps operations from seed and runs them on the model.
// It returns the plan, followed by closing steps (cancel every waiting
// Lock, force-unlock every lock), and the trace a correct lock records for
// it.
func planTrace(seed int64, steps int) ([]traceStep, []string) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6661_6972_6c6f_636b)) // "fairlock"
	var (
		model traceModel
		plan  []traceStep
		want  []string
	)
	for i := range model {
		model[i].holder = -1
	}
	add := func(s traceStep) {
		l := &model[s.lock]
		if s.op == traceTryLock {
			s.wait = traceLongWait
			if l.holder >= 0 && l.holder != s.owner {
				s.wait = traceRefusedWait
			}
		}
		result, grants := model.apply(s)
		want = append(want, traceLine(len(plan), s, result, grants, l.state()))
		plan = append(plan, s)
	}
	for range steps {
		s := traceStep{lock: rng.IntN(traceLocks)}
		l := &model[s.lock]
		// Owners without a waiting Lock on this lock: the acquiring
		// operations pick among them. There is always one (the holder,
		// or anyone when the lock is free, as then nobody waits).
		var idle []int
		for o := range traceOwners {
			if !l.queued(o) {
				idle = append(idle, o)
			}
		}
		pickIdle := func() int { return idle[rng.IntN(len(idle))] }
		switch r := rng.IntN(100); {
		case r < 30:
			s.op, s.owner = traceLock, pickIdle()
		case r < 40:
			s.op, s.owner = traceTryLock, pickIdle()
		case r < 47:
			s.op, s.owner = traceTryLockOnce, pickIdle()
		case r < 72:
			s.op, s.owner = traceUnlock, rng.IntN(traceOwners)
			if l.holder >= 0 && rng.IntN(4) > 0 {
				s.owner = l.holder
			}
		case r < 77:
			// Not the head waiter: its own Lock, granted by this force
			// unlock, races with the force unlock's local cleanup (see
			// testForceUnlockRacingOwnGrant), which would make the trace
			// depend on timing.
			s.op, s.owner = traceForceUnlock, rng.IntN(traceOwners)
			if len(l.queue) > 0 && s.owner == l.queue[0] {
				s.owner = pickIdle()
			}
		case r < 92 && len(l.queue) > 0:
			s.op, s.owner = traceCancel, l.queue[rng.IntN(len(l.queue))]
		case r < 92:
			s.op, s.owner = traceLock, pickIdle()
		default:
			s.op, s.owner = traceLockCancelled, pickIdle()
		}
		add(s)
	}
	for li := range model {
		for len(model[li].queue) > 0 {
			add(traceStep{op: traceCancel, owner: model[li].queue[0], lock: li})
		}
		add(traceStep{op: traceForceUnlock, owner: 0, lock: li})
	}
	return plan, want
}

// modelTrace returns the trace a correct fair reentrant lock records for
// recordTrace(t, f, seed, steps).
func modelTrace(seed int64, steps int) []string {
	_, want := planTrace(seed, steps)
	return want
}

// recordTrace runs the seeded differential workload - steps operations
// (Lock, re-entrant Lock, TryLock with a wait, TryLockOnce, Unlock,
// ForceUnlock, Lock with a cancelled context, cancelling a waiting Lock)
// by four owners on two new locks - on backends from newBackend, then
// cancels every waiting Lock and force-unlocks both locks. It returns one
// line per step: the operation, what it returned (and which waiter the
// step handed the lock to), and the lock's state read with Inspect
// afterwards. Owners appear as o0..o3, locks as L0 and L1, fencing tokens
// relative to the lock's counter at the start, so the trace depends only
// on seed and steps: two correct backends record identical traces, and
// comparing them is the differential check. It fails t only when the
// server cannot be read; misbehaviour shows in the trace.
func recordTrace(t *testing.T, newBackend func(testing.TB) capable, seed int64, steps int) []string {
	t.Helper()
	plan, _ := planTrace(seed, steps)
	r := newTraceRun(t, newBackend)
	defer r.stop()
	trace := make([]string, 0, len(plan))
	for i, s := range plan {
		result := r.run(s)
		st, grants := r.settle(s.lock)
		trace = append(trace, traceLine(i, s, result, grants, r.state(s.lock, st)))
	}
	return trace
}

// traceDiff returns "" when the traces are equal, else a description of the
// first line where they differ.
func traceDiff(want, got []string) string {
	for i := range max(len(want), len(got)) {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			var b strings.Builder
			fmt.Fprintf(&b, "first difference at line %d (of %d and %d)", i, len(want), len(got))
			if i > 0 {
				b.WriteString(", after:\n")
				for _, l := range want[max(0, i-3):i] {
					b.WriteString("        " + l + "\n")
				}
			} else {
				b.WriteString(":\n")
			}
			fmt.Fprintf(&b, "  want: %s\n  got:  %s", w, g)
			return b.String()
		}
	}
	return ""
}

// traceAcq is what an acquire call returned.
type traceAcq struct {
	h   *lock.Hold
	err error
}

// traceWaiter is a Lock waiting in its own goroutine.
type traceWaiter struct {
	ch     chan traceAcq
	cancel context.CancelFunc
}

// traceRun executes a plan.
type traceRun struct {
	t      *testing.T
	life   context.Context // bounds every call of the run
	end    context.CancelFunc
	wg     sync.WaitGroup // waiting Locks
	mus    [traceOwners][traceLocks]*lock.Mutex
	holds  [traceOwners][traceLocks]*lock.Hold // latest hold returned
	owners map[string]int                      // owner field -> index
	base   [traceLocks]int64                   // token before the first grant (0: none yet)
	wait   [traceOwners][traceLocks]*traceWaiter
	// inflight counts acquire script calls under way per owner field.
	inflight traceInflight
}

// traceInflight counts acquire script calls under way per owner.
type traceInflight struct {
	mu sync.Mutex
	n  map[string]int
}

func (in *traceInflight) add(owner string, d int) {
	in.mu.Lock()
	if in.n == nil {
		in.n = map[string]int{}
	}
	in.n[owner] += d
	in.mu.Unlock()
}

func (in *traceInflight) busy(owner string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.n[owner] > 0
}

// traceBackend is the backend under test, counting acquire calls under
// way: a waiting Lock is cancelled only between its attempts. (An attempt
// cancelled on its way can reach the server after the call's cleanup -
// testAcquireLandingAfterCancel - which would make the trace depend on
// timing.)
type traceBackend struct {
	capable
	inflight *traceInflight
}

func (b *traceBackend) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	if s.Name != "acquire" || len(args) == 0 {
		return b.capable.Eval(ctx, s, keys, args)
	}
	b.inflight.add(args[0], 1)
	defer b.inflight.add(args[0], -1)
	return b.capable.Eval(ctx, s, keys, args)
}

// WatchKey forwards to the backend under test (see linBackend.WatchKey).
func (b *traceBackend) WatchKey(ctx context.Context, key string) (*backend.Subscription, error) {
	return watchKeyOf(ctx, b.capable, key)
}

func newTraceRun(t *testing.T, newBackend func(testing.TB) capable) *traceRun {
	t.Helper()
	r := &traceRun{t: t, owners: map[string]int{}}
	r.life, r.end = context.WithTimeout(context.Background(), 10*time.Minute)
	// A long waiter timeout: a waiter delayed by a loaded machine must
	// never be dropped from the queue, which would reorder it.
	var clients [2]*lock.Client
	for i := range clients {
		b := &traceBackend{capable: newBackend(t), inflight: &r.inflight}
		c, err := lock.NewClient(b, lock.WithWaiterTimeout(time.Minute))
		if err != nil {
			t.Fatalf("lock.NewClient: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		clients[i] = c
	}
	var names [traceLocks]string
	for l := range names {
		names[l] = traceLockName(t, l)
	}
	for o := range traceOwners {
		for l := range traceLocks {
			m, err := clients[o%2].NewMutex(names[l], lock.WithOwnerID(int64(o+1)))
			if err != nil {
				t.Fatalf("NewMutex: %v", err)
			}
			r.mus[o][l] = m
			r.owners[m.Owner()] = o
		}
	}
	return r
}

// relToken returns token relative to the token before the trace's first
// grant on lock l. A new lock's first token comes from the server's clock
// (X15), so the base is taken from the first token seen.
func (r *traceRun) relToken(l int, token int64) int64 {
	if token == 0 {
		return 0
	}
	if r.base[l] == 0 {
		r.base[l] = token - 1
	}
	return token - r.base[l]
}

// traceLockName returns a new lock name for lock l of a trace.
func traceLockName(t *testing.T, l int) string {
	return fmt.Sprintf("%s:L%d", historyLockName(t), l)
}

// stop cancels every waiting Lock and waits for their goroutines.
func (r *traceRun) stop() {
	r.end()
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(eventually):
		r.t.Errorf("waiting Lock calls did not return within %v of their context's end", eventually)
	}
}

func (r *traceRun) ctx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.life, d)
}

func (r *traceRun) inspect(l int) inspect.State {
	r.t.Helper()
	ctx, cancel := r.ctx(eventually)
	defer cancel()
	st, err := r.mus[0][l].Inspect(ctx, 16)
	if err != nil {
		r.t.Fatalf("Inspect L%d: %v", l, err)
	}
	return st
}

func (r *traceRun) owner(field string) string {
	if o, ok := r.owners[field]; ok {
		return fmt.Sprintf("o%d", o)
	}
	return "stranger(" + field + ")"
}

// holder returns the index of the single holder in st, or -1.
func (r *traceRun) holder(st inspect.State) int {
	if len(st.Holders) != 1 {
		return -1
	}
	if o, ok := r.owners[st.Holders[0].Owner]; ok {
		return o
	}
	return -1
}

func (r *traceRun) state(l int, st inspect.State) string {
	var holders, queue []string
	for _, h := range st.Holders {
		holders = append(holders, fmt.Sprintf("%sx%d", r.owner(h.Owner), h.Count))
	}
	for _, w := range st.Queue {
		queue = append(queue, r.owner(w.Owner))
	}
	if st.QueueLength != len(st.Queue) {
		queue = append(queue, fmt.Sprintf("(length %d)", st.QueueLength))
	}
	return traceState(holders, queue, r.relToken(l, st.Token))
}

// errKind names an error by the sentinel it wraps; other errors are
// logged, as their text carries names that differ between runs.
func (r *traceRun) errKind(err error) string {
	switch {
	case errors.Is(err, lock.ErrNotAcquired):
		return traceNotAcquired
	case errors.Is(err, lock.ErrNotHeld):
		return traceNotHeld
	case errors.Is(err, context.Canceled):
		return traceCancelled
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline exceeded"
	case errors.Is(err, lock.ErrLockLost):
		return "lock lost"
	case errors.Is(err, lock.ErrClosed):
		return "closed"
	}
	r.t.Logf("unexpected error: %v", err)
	return "error"
}

// acquired records a successful acquire and describes it.
func (r *traceRun) acquired(o, l int, a traceAcq) string {
	if a.err != nil {
		return r.errKind(a.err)
	}
	reentered := a.h == r.holds[o][l]
	r.holds[o][l] = a.h
	return traceAcquired(reentered, r.relToken(l, a.h.Token()))
}

func (r *traceRun) run(s traceStep) string {
	m := r.mus[s.owner][s.lock]
	switch s.op {
	case traceLock:
		return r.lock(s.owner, s.lock)
	case traceLockCancelled:
		ctx, cancel := context.WithCancel(r.life)
		cancel()
		h, err := m.Lock(ctx)
		return r.acquired(s.owner, s.lock, traceAcq{h, err})
	case traceTryLock:
		ctx, cancel := r.ctx(traceLongWait)
		defer cancel()
		h, err := m.TryLock(ctx, s.wait)
		return r.acquired(s.owner, s.lock, traceAcq{h, err})
	case traceTryLockOnce:
		ctx, cancel := r.ctx(traceLongWait)
		defer cancel()
		h, err := m.TryLock(ctx, 0)
		return r.acquired(s.owner, s.lock, traceAcq{h, err})
	case traceUnlock:
		ctx, cancel := r.ctx(eventually)
		defer cancel()
		if err := m.Unlock(ctx); err != nil {
			return r.errKind(err)
		}
		if h := r.holds[s.owner][s.lock]; h != nil && errors.Is(h.Err(), lock.ErrReleased) {
			return traceHoldEnded
		}
		return traceReleased
	case traceForceUnlock:
		ctx, cancel := r.ctx(eventually)
		defer cancel()
		released, err := m.ForceUnlock(ctx)
		if err != nil {
			return r.errKind(err)
		}
		return traceForced(released)
	case traceCancel:
		w := r.wait[s.owner][s.lock]
		if w == nil {
			return "no waiting Lock to cancel"
		}
		r.wait[s.owner][s.lock] = nil
		r.quiet(m.Owner())
		w.cancel()
		return r.awaitWaiter(s.owner, s.lock, w)
	}
	return "unknown op"
}

// lock starts Lock in a goroutine and returns when it has returned or
// when Inspect shows the owner queued; then it is left waiting.
func (r *traceRun) lock(o, l int) string {
	ctx, cancel := context.WithCancel(r.life)
	w := &traceWaiter{ch: make(chan traceAcq, 1), cancel: cancel}
	m := r.mus[o][l]
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		h, err := m.Lock(ctx)
		w.ch <- traceAcq{h, err}
	}()
	field := m.Owner()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(eventually)
	for {
		select {
		case a := <-w.ch:
			cancel()
			return r.acquired(o, l, a)
		default:
		}
		st := r.inspect(l)
		if i := slices.IndexFunc(st.Queue, func(w inspect.Waiter) bool { return w.Owner == field }); i >= 0 {
			r.wait[o][l] = w
			return traceQueued(i + 1)
		}
		if time.Now().After(deadline) {
			cancel()
			return "neither returned nor queued within " + eventually.String() + ", then " + r.awaitWaiter(o, l, w)
		}
		select {
		case a := <-w.ch:
			cancel()
			return r.acquired(o, l, a)
		case <-tick.C:
		}
	}
}

// quiet waits, boundedly, until owner has no acquire attempt under way.
func (r *traceRun) quiet(owner string) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(eventually); r.inflight.busy(owner) && time.Now().Before(deadline); {
		<-tick.C
	}
}

func (r *traceRun) awaitWaiter(o, l int, w *traceWaiter) string {
	select {
	case a := <-w.ch:
		return r.acquired(o, l, a)
	case <-time.After(eventually):
		return "no result within " + eventually.String()
	}
}

// settle waits until lock l is not free while owners wait (a woken head
// takes the lock), then collects the waiting Lock the step handed the lock
// to. It returns the state read last and the grants, as "oN <result>".
func (r *traceRun) settle(l int) (inspect.State, []string) {
	var grants []string
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(eventually)
	st := r.inspect(l)
	for !st.Locked() && st.QueueLength > 0 {
		if time.Now().After(deadline) {
			grants = append(grants, fmt.Sprintf("none: free with %d waiting for %v", st.QueueLength, eventually))
			break
		}
		<-tick.C
		st = r.inspect(l)
	}
	holder := r.holder(st)
	for o := range traceOwners {
		w := r.wait[o][l]
		if w == nil {
			continue
		}
		if o == holder {
			r.wait[o][l] = nil
			grants = append(grants, fmt.Sprintf("o%d %s", o, r.awaitWaiter(o, l, w)))
			continue
		}
		select {
		case a := <-w.ch: // a bug: it returned while someone else holds
			r.wait[o][l] = nil
			grants = append(grants, fmt.Sprintf("o%d returned while not holding: %s", o, r.acquired(o, l, a)))
		default:
		}
	}
	return st, grants
}
