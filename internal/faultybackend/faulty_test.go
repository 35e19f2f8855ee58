package faultybackend

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/internal/backendtest"
	"github.com/fairlock/fairlock/redistest"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

var (
	incr   = backend.NewScript("incr", "return redis.call('INCR', KEYS[1])")
	set    = backend.NewScript("set", "return redis.call('SET', KEYS[1], ARGV[1])")
	getter = backend.NewScript("get", "return redis.call('GET', KEYS[1])")
)

func dial(t *testing.T) backend.Backend {
	t.Helper()
	srv := redistest.Start(t)
	b, err := rueidisbackend.Dial(rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func get(t *testing.T, b backend.Backend, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := b.Eval(ctx, getter, []string{key}, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return r.Str
}

func waitHit(t *testing.T, hits <-chan Hit) Hit {
	t.Helper()
	select {
	case h := <-hits:
		return h
	case <-time.After(10 * time.Second):
		t.Fatal("no hit reported")
		return Hit{}
	}
}

// TestLoseReply_ScriptRunsCallerGetsTimeout: the script runs on the
// server (the key changed), the caller gets a read timeout, and the next
// request is answered as usual.
func TestLoseReply_ScriptRunsCallerGetsTimeout(t *testing.T) {
	inner := dial(t)
	b, f := Wrap(inner)
	hits := f.Arm(Fault{Mode: LoseReply, Delay: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := b.Eval(ctx, incr, []string{"k"}, nil)
	if !errors.Is(err, ErrReplyLost) {
		t.Fatalf("Eval under LoseReply: err %v, want ErrReplyLost", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("the lost reply's error %v is not a network timeout", err)
	}
	if got := get(t, inner, "k"); got != "1" {
		t.Fatalf("after the lost reply the key is %q, want 1: the script did not run", got)
	}
	h := waitHit(t, hits)
	if h.Mode != LoseReply || h.Script != "incr" || h.Err != nil || h.Returned.Before(h.Ran) {
		t.Errorf("hit %+v", h)
	}
	// The hit keeps the reply the caller never got: what the script did.
	if len(h.Lost) != 1 || h.Lost[0].Reply.Int != 1 || h.Lost[0].Ran.Before(h.Lost[0].Sent) {
		t.Errorf("hit's lost replies %+v, want one: 1", h.Lost)
	}
	r, err := b.Eval(ctx, incr, []string{"k"}, nil)
	if err != nil || r.Int != 2 {
		t.Fatalf("the next Eval: %v, %v; want 2 (the fault takes one request)", r, err)
	}
}

// TestLoseReply_CallerContextEnds: a caller whose context ends before
// the (lost) reply would have timed out gets its context's error; the
// script ran all the same.
func TestLoseReply_CallerContextEnds(t *testing.T) {
	inner := dial(t)
	b, f := Wrap(inner)
	hits := f.Arm(Fault{Mode: LoseReply, Delay: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := b.Eval(ctx, incr, []string{"k"}, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the context's deadline", err)
	}
	waitHit(t, hits)
	if got := get(t, inner, "k"); got != "1" {
		t.Fatalf("key %q, want 1", got)
	}
}

// TestLoseReply_Batch: every script of a batch runs, and every result
// is the lost reply's error.
func TestLoseReply_Batch(t *testing.T) {
	inner := dial(t)
	b, f := Wrap(inner)
	f.Arm(Fault{Mode: LoseReply})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res := b.EvalBatch(ctx, []backend.Call{{Script: incr, Keys: []string{"a"}}, {Script: incr, Keys: []string{"b"}}})
	if len(res) != 2 {
		t.Fatalf("%d results", len(res))
	}
	for i, r := range res {
		if !errors.Is(r.Err, ErrReplyLost) {
			t.Errorf("result %d: %v, want ErrReplyLost", i, r.Err)
		}
	}
	if a, bb := get(t, inner, "a"), get(t, inner, "b"); a != "1" || bb != "1" {
		t.Errorf("keys a=%q b=%q, want both 1", a, bb)
	}
}

// TestLoseReply_EvalWait: the script sent with its WAIT runs, and its
// reply is lost.
func TestLoseReply_EvalWait(t *testing.T) {
	inner := dial(t)
	b, f := Wrap(inner)
	f.Arm(Fault{Mode: LoseReply})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err := b.(backend.ReplicaWaiter).EvalWait(ctx, incr, []string{"k"}, nil, 0, 10*time.Millisecond)
	if !errors.Is(err, ErrReplyLost) {
		t.Fatalf("err %v, want ErrReplyLost", err)
	}
	if got := get(t, inner, "k"); got != "1" {
		t.Fatalf("key %q, want 1", got)
	}
}

// TestHoldBack_LaterRequestGoesFirst: a held-back request runs after a
// request sent later, and is answered then.
func TestHoldBack_LaterRequestGoesFirst(t *testing.T) {
	inner := dial(t)
	b, f := Wrap(inner)
	hits := f.Arm(Fault{Mode: HoldBack, Delay: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := b.Eval(ctx, set, []string{"k"}, []string{"first"})
		first <- err
	}()
	waitTaken(t, f)
	if _, err := b.Eval(ctx, set, []string{"k"}, []string{"second"}); err != nil {
		t.Fatal(err)
	}
	if got := get(t, inner, "k"); got != "second" {
		t.Fatalf("after the later request the key is %q, want second (the held-back one ran first)", got)
	}
	if err := <-first; err != nil {
		t.Fatalf("the held-back request: %v", err)
	}
	if got := get(t, inner, "k"); got != "first" {
		t.Fatalf("after the held-back request returned the key is %q, want first", got)
	}
	if h := waitHit(t, hits); h.Ran.Sub(h.Sent) < 300*time.Millisecond {
		t.Errorf("the held-back request ran %v after it was sent, want at least 300 ms", h.Ran.Sub(h.Sent))
	}
}

// TestHoldBack_RunsAfterCallerGaveUp: a caller whose context ends first
// gets its context's error, and the script runs afterwards.
func TestHoldBack_RunsAfterCallerGaveUp(t *testing.T) {
	inner := dial(t)
	b, f := Wrap(inner)
	hits := f.Arm(Fault{Mode: HoldBack, Delay: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := b.Eval(ctx, incr, []string{"k"}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the context's deadline", err)
	}
	if got := get(t, inner, "k"); got != "" {
		t.Fatalf("the key is %q as the caller returned, want none yet", got)
	}
	h := waitHit(t, hits)
	if h.Err != nil || !h.Ran.After(h.Returned) {
		t.Errorf("hit %+v: want the script run after its caller returned", h)
	}
	f.Wait()
	if got := get(t, inner, "k"); got != "1" {
		t.Fatalf("the key is %q after the held-back request ran, want 1", got)
	}
}

// TestArm_ScriptsFilter: a fault for some scripts lets others pass, and
// Disarm reports whether it was still armed.
func TestArm_ScriptsFilter(t *testing.T) {
	inner := dial(t)
	b, f := Wrap(inner)
	f.Arm(Fault{Mode: LoseReply, Scripts: []string{"set"}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := b.Eval(ctx, incr, []string{"k"}, nil); err != nil {
		t.Fatalf("a script the fault does not name: %v", err)
	}
	if !f.Disarm() {
		t.Error("Disarm: the fault was taken by a script it does not name")
	}
	if f.Disarm() {
		t.Error("Disarm twice reported an armed fault")
	}
}

// TestArm_KeyFilter: a fault with a Key passes requests on other keys by
// and takes the first on its key.
func TestArm_KeyFilter(t *testing.T) {
	inner := dial(t)
	b, f := Wrap(inner)
	hits := f.Arm(Fault{Mode: LoseReply, Key: "mine"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := b.Eval(ctx, incr, []string{"other"}, nil); err != nil {
		t.Fatalf("a request on another key: %v", err)
	}
	if !f.Armed() {
		t.Fatal("a request on another key took the fault")
	}
	if _, err := b.Eval(ctx, incr, []string{"mine"}, nil); !errors.Is(err, ErrReplyLost) {
		t.Fatalf("the request on the fault's key: %v, want ErrReplyLost", err)
	}
	if h := waitHit(t, hits); len(h.Keys) != 1 || h.Keys[0] != "mine" {
		t.Errorf("hit %+v, want one on key mine", h)
	}
}

// TestWrap_KeepsCapabilities: the wrapper has exactly the wrapped
// backend's optional capabilities.
func TestWrap_KeepsCapabilities(t *testing.T) {
	inner := dial(t)
	caps := func(b backend.Backend) [4]bool {
		_, kw := b.(backend.KeyWatcher)
		_, ss := b.(backend.ShardedSubscriber)
		_, rw := b.(backend.ReplicaWaiter)
		_, cr := b.(backend.CachedReader)
		return [4]bool{kw, ss, rw, cr}
	}
	sub, ok := inner.(backendtest.Subscriber)
	if !ok {
		t.Fatal("rueidis watches no keys")
	}
	for _, b := range []backend.Backend{inner, backendtest.Split{Backend: inner, Subs: sub}, bare{inner}} {
		w, _ := Wrap(b)
		if got, want := caps(w), caps(b); got != want {
			t.Errorf("%T: wrapped capabilities %v, want %v", b, got, want)
		}
	}
	if caps(inner) != [4]bool{true, true, true, true} || caps(bare{inner}) != [4]bool{} {
		t.Fatalf("the test's backends do not span the cases: %v, %v", caps(inner), caps(bare{inner}))
	}
}

// bare is a backend with no optional capability.
type bare struct{ b backend.Backend }

func (x bare) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	return x.b.Eval(ctx, s, keys, args)
}
func (x bare) EvalBatch(ctx context.Context, calls []backend.Call) []backend.Result {
	return x.b.EvalBatch(ctx, calls)
}
func (x bare) Subscribe(ctx context.Context, ch string) (*backend.Subscription, error) {
	return x.b.Subscribe(ctx, ch)
}
func (x bare) Close() error { return nil }

// waitTaken waits until a request has taken f's armed fault.
func waitTaken(t *testing.T, f *Faulty) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if !f.Armed() {
			return
		}
	}
	t.Fatal("no request took the armed fault")
}

// TestLoseReply_For: for its window the fault loses the reply of every
// request of the same script on the same key (a caller's retries), each
// of which runs; other keys pass, and the requests after the window are
// answered.
func TestLoseReply_For(t *testing.T) {
	inner := dial(t)
	b, f := Wrap(inner)
	hits := f.Arm(Fault{Mode: LoseReply, For: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range 3 {
		if _, err := b.Eval(ctx, incr, []string{"k"}, nil); !errors.Is(err, ErrReplyLost) {
			t.Fatalf("request %d in the window: %v, want ErrReplyLost", i, err)
		}
	}
	if r, err := b.Eval(ctx, incr, []string{"other"}, nil); err != nil || r.Int != 1 {
		t.Fatalf("another key in the window: %v, %v", r, err)
	}
	if f.Disarm() {
		t.Error("Disarm of a fault taken already reported it untaken")
	}
	h := waitHit(t, hits)
	if h.Requests != 3 || h.Err != nil {
		t.Errorf("hit %+v: want 3 requests", h)
	}
	if got := get(t, inner, "k"); got != "3" {
		t.Fatalf("the key is %q, want 3: every request ran", got)
	}
	if r, err := b.Eval(ctx, incr, []string{"k"}, nil); err != nil || r.Int != 4 {
		t.Fatalf("after the window: %v, %v; want 4", r, err)
	}
}

// TestDelayReply: the script runs at once, its reply comes after the
// delay, and a request sent meanwhile is answered first.
func TestDelayReply(t *testing.T) {
	inner := dial(t)
	b, f := Wrap(inner)
	hits := f.Arm(Fault{Mode: DelayReply, Delay: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	type result struct {
		r   backend.Reply
		err error
		at  time.Time
	}
	delayed := make(chan result, 1)
	go func() {
		r, err := b.Eval(ctx, incr, []string{"k"}, nil)
		delayed <- result{r, err, time.Now()}
	}()
	waitTaken(t, f)
	if got := waitKey(t, inner, "k", "1"); got != "1" {
		t.Fatalf("the key is %q while the reply is delayed, want 1: the script runs at once", got)
	}
	answered := time.Now()
	select {
	case res := <-delayed:
		t.Fatalf("the delayed reply came before a later request's: %v, %v", res.r, res.err)
	default:
	}
	res := <-delayed
	if res.err != nil || res.r.Int != 1 || !res.at.After(answered) {
		t.Fatalf("the delayed reply: %v, %v", res.r, res.err)
	}
	if h := waitHit(t, hits); h.Returned.Sub(h.Ran) < 900*time.Millisecond {
		t.Errorf("hit %+v: the reply came %v after the script ran, want about 1 s", h, h.Returned.Sub(h.Ran))
	}
}

// waitKey polls key until it reads want (bounded), and returns what it
// read last.
func waitKey(t *testing.T, b backend.Backend, key, want string) string {
	t.Helper()
	var got string
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if got = get(t, b, key); got == want {
			break
		}
	}
	return got
}
