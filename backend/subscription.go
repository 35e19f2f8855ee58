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
// KeyWatcher), in order: every message is delivered, so a receiver that
// learns one fact per message (a client told that each of its holds was
// force-unlocked) misses none. A slow receiver never stalls the
// connection's reader: at most SubscriptionBuffer events wait, and when
// that many do, they are replaced by one Reconnect, which tells the
// receiver to re-check everything - so nothing is lost, only summarised.
// A receiver that only needs the latest news (a lock waiter: a hand-over
// grant after a "you are first in line") folds what is pending with
// Latest.
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

// SubscriptionBuffer is how many events a Subscription keeps for a slow
// receiver before it summarises them as one Reconnect.
const SubscriptionBuffer = 16

// NewSubscription returns a Subscription of channel and the function that
// delivers an event to it. deliver never blocks (it queues the event, or
// summarises a full queue, as Subscription says) and may be called from any goroutine, also after
// Close, when the event is simply never read. stop, which may be nil, runs
// once, at the first Close: the adapter stops delivering there and drops
// the server-side subscription when no other Subscription needs it.
func NewSubscription(channel string, stop func()) (s *Subscription, deliver func(Event)) {
	s = &Subscription{channel: channel, events: make(chan Event, SubscriptionBuffer), stop: stop}
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
	select {
	case s.events <- e:
		return
	default:
	}
	// Full: the receiver is behind. Take the pending events back and
	// leave one Reconnect in their place (only offers fill the channel,
	// one at a time, so it fits).
	for {
		select {
		case <-s.events:
			continue
		default:
		}
		break
	}
	s.events <- Event{Reconnect: true}
}

// Latest folds first, an event just received, with every event pending
// behind it into the one that matters to a receiver of the latest news:
// a Reconnect, if any came (re-check everything), else the newest
// message. It does not wait.
func (s *Subscription) Latest(first Event) Event {
	e := first
	for {
		select {
		case next := <-s.events:
			if !e.Reconnect {
				e = next
			}
		default:
			return e
		}
	}
}
