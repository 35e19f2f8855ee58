package backend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

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

// Subscription receives the events of one channel. Events are coalesced:
// the channel holds at most one pending event and further ones are dropped
// while it is full, so a slow receiver never stalls the connection's reader.
// A receiver therefore treats any event as "re-check now", not as a count.
type Subscription struct {
	channel string // or key, for a key watch
	key     bool   // a WatchKey subscription
	events  chan Event
	hub     *Hub
	once    sync.Once
}

// Channel returns the channel name (the key, for a key watch).
func (s *Subscription) Channel() string { return s.channel }

// Events returns the channel on which events arrive.
func (s *Subscription) Events() <-chan Event { return s.events }

// Close stops delivery; the server-side subscription is dropped when the
// last local subscriber of the channel closes. Close is idempotent.
func (s *Subscription) Close() {
	s.once.Do(func() { s.hub.remove(s) })
}

func (s *Subscription) offer(e Event) {
	select {
	case s.events <- e:
	default: // an event is already pending; the receiver will re-check anyway
	}
}

// KeyTracker is implemented by a PubSubConn that can track keys with
// client-side caching (Hub.WatchKey).
type KeyTracker interface {
	// Track makes the server report key's next change on this connection
	// (as an invalidation passed to Sink.Invalidate), and reports whether
	// the key exists now. It returns ErrNotSupported when tracking is off.
	Track(ctx context.Context, key string) (exists bool, err error)
}

// Sink receives what arrives on a subscription connection. Hub implements
// it; an adapter's reader goroutine calls it, and its methods never block.
type Sink interface {
	// Deliver passes on a message published on channel.
	Deliver(channel, payload string)
	// Invalidate passes on an invalidation of keys (nil: every key, as
	// after a reconnect).
	Invalidate(keys []string)
}

// PubSubConn is one subscription connection opened by an adapter.
type PubSubConn interface {
	// Subscribe subscribes to the channels and returns after the server
	// confirmed them.
	Subscribe(ctx context.Context, channels ...string) error
	// Unsubscribe unsubscribes from the channels.
	Unsubscribe(ctx context.Context, channels ...string) error
	// Close closes the connection.
	Close()
}

// Dialer opens a subscription connection. The adapter passes what arrives
// on it to sink (from its reader goroutine) and reports the connection's
// end on the returned channel, which must receive at most one error and
// then be closed.
type Dialer func(ctx context.Context, sink Sink) (PubSubConn, <-chan error, error)

// Hub multiplexes any number of Subscriptions over one PubSubConn,
// subscribing on the server only once per channel, and re-dials and
// re-subscribes after the connection drops. Adapters build one Hub per
// Backend; it is safe for concurrent use.
type Hub struct {
	dial Dialer

	wire   sync.Mutex // serialises dialing and SUBSCRIBE/UNSUBSCRIBE so they reach the server in order
	conn   PubSubConn
	closed bool

	mu   sync.Mutex // guards subs and keys; never held while talking to the server
	subs map[string]map[*Subscription]struct{}
	keys map[string]map[*Subscription]struct{} // key watches

	stop chan struct{}
	wg   sync.WaitGroup
}

// NewHub returns a Hub that opens its connection with dial on first use.
func NewHub(dial Dialer) *Hub {
	return &Hub{
		dial: dial,
		subs: make(map[string]map[*Subscription]struct{}),
		keys: make(map[string]map[*Subscription]struct{}),
		stop: make(chan struct{}),
	}
}

// unsubscribeTimeout bounds the UNSUBSCRIBE sent by Subscription.Close.
const unsubscribeTimeout = 5 * time.Second

// Subscribe implements Backend.Subscribe.
func (h *Hub) Subscribe(ctx context.Context, channel string) (*Subscription, error) {
	h.wire.Lock()
	defer h.wire.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	s := &Subscription{channel: channel, events: make(chan Event, 1), hub: h}
	// Registered first, so a re-dial subscribes this channel too.
	if !h.add(h.subs, s) {
		return s, nil
	}
	if err := h.onConn(ctx, func(c PubSubConn) error { return c.Subscribe(ctx, channel) }); err != nil {
		// The SUBSCRIBE may have reached the server before ctx ended or the
		// reply was lost: take it back, or the server keeps the channel.
		if h.drop(h.subs, s) && h.conn != nil {
			h.unsubscribeLocked(channel)
		}
		return nil, fmt.Errorf("subscribe %q: %w", channel, err)
	}
	return s, nil
}

// unsubscribeLocked sends UNSUBSCRIBE, bounded by unsubscribeTimeout. An
// error means the connection is going away; the re-subscribe after
// reconnecting uses the current channel set, without this one. The caller
// holds h.wire.
func (h *Hub) unsubscribeLocked(channel string) {
	ctx, cancel := context.WithTimeout(context.Background(), unsubscribeTimeout)
	defer cancel()
	_ = h.conn.Unsubscribe(ctx, channel)
}

// WatchKey implements KeyWatcher when the adapter's connection implements
// KeyTracker; otherwise it returns ErrNotSupported.
func (h *Hub) WatchKey(ctx context.Context, key string) (*Subscription, error) {
	h.wire.Lock()
	defer h.wire.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	s := &Subscription{channel: key, key: true, events: make(chan Event, 1), hub: h}
	// Registered before tracking starts, so no invalidation slips past.
	h.add(h.keys, s)
	var exists bool
	err := h.onConn(ctx, func(c PubSubConn) error {
		tracker, ok := c.(KeyTracker)
		if !ok {
			return ErrNotSupported
		}
		var err error
		exists, err = tracker.Track(ctx, key)
		return err
	})
	if err != nil {
		h.drop(h.keys, s)
		return nil, err
	}
	if !exists {
		s.offer(Event{})
	}
	return s, nil
}

// onConn runs do on the connection, dialing one first if needed. When do
// fails for another reason than ctx or ErrNotSupported, the connection may
// have died without telling us yet (the server restarted): it is replaced
// once - the new one subscribes every channel - and do runs again. The
// caller holds h.wire.
func (h *Hub) onConn(ctx context.Context, do func(PubSubConn) error) error {
	if h.closed {
		return ErrClosed
	}
	if err := h.connectLocked(ctx); err != nil {
		return err
	}
	err := do(h.conn)
	if err == nil || ctx.Err() != nil || errors.Is(err, ErrNotSupported) {
		return err
	}
	h.conn.Close()
	h.conn = nil
	if err := h.connectLocked(ctx); err != nil {
		return err
	}
	return do(h.conn)
}

// add puts s in set m under its name and reports whether it is the first
// there.
func (h *Hub) add(m map[string]map[*Subscription]struct{}, s *Subscription) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := m[s.channel]
	if set == nil {
		set = make(map[*Subscription]struct{})
		m[s.channel] = set
	}
	set[s] = struct{}{}
	return len(set) == 1
}

// drop takes s out of set m and reports whether it was the last there.
func (h *Hub) drop(m map[string]map[*Subscription]struct{}, s *Subscription) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	set, ok := m[s.channel]
	if !ok {
		return false
	}
	delete(set, s)
	if len(set) > 0 {
		return false
	}
	delete(m, s.channel)
	return true
}

// Invalidate implements Sink: it wakes the watches of keys (all of them
// for nil) and forgets them, since the server reports a tracked key once.
func (h *Hub) Invalidate(keys []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if keys == nil {
		for k := range h.keys {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		for s := range h.keys[k] {
			s.offer(Event{})
		}
		delete(h.keys, k)
	}
}

func (h *Hub) remove(s *Subscription) {
	if s.key {
		h.drop(h.keys, s)
		return
	}
	h.wire.Lock()
	defer h.wire.Unlock()
	if h.drop(h.subs, s) && h.conn != nil {
		h.unsubscribeLocked(s.channel)
	}
}

// Deliver implements Sink: it hands a message to the channel's
// subscribers without blocking.
func (h *Hub) Deliver(channel, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs[channel] {
		s.offer(Event{Payload: payload})
	}
}

func (h *Hub) broadcastReconnect() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range []map[string]map[*Subscription]struct{}{h.subs, h.keys} {
		for _, set := range m {
			for s := range set {
				s.offer(Event{Reconnect: true})
			}
		}
	}
}

func (h *Hub) channels() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.subs))
	for c := range h.subs {
		out = append(out, c)
	}
	return out
}

// connectLocked dials when there is no connection and subscribes to every
// channel that has subscribers. The caller holds h.wire.
func (h *Hub) connectLocked(ctx context.Context) error {
	if h.conn != nil {
		return nil
	}
	conn, done, err := h.dial(ctx, h)
	if err != nil {
		return fmt.Errorf("backend: open subscription connection: %w", err)
	}
	if chans := h.channels(); len(chans) > 0 {
		if err := conn.Subscribe(ctx, chans...); err != nil {
			conn.Close()
			return fmt.Errorf("backend: re-subscribe: %w", err)
		}
	}
	h.conn = conn
	h.wg.Add(1)
	go h.watch(conn, done)
	return nil
}

// Reconnect back-off bounds.
const (
	minRedial = 20 * time.Millisecond
	maxRedial = 2 * time.Second
)

// watch waits for conn to end, tells every subscriber to re-check, then
// re-dials until it succeeds or the hub closes, and tells them again.
func (h *Hub) watch(conn PubSubConn, done <-chan error) {
	defer h.wg.Done()
	select {
	case <-done:
	case <-h.stop:
		return
	}
	h.wire.Lock()
	if h.conn == conn {
		h.conn = nil
	}
	h.wire.Unlock()
	conn.Close()
	h.broadcastReconnect()
	delay := minRedial
	for {
		h.wire.Lock()
		if h.closed {
			h.wire.Unlock()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), maxRedial+time.Second)
		err := h.connectLocked(ctx)
		cancel()
		h.wire.Unlock()
		if err == nil {
			h.broadcastReconnect()
			return
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-h.stop:
			t.Stop()
			return
		}
		delay = min(2*delay, maxRedial)
	}
}

// Close closes the connection and stops re-dialing; Subscribe then returns
// ErrClosed. Open Subscriptions stop receiving events.
func (h *Hub) Close() error {
	h.wire.Lock()
	if h.closed {
		h.wire.Unlock()
		return nil
	}
	h.closed = true
	close(h.stop)
	conn := h.conn
	h.conn = nil
	h.wire.Unlock()
	if conn != nil {
		conn.Close()
	}
	h.wg.Wait()
	return nil
}
