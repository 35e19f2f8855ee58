// Package pubsub helps backend adapters implement backend.Backend's
// Subscribe (and backend.KeyWatcher) over one subscription connection per
// backend. It is not part of the contract: an adapter may build
// Subscriptions itself with backend.NewSubscription instead.
//
// The adapter provides a Dialer that opens a Conn and passes what the
// connection reads to a Sink; Hub does the rest: a SUBSCRIBE for each
// Subscribe (calls made while one is on its way share the next), the fan-out to every Subscription of a channel, UNSUBSCRIBE
// when the last one closes, and, when the connection drops, a Reconnect
// event to every Subscription, a re-dial with back-off and a re-subscribe
// of every channel.
//
// # Ordering
//
// A Subscription that Hub.Subscribe returns receives the messages the
// connection reads after the server's confirmation of the SUBSCRIBE that
// Subscribe sent, as they are read (coalesced, see backend.Subscription),
// and no message read before that confirmation. Since the server handles
// commands and publishes one at a time and a connection delivers what it
// sends in order, that means:
//   - no message published before Subscribe was called is delivered, even
//     when the channel was already subscribed for another Subscription and
//     the message was still on its way to the reader;
//   - every message published after Subscribe returned is delivered,
//     unless the connection drops (reported as a Reconnect event);
//   - a message published while Subscribe runs may or may not be.
//
// "Published" means handled by the server this connection is on: on a
// cluster, a message published on another node counts from when the
// cluster bus brings it here.
//
// To give this, Subscribe sends SUBSCRIBE on the connection even when the
// channel is already subscribed there (the server confirms it again, and
// the confirmation is the point from which the new Subscription listens):
// one round trip per Subscribe, shared by the calls that arrive while a
// SUBSCRIBE waits for its confirmation (they go out together in the next). It relies on the Conn's contract: Subscribe
// returns only after the reader has read the confirmation, and the reader
// passes messages to the Sink one at a time, in the order it reads them.
//
// Key watches (Hub.WatchKey) work the other way round: a watch listens from
// before its tracking starts, since an early invalidation only costs a
// re-check, while a missed one would cost the wake-up.
package pubsub
