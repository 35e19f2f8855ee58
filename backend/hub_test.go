package backend_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
)

// serverConn stands in for a subscription connection: it keeps the set of
// channels the server would have subscribed. SUBSCRIBE reaches the
// "server" at once but, when slow is set, its confirmation never comes and
// the call waits for its context, as when a caller gives up mid-flight.
type serverConn struct {
	mu       sync.Mutex
	channels map[string]bool
	slow     bool
	sent     chan struct{} // receives once per SUBSCRIBE
}

func (c *serverConn) Subscribe(ctx context.Context, channels ...string) error {
	c.mu.Lock()
	for _, ch := range channels {
		c.channels[ch] = true
	}
	slow := c.slow
	c.mu.Unlock()
	c.sent <- struct{}{}
	if slow {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (c *serverConn) Unsubscribe(_ context.Context, channels ...string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range channels {
		delete(c.channels, ch)
	}
	return nil
}

// Close ends the connection: the server forgets its subscriptions.
func (c *serverConn) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.channels)
}

func (c *serverConn) subscribed(ch string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.channels[ch]
}

// TestSubscribeCancelledInFlightLeavesNoServerSubscription: a Subscribe
// whose context ends after the SUBSCRIBE was sent but before it was
// confirmed must take the subscription back; the server kept it before (a
// cancelled Lock left its owner's channel subscribed until a reconnect).
func TestSubscribeCancelledInFlightLeavesNoServerSubscription(t *testing.T) {
	conn := &serverConn{channels: map[string]bool{}, sent: make(chan struct{}, 8)}
	hub := backend.NewHub(func(context.Context, backend.Sink) (backend.PubSubConn, <-chan error, error) {
		return conn, make(chan error), nil
	})
	t.Cleanup(func() { hub.Close() })
	// An open connection with another subscriber on it.
	other, err := hub.Subscribe(context.Background(), "other")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	<-conn.sent
	conn.mu.Lock()
	conn.slow = true
	conn.mu.Unlock()

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := hub.Subscribe(ctx, "waiter")
		errc <- err
	}()
	select {
	case <-conn.sent:
	case <-time.After(10 * time.Second):
		t.Fatal("SUBSCRIBE never sent")
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Subscribe = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Subscribe did not return after its context ended")
	}
	if conn.subscribed("waiter") {
		t.Error("the server still has the subscription of a cancelled Subscribe")
	}

	// A later Subscribe of the same channel works and is kept.
	conn.mu.Lock()
	conn.slow = false
	conn.mu.Unlock()
	sub, err := hub.Subscribe(context.Background(), "waiter")
	<-conn.sent
	if err != nil {
		t.Fatal(err)
	}
	if !conn.subscribed("waiter") {
		t.Error("a confirmed Subscribe is not kept")
	}
	sub.Close()
	if conn.subscribed("waiter") {
		t.Error("Close left the subscription on the server")
	}
}
