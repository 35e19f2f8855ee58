package lock

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/redistest"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

// stalledWakeUps is a backend on which the waiters' SUBSCRIBEs to a lock's
// wake-up channels never complete (until their context ends), and which
// can hold back the reply to one owner's first acquire attempt: the reply
// is let through when release is closed, after held is closed.
type stalledWakeUps struct {
	backend.Backend
	channels string // the lock's channel prefix: Subscribes to it stall

	owner   string // whose first acquire reply is held back ("": none)
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *stalledWakeUps) Subscribe(ctx context.Context, channel string) (*backend.Subscription, error) {
	if strings.HasPrefix(channel, b.channels) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return b.Backend.Subscribe(ctx, channel)
}

func (b *stalledWakeUps) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	rep, err := b.Backend.Eval(ctx, s, keys, args)
	if s.Name == "acquire" && b.owner != "" && args[0] == b.owner {
		b.once.Do(func() {
			close(b.held)
			<-b.release // the reply's late arrival, ordered by the test
		})
	}
	return rep, err
}

// localWakeClient returns a client on srv whose waiters on lock name never
// get their wake-up subscriptions, and a waiter timeout of a minute: a head
// would attempt again only after 20 s (its heartbeat) unless woken
// otherwise.
func localWakeClient(t *testing.T, srv *redistest.Server, name string) (*Client, *stalledWakeUps) {
	t.Helper()
	b := &stalledWakeUps{Backend: rueidisOn(t, srv), channels: "redisson_lock__channel:{" + name + "}"}
	c, err := NewClient(b, WithWaiterTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, b
}

// TestLocalWake_HeadOfTheSameClient: when the holder and the head of the
// queue share a client, the holder's Unlock wakes the head in the process:
// it is granted the lock at once, although its subscription to the
// wake-up channel never completes (without the local wake-up it would wait
// for its heartbeat, 20 s here).
func TestLocalWake_HeadOfTheSameClient(t *testing.T) {
	srv := redistest.Start(t)
	const name = "local-wake"
	c, _ := localWakeClient(t, srv, name)
	ctx, holder, waiter := lockedBy(t, c, name)
	got := lockInBackground(ctx, waiter)
	awaitQueue(t, srv, name, 1)
	released := time.Now()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	mustBeGranted(t, got, "the head, after the Unlock of a holder of its own client")
	t.Logf("granted %v after the holder's Unlock returned, with its subscription stalled", time.Since(released))
	if err := waiter.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLocalWake_ReleaseBeforeTheHeadKnew: the holder's release runs, and
// its Unlock returns, while the reply that makes the other owner the head
// is still on its way: the wake-up found nobody registered. The head
// learns of it when it registers, and attempts at once.
func TestLocalWake_ReleaseBeforeTheHeadKnew(t *testing.T) {
	srv := redistest.Start(t)
	const name = "local-wake-late"
	c, b := localWakeClient(t, srv, name)
	ctx, holder, waiter := lockedBy(t, c, name)
	b.owner, b.held, b.release = waiter.Owner(), make(chan struct{}), make(chan struct{})
	got := lockInBackground(ctx, waiter)
	select {
	case <-b.held: // the waiter's attempt ran: it is queued, and does not know yet
	case <-ctx.Done():
		t.Fatal("the waiter's first attempt never ran")
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	close(b.release)
	mustBeGranted(t, got, "the head, after a release it missed (not noticed)")
	if err := waiter.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	c.wakes.mu.Lock()
	left := len(c.wakes.heads)
	c.wakes.mu.Unlock()
	if left != 0 {
		t.Errorf("%d locks still have heads registered after every call ended", left)
	}
}

// rueidisOn returns a rueidis backend on srv, closed with the test.
func rueidisOn(t *testing.T, srv *redistest.Server) backend.Backend {
	t.Helper()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	return rueidisbackend.New(rc)
}

// lockedBy returns two owners of lock name on c, the first holding it,
// and a context that ends with the test, or after 15 s.
func lockedBy(t *testing.T, c *Client, name string) (ctx context.Context, holder, waiter *Mutex) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	holder, waiter = newTestMutex(t, c, name), newTestMutex(t, c, name)
	if _, err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	return ctx, holder, waiter
}

// awaitQueue waits (bounded) until lock name's queue holds n entries.
func awaitQueue(t *testing.T, srv *redistest.Server, name string, n int64) {
	t.Helper()
	redistest.Eventually(t, 5*time.Second, fmt.Sprintf("%d entries in the queue of %q", n, name), func() bool {
		got, _ := srv.Do(t, "LLEN", "redisson_lock_queue:{"+name+"}").(int64)
		return got == n
	})
}

// countedAcquires counts one owner's acquire attempts.
type countedAcquires struct {
	backend.Backend
	owner string
	n     atomic.Int64
}

func (b *countedAcquires) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	if s.Name == "acquire" && args[0] == b.owner {
		defer b.n.Add(1) // counted once its reply is in
	}
	return b.Backend.Eval(ctx, s, keys, args)
}

// TestLocalWake_SubscribedHeadTakesTheMessage: a head that is subscribed
// already is not woken in the process: the release's own message hands
// the lock over without a round trip, and a local wake-up racing it would
// cost an attempt.
func TestLocalWake_SubscribedHeadTakesTheMessage(t *testing.T) {
	srv := redistest.Start(t)
	const name = "local-wake-subscribed"
	b := &countedAcquires{Backend: rueidisOn(t, srv)}
	c, err := NewClient(b, WithWaiterTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, holder, waiter := lockedBy(t, c, name)
	b.owner = waiter.Owner()
	got := lockInBackground(ctx, waiter)
	// Queued, subscribed, and checked again after the subscription: two
	// attempts, then it sleeps until a wake-up.
	redistest.Eventually(t, 5*time.Second, "the waiter's two attempts (queued, then the check after subscribing)", func() bool { return b.n.Load() >= 2 })
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	mustBeGranted(t, got, "the subscribed head, after the Unlock")
	if n := b.n.Load(); n != 2 {
		t.Errorf("the head made %d acquire attempts, want 2: the hand-over message should have granted it, with no attempt after the Unlock", n)
	}
	if err := waiter.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLocalWake_HeadSubscribesWhileTheLocalHoldLasts: a head that put off
// its subscription because another owner of its client holds the lock
// subscribes all the same once that hold outlasts localSubscribeDelay, and
// is then woken by a message like any head: here, another client's
// ForceUnlock ends the hold and publishes on the head's channel.
func TestLocalWake_HeadSubscribesWhileTheLocalHoldLasts(t *testing.T) {
	srv := redistest.Start(t)
	const name = "local-wake-long-hold"
	c, _ := localWakeClient(t, srv, "not-"+name) // nothing stalls on this lock
	other, _ := localWakeClient(t, srv, "not-"+name)
	ctx, _, waiter := lockedBy(t, c, name)
	got := lockInBackground(ctx, waiter)
	awaitQueue(t, srv, name, 1)
	redistest.Eventually(t, 5*time.Second, "the head's subscription to "+waiter.channel+" while the local hold lasts", func() bool {
		n, _ := srv.Do(t, "PUBSUB", "NUMSUB", waiter.channel).([]any)
		return len(n) == 2 && n[1] == int64(1)
	})
	if released, err := newTestMutex(t, other, name).ForceUnlock(ctx); err != nil || !released {
		t.Fatalf("ForceUnlock = (%v, %v), want (true, nil)", released, err)
	}
	mustBeGranted(t, got, "the head, after the ForceUnlock")
	if err := waiter.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// lockInBackground runs m.Lock in a goroutine and sends its error.
func lockInBackground(ctx context.Context, m *Mutex) <-chan error {
	got := make(chan error, 1)
	go func() {
		_, err := m.Lock(ctx)
		got <- err
	}()
	return got
}

// mustBeGranted fails the test unless the Lock whose error got sends
// succeeds within 5 s; who names the waiter and what it waited for.
func mustBeGranted(t *testing.T, got <-chan error, who string) {
	t.Helper()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter's Lock: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: not granted within 5 s", who)
	}
}
