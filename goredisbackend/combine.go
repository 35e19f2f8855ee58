package goredisbackend

import (
	"context"
	"sync"
	"time"

	"github.com/fairlock/fairlock/backend"
)

// Combining the scripts that callers start at the same time.
//
// go-redis sends a command on a pooled connection of its own and waits for
// the reply before that connection serves another, so each script costs a
// write, a read and a server wake-up of its own: under load (many
// goroutines locking at once) that is most of what a lock costs, on both
// sides. So Eval sends a script at once only when no other is on its way;
// otherwise the script waits, and the scripts that gathered meanwhile go
// out together as one pipeline (EvalBatch), as rueidis and valkey-go
// pipeline by themselves. An uncontended lock waits for nobody.

// Limits of the combining.
const (
	// maxBatches is how many pipelines of combined scripts may be on their
	// way at once; further scripts wait for one of them to come back.
	maxBatches = 2
	// maxBatch is the most scripts one pipeline carries.
	maxBatch = 128
)

// combiner runs scripts one at a time (one) when nothing else is on its
// way, else combined with the others waiting into one batch (batch). It
// owns its queue and its counts; the goroutines that send batches run only
// while scripts wait.
type combiner struct {
	one   func(context.Context, backend.Call) backend.Result
	batch func(context.Context, []backend.Call) []backend.Result

	mu      sync.Mutex
	queue   []*pending // waiting, oldest first
	alone   int        // scripts sent alone and not yet answered
	senders int        // goroutines sending batches
}

// pending is one script waiting to be combined, then its outcome.
type pending struct {
	ctx  context.Context
	call backend.Call
	sent bool           // taken into a batch (guarded by combiner.mu)
	res  backend.Result // the outcome, once done is closed
	done chan struct{}
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
		res := c.one(ctx, call)
		c.mu.Lock()
		c.alone--
		c.mu.Unlock()
		return res
	}
	p := &pending{ctx: ctx, call: call, done: make(chan struct{})}
	c.queue = append(c.queue, p)
	if c.senders < maxBatches {
		c.senders++
		go c.send()
	}
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

// withdraw takes p out of the queue unless a batch has taken it, and
// reports whether it did.
func (c *combiner) withdraw(p *pending) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.sent {
		return false
	}
	for i, q := range c.queue {
		if q == p {
			c.queue = append(c.queue[:i], c.queue[i+1:]...)
			break
		}
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
		ctx, cancel := batchContext(waiting)
		calls := make([]backend.Call, len(waiting))
		for i, p := range waiting {
			calls[i] = p.call
		}
		results := c.batch(ctx, calls)
		cancel()
		for i, p := range waiting {
			p.res = results[i]
			close(p.done)
		}
	}
}

// take removes up to maxBatch waiting scripts from the queue, or, when
// none wait, ends the sender that calls it (nil).
func (c *combiner) take() []*pending {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := min(len(c.queue), maxBatch)
	if n == 0 {
		c.senders--
		return nil
	}
	waiting := make([]*pending, n)
	copy(waiting, c.queue)
	c.queue = append(c.queue[:0], c.queue[n:]...)
	for _, p := range waiting {
		p.sent = true
	}
	return waiting
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
