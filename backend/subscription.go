package backend

import "sync"

// Event is what a Subscription delivers.
type Event struct {
	// Payload is the message body ("0" for an unlock wake-up); empty for a
	// Reconnect event.
	Payload string
	// Reconnect reports that the subscription connection dropped, or came
	// back after dropping: messages sent meanwhile are lost, so the
	// receiver must re-check whatever it waits for. Both edges are
	// reported, so a receiver also learns promptly that the server went
	// away.
	Reconnect bool
}

// Subscription receives the events of one channel (or of one key, for
// KeyWatcher). Events are coalesced: the channel holds at most one pending
// event and further ones are dropped while it is full, so a slow receiver
// never stalls the connection's reader. A receiver therefore treats any
// event as "re-check now", not as a count.
//
// An adapter builds Subscriptions with NewSubscription (pubsub.Hub does so
// for the adapters that use it).
type Subscription struct {
	channel string
	events  chan Event
	stop    func()
	once    sync.Once
}

// NewSubscription returns a Subscription of channel and the function that
// delivers an event to it. deliver never blocks (it drops the event when
// one is already pending) and may be called from any goroutine, also after
// Close, when the event is simply never read. stop, which may be nil, runs
// once, at the first Close: the adapter stops delivering there and drops
// the server-side subscription when no other Subscription needs it.
func NewSubscription(channel string, stop func()) (s *Subscription, deliver func(Event)) {
	s = &Subscription{channel: channel, events: make(chan Event, 1), stop: stop}
	return s, s.offer
}

// Channel returns the channel name (the key, for a key watch).
func (s *Subscription) Channel() string { return s.channel }

// Events returns the channel on which events arrive.
func (s *Subscription) Events() <-chan Event { return s.events }

// Close stops delivery: it runs the stop function given to NewSubscription
// once. Close is idempotent.
func (s *Subscription) Close() {
	s.once.Do(func() {
		if s.stop != nil {
			s.stop()
		}
	})
}

func (s *Subscription) offer(e Event) {
	select {
	case s.events <- e:
	default: // an event is already pending; the receiver will re-check anyway
	}
}
