package pubsub_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/backend/pubsub"
)

// within bounds every wait for something that must happen.
const within = 10 * time.Second

// fakeConn stands in for a server and one subscription connection to it.
// The server side keeps the set of subscribed channels; what it sends -
// published messages and SUBSCRIBE confirmations - queues on the wire in
// order until the reader goroutine, as an adapter's would, passes it to
// the Sink. Pausing the reader keeps messages in flight, and keeps
// SUBSCRIBE waiting for its confirmation.
type fakeConn struct {
	sink pubsub.Sink
	wire chan frame
	sent chan string // receives the channels of each SUBSCRIBE sent

	mu         sync.Mutex // the server: orders publishes and subscribes
	channels   map[string]bool
	subscribes int // SUBSCRIBE commands received

	// reading is a one-slot semaphore the reader holds while it handles a
	// frame; a test holds it (pause) to stop the reader.
	reading chan struct{}

	done   chan error // the connection's end, for the Hub
	closed chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
}

// frame is a message, or a SUBSCRIBE confirmation when confirmed is set.
type frame struct {
	channel, payload string
	confirmed        chan struct{}
}

func newFakeConn(sink pubsub.Sink) *fakeConn {
	c := &fakeConn{
		sink:     sink,
		wire:     make(chan frame, 64),
		sent:     make(chan string, 64),
		channels: map[string]bool{},
		reading:  make(chan struct{}, 1),
		done:     make(chan error, 1),
		closed:   make(chan struct{}),
	}
	c.wg.Go(c.read)
	return c
}

func (c *fakeConn) read() {
	for {
		select {
		case f := <-c.wire:
			select {
			case c.reading <- struct{}{}:
			case <-c.closed:
				return
			}
			if f.confirmed != nil {
				close(f.confirmed)
			} else {
				c.sink.Deliver(f.channel, f.payload)
			}
			<-c.reading
		case <-c.closed:
			return
		}
	}
}

// forgetSent forgets the SUBSCRIBEs sent so far: those of the Subscribe
// calls that returned (Subscribe notes them before it waits).
func (c *fakeConn) forgetSent() {
	for len(c.sent) > 0 {
		<-c.sent
	}
}

// pause stops the reader before its next frame; resume lets it go on.
func (c *fakeConn) pause()  { c.reading <- struct{}{} }
func (c *fakeConn) resume() { <-c.reading }

func (c *fakeConn) Subscribe(ctx context.Context, channels ...string) error {
	confirmed := make(chan struct{})
	c.mu.Lock()
	c.subscribes++
	for _, ch := range channels {
		c.channels[ch] = true
	}
	c.wire <- frame{confirmed: confirmed}
	c.mu.Unlock()
	for _, ch := range channels {
		c.sent <- ch
	}
	select {
	case <-confirmed:
		return nil
	case <-c.closed:
		return errors.New("fake: connection closed")
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *fakeConn) Unsubscribe(_ context.Context, channels ...string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range channels {
		delete(c.channels, ch)
	}
	return nil
}

// Close ends the connection: the server forgets its subscriptions.
func (c *fakeConn) Close() {
	c.once.Do(func() {
		c.mu.Lock()
		clear(c.channels)
		c.mu.Unlock()
		close(c.closed)
		c.wg.Wait()
	})
}

// publish is PUBLISH from another client: queued on the wire when this
// connection is subscribed to channel.
func (c *fakeConn) publish(channel, payload string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.channels[channel] {
		c.wire <- frame{channel: channel, payload: payload}
	}
}

func (c *fakeConn) subscribed(ch string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.channels[ch]
}

// fakeHub returns a Hub whose dials open fakeConns; conns receives each.
func fakeHub(t *testing.T) (*pubsub.Hub, <-chan *fakeConn) {
	conns := make(chan *fakeConn, 8)
	hub := pubsub.NewHub(func(_ context.Context, sink pubsub.Sink) (pubsub.Conn, <-chan error, error) {
		c := newFakeConn(sink)
		t.Cleanup(c.Close)
		conns <- c
		return c, c.done, nil
	})
	t.Cleanup(func() { hub.Close() })
	return hub, conns
}

func mustSubscribe(t *testing.T, hub *pubsub.Hub, channel string) *backend.Subscription {
	t.Helper()
	s, err := hub.Subscribe(context.Background(), channel)
	if err != nil {
		t.Fatalf("Subscribe(%q): %v", channel, err)
	}
	return s
}

func next(t *testing.T, s *backend.Subscription) backend.Event {
	t.Helper()
	select {
	case e := <-s.Events():
		return e
	case <-time.After(within):
		t.Fatalf("no event on %q within %v", s.Channel(), within)
		return backend.Event{}
	}
}

// waitSent waits until SUBSCRIBE was sent for each of channels, skipping
// others.
func waitSent(t *testing.T, c *fakeConn, channels ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, ch := range channels {
		want[ch] = true
	}
	for len(want) > 0 {
		select {
		case ch := <-c.sent:
			delete(want, ch)
		case <-time.After(within):
			t.Fatalf("SUBSCRIBE never sent for %v", want)
		}
	}
}

// waitFor polls cond until it holds, for at most within.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", within, what)
		}
		time.Sleep(time.Millisecond)
	}
}

type subscribed struct {
	s   *backend.Subscription
	err error
}

func goSubscribe(ctx context.Context, hub *pubsub.Hub, channel string) <-chan subscribed {
	ch := make(chan subscribed, 1)
	go func() {
		s, err := hub.Subscribe(ctx, channel)
		ch <- subscribed{s, err}
	}()
	return ch
}

func awaitSubscribed(t *testing.T, ch <-chan subscribed) subscribed {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(within):
		t.Fatalf("Subscribe did not return within %v", within)
		return subscribed{}
	}
}

// TestSubscribeCancelledInFlightLeavesNoServerSubscription: a Subscribe
// whose context ends after the SUBSCRIBE was sent but before it was
// confirmed must take the subscription back; the server kept it before (a
// cancelled Lock left its owner's channel subscribed until a reconnect).
func TestSubscribeCancelledInFlightLeavesNoServerSubscription(t *testing.T) {
	hub, conns := fakeHub(t)
	// An open connection with another subscriber on it.
	other := mustSubscribe(t, hub, "other")
	defer other.Close()
	conn := <-conns
	conn.pause() // confirmations stop coming

	ctx, cancel := context.WithCancel(context.Background())
	res := goSubscribe(ctx, hub, "waiter")
	waitSent(t, conn, "waiter")
	cancel()
	if r := awaitSubscribed(t, res); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("Subscribe = %v, want context.Canceled", r.err)
	}
	if conn.subscribed("waiter") {
		t.Error("the server still has the subscription of a cancelled Subscribe")
	}

	// A later Subscribe of the same channel works and is kept.
	conn.resume()
	sub := mustSubscribe(t, hub, "waiter")
	if !conn.subscribed("waiter") {
		t.Error("a confirmed Subscribe is not kept")
	}
	sub.Close() // the UNSUBSCRIBE goes out beside Close
	waitFor(t, "Close to take the subscription off the server", func() bool { return !conn.subscribed("waiter") })
	if !conn.subscribed("other") {
		t.Error("the other channel lost its subscription")
	}
}

// TestWaitForTheConnectionEndsWithTheContext: while one SUBSCRIBE waits
// for its confirmation, a Subscribe or WatchKey of another caller waits
// for the connection, but only until its own context ends; it used to
// wait for the slow SUBSCRIBE whatever its context said.
func TestWaitForTheConnectionEndsWithTheContext(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(ctx context.Context, hub *pubsub.Hub) error
	}{
		{name: "Subscribe", call: func(ctx context.Context, hub *pubsub.Hub) error {
			_, err := hub.Subscribe(ctx, "impatient")
			return err
		}},
		{name: "WatchKey", call: func(ctx context.Context, hub *pubsub.Hub) error {
			_, err := hub.WatchKey(ctx, "impatient")
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hub, conns := fakeHub(t)
			mustSubscribe(t, hub, "warm").Close()
			conn := <-conns
			conn.forgetSent()
			conn.pause() // the next SUBSCRIBE is never confirmed
			slow := goSubscribe(context.Background(), hub, "slow")
			waitSent(t, conn, "slow")

			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- tc.call(ctx, hub) }()
			select {
			case err := <-errc:
				conn.resume()
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("%s while another SUBSCRIBE is in flight = %v, want context.DeadlineExceeded", tc.name, err)
				}
			case <-time.After(within):
				conn.resume()
				t.Errorf("%s waited for another caller's SUBSCRIBE past its own deadline", tc.name)
				<-errc
			}
			if r := awaitSubscribed(t, slow); r.err != nil {
				t.Fatalf("slow Subscribe: %v", r.err)
			}
		})
	}
}

// TestNewSubscriptionGetsNoMessageFromBeforeSubscribe: a message published
// before Subscribe was called and still on its way to the reader reaches
// the Subscriptions that listened when it was published, never the new
// one, whether the channel was still subscribed on the server for another
// Subscription or is subscribed again after the last one closed. It used
// to reach the new one, which took it for a fresh wake-up.
func TestNewSubscriptionGetsNoMessageFromBeforeSubscribe(t *testing.T) {
	for _, tc := range []struct {
		name string
		// closeFirst closes the first Subscription before the second
		// subscribes, so the channel is unsubscribed and subscribed anew.
		closeFirst bool
	}{
		{name: "ChannelStillSubscribed", closeFirst: false},
		{name: "ChannelSubscribedAnew", closeFirst: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hub, conns := fakeHub(t)
			first := mustSubscribe(t, hub, "ch")
			defer first.Close()
			conn := <-conns
			conn.forgetSent()

			conn.pause() // the message stays in flight
			conn.publish("ch", "old")
			if tc.closeFirst {
				first.Close()
			}
			res := goSubscribe(context.Background(), hub, "ch")
			// Go on once Subscribe has done its part while the message
			// is in flight: it sent SUBSCRIBE (and waits for the
			// confirmation behind the message) or it returned.
			var r subscribed
			select {
			case <-conn.sent:
				conn.resume()
				r = awaitSubscribed(t, res)
			case r = <-res:
				conn.resume()
			case <-time.After(within):
				t.Fatal("Subscribe neither sent SUBSCRIBE nor returned")
			}
			if r.err != nil {
				t.Fatal(r.err)
			}
			second := r.s
			defer second.Close()

			// The reader passed "old" on before the confirmation that let
			// Subscribe return: had it reached the second Subscription, it
			// would be pending now.
			select {
			case e := <-second.Events():
				t.Errorf("the new Subscription received %+v, published before Subscribe was called", e)
			default:
			}
			if !tc.closeFirst {
				if e := next(t, first); e.Payload != "old" {
					t.Errorf("the first Subscription received %+v first, want the message published while it listened", e)
				}
			}
			conn.publish("ch", "new")
			if e := next(t, second); e.Payload != "new" {
				t.Errorf("the new Subscription received %+v, want the message published after Subscribe returned", e)
			}
		})
	}
}

// TestReconnectResubscribesAndTellsEverySubscription: when the connection
// ends, every Subscription hears a Reconnect event, the Hub dials a new
// connection, subscribes every channel on it, and messages flow again.
func TestReconnectResubscribesAndTellsEverySubscription(t *testing.T) {
	hub, conns := fakeHub(t)
	a, b := mustSubscribe(t, hub, "a"), mustSubscribe(t, hub, "b")
	defer a.Close()
	defer b.Close()
	old := <-conns
	old.done <- errors.New("fake: connection reset")
	close(old.done)
	for _, s := range []*backend.Subscription{a, b} {
		if e := next(t, s); !e.Reconnect {
			t.Errorf("%q: %+v, want a Reconnect event", s.Channel(), e)
		}
	}
	var conn *fakeConn
	select {
	case conn = <-conns:
	case <-time.After(within):
		t.Fatal("no re-dial")
	}
	waitSent(t, conn, "a", "b")
	// The Hub reports the new connection with a second Reconnect event,
	// which may come after a message and push it out (events coalesce):
	// publish again after each Reconnect event.
	for {
		conn.publish("a", "after")
		e := next(t, a)
		if e.Payload == "after" {
			break
		}
		if !e.Reconnect {
			t.Fatalf("after the reconnect: %+v, want the message", e)
		}
	}
}

// TestClosedHub: after Close, Subscribe and WatchKey return ErrClosed.
func TestClosedHub(t *testing.T) {
	hub, _ := fakeHub(t)
	mustSubscribe(t, hub, "x")
	if err := hub.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := hub.Subscribe(context.Background(), "x"); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Subscribe after Close = %v, want ErrClosed", err)
	}
	if _, err := hub.WatchKey(context.Background(), "k"); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("WatchKey after Close = %v, want ErrClosed", err)
	}
}

// TestConcurrentSubscribesShareOneSubscribe: calls made while a SUBSCRIBE
// waits for its confirmation share the next SUBSCRIBE, so a burst of
// waiters costs two round trips, not one each (they used to queue for the
// connection one round trip at a time: tens of milliseconds with 64
// goroutines). Each still gets its own armed Subscription.
func TestConcurrentSubscribesShareOneSubscribe(t *testing.T) {
	hub, conns := fakeHub(t)
	mustSubscribe(t, hub, "warm").Close()
	conn := <-conns
	conn.forgetSent()
	conn.pause() // the next SUBSCRIBE waits for its confirmation
	first := goSubscribe(context.Background(), hub, "first")
	waitSent(t, conn, "first")
	const n = 10
	var rest []<-chan subscribed
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("burst-%d", i))
		rest = append(rest, goSubscribe(context.Background(), hub, names[i]))
	}
	deadline := time.Now().Add(within)
	for pubsub.PendingSubscribes(hub) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d calls pending after %v", pubsub.PendingSubscribes(hub), n, within)
		}
		time.Sleep(time.Millisecond) // polling
	}
	conn.mu.Lock()
	before := conn.subscribes
	conn.mu.Unlock()
	conn.resume()
	waitSent(t, conn, names...)
	if r := awaitSubscribed(t, first); r.err != nil {
		t.Fatalf("first Subscribe: %v", r.err)
	}
	for i, ch := range rest {
		r := awaitSubscribed(t, ch)
		if r.err != nil {
			t.Fatalf("Subscribe(%q): %v", names[i], r.err)
		}
		if r.s.Channel() != names[i] {
			t.Errorf("Subscribe(%q) returned a Subscription to %q", names[i], r.s.Channel())
		}
		r.s.Close()
	}
	conn.mu.Lock()
	got := conn.subscribes - before
	conn.mu.Unlock()
	if got != 1 {
		t.Errorf("%d calls made while a SUBSCRIBE was in flight sent %d SUBSCRIBEs, want 1", n, got)
	}
	t.Logf("%d concurrent Subscribe calls: %d SUBSCRIBE after the one in flight", n, got)
}
