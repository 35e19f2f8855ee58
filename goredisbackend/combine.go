package goredisbackend

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/fairlock/fairlock/backend"
)

// Combining the scripts that callers start at the same time: why and
// how is in the package documentation ("Combined scripts").

// Limits of the combining.
const (
	// maxBatches is how many pipelines of combined scripts may be on their
	// way at once, not counting stalled ones; further scripts wait for one
	// of them to come back.
	maxBatches = 2
	// maxBatch is the most scripts one pipeline carries.
	maxBatch = 128
	// stallAfter is how long a pipeline may be on its way before it no
	// longer counts towards maxBatches, so that scripts waiting behind
	// pipelines stuck on dead connections (a silently dropped one taken
	// from the pool, say) go out on others. A round trip under load takes
	// a few milliseconds.
	stallAfter = 100 * time.Millisecond
)

// combiner runs scripts one at a time (one) when nothing else is on its
// way, else combined with the others waiting into one batch (batch). It
// owns its queue and its counts; the goroutines that send batches run only
// while scripts wait.
type combiner struct {
	one        func(context.Context, backend.Call) backend.Result
	batch      func(context.Context, []backend.Call) []backend.Result
	stallAfter time.Duration // stallAfter, but for tests

	mu      sync.Mutex
	queue   []*pending // waiting, oldest first
	alone   int        // scripts sent alone and not yet answered
	senders int        // goroutines sending batches
	counted int        // those of them counted against maxBatches: not stalled
}

// pending is one script waiting to be combined, then its outcome.
type pending struct {
	ctx  context.Context
	call backend.Call
	sent bool           // taken into a batch (guarded by combiner.mu)
	res  backend.Result // the outcome, once done is closed
	done chan struct{}
}

// outbound is one batch on its way; combiner.mu guards its fields.
type outbound struct {
	back    bool // the batch came back
	stalled bool // it stalled first: its sender no longer counts
}

// eval runs call, alone when nothing else is on its way, else combined
// with the scripts waiting. When ctx ends first it returns ctx's error:
// the script was then not sent, or sent and its reply abandoned (its
// outcome unknown, as after a network error).
func (c *combiner) eval(ctx context.Context, call backend.Call) backend.Result {
	c.mu.Lock()
	if c.alone == 0 && c.senders == 0 {
		c.alone++
		c.mu.Unlock()
		defer c.doneAlone()
		return c.one(ctx, call)
	}
	p := &pending{ctx: ctx, call: call, done: make(chan struct{})}
	c.queue = append(c.queue, p)
	c.startSender()
	c.mu.Unlock()
	select {
	case <-p.done:
		return p.res
	case <-ctx.Done():
	}
	if c.withdraw(p) {
		return backend.Result{Err: ctx.Err()}
	}
	select {
	case <-p.done: // answered meanwhile
		return p.res
	default:
		return backend.Result{Err: ctx.Err()}
	}
}

// doneAlone records that a script sent alone was answered.
func (c *combiner) doneAlone() {
	c.mu.Lock()
	c.alone--
	c.mu.Unlock()
}

// startSender starts a sender when scripts wait and fewer than maxBatches
// senders count. Callers hold c.mu.
func (c *combiner) startSender() {
	if len(c.queue) > 0 && c.counted < maxBatches {
		c.senders++
		c.counted++
		go c.send()
	}
}

// withdraw takes p out of the queue unless a batch has taken it, and
// reports whether it did.
func (c *combiner) withdraw(p *pending) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.sent {
		return false
	}
	if i := slices.Index(c.queue, p); i >= 0 {
		c.queue = slices.Delete(c.queue, i, i+1)
	}
	return true
}

// send sends the waiting scripts as batches until none wait.
func (c *combiner) send() {
	for {
		waiting := c.take()
		if waiting == nil {
			return
		}
		out := &outbound{}
		stall := time.AfterFunc(c.stallAfter, func() { c.stalled(out) })
		ctx, cancel := batchContext(waiting)
		calls := make([]backend.Call, len(waiting))
		for i, p := range waiting {
			calls[i] = p.call
		}
		results := c.batch(ctx, calls)
		cancel()
		stall.Stop()
		for i, p := range waiting {
			p.res = results[i]
			close(p.done)
		}
		if !c.comeBack(out) {
			return
		}
	}
}

// take removes up to maxBatch waiting scripts from the queue, or, when
// none wait, ends the sender that calls it (nil). Scripts whose context
// has ended leave the queue unsent: their callers return, or have
// returned, with the context's error.
func (c *combiner) take() []*pending {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queue = slices.DeleteFunc(c.queue, func(p *pending) bool { return p.ctx.Err() != nil })
	n := min(len(c.queue), maxBatch)
	if n == 0 {
		c.senders--
		c.counted--
		return nil
	}
	waiting := slices.Clone(c.queue[:n])
	c.queue = slices.Delete(c.queue, 0, n)
	for _, p := range waiting {
		p.sent = true
	}
	return waiting
}

// stalled stops counting the sender of out, unless out came back first,
// and lets another sender take the waiting scripts.
func (c *combiner) stalled(out *outbound) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if out.back {
		return
	}
	out.stalled = true
	c.counted--
	c.startSender()
}

// comeBack records that out came back, and reports whether its sender goes
// on: a sender that stalled counts again only if there is room, else it
// ends.
func (c *combiner) comeBack(out *outbound) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out.back = true
	if !out.stalled {
		return true
	}
	if c.counted >= maxBatches {
		c.senders--
		return false
	}
	c.counted++
	return true
}

// batchContext returns the context a batch of waiting runs with: the
// values of the oldest caller's context (a trace span, say), and a
// deadline at the latest of the callers' deadlines, or none if one of them
// has none (go-redis' ReadTimeout and WriteTimeout bound it then). A
// caller that stops waiting earlier returns at its own deadline.
func batchContext(waiting []*pending) (context.Context, context.CancelFunc) {
	base := context.WithoutCancel(waiting[0].ctx)
	var latest time.Time
	for _, p := range waiting {
		d, ok := p.ctx.Deadline()
		if !ok {
			return base, func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(base, latest)
}
