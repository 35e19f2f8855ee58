package backend_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/fairlock/fairlock/backend"
)

// TestNewSubscriptionWithoutHub: an adapter builds a Subscription itself;
// it delivers every event in order, and runs the adapter's stop once.
func TestNewSubscriptionWithoutHub(t *testing.T) {
	stops := 0
	s, deliver := backend.NewSubscription("ch", func() { stops++ })
	if s.Channel() != "ch" {
		t.Errorf("Channel = %q, want ch", s.Channel())
	}
	select {
	case e := <-s.Events():
		t.Fatalf("event %+v before any delivery", e)
	default:
	}
	deliver(backend.Event{Payload: "0"})
	deliver(backend.Event{Payload: "1"})
	deliver(backend.Event{Reconnect: true})
	for _, want := range []backend.Event{{Payload: "0"}, {Payload: "1"}, {Reconnect: true}} {
		if e := <-s.Events(); e != want {
			t.Errorf("event %+v, want %+v", e, want)
		}
	}
	s.Close()
	s.Close()
	if stops != 1 {
		t.Errorf("stop ran %d times, want 1", stops)
	}
	deliver(backend.Event{Payload: "late"}) // after Close: must not block or panic
}

// TestSubscriptionLosesNothing: notices that arrive together (a client
// told that 16 of its holds were force-unlocked at once) all reach the
// receiver; more than the buffer holds are summarised as one Reconnect,
// which tells the receiver to re-check everything. (A newer notice used
// to replace a pending one: 10-14 of 16 holds were not told.)
func TestSubscriptionLosesNothing(t *testing.T) {
	s, deliver := backend.NewSubscription("ch", nil)
	defer s.Close()
	for i := range backend.SubscriptionBuffer {
		deliver(backend.Event{Payload: fmt.Sprint(i)})
	}
	for i := range backend.SubscriptionBuffer {
		if e := <-s.Events(); e.Payload != fmt.Sprint(i) {
			t.Fatalf("event %d: %+v, want payload %d", i, e, i)
		}
	}
	for i := range backend.SubscriptionBuffer + 1 {
		deliver(backend.Event{Payload: fmt.Sprint(i)})
	}
	if e := <-s.Events(); !e.Reconnect {
		t.Errorf("after an overflow: %+v, want a Reconnect", e)
	}
	select {
	case e := <-s.Events():
		t.Errorf("after the Reconnect: %+v pending, want nothing", e)
	default:
	}
}

// TestNewSubscriptionNilStop: a nil stop is allowed.
func TestNewSubscriptionNilStop(t *testing.T) {
	s, _ := backend.NewSubscription("ch", nil)
	s.Close()
}

// TestNewSubscriptionConcurrentDelivery: deliver may be called from any
// goroutine while the receiver reads and closes.
func TestNewSubscriptionConcurrentDelivery(t *testing.T) {
	s, deliver := backend.NewSubscription("ch", nil)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 1000 {
				deliver(backend.Event{Payload: "0"})
			}
		})
	}
	delivered := make(chan struct{})
	go func() {
		wg.Wait()
		close(delivered)
	}()
	received := 0
	for done := false; !done; {
		select {
		case <-s.Events():
			received++
		case <-delivered:
			done = true
		}
	}
	s.Close()
	if received > 4000 {
		t.Errorf("received %d events, more than the 4000 delivered", received)
	}
}

// An adapter that does not use pubsub.Hub implements Subscribe with
// NewSubscription: it keeps each Subscription's deliver function for its
// reader, and forgets it in stop.
func ExampleNewSubscription() {
	var (
		mu    sync.Mutex
		subs  = map[*backend.Subscription]func(backend.Event){}
		reads = func(channel, payload string) { // the adapter's reader
			mu.Lock()
			defer mu.Unlock()
			for s, deliver := range subs {
				if s.Channel() == channel {
					deliver(backend.Event{Payload: payload})
				}
			}
		}
	)
	subscribe := func(channel string) *backend.Subscription {
		var s *backend.Subscription
		s, deliver := backend.NewSubscription(channel, func() {
			mu.Lock()
			defer mu.Unlock()
			delete(subs, s) // and UNSUBSCRIBE when it was the last
		})
		// SUBSCRIBE here, and register once the server confirmed it.
		mu.Lock()
		subs[s] = deliver
		mu.Unlock()
		return s
	}

	s := subscribe("redisson_lock__channel:{orders}")
	reads("redisson_lock__channel:{orders}", "0")
	fmt.Printf("%+v\n", <-s.Events())
	s.Close()
	// Output: {Payload:0 Reconnect:false}
}

// TestSubscriptionLatest: a receiver of the latest news folds what is
// pending: a newer message replaces an older one (a lock waiter told
// "you are first in line" and then granted the lock before it ran must
// see the grant), and a Reconnect replaces a message and outlives later
// ones.
func TestSubscriptionLatest(t *testing.T) {
	reconnect := backend.Event{Reconnect: true}
	for _, tc := range []struct {
		name    string
		offered []backend.Event
		want    backend.Event
	}{
		{"LatestMessage", []backend.Event{{Payload: "head:100"}, {Payload: "grant:7:1"}}, backend.Event{Payload: "grant:7:1"}},
		{"ReconnectOverMessage", []backend.Event{{Payload: "0"}, reconnect}, reconnect},
		{"ReconnectKept", []backend.Event{reconnect, {Payload: "0"}, {Payload: "grant:7:1"}}, reconnect},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, deliver := backend.NewSubscription("ch", nil)
			defer s.Close()
			for _, e := range tc.offered {
				deliver(e)
			}
			if got := s.Latest(<-s.Events()); got != tc.want {
				t.Errorf("received %+v, want %+v", got, tc.want)
			}
			select {
			case e := <-s.Events():
				t.Errorf("an event %+v still pending after Latest", e)
			default:
			}
		})
	}
}
