package conformance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/lock/inspect"
	"github.com/fairlock/fairlock/lock/observe"
)

// The linearizability case records concurrent histories of several owners
// on a lock and checks with porcupine that they are linearizable with
// respect to a sequential fair reentrant lock: state = holder, hold count,
// FIFO queue and (a lower bound of) the fencing counter.
//
// An acquire that waits takes effect twice - it joins the queue, and later
// it is granted the lock - and FIFO is about the order of the first
// effects, so an acquire call is recorded as up to three operations:
//
//   - join, from the call to the moment the observer hears the first reply
//     (AcquireTracker.Queued, or the end of the call when it did not queue):
//     acquired (new hold or re-entry, with count and token), queued at a
//     1-based position, or refused (TryLock with no wait);
//   - grant, from that moment to the end of the call, when the call
//     acquired after queuing: only the head of the queue may be granted a
//     free lock;
//   - leave, the queue cleanup the call runs when it gives up (X5),
//     recorded by a wrapper around the backend as the script call it is,
//     as part of its call also when it runs after the caller returned,
//     during the owner's next call (linCall).
//
// Unlock (released with the count left, or not held) and Inspect (holder,
// count, queue, token) are one operation each.
//
// A call that failed has an unknown effect. Following porcupine's
// convention its output is "unknown" and it returns at the end of the
// history, and the model lets it have its script's effect at any point
// after its call, or none: an acquire attempt whose reply was lost may
// have acquired, re-entered or queued (the cleanup that follows is
// recorded as a leave), an unlock may or may not have released. "Any
// point after" matters: a client that stops waiting for a reply has not
// stopped the request, which can reach the server after the call's
// cleanup (see X5_AcquireLandingAfterCancelLeavesNoTrace).

// linKind is the kind of a recorded operation.
type linKind uint8

const (
	linJoin    linKind = iota // an acquire's first attempt
	linGrant                  // a queued acquire being granted the lock
	linLeave                  // a waiting acquire leaving the queue
	linUnlock                 // Unlock
	linInspect                // Inspect
)

var linKindNames = [...]string{"join", "grant", "leave", "unlock", "inspect"}

// linInput is a recorded call.
type linInput struct {
	kind  linKind
	lock  int // partition: operations on different locks are independent
	owner int
	once  bool // join: TryLock with no wait, which never queues
	// failed (join, grant): an acquire attempt of the call failed, and the
	// call's leave follows it. after (leave): it follows such an attempt,
	// which must have landed first - only in histories that confine
	// effects to their calls (linHistory.finish).
	failed, after bool
}

// linResult is how a recorded call ended.
type linResult uint8

const (
	linUnknown  linResult = iota // the call failed; its effect is unknown
	linAcquired                  // join, grant: count, token
	linQueued                    // join: pos
	linRefused                   // join with once
	linLeft                      // leave: wasQueued
	linReleased                  // unlock: count left
	linNotHeld                   // unlock
	linObserved                  // inspect: holder, count, queue, queueLen, token
	linMaybe                     // grant: an attempt failed, its effect is unknown
)

// linOutput is what a recorded call returned.
type linOutput struct {
	result    linResult
	count     int
	token     int64
	pos       int
	wasQueued bool
	holder    int    // inspect: -1 free, linStranger for anything but one known owner
	queue     string // inspect: owner indexes as bytes, head first
	queueLen  int
}

// linStranger marks an inspected holder or waiter that is not one known
// owner (or several holders at once); the model never matches it.
const linStranger = 0xff

// linState is the model's state. It is comparable, so porcupine can
// compare states with ==.
type linState struct {
	holder int // -1 when free
	count  int // the holder's hold count
	// handed is set while the holder was handed the lock by a release
	// (one-message hand-over) and its waiting call has not reported it.
	handed bool
	queue  string // owner indexes as bytes, head first
	token  int64  // lower bound of the lock's fencing counter
	// landed has bit o set between a failed attempt of o taking effect
	// (or not) and the leave that follows it.
	landed uint32
}

func (s linState) canAcquire(o int) bool {
	return s.holder == o || (s.holder < 0 && (s.queue == "" || int(s.queue[0]) == o))
}

// handOver is what a script does with a lock it finds (or leaves) free
// while owners wait: it grants it to the head, which leaves the queue, with
// the next token. (Every owner here is a fairlock waiter, alive.)
func (s linState) handOver() linState {
	if s.holder < 0 && s.queue != "" {
		s.holder, s.count, s.queue = int(s.queue[0]), 1, s.queue[1:]
		s.token++
		s.handed = true
	}
	return s
}

func (s linState) queued(o int) bool { return strings.IndexByte(s.queue, byte(o)) >= 0 }

func (s linState) without(o int) string {
	return strings.ReplaceAll(s.queue, string([]byte{byte(o)}), "")
}

// acquire applies an acquire by o that does not wait. With known, count
// and token must be what the call reported.
func (s linState) acquire(o int, known bool, count int, token int64) (linState, bool) {
	switch {
	case s.holder == o && s.handed:
		// The hand-over's grant, reported by o's call (or taken up by
		// its attempt).
		if known && (count != 1 || token < s.token) {
			return s, false
		}
		s.handed = false
		if known {
			s.token = token
		}
		return s, true
	case s.holder == o:
		if known && (count != s.count+1 || token < s.token) {
			return s, false
		}
		s.count++
		if known {
			s.token = token
		}
		return s, true
	case s.canAcquire(o):
		if known && (count != 1 || token <= s.token) {
			return s, false
		}
		if s.queue != "" {
			s.queue = s.queue[1:]
		}
		s.holder, s.count = o, 1
		if known {
			s.token = token
		}
		return s, true
	}
	return s, false
}

// attempt is the effect of one acquire script call by o whose reply was
// lost, in whatever state it ran: a new hold or a re-entry when it can
// acquire, else joining the tail unless queued already (or refusing, once).
// It may run after the call that sent it returned (the client gave up on
// the reply, not on the request), so the model allows it at any later
// point: porcupine's convention for an unknown output.
func (s linState) attempt(o int, once bool) linState {
	if n, ok := s.acquire(o, false, 0, 0); ok {
		return n
	}
	s = s.handOver()
	if n, ok := s.acquire(o, false, 0, 0); ok {
		return n
	}
	if !once && !s.queued(o) {
		s.queue += string([]byte{byte(o)})
	}
	return s
}

// failedAttempt: the states after an acquire call whose attempt failed -
// its effect or none - marking the attempt as landed when a leave follows.
func (s linState) failedAttempt(in linInput) []linState {
	if in.failed {
		s.landed |= 1 << in.owner
	}
	return []linState{s, s.attempt(in.owner, in.once)}
}

// release drops one hold of o.
func (s linState) release(o int) linState {
	if s.holder != o {
		return s
	}
	s.count--
	if s.count == 0 {
		s.holder = -1
		s = s.handOver()
	}
	return s
}

// linStep is the sequential specification: the states the lock can be in
// after in returned out in state s (none: the step is illegal).
func linStep(s linState, in linInput, out linOutput) []linState {
	o := in.owner
	switch in.kind {
	case linJoin:
		switch out.result {
		case linAcquired:
			if n, ok := s.acquire(o, true, out.count, out.token); ok {
				return []linState{n}
			}
		case linQueued:
			s = s.handOver()
			if !in.once && !s.canAcquire(o) && !s.queued(o) && out.pos == len(s.queue)+1 {
				s.queue += string([]byte{byte(o)})
				return []linState{s}
			}
		case linRefused:
			if !s.canAcquire(o) {
				return []linState{s.handOver()}
			}
		case linUnknown:
			return s.failedAttempt(in)
		}
	case linGrant:
		switch out.result {
		case linAcquired:
			// Normally a new hold for the head of the queue; a re-entry
			// only after a late attempt of an earlier call took the lock.
			if n, ok := s.acquire(o, true, out.count, out.token); ok {
				return []linState{n}
			}
		case linMaybe:
			return s.failedAttempt(in)
		}
	case linLeave:
		if in.after {
			if s.landed&(1<<o) == 0 {
				return nil
			}
			s.landed &^= 1 << o
		}
		left := s
		left.queue = s.without(o)
		if left.holder == o && left.handed {
			// A hand-over grant its call never reported passes on.
			left.holder, left.count, left.handed = -1, 0, false
		}
		left = left.handOver()
		switch out.result {
		case linLeft:
			if (s.queued(o) || (s.holder == o && s.handed)) == out.wasQueued {
				return []linState{left}
			}
		case linUnknown:
			return []linState{s, left}
		}
	case linUnlock:
		switch out.result {
		case linReleased:
			if s.holder == o && out.count == s.count-1 {
				return []linState{s.release(o)}
			}
		case linNotHeld:
			if s.holder != o {
				return []linState{s}
			}
		case linUnknown:
			return []linState{s, s.release(o)}
		}
	case linInspect:
		if out.result == linObserved && out.holder == s.holder && (s.holder < 0 || out.count == s.count) &&
			out.queue == s.queue && out.queueLen == len(s.queue) && out.token >= s.token {
			s.token = out.token
			return []linState{s}
		}
	}
	return nil
}

func linOwnerName(o int) string {
	if o == linStranger {
		return "o?"
	}
	return fmt.Sprintf("o%d", o)
}

func linQueueString(q string) string {
	names := make([]string, len(q))
	for i := range len(q) {
		names[i] = linOwnerName(int(q[i]))
	}
	return "[" + strings.Join(names, " ") + "]"
}

func (s linState) String() string {
	h := "free"
	if s.holder >= 0 {
		h = fmt.Sprintf("%sx%d", linOwnerName(s.holder), s.count)
		if s.handed {
			h += " (handed over)"
		}
	}
	return fmt.Sprintf("%s queue %s token>=%d", h, linQueueString(s.queue), s.token)
}

func (in linInput) String() string {
	s := fmt.Sprintf("L%d o%d %s", in.lock, in.owner, linKindNames[in.kind])
	if in.once {
		s += "(once)"
	}
	if in.failed || in.after {
		s += "(after a failed attempt)"
	}
	return s
}

func (out linOutput) String() string {
	switch out.result {
	case linUnknown:
		return "unknown"
	case linAcquired:
		return fmt.Sprintf("acquired x%d token %d", out.count, out.token)
	case linQueued:
		return fmt.Sprintf("queued at %d", out.pos)
	case linRefused:
		return "refused"
	case linLeft:
		return fmt.Sprintf("left (was queued: %t)", out.wasQueued)
	case linReleased:
		return fmt.Sprintf("released, %d left", out.count)
	case linNotHeld:
		return "not held"
	case linObserved:
		h := "free"
		if out.holder >= 0 {
			h = fmt.Sprintf("%sx%d", linOwnerName(out.holder), out.count)
		}
		return fmt.Sprintf("%s queue %s (length %d) token %d", h, linQueueString(out.queue), out.queueLen, out.token)
	case linMaybe:
		return "an attempt failed (unknown effect)"
	}
	return "?"
}

// linModel is the porcupine model of a fair reentrant lock, partitioned by
// lock.
func linModel() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byLock := map[int][]porcupine.Operation{}
			var locks []int
			for _, op := range history {
				l := op.Input.(linInput).lock
				if _, ok := byLock[l]; !ok {
					locks = append(locks, l)
				}
				byLock[l] = append(byLock[l], op)
			}
			slices.Sort(locks)
			parts := make([][]porcupine.Operation, 0, len(locks))
			for _, l := range locks {
				parts = append(parts, byLock[l])
			}
			return parts
		},
		Init: func() []any { return []any{linState{holder: -1}} },
		Step: func(state, input, output any) []any {
			next := linStep(state.(linState), input.(linInput), output.(linOutput))
			states := make([]any, len(next))
			for i, n := range next {
				states[i] = n
			}
			return states
		},
		Hash: func(state any) uint64 {
			s := state.(linState)
			h := fnv.New64a()
			fmt.Fprintf(h, "%d/%d/%s/%d/%d", s.holder, s.count, s.queue, s.token, s.landed)
			return h.Sum64()
		},
		DescribeOperation: func(input, output any) string {
			return fmt.Sprintf("%v -> %v", input, output)
		},
		DescribeState: func(state any) string { return state.(linState).String() },
	}
	return nm.ToModel()
}

// linHistory collects operations from many goroutines.
type linHistory struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
	// clients is the next porcupine client ID to hand out: the actors'
	// own come first.
	clients int
}

func (h *linHistory) now() int64 { return int64(time.Since(h.start)) }

// add records an operation; ret is when the call returned, also for an
// unknown output (see finish). It returns the operation's index.
func (h *linHistory) add(client int, in linInput, call, ret int64, out linOutput) int {
	ret = max(ret, call)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	return len(h.ops) - 1
}

// extend moves the return of operation i to ret, when that is later: an
// attempt of unknown effect that was in flight when its caller returned
// lands by its reply.
func (h *linHistory) extend(i int, ret int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops[i].Return = max(h.ops[i].Return, ret)
}

// freshClient returns a porcupine client ID no operation has had: one
// for an operation that overlaps its actor's later calls.
func (h *linHistory) freshClient() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clients++
	return h.clients - 1
}

func (out linOutput) unknown() bool { return out.result == linUnknown || out.result == linMaybe }

// finish returns the history. With late, an operation of unknown output
// returns at the end of the history (porcupine's convention: its effect
// may land any time after its call, as a request the client stopped
// waiting for can). Without, effects are confined to their calls, as X5
// promises: a failed call's effect lands before the call returns, and a
// failed acquire attempt's before the leave that cleans up after it.
func (h *linHistory) finish(late bool) []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	end := h.now()
	for _, op := range h.ops {
		end = max(end, op.Return+1)
	}
	ops := slices.Clone(h.ops)
	for i := range ops {
		if !late {
			continue
		}
		if ops[i].Output.(linOutput).unknown() {
			ops[i].Return = end
		}
		if in := ops[i].Input.(linInput); in.failed || in.after {
			in.failed, in.after = false, false
			ops[i].Input = in
		}
	}
	return ops
}

// linActor is one owner on one lock, run by one goroutine.
type linActor struct {
	h      *linHistory
	m      *lock.Mutex
	lock   int
	owner  int
	client int // porcupine client ID of the actor's own calls
	field  string
	owners map[string]int // owner field -> index, for Inspect
	rng    *rand.Rand
	count  int // holds this owner believes it has
}

// linCall is the record of one acquire call, which the observer and the
// backend wrapper find in the context the call's script calls run under.
// A call's caller can return before the call is over (X5: after 250 ms a
// cleanup, and an attempt in flight, finish in the background), so the
// call's last script calls can run while the actor's next call does:
// each call has its own record, under a mutex. What it learns after the
// caller returned - a leave, an unlock giving a grant back, an attempt's
// late reply - is recorded under a fresh porcupine client ID, which no
// other operation shares. (Rather than have the actor wait for that work
// before its next call: the lock says nowhere when it ends, and the
// overlap X5 allows is part of what the history should check.)
type linCall struct {
	a    *linActor
	once bool

	mu       sync.Mutex
	returned bool  // the caller has returned and recorded the call
	queuedAt int64 // when the observer heard "queued"; -1 if not
	pos      int
	acquire  observe.AcquireResult
	// failed: an acquire script call of the call failed, or was in flight
	// when the caller returned; its leave, if any, follows that attempt.
	// Once the caller has returned: the call recorded an operation with
	// failed set, which a leave marked after needs in a strict history.
	failed   bool
	inFlight int // acquire script calls awaiting their reply
	// unknownOp is the index in the history of the call's operation of
	// unknown effect whose attempt was in flight when the caller
	// returned, or -1: the attempt's reply ends it (linHistory.extend).
	unknownOp int
}

// linCallKey is the context key of the *linCall of an acquire call, and
// linUnlockKey that of the *linRelease of an actor's Unlock call.
type (
	linCallKey   struct{}
	linUnlockKey struct{}
)

// linRelease is the record of one actor's Unlock call.
type linRelease struct {
	mu     sync.Mutex
	result observe.ReleaseResult
}

func linCallOf(ctx context.Context) *linCall {
	c, _ := ctx.Value(linCallKey{}).(*linCall)
	return c
}

// clientAt returns the porcupine client ID for an operation of the call
// recorded now: the actor's own while the caller waits, a fresh one once
// it returned, since the actor may have started its next call. c.mu held.
func (c *linCall) clientAt() int {
	if c.returned {
		return c.a.h.freshClient()
	}
	return c.a.client
}

// linObserver routes lock events to the record of the call.
type linObserver struct{}

func (linObserver) StartAcquire(ctx context.Context, _ observe.Call) (context.Context, observe.AcquireTracker) {
	return ctx, linAcquireTracker{linCallOf(ctx)}
}

func (linObserver) StartRelease(ctx context.Context, _ observe.Call) (context.Context, observe.ReleaseTracker) {
	r, _ := ctx.Value(linUnlockKey{}).(*linRelease)
	return ctx, linReleaseTracker{r}
}

func (linObserver) HoldLost(observe.Call, int64, time.Duration, error) {}

func (linObserver) Renewed(observe.Call, error) {}

// linAcquireTracker notes what the call's observer hears until the caller
// has returned.
type linAcquireTracker struct{ c *linCall }

func (t linAcquireTracker) Queued(position int) {
	if t.c == nil {
		return
	}
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if !t.c.returned && t.c.queuedAt < 0 {
		t.c.queuedAt, t.c.pos = t.c.a.h.now(), position
	}
}

func (linAcquireTracker) Woken(bool) {}

func (t linAcquireTracker) End(r observe.AcquireResult) {
	if t.c == nil {
		return
	}
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if !t.c.returned {
		t.c.acquire = r
	}
}

// linReleaseTracker notes an actor's Unlock result; a release the lock
// makes on its own (a late grant given back) has no record.
type linReleaseTracker struct{ r *linRelease }

func (t linReleaseTracker) End(r observe.ReleaseResult) {
	if t.r == nil {
		return
	}
	t.r.mu.Lock()
	t.r.result = r
	t.r.mu.Unlock()
}

// linBackend wraps the backend under test: it notes the acquire script
// calls of each acquire call and records the leave script as a leave
// operation, and the unlock script when the lock runs it on its own.
type linBackend struct {
	capable
	actors map[string]*linActor // hash key + "\x00" + owner field
}

func (b *linBackend) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	var a *linActor
	if len(keys) > 0 && len(args) > 0 && (s.Name == "acquire" || s.Name == "leave" || s.Name == "unlock") {
		a = b.actors[linKey(keys[0], args[0])]
	}
	if a == nil {
		return b.capable.Eval(ctx, s, keys, args)
	}
	c := linCallOf(ctx)
	var late bool
	if s.Name == "acquire" && c != nil {
		late = c.sending()
	}
	call := a.h.now()
	rep, err := b.capable.Eval(ctx, s, keys, args)
	ret := a.h.now()
	switch s.Name {
	case "acquire":
		if c != nil {
			c.replied(late, call, ret, err)
		}
	case "leave":
		a.recordLeave(c, call, ret, rep, err)
	case "unlock":
		// An actor's Unlock call is recorded by unlockOp; any other
		// unlock of the owner is the lock's own: inside an acquire call,
		// it undoes a grant whose reply was lost, and after it a grant
		// that came after the caller returned is given back.
		if _, ok := ctx.Value(linUnlockKey{}).(*linRelease); !ok {
			a.recordUnlock(c, call, ret, rep, err)
		}
	}
	return rep, err
}

func linKey(name, field string) string { return name + "\x00" + field }

// sending notes an acquire script call of c about to be sent, and reports
// whether the caller has returned already.
func (c *linCall) sending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inFlight++
	return c.returned
}

// replied notes the reply to an acquire script call of c sent at call. An
// attempt sent after the caller returned is recorded here, as an attempt
// of unknown effect; one the caller left in flight ends its operation of
// unknown effect now, when its effect has landed (or failed to).
func (c *linCall) replied(late bool, call, ret int64, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inFlight--
	switch {
	case late:
		c.failed = true
		in := linInput{kind: linJoin, lock: c.a.lock, owner: c.a.owner, once: c.once, failed: true}
		c.a.h.add(c.a.h.freshClient(), in, call, ret, linOutput{result: linUnknown})
	case c.returned && c.unknownOp >= 0:
		c.a.h.extend(c.unknownOp, ret)
	case err != nil:
		c.failed = true
	}
}

// recordLeave records a leave script call of the owner, as part of the
// acquire call c whose cleanup it is (nil: none, such as Close's).
func (a *linActor) recordLeave(c *linCall, call, ret int64, rep backend.Reply, err error) {
	in := linInput{kind: linLeave, lock: a.lock, owner: a.owner}
	client := a.h.freshClient()
	if c != nil {
		c.mu.Lock()
		in.after, client = c.failed, c.clientAt()
		c.mu.Unlock()
	}
	if err != nil {
		a.h.add(client, in, call, ret, linOutput{result: linUnknown})
		return
	}
	queued := rep.Kind == backend.Array && len(rep.Elems) > 0 && rep.Elems[0].Int == 1
	a.h.add(client, in, call, ret, linOutput{result: linLeft, wasQueued: queued})
}

// recordUnlock records an unlock script call the lock made on its own for
// the owner, as part of the acquire call c (nil: a late grant given back
// after the call, or Close's).
func (a *linActor) recordUnlock(c *linCall, call, ret int64, rep backend.Reply, err error) {
	in := linInput{kind: linUnlock, lock: a.lock, owner: a.owner}
	client := a.h.freshClient()
	if c != nil {
		c.mu.Lock()
		client = c.clientAt()
		c.mu.Unlock()
	}
	switch {
	case err != nil:
		a.h.add(client, in, call, ret, linOutput{result: linUnknown})
	case rep.Int < 0:
		a.h.add(client, in, call, ret, linOutput{result: linNotHeld})
	default:
		a.h.add(client, in, call, ret, linOutput{result: linReleased, count: int(rep.Int)})
	}
}

// WatchKey forwards to the backend under test when it can watch keys, so
// the lock takes the same paths as without the wrapper.
func (b *linBackend) WatchKey(ctx context.Context, key string) (*backend.Subscription, error) {
	return watchKeyOf(ctx, b.capable, key)
}

// watchKeyOf calls b's WatchKey, or says it has none.
func watchKeyOf(ctx context.Context, b backend.Backend, key string) (*backend.Subscription, error) {
	if kw, ok := b.(backend.KeyWatcher); ok {
		return kw.WatchKey(ctx, key)
	}
	return nil, backend.ErrNotSupported
}

// linAcquireKind is how an actor acquires.
type linAcquireKind uint8

const (
	linLock linAcquireKind = iota
	linTryLock
	linTryLockOnce
)

// acquireOp makes one acquire call and records it as join, grant and (via
// the backend) leave operations.
func (a *linActor) acquireOp(kind linAcquireKind, d time.Duration) {
	c := &linCall{a: a, once: kind == linTryLockOnce, queuedAt: -1, unknownOp: -1}
	ctx := context.WithValue(context.Background(), linCallKey{}, c)
	var (
		h   *lock.Hold
		err error
	)
	call := a.h.now()
	switch kind {
	case linLock:
		ctx, cancel := context.WithTimeout(ctx, d)
		h, err = a.m.Lock(ctx)
		cancel()
	case linTryLock:
		ctx, cancel := context.WithTimeout(ctx, eventually)
		h, err = a.m.TryLock(ctx, d)
		cancel()
	case linTryLockOnce:
		ctx, cancel := context.WithTimeout(ctx, eventually)
		h, err = a.m.TryLock(ctx, 0)
		cancel()
	}
	ret := a.h.now()
	count, unknown := c.record(call, ret, h, err)
	switch {
	case err == nil:
		a.count = count
	case unknown:
		a.resync()
	}
}

// record records call c, which returned h and err at ret, as join and
// grant operations, and returns the hold count it acquired and whether
// its outcome is unknown. From now on c's script calls are background
// work (X5), recorded by the backend wrapper as operations of their own.
// An attempt in flight now has an unknown effect, which lands before the
// call's leave (X5) as one that failed does: c.failed marks the leave as
// following it, and the attempt's reply ends the operation.
func (c *linCall) record(call, ret int64, h *lock.Hold, err error) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.returned = true
	a := c.a
	failed := c.failed || c.inFlight > 0
	c.failed = false
	join := linInput{kind: linJoin, lock: a.lock, owner: a.owner, once: c.once}
	acquired := func() linOutput {
		return linOutput{result: linAcquired, count: c.acquire.HoldCount, token: h.Token()}
	}
	maybe := func(in linInput, call int64, out linOutput) {
		in.failed, c.failed = failed, failed
		if c.inFlight > 0 {
			c.unknownOp = a.h.add(a.client, in, call, ret, out)
			return
		}
		a.h.add(a.client, in, call, ret, out)
	}
	switch {
	case c.queuedAt >= 0:
		a.h.add(a.client, join, call, c.queuedAt, linOutput{result: linQueued, pos: c.pos})
		grant := linInput{kind: linGrant, lock: a.lock, owner: a.owner}
		switch {
		case err == nil:
			a.h.add(a.client, grant, c.queuedAt, ret, acquired())
		case failed:
			maybe(grant, c.queuedAt, linOutput{result: linMaybe})
			return 0, true
		}
	case err == nil:
		a.h.add(a.client, join, call, ret, acquired())
	case c.once && errors.Is(err, lock.ErrNotAcquired) && !failed:
		a.h.add(a.client, join, call, ret, linOutput{result: linRefused})
	default:
		maybe(join, call, linOutput{result: linUnknown})
		return 0, true
	}
	return c.acquire.HoldCount, false
}

func (a *linActor) unlockOp() {
	r := &linRelease{}
	in := linInput{kind: linUnlock, lock: a.lock, owner: a.owner}
	call := a.h.now()
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), linUnlockKey{}, r), eventually)
	err := a.m.Unlock(ctx)
	cancel()
	ret := a.h.now()
	r.mu.Lock()
	left := r.result.HoldCount
	r.mu.Unlock()
	switch {
	case err == nil:
		a.h.add(a.client, in, call, ret, linOutput{result: linReleased, count: left})
		a.count = left
	case errors.Is(err, lock.ErrNotHeld):
		a.h.add(a.client, in, call, ret, linOutput{result: linNotHeld})
		a.count = 0
	default:
		a.h.add(a.client, in, call, ret, linOutput{result: linUnknown})
		a.resync()
	}
}

// inspectOp reads the state and records it; a failed read is not
// recorded (it changes nothing). It returns the state read.
func (a *linActor) inspectOp(client int) (inspect.State, bool) {
	call := a.h.now()
	ctx, cancel := context.WithTimeout(context.Background(), eventually)
	st, err := a.m.Inspect(ctx, 16)
	cancel()
	ret := a.h.now()
	if err != nil {
		return st, false
	}
	out := linOutput{result: linObserved, holder: -1, token: st.Token, queueLen: st.QueueLength}
	switch {
	case len(st.Holders) == 1:
		out.holder, out.count = linStranger, st.Holders[0].Count
		if o, ok := a.owners[st.Holders[0].Owner]; ok {
			out.holder = o
		}
	case len(st.Holders) > 1:
		out.holder = linStranger
	}
	q := make([]byte, len(st.Queue))
	for i, w := range st.Queue {
		q[i] = linStranger
		if o, ok := a.owners[w.Owner]; ok {
			q[i] = byte(o)
		}
	}
	out.queue = string(q)
	a.h.add(client, linInput{kind: linInspect, lock: a.lock, owner: a.owner}, call, ret, out)
	return st, true
}

// resync reads this owner's hold count after a call of unknown effect.
func (a *linActor) resync() {
	if st, ok := a.inspectOp(a.client); ok {
		a.count = st.CountOf(a.field)
	}
}

// run makes ops random calls, then releases what it holds.
func (a *linActor) run(ops int) {
	for range ops {
		r := a.rng.IntN(100)
		if a.count > 0 {
			switch {
			case r < 40:
				a.unlockOp()
			case r < 50:
				a.acquireOp(linLock, eventually)
			case r < 58:
				a.acquireOp(linTryLock, time.Duration(1+a.rng.IntN(20))*time.Millisecond)
			case r < 63:
				a.acquireOp(linTryLockOnce, 0)
			default: // "work" while holding
				a.inspectOp(a.client)
			}
			continue
		}
		switch {
		case r < 5:
			a.unlockOp()
		case r < 45:
			a.acquireOp(linLock, time.Duration(10+a.rng.IntN(200))*time.Millisecond)
		case r < 80:
			a.acquireOp(linTryLock, time.Duration(1+a.rng.IntN(30))*time.Millisecond)
		case r < 92:
			a.acquireOp(linTryLockOnce, 0)
		default:
			a.inspectOp(a.client)
		}
	}
	for i := 0; a.count > 0 && i < 100; i++ {
		a.unlockOp()
	}
}

// Sizes of the linearizability case: per run, linLocks locks with
// linOwners owners each (spread over two clients) making linOps calls
// each, plus one reader per lock.
const (
	linLocks  = 2
	linOwners = 5
	linOps    = 100
	// linCheckTimeout bounds porcupine's search per history.
	linCheckTimeout = 10 * time.Second
)

// recordLinHistory runs the concurrent workload on backends from
// newBackend and returns its history.
func recordLinHistory(t *testing.T, newBackend func(testing.TB) capable, seed uint64) *linHistory {
	t.Helper()
	h := &linHistory{start: time.Now(), clients: linLocks * (linOwners + 1)}
	var ob linObserver
	var wrappers []*linBackend
	var clients [2]*lock.Client
	for i := range clients {
		wb := &linBackend{capable: newBackend(t), actors: map[string]*linActor{}}
		c, err := lock.NewClient(wb, lock.WithObserver(ob), lock.WithWaiterTimeout(time.Minute))
		if err != nil {
			t.Fatalf("lock.NewClient: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		clients[i], wrappers = c, append(wrappers, wb)
	}
	// Owner indexes are per lock; every field is unique, so one map serves
	// all locks.
	owners := map[string]int{}
	var actors, readers []*linActor
	for l := range linLocks {
		name := fmt.Sprintf("%s:L%d", historyLockName(t), l)
		for o := range linOwners + 1 {
			c := clients[o%2]
			m, err := c.NewMutex(name)
			if err != nil {
				t.Fatalf("NewMutex: %v", err)
			}
			a := &linActor{
				h: h, m: m, lock: l, owner: o, client: l*(linOwners+1) + o,
				field: m.Owner(), owners: owners,
				rng: rand.New(rand.NewPCG(seed, uint64(l*(linOwners+1)+o))),
			}
			if o == linOwners { // the reader only inspects
				readers = append(readers, a)
				continue
			}
			owners[a.field] = o
			actors = append(actors, a)
			wrappers[o%2].actors[linKey(m.Keys()[0], a.field)] = a
		}
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, a := range actors {
		wg.Go(func() { a.run(linOps) })
	}
	var rwg sync.WaitGroup
	for _, a := range readers {
		rwg.Go(func() {
			tick := time.NewTicker(3 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					a.inspectOp(a.client)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	rwg.Wait()
	// Close waits for the calls' background work (X5), so the history
	// has the last leaves and the replies that end its operations.
	for _, c := range clients {
		c.Close()
	}
	return h
}

// checkLinearizable checks history against the model, failing t with the
// longest partial linearization when it is not linearizable, and writing
// porcupine's visualization to t.ArtifactDir.
func checkLinearizable(t *testing.T, history []porcupine.Operation) {
	t.Helper()
	model := linModel()
	start := time.Now()
	res := porcupine.CheckOperationsTimeout(model, history, linCheckTimeout)
	t.Logf("checked %d operations in %v: %s", len(history), time.Since(start).Round(time.Millisecond), res)
	if res == porcupine.Ok {
		return
	}
	_, info := porcupine.CheckOperationsVerbose(model, history, linCheckTimeout)
	path := filepath.Join(t.ArtifactDir(), "linearizability.html")
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		t.Logf("visualization: %v", err)
	} else {
		t.Logf("visualization: %s", path)
	}
	if res == porcupine.Unknown {
		// Unknown only means the search ran out of time. Histories of
		// this size check in well under a second, and an exhaustive
		// search is what an illegal history needs, so treat it as a
		// failure rather than let a violation hide behind it.
		t.Errorf("porcupine found no linearization within %v (history of %d operations):\n%s",
			linCheckTimeout, len(history), describeLinFailure(info, history))
		return
	}
	t.Errorf("history is not linearizable for a fair reentrant lock:\n%s", describeLinFailure(info, history))
}

// describeLinFailure prints, per partition that has no full linearization,
// its longest partial linearization and the operations that could not
// follow it.
func describeLinFailure(info porcupine.LinearizationInfo, history []porcupine.Operation) string {
	var b strings.Builder
	for p, partials := range info.PartialLinearizationsOperations() {
		var longest []porcupine.Operation
		for _, lin := range partials {
			if len(lin) > len(longest) {
				longest = lin
			}
		}
		var part []porcupine.Operation
		for _, op := range history {
			if op.Input.(linInput).lock == p {
				part = append(part, op)
			}
		}
		slices.SortFunc(part, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		if len(longest) == len(part) {
			continue
		}
		fmt.Fprintf(&b, "partition %d: linearized %d of %d operations; the last ones, with the state after each (one of them, after an unknown output):\n", p, len(longest), len(part))
		s := linState{holder: -1}
		var states []string
		for _, op := range longest {
			next := linStep(s, op.Input.(linInput), op.Output.(linOutput))
			if len(next) > 0 {
				s = next[len(next)-1]
			}
			states = append(states, fmt.Sprintf("  [%d,%d] %v -> %v  => %v", op.Call, op.Return, op.Input, op.Output, s))
		}
		for _, line := range states[max(0, len(states)-15):] {
			b.WriteString(line + "\n")
		}
		var last int64
		if len(longest) > 0 {
			last = longest[len(longest)-1].Call
		}
		b.WriteString("  then none of these fits (calls from the last linearized one on):\n")
		n := 0
		for _, op := range part {
			if op.Call >= last && !slices.ContainsFunc(longest, func(x porcupine.Operation) bool { return x.Call == op.Call && x.ClientId == op.ClientId }) {
				fmt.Fprintf(&b, "  [%d,%d] %v -> %v\n", op.Call, op.Return, op.Input, op.Output)
				if n++; n == 10 {
					break
				}
			}
		}
	}
	return b.String()
}

// linRounds is how many histories the case records and checks.
const linRounds = 3

// testLinearizabilityFairReentrantLock records concurrent histories of
// Lock (bounded by a context), TryLock with short waits, TryLockOnce,
// re-entry, Unlock and Inspect by linOwners owners per lock, and checks with
// porcupine that each is linearizable for a fair reentrant lock: mutual
// exclusion, re-entry counts, grants only to the head of the queue in
// join order (B1-B4, B7, X5), tokens increasing (X6).
//
// Calls of unknown outcome follow porcupine's convention (their effect may
// land any time after the call). Whether such an effect landed after its
// call had returned - which X5 forbids, and which
// X5_AcquireLandingAfterCancelLeavesNoTrace pins down - is checked too
// (a strict history where each failed call's effect must land before its
// own cleanup).
func testLinearizabilityFairReentrantLock(t *testing.T, s *suite) {
	for round := range linRounds {
		seed := rand.Uint64()
		start := time.Now()
		h := recordLinHistory(t, s.newBackend, seed)
		history := h.finish(true)
		t.Logf("round %d (seed %d): recorded %d operations in %v: %s", round, seed, len(history), time.Since(start).Round(time.Millisecond), linSummary(history))
		checkLinearizable(t, history)
		if t.Failed() {
			if path, err := dumpLinHistory(t, history); err == nil {
				t.Logf("history: %s", path)
			}
			return
		}
		strict := h.finish(false)
		switch res, info := porcupine.CheckOperationsVerbose(linModel(), strict, linCheckTimeout/4); res {
		case porcupine.Illegal:
			t.Errorf("round %d: with the effects of failed calls confined to the calls, the history is illegal: a request the client gave up on took effect after the call's cleanup (X5):\n%s",
				round, describeLinFailure(info, strict))
		case porcupine.Unknown:
			t.Logf("round %d: the strict check ran out of time (%v); not judged", round, linCheckTimeout/4)
		}
	}
}

// linSummary counts a history's operations by kind and outcome.
func linSummary(history []porcupine.Operation) string {
	counts := map[string]int{}
	for _, op := range history {
		in, out := op.Input.(linInput), op.Output.(linOutput)
		key := linKindNames[in.kind]
		switch out.result {
		case linQueued:
			key += " queued"
		case linRefused:
			key += " refused"
		case linNotHeld:
			key += " not-held"
		case linUnknown, linMaybe:
			key += " unknown"
		}
		counts[key]++
	}
	keys := slices.Sorted(maps.Keys(counts))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, counts[k])
	}
	return strings.Join(parts, ", ")
}

// dumpLinHistory writes the history, one operation a line in call order,
// to t.ArtifactDir.
func dumpLinHistory(t *testing.T, history []porcupine.Operation) (string, error) {
	ops := slices.Clone(history)
	slices.SortFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	var b strings.Builder
	for _, op := range ops {
		fmt.Fprintf(&b, "[%d,%d] c%d %v -> %v\n", op.Call, op.Return, op.ClientId, op.Input, op.Output)
	}
	path := filepath.Join(t.ArtifactDir(), "history.txt")
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}
