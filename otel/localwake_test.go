package otel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/lock/observe"
)

// TestAcquireWokenInProcess: a hand-over between two owners of one client
// wakes the waiter in process, without the release's message (the waiter
// has not subscribed yet), and that wake-up is one all the same: the
// acquire span has a fairlock.woken event (wakeup.reconnect false) and
// fairlock.wakeup.count counts it.
func TestAcquireWokenInProcess(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter) {
		e := newEnv(t, a)
		queued := make(chan struct{}, 1)
		c := e.client(lock.WithObserver(queuedSignal{e.obs, queued}))
		holder, waiter := e.mutex(c, "orders"), e.mutex(c, "orders")
		if _, err := holder.Lock(context.Background()); err != nil {
			t.Fatalf("holder Lock: %v", err)
		}
		ctx, req := e.request()
		locked := goLock(t, ctx, waiter)
		// Release as soon as the waiter queued: within the 20 ms a head
		// whose lock its own client holds waits before it subscribes, so
		// only the in-process wake-up can reach it.
		select {
		case <-queued:
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter did not queue")
		}
		if err := holder.Unlock(context.Background()); err != nil {
			t.Fatalf("holder Unlock: %v", err)
		}
		locked()
		req.End()

		s := e.one("fairlock.acquire", req.SpanContext())
		checkAttrs(t, s, map[attribute.Key]any{
			"fairlock.outcome":        "acquired",
			"fairlock.queue.position": int64(1),
		})
		checkWoken(t, s)
		if err := waiter.Unlock(context.Background()); err != nil {
			t.Fatalf("waiter Unlock: %v", err)
		}
	})
}

// queuedSignal is an Observer that also says, on queued, when an acquire
// joined the queue: a test acts at that moment, without polling.
type queuedSignal struct {
	observe.Observer
	queued chan<- struct{}
}

func (o queuedSignal) StartAcquire(ctx context.Context, c observe.Call) (context.Context, observe.AcquireTracker) {
	ctx, tr := o.Observer.StartAcquire(ctx, c)
	return ctx, queuedTracker{tr, o.queued}
}

type queuedTracker struct {
	observe.AcquireTracker
	queued chan<- struct{}
}

func (t queuedTracker) Queued(position int) {
	t.AcquireTracker.Queued(position)
	select {
	case t.queued <- struct{}{}:
	default:
	}
}
