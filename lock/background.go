package lock

import (
	"context"
	"sync"
	"time"

	"github.com/fairlock/fairlock/backend"
)

// A waiter's calls on the subscription connection - subscribing to its
// owner's wake-up channel, arming the head's watch on the lock hash - run
// beside its wait loop, not in it: a subscription connection that stalls
// while the others work (an idle pub/sub connection a NAT dropped without
// a word) must never keep a waiter from its heartbeat, or the head from
// its attempt when the lease runs out (X2, X3). The loop reads the call's
// result when it comes, and keeps its timers meanwhile.
const (
	// subscribeTimeout bounds one background Subscribe, retries of its
	// transient errors included; the waiter then starts another.
	subscribeTimeout = 5 * time.Second
	// watchTimeout bounds one background WatchKey: a watch is only an
	// early wake-up, and the next sleep at the head tries again.
	watchTimeout = time.Second
)

// background is one such call in flight, in a goroutine the client's
// lifetime counts (Close waits for it: no longer than the backend takes
// to give up a cancelled call). Its result arrives on done; stop cancels
// it.
type background struct {
	done   chan backgroundResult // buffered: the goroutine never waits on it
	cancel context.CancelFunc

	mu      sync.Mutex
	stopped bool // nobody will read done: a Subscription that comes is closed
}

type backgroundResult struct {
	sub *backend.Subscription
	err error
}

// goBackground runs call in a goroutine the client's lifetime counts,
// with a context that keeps ctx's values and cancellation and ends after
// timeout or at stop. It returns nil, starting nothing, once the client
// is closed.
func goBackground(ctx context.Context, life *lifetime, timeout time.Duration, call func(context.Context) (*backend.Subscription, error)) *background {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	b := &background{done: make(chan backgroundResult, 1), cancel: cancel}
	if !life.spawn(func() { b.run(ctx, call) }) {
		cancel()
		return nil
	}
	return b
}

// run makes the call and hands its result over, or closes the
// Subscription it made when nobody will read it.
func (b *background) run(ctx context.Context, call func(context.Context) (*backend.Subscription, error)) {
	defer b.cancel()
	sub, err := call(ctx)
	b.mu.Lock()
	stopped := b.stopped
	if !stopped {
		b.done <- backgroundResult{sub: sub, err: err}
	}
	b.mu.Unlock()
	if stopped && sub != nil {
		sub.Close()
	}
}

// result returns the channel the result arrives on; nil (never ready) for
// a nil background.
func (b *background) result() <-chan backgroundResult {
	if b == nil {
		return nil
	}
	return b.done
}

// stop cancels the call without waiting for it. It returns the
// Subscription the call returned if that has arrived unread (the caller
// owns it then); one that comes later is closed.
func (b *background) stop() *backend.Subscription {
	if b == nil {
		return nil
	}
	b.cancel()
	b.mu.Lock()
	b.stopped = true
	b.mu.Unlock()
	select {
	case r := <-b.done:
		return r.sub
	default:
		return nil
	}
}
