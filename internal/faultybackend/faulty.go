// Package faultybackend wraps a backend.Backend with faults at the level
// of one request, which a proxy in front of a connection cannot make: the
// reply to one script lost after the script ran, while the connection
// stays up; one script held back before it reaches the server while
// later requests go past it (a client's connections keep no order between
// them); one reply held back after its script ran, while other messages
// overtake it. A fault is armed for the next script request and then disarms
// itself, so a test or the soak's nemesis decides which request and when.
//
// The wrapper keeps the wrapped backend's optional capabilities
// (KeyWatcher, ShardedSubscriber, ReplicaWaiter, CachedReader): it has
// exactly those the wrapped backend has, so a client built on it behaves
// as on the backend itself.
package faultybackend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/fairlock/fairlock/backend"
)

// Mode is what an armed fault does to the request it takes.
type Mode int

// Modes.
const (
	// LoseReply runs the script and then, instead of its reply, returns
	// ErrReplyLost after Fault.Delay (or the caller's context error, if
	// that ends first), as a read that timed out would.
	LoseReply Mode = iota + 1
	// HoldBack waits Fault.Delay before sending the script, whatever the
	// caller's context does meanwhile (a request on its way cannot be
	// called back): the script runs late, possibly after its caller gave
	// up with its context's error, and requests sent after it, by this
	// caller or any other, go ahead of it.
	HoldBack
	// DelayReply runs the script at once and hands its reply to the
	// caller only Fault.Delay later (or the caller's context error, if
	// that ends first): a grant on its way while other messages - a
	// notice that it was force-unlocked - overtake it.
	DelayReply
)

func (m Mode) String() string {
	switch m {
	case LoseReply:
		return "lose-reply"
	case HoldBack:
		return "hold-back"
	case DelayReply:
		return "delay-reply"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ErrReplyLost is what a request whose reply LoseReply dropped returns,
// wrapped: a read timeout (net.Error with Timeout true), which callers
// treat as a transient error of unknown outcome - the script may have run.
var ErrReplyLost error = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}

// Fault is one armed fault.
type Fault struct {
	Mode  Mode
	Delay time.Duration
	// Scripts, when not empty, are the script names (backend.Script.Name)
	// the fault may take; requests of other scripts pass it by.
	Scripts []string
	// For, when not 0, keeps the fault on after the first request it
	// takes, for that long, for the requests of the same script with the
	// same first key: a caller's retries of one request (an owner's
	// attempts on one lock) meet it too, as behind a connection whose
	// replies are lost for a while.
	For time.Duration
	// Key, when not empty, is the first key the fault's requests must
	// have (one lock's); requests on other keys pass it by.
	Key string
}

// Hit is what an armed fault did to the requests it took.
type Hit struct {
	Mode   Mode
	Script string   // the script's name (the first of a batch)
	Keys   []string // its keys (the first call's, for a batch)
	Sent   time.Time
	// Ran is when the wrapped backend last answered a request taken (the
	// script ran, unless Err says otherwise); Returned when a caller last
	// got its answer. For HoldBack a caller may return first.
	Ran, Returned time.Time
	Err           error // the first error the wrapped backend returned (nil: every script ran)
	Requests      int   // how many requests the fault took
	// Lost are the replies LoseReply dropped (of Eval and EvalWait; a
	// batch's are not kept), each with when its request was sent and its
	// reply came: what the script did, though its caller never heard.
	Lost []Lost
}

// Lost is one reply LoseReply dropped.
type Lost struct {
	Sent, Ran time.Time
	Reply     backend.Reply
}

// faultErr marks an error the fault made (not the wrapped backend).
type faultErr struct{ error }

func (e faultErr) Unwrap() error { return e.error }

// hitKeep bounds a held-back request's own wait for the server once it
// is sent, so it cannot outlive a closed backend by long.
const hitKeep = 10 * time.Second

// Faulty is the fault switch of one wrapped backend. Its methods are safe
// for concurrent use.
type Faulty struct {
	inner backend.Backend

	mu    sync.Mutex
	armed *armed
	wg    sync.WaitGroup // held-back requests still on their way
}

// armed is one armed fault and what it has done. Lock order: Faulty.mu,
// then armed.mu.
type armed struct {
	Fault
	hit chan Hit // buffered 1: the one report

	mu       sync.Mutex
	rep      Hit
	key      string // the first request's first key
	closed   bool   // takes no more requests
	pending  int    // ends (ran, returned) of taken requests still to come
	reported bool
}

// Wrap returns b wrapped, with the same optional capabilities as b, and
// its fault switch. Close of the wrapper closes b.
func Wrap(b backend.Backend) (backend.Backend, *Faulty) {
	f := &Faulty{inner: b}
	return f.withCapabilities(), f
}

// Arm arms fault for the next script request (Eval, EvalBatch or
// EvalWait) it matches; an earlier fault not taken yet is disarmed. The
// returned channel receives one Hit once the fault takes no more requests
// and each it took has both run (or failed) and returned to its caller;
// it never receives anything for a fault disarmed before any request took
// it.
func (f *Faulty) Arm(fault Fault) <-chan Hit {
	a := &armed{Fault: fault, hit: make(chan Hit, 1)}
	f.mu.Lock()
	f.armed = a
	f.mu.Unlock()
	return a.hit
}

// Disarm disarms the armed fault when no request has taken it yet, and
// reports whether it did. A fault taken already goes on for its For.
func (f *Faulty) Disarm() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.armed == nil || f.armed.taken() {
		return false
	}
	f.armed = nil
	return true
}

// Armed reports whether a fault is armed and no request has taken it yet.
func (f *Faulty) Armed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.armed != nil && !f.armed.taken()
}

func (a *armed) taken() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rep.Requests > 0
}

// take returns the armed fault when it takes a request of script name on
// keys, and nil otherwise.
func (f *Faulty) take(name string, keys []string) *armed {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.armed
	key := ""
	if len(keys) > 0 {
		key = keys[0]
	}
	if a == nil || !a.matches(name) || a.Fault.Key != "" && key != a.Fault.Key {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.closed:
		return nil
	case a.rep.Requests == 0:
		a.rep = Hit{Mode: a.Mode, Script: name, Keys: keys, Sent: time.Now()}
		a.key = key
		if a.For <= 0 {
			a.closed, f.armed = true, nil
		} else {
			time.AfterFunc(a.For, func() { f.closeWindow(a) })
		}
	case name != a.rep.Script || key != a.key:
		return nil
	}
	a.rep.Requests++
	a.pending += 2
	return a
}

// closeWindow ends a's For: it takes no more requests.
func (f *Faulty) closeWindow(a *armed) {
	f.mu.Lock()
	if f.armed == a {
		f.armed = nil
	}
	f.mu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	a.report()
}

func (a *armed) matches(name string) bool {
	if len(a.Scripts) == 0 {
		return true
	}
	for _, s := range a.Scripts {
		if s == name {
			return true
		}
	}
	return false
}

// ran and returned record the two ends of a request a took, which may
// come in either order for HoldBack.
func (a *armed) ran(at time.Time, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if at.After(a.rep.Ran) {
		a.rep.Ran = at
	}
	if a.rep.Err == nil {
		a.rep.Err = err
	}
	a.pending--
	a.report()
}

// lost records the reply of a request sent at sent, which came at ran and
// was dropped.
func (a *armed) lost(sent, ran time.Time, r any) {
	rep, ok := r.(backend.Reply)
	if w, isWaited := r.(waited); isWaited {
		rep, ok = w.r, true
	}
	if !ok {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rep.Lost = append(a.rep.Lost, Lost{Sent: sent, Ran: ran, Reply: rep})
}

func (a *armed) returned(at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if at.After(a.rep.Returned) {
		a.rep.Returned = at
	}
	a.pending--
	a.report()
}

// report sends the Hit once a takes no more requests and each one's ends
// have come.
func (a *armed) report() {
	if a.closed && a.pending == 0 && !a.reported {
		a.reported = true
		a.hit <- a.rep
	}
}

// run sends one request (send) under fault a: it returns send's result,
// or the fault's. lose turns a result into its lost-reply form.
func run[R any](f *Faulty, ctx context.Context, a *armed, send func(context.Context) (R, error), lose func(R) R) (R, error) {
	if a.Mode == HoldBack {
		return holdBack(f, ctx, a, send)
	}
	sent := time.Now()
	r, err := send(ctx)
	ranAt := time.Now()
	a.ran(ranAt, err)
	defer func() { a.returned(time.Now()) }()
	if err != nil {
		return r, err // nothing ran to lose the reply of
	}
	t := time.NewTimer(a.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		if a.Mode == DelayReply {
			return r, nil
		}
		a.lost(sent, ranAt, r)
		return lose(r), faultErr{fmt.Errorf("faultybackend: the reply was lost after the script ran: %w", ErrReplyLost)}
	case <-ctx.Done():
		a.lost(sent, ranAt, r)
		return lose(r), faultErr{fmt.Errorf("faultybackend: no reply before the caller gave up (the script ran): %w", ctx.Err())}
	}
}

// holdBack sends the request after a's delay on a goroutine of its own,
// and returns its result, or the caller's context error when that ends
// first (the request still goes, and runs).
func holdBack[R any](f *Faulty, ctx context.Context, a *armed, send func(context.Context) (R, error)) (R, error) {
	type result struct {
		r   R
		err error
	}
	done := make(chan result, 1)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		time.Sleep(a.Delay) // the request is on its way: nothing calls it back
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hitKeep)
		defer cancel()
		r, err := send(sctx)
		a.ran(time.Now(), err)
		done <- result{r, err}
	}()
	defer func() { a.returned(time.Now()) }()
	select {
	case res := <-done:
		return res.r, res.err
	case <-ctx.Done():
		var zero R
		return zero, faultErr{fmt.Errorf("faultybackend: no reply yet to a held-back request: %w", ctx.Err())}
	}
}

// Eval runs the script on the wrapped backend, under the armed fault if
// it takes this request.
func (f *Faulty) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	a := f.take(s.Name, keys)
	if a == nil {
		return f.inner.Eval(ctx, s, keys, args)
	}
	return run(f, ctx, a, func(ctx context.Context) (backend.Reply, error) {
		return f.inner.Eval(ctx, s, keys, args)
	}, func(backend.Reply) backend.Reply { return backend.Reply{} })
}

// EvalBatch runs the batch on the wrapped backend; an armed fault that
// takes it (by its first script) loses or holds back the whole batch, as
// one pipelined write and its replies are.
func (f *Faulty) EvalBatch(ctx context.Context, calls []backend.Call) []backend.Result {
	if len(calls) == 0 {
		return f.inner.EvalBatch(ctx, calls)
	}
	a := f.take(calls[0].Script.Name, calls[0].Keys)
	if a == nil {
		return f.inner.EvalBatch(ctx, calls)
	}
	res, err := run(f, ctx, a, func(ctx context.Context) ([]backend.Result, error) {
		res := f.inner.EvalBatch(ctx, calls)
		return res, batchErr(res)
	}, func(r []backend.Result) []backend.Result { return r })
	var fe faultErr
	if !errors.As(err, &fe) {
		return res // answered, or the wrapped backend's own errors call by call
	}
	out := make([]backend.Result, len(calls))
	for i := range out {
		out[i].Err = err
	}
	return out
}

// batchErr is the first error among a batch's results.
func batchErr(res []backend.Result) error {
	for _, r := range res {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

// Subscribe subscribes on the wrapped backend.
func (f *Faulty) Subscribe(ctx context.Context, channel string) (*backend.Subscription, error) {
	return f.inner.Subscribe(ctx, channel)
}

// Close closes the wrapped backend; a held-back request still on its
// way then fails there.
func (f *Faulty) Close() error { return f.inner.Close() }

// Wait waits until no held-back request is on its way.
func (f *Faulty) Wait() { f.wg.Wait() }

// waited is EvalWait's reply.
type waited struct {
	r     backend.Reply
	acked int
}

// evalWait is ReplicaWaiter's EvalWait on the wrapped backend, under the
// armed fault: the script and its WAIT are one request.
func (f *Faulty) evalWait(ctx context.Context, s *backend.Script, keys, args []string, replicas int, timeout time.Duration) (backend.Reply, int, error) {
	rw := f.inner.(backend.ReplicaWaiter)
	a := f.take(s.Name, keys)
	if a == nil {
		return rw.EvalWait(ctx, s, keys, args, replicas, timeout)
	}
	w, err := run(f, ctx, a, func(ctx context.Context) (waited, error) {
		r, n, err := rw.EvalWait(ctx, s, keys, args, replicas, timeout)
		return waited{r, n}, err
	}, func(waited) waited { return waited{} })
	return w.r, w.acked, err
}
