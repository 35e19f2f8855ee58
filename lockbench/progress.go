package lockbench

import (
	"context"
	"sync/atomic"
)

// Progress counts the operations of runs as they complete, so that another
// goroutine can report on a long run while it goes: an uncontended or
// many-locks Lock+Unlock pair, a contended acquisition, an idle hand-over.
// Warm-up pairs do not count. Give it to runs with WithProgress. Safe for
// concurrent use; the zero value counts from 0.
type Progress struct {
	done atomic.Int64
}

// Done returns the number of operations completed so far.
func (p *Progress) Done() int64 { return p.done.Load() }

// Reset sets the count back to 0, for the next run.
func (p *Progress) Reset() { p.done.Store(0) }

func (p *Progress) add() {
	if p != nil {
		p.done.Add(1)
	}
}

type progressKey struct{}

// WithProgress returns a context that makes the runs given it count their
// operations into p.
func WithProgress(ctx context.Context, p *Progress) context.Context {
	return context.WithValue(ctx, progressKey{}, p)
}

// progressOf returns the Progress of ctx, nil (counting nothing) if none.
func progressOf(ctx context.Context) *Progress {
	p, _ := ctx.Value(progressKey{}).(*Progress)
	return p
}
