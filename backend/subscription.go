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
// KeyWatcher). Events are coalesced, so a slow receiver never stalls the
// connection's reader: the channel holds at most one pending event. A
// newer message replaces a pending message - the receiver sees the latest
// one, which for a lock waiter is the one that matters (a hand-over grant
// after a "you are first in line") - and a Reconnect replaces a pending
// message and is kept over later messages, since it tells the receiver to
// re-check everything. A receiver therefore treats events as the latest
// news, not as a count.
//
// An adapter builds Subscriptions with NewSubscription (pubsub.Hub does so
// for the adapters that use it).
type Subscription struct {
	channel string
	events  chan Event
	stop    func()
	once    sync.Once
	offers  sync.Mutex // one offer at a time, so a replacement is atomic
}

// NewSubscription returns a Subscription of channel and the function that
// delivers an event to it. deliver never blocks (it replaces or keeps a
// pending event, as Subscription says) and may be called from any goroutine, also after
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
	s.offers.Lock()
	defer s.offers.Unlock()
	for {
		select {
		case s.events <- e:
			return
		default:
		}
		// Full: take the pending event back and keep what matters. Only
		// offers fill the channel, one at a time, so the next try fits.
		select {
		case pending := <-s.events:
			if pending.Reconnect {
				e = pending
			}
		default: // the receiver took it meanwhile
		}
	}
}
