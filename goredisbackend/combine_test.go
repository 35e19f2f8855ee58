package goredisbackend

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/redistest"
)

// fakeRunner stands in for the client: each run and each batch blocks
// until the test releases it, and answers every call with its Args[0] as
// an integer, so each caller can check that it got its own reply.
type fakeRunner struct {
	release chan struct{} // one receive lets one run or batch finish

	mu      sync.Mutex
	alone   []string   // Args[0] of the calls run alone
	batches [][]string // Args[0] of the calls of each batch, in order
}

func newFake() *fakeRunner { return &fakeRunner{release: make(chan struct{})} }

func reply(call backend.Call) backend.Result {
	n, _ := strconv.ParseInt(call.Args[0], 10, 64)
	return backend.Result{Reply: backend.IntReply(n)}
}

func (f *fakeRunner) one(ctx context.Context, call backend.Call) backend.Result {
	f.mu.Lock()
	f.alone = append(f.alone, call.Args[0])
	f.mu.Unlock()
	<-f.release
	return reply(call)
}

func (f *fakeRunner) batch(ctx context.Context, calls []backend.Call) []backend.Result {
	ids := make([]string, len(calls))
	out := make([]backend.Result, len(calls))
	for i, c := range calls {
		ids[i], out[i] = c.Args[0], reply(c)
	}
	f.mu.Lock()
	f.batches = append(f.batches, ids)
	f.mu.Unlock()
	<-f.release
	return out
}

// combiner returns a combiner over f whose batches stall only after a
// minute, longer than any of these tests.
func (f *fakeRunner) combiner() *combiner {
	return &combiner{one: f.one, batch: f.batch, stallAfter: time.Minute}
}

func (f *fakeRunner) sent() (alone []string, batches [][]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.alone...), append([][]string(nil), f.batches...)
}

// state returns how many scripts wait in c's queue and how many senders run.
// (The stall test below reads c.counted too.)
func (c *combiner) state() (queued, senders int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue), c.senders
}

// until polls cond for up to 10 s.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	redistest.Eventually(t, 10*time.Second, what, cond)
}

// evalAsync runs c.eval for id in a goroutine; the result arrives on the
// returned channel.
func evalAsync(ctx context.Context, c *combiner, id int) <-chan backend.Result {
	out := make(chan backend.Result, 1)
	go func() { out <- c.eval(ctx, backend.Call{Args: []string{strconv.Itoa(id)}}) }()
	return out
}

func wantReply(t *testing.T, res <-chan backend.Result, id int) {
	t.Helper()
	select {
	case r := <-res:
		n, err := r.Reply.AsInt()
		if r.Err != nil || err != nil || n != int64(id) {
			t.Errorf("call %d: reply %v, error %v; want its own reply %d", id, r.Reply, r.Err, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("call %d: no reply in 10 s", id)
	}
}

// wantCanceled checks that the call behind res, whose context was
// cancelled, returns at once with context.Canceled.
func wantCanceled(t *testing.T, res <-chan backend.Result, what string) {
	t.Helper()
	select {
	case r := <-res:
		if !errors.Is(r.Err, context.Canceled) {
			t.Fatalf("%s: error %v, want context.Canceled", what, r.Err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return", what)
	}
}

// A script started while nothing else is on its way runs alone, on the
// caller's goroutine, and starts no sender.
func TestCombineAloneWhenIdle(t *testing.T) {
	f := newFake()
	c := f.combiner()
	close(f.release) // nothing blocks
	for id := range 3 {
		r := c.eval(context.Background(), backend.Call{Args: []string{strconv.Itoa(id)}})
		if n, _ := r.Reply.AsInt(); r.Err != nil || n != int64(id) {
			t.Fatalf("call %d: %v, %v", id, r.Reply, r.Err)
		}
	}
	alone, batches := f.sent()
	if len(alone) != 3 || len(batches) != 0 {
		t.Errorf("sent alone %v, in batches %v; want all three alone", alone, batches)
	}
	if _, senders := c.state(); senders != 0 {
		t.Errorf("%d senders after idle calls, want 0", senders)
	}
}

// Scripts started while others are on their way wait, and go out together
// in one batch as soon as a sender is free; each caller gets its own reply,
// and the senders end once nothing waits.
func TestCombineWhileBusy(t *testing.T) {
	f := newFake()
	c := f.combiner()
	ctx := context.Background()
	first := evalAsync(ctx, c, 0) // alone, held in f.one
	until(t, "the first script on its way", func() bool { a, _ := f.sent(); return len(a) == 1 })
	// Each of the next two starts a sender, which takes it alone (the
	// queue holds just it) and is held in f.batch.
	var res []<-chan backend.Result
	for id := 1; id <= 2; id++ {
		res = append(res, evalAsync(ctx, c, id))
		until(t, "a batch on its way", func() bool { _, b := f.sent(); return len(b) == id })
	}
	// Both senders busy: these wait, all three in the queue.
	for id := 3; id <= 5; id++ {
		res = append(res, evalAsync(ctx, c, id))
	}
	until(t, "three scripts queued", func() bool { q, _ := c.state(); return q == 3 })
	if _, senders := c.state(); senders != maxBatches {
		t.Fatalf("%d senders, want %d", senders, maxBatches)
	}
	close(f.release)
	wantReply(t, first, 0)
	for i, r := range res {
		wantReply(t, r, i+1)
	}
	alone, batches := f.sent()
	if len(alone) != 1 || len(batches) != 3 || len(batches[2]) != 3 {
		t.Fatalf("sent alone %v, in batches %v; want [0], then [1] [2] [3 4 5]", alone, batches)
	}
	until(t, "the senders to end", func() bool { q, s := c.state(); return q == 0 && s == 0 })
}

// A caller whose context ends while its script still waits gets the
// context's error, and the script is never sent.
func TestCombineWithdrawn(t *testing.T) {
	f := newFake()
	c := f.combiner()
	first := evalAsync(context.Background(), c, 0)
	until(t, "the first script on its way", func() bool { a, _ := f.sent(); return len(a) == 1 })
	second := evalAsync(context.Background(), c, 1) // taken by a sender, held in f.batch
	until(t, "a batch on its way", func() bool { _, b := f.sent(); return len(b) == 1 })
	third := evalAsync(context.Background(), c, 2) // the second sender, held too
	until(t, "two batches on their way", func() bool { _, b := f.sent(); return len(b) == 2 })
	ctx, cancel := context.WithCancel(context.Background())
	withdrawn := evalAsync(ctx, c, 3)
	until(t, "a script queued", func() bool { q, _ := c.state(); return q == 1 })
	cancel()
	wantCanceled(t, withdrawn, "a cancelled call whose script waits")
	if q, _ := c.state(); q != 0 {
		t.Errorf("%d scripts still queued after the withdrawal, want 0", q)
	}
	close(f.release)
	wantReply(t, first, 0)
	wantReply(t, second, 1)
	wantReply(t, third, 2)
	until(t, "the senders to end", func() bool { _, s := c.state(); return s == 0 })
	for _, b := range func() [][]string { _, b := f.sent(); return b }() {
		for _, id := range b {
			if id == "3" {
				t.Errorf("the withdrawn script was sent (batches %v)", b)
			}
		}
	}
}

// A caller whose context ends after its script went out returns at once
// with the context's error; the batch still finishes, for the others.
func TestCombineAbandoned(t *testing.T) {
	f := newFake()
	c := f.combiner()
	first := evalAsync(context.Background(), c, 0)
	until(t, "the first script on its way", func() bool { a, _ := f.sent(); return len(a) == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	abandoned := evalAsync(ctx, c, 1)
	until(t, "its batch on its way", func() bool { _, b := f.sent(); return len(b) == 1 })
	cancel()
	wantCanceled(t, abandoned, "a cancelled call whose batch is on its way")
	close(f.release)
	wantReply(t, first, 0)
	until(t, "the senders to end", func() bool { _, s := c.state(); return s == 0 })
}

// A batch runs until the latest of its callers' deadlines, without a
// deadline when one caller has none, and with the values of the oldest
// caller's context.
func TestBatchContext(t *testing.T) {
	now := time.Now()
	early, cancelEarly := context.WithDeadline(context.Background(), now.Add(time.Second))
	defer cancelEarly()
	late, cancelLate := context.WithDeadline(context.Background(), now.Add(time.Minute))
	defer cancelLate()
	ctx, cancel := batchContext([]*pending{{ctx: early}, {ctx: late}})
	d, ok := ctx.Deadline()
	cancel()
	if !ok || !d.Equal(now.Add(time.Minute)) {
		t.Errorf("deadline %v (set: %v), want the latest, %v", d, ok, now.Add(time.Minute))
	}
	ctx, cancel = batchContext([]*pending{{ctx: early}, {ctx: context.Background()}})
	defer cancel()
	if d, ok := ctx.Deadline(); ok {
		t.Errorf("deadline %v, want none when a caller has none", d)
	}
	type key struct{}
	oldest, stop := context.WithCancel(context.WithValue(context.Background(), key{}, "span"))
	ctx, cancel = batchContext([]*pending{{ctx: oldest}, {ctx: late}})
	defer cancel()
	stop()
	if ctx.Value(key{}) != "span" || ctx.Err() != nil {
		t.Errorf("value %v, error %v: want the oldest caller's values, not its cancellation", ctx.Value(key{}), ctx.Err())
	}
}

// Scripts waiting behind batches that stall (on dead connections, say) go
// out in a batch of their own once the others have been on their way for
// stallAfter, and no more than maxBatches senders count at any time.
func TestCombineStalled(t *testing.T) {
	f := newFake()
	c := f.combiner()
	c.stallAfter = 20 * time.Millisecond
	ctx := context.Background()
	first := evalAsync(ctx, c, 0)
	until(t, "the first script on its way", func() bool { a, _ := f.sent(); return len(a) == 1 })
	var res []<-chan backend.Result
	for id := 1; id <= 2; id++ {
		res = append(res, evalAsync(ctx, c, id))
		until(t, "a batch on its way", func() bool { _, b := f.sent(); return len(b) == id })
	}
	// Both batches held: after stallAfter they stop counting, and this
	// script goes out in a third batch instead of waiting for them.
	res = append(res, evalAsync(ctx, c, 3))
	until(t, "a third batch despite the two on their way", func() bool { _, b := f.sent(); return len(b) == 3 })
	c.mu.Lock()
	counted := c.counted
	c.mu.Unlock()
	if counted > maxBatches {
		t.Errorf("%d senders counted, want at most %d", counted, maxBatches)
	}
	close(f.release)
	wantReply(t, first, 0)
	for i, r := range res {
		wantReply(t, r, i+1)
	}
	until(t, "the senders to end", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.senders == 0 && c.counted == 0 && len(c.queue) == 0
	})
}

// A pipeline leaving drops the queued scripts whose context has ended,
// unsent, and takes the others, oldest first.
func TestTakeDropsEnded(t *testing.T) {
	c := newFake().combiner()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	live := []*pending{{ctx: context.Background()}, {ctx: context.Background()}}
	gone := &pending{ctx: ended}
	c.queue = []*pending{live[0], gone, live[1]}
	c.senders, c.counted = 1, 1
	got := c.take()
	if len(got) != 2 || got[0] != live[0] || got[1] != live[1] {
		t.Fatalf("took %v, want the two live scripts in order", got)
	}
	if gone.sent || !live[0].sent || !live[1].sent || len(c.queue) != 0 {
		t.Errorf("ended script sent: %v; live ones sent: %v %v; left queued: %d", gone.sent, live[0].sent, live[1].sent, len(c.queue))
	}
	if c.take() != nil || c.senders != 0 || c.counted != 0 {
		t.Errorf("with nothing queued take should end its sender: %d senders, %d counted", c.senders, c.counted)
	}
}
