package pubsub

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/fairlock/fairlock/backend"
)

// Sink receives what arrives on a subscription connection. Hub implements
// it; an adapter's reader goroutine calls it, one call at a time in the
// order the connection read the messages, and its methods never block.
type Sink interface {
	// Deliver passes on a message published on channel.
	Deliver(channel, payload string)
	// Invalidate passes on an invalidation of keys (nil: every key, as
	// after a reconnect).
	Invalidate(keys []string)
	// Unsubscribed passes on the server's own UNSUBSCRIBE (or SUNSUBSCRIBE)
	// of channel: on a cluster, the channel's slot moved to another node.
	// A confirmation of the adapter's own Unsubscribe may be passed on too;
	// it costs the channel's Subscriptions a re-check.
	Unsubscribed(channel string)
}

// Conn is one subscription connection opened by an adapter.
type Conn interface {
	// Subscribe sends SUBSCRIBE for the channels, also for a channel this
	// connection has subscribed already, and returns once the reader has
	// read the server's confirmation, after passing every message read
	// before it to the Sink. The server's refusal (NOPERM) is a
	// *backend.ServerError, and subscribed nothing; another error leaves
	// it unknown whether the server subscribed.
	Subscribe(ctx context.Context, channels ...string) error
	// Unsubscribe sends UNSUBSCRIBE for the channels; it need not wait for
	// the confirmation.
	Unsubscribe(ctx context.Context, channels ...string) error
	// Close closes the connection.
	Close()
}

// KeyTracker is implemented by a Conn that can track keys with client-side
// caching (Hub.WatchKey).
type KeyTracker interface {
	// Track makes the server report key's next change on this connection
	// (as an invalidation passed to Sink.Invalidate), and reports whether
	// the key exists now. It returns backend.ErrNotSupported when tracking
	// is off.
	Track(ctx context.Context, key string) (exists bool, err error)
}

// Dialer opens a subscription connection. The adapter passes what arrives
// on it to sink (from its reader goroutine) and reports the connection's
// end on the returned channel, which must receive at most one error and
// then be closed.
type Dialer func(ctx context.Context, sink Sink) (Conn, <-chan error, error)

// Hub multiplexes any number of Subscriptions over one Conn, and re-dials
// and re-subscribes after the connection drops. Adapters build one Hub per
// Backend; it is safe for concurrent use.
type Hub struct {
	dial Dialer
	// bySlot sends one SUBSCRIBE per cluster slot (SSUBSCRIBE takes the
	// channels of one slot); lost, when set (ShardedHub's node hubs),
	// takes a channel's Subscriptions when the server unsubscribes it or
	// the connection ends, and the hub then never re-dials.
	bySlot bool
	lost   func(channel string, subs map[*backend.Subscription]func(backend.Event))

	// wire is a one-slot semaphore that serialises dialing and
	// SUBSCRIBE/UNSUBSCRIBE, so they reach the server in order; a channel
	// rather than a mutex, so that a caller can stop waiting for it when
	// its context ends. It guards conn and closed.
	wire   chan struct{}
	conn   Conn
	closed bool
	// handedOff: a hub with lost had its connection end, and its channels
	// went to lost; set while holding the wire.
	handedOff atomic.Bool

	mu       sync.Mutex    // guards the fields below; never held while talking to the server
	subs     listeners     // by channel: Subscriptions armed by a confirmed SUBSCRIBE
	keys     listeners     // by key: key watches
	pending  []*subRequest // Subscribe calls waiting for the next SUBSCRIBE
	flushing bool          // a flush goroutine is sending pending SUBSCRIBEs
	// inflight counts, by channel, the SUBSCRIBEs on the wire; dropped
	// marks a channel the server unsubscribed meanwhile (a hub with lost),
	// before the Subscriptions waiting for the SUBSCRIBE were registered.
	inflight map[string]int
	dropped  map[string]bool
	ended    bool // Close has begun: no new flush goroutine

	stop chan struct{}
	wg   sync.WaitGroup
	// ctx bounds the hub's own calls (SUBSCRIBE batches, UNSUBSCRIBEs,
	// re-dials); Close cancels it first, so a call that stalls gives the
	// wire back at once rather than at its timeout.
	ctx    context.Context
	cancel context.CancelFunc
}

// listeners holds, by channel or key, the Subscriptions and the function
// that delivers to each.
type listeners map[string]map[*backend.Subscription]func(backend.Event)

// NewHub returns a Hub that opens its connection with dial on first use.
func NewHub(dial Dialer) *Hub {
	ctx, cancel := context.WithCancel(context.Background())
	return &Hub{
		ctx:      ctx,
		cancel:   cancel,
		dial:     dial,
		wire:     make(chan struct{}, 1),
		subs:     make(listeners),
		keys:     make(listeners),
		inflight: make(map[string]int),
		dropped:  make(map[string]bool),
		stop:     make(chan struct{}),
	}
}

// errMovedAway answers a SUBSCRIBE the server confirmed and then
// unsubscribed by itself (the slot moved) before its Subscriptions were
// registered: ShardedHub looks for the slot again.
var errMovedAway = errors.New("pubsub: the channel's slot moved right after its subscription")

// unsubscribeTimeout bounds the UNSUBSCRIBE sent by Subscription.Close.
const unsubscribeTimeout = 5 * time.Second

// lockWire takes the wire, or gives up when ctx ends first.
func (h *Hub) lockWire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case h.wire <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// lockWireNoCtx takes the wire, for the work that has no caller to answer
// to (closing, re-dialing).
func (h *Hub) lockWireNoCtx() { h.wire <- struct{}{} }

func (h *Hub) unlockWire() { <-h.wire }

// subscribeTimeout bounds one SUBSCRIBE of a batch.
const subscribeTimeout = 10 * time.Second

// subRequest is one Subscribe call waiting for its SUBSCRIBE.
type subRequest struct {
	channel string
	done    chan subResult // buffered: the flush's answer
	// s and deliver, when set, are an existing Subscription to arm
	// (ShardedHub's); otherwise a new one is made.
	s       *backend.Subscription
	deliver func(backend.Event)
	// guarded by Hub.mu
	batch     *subBatch // set once its SUBSCRIBE is on its way
	abandoned bool      // the caller's context ended first
}

type subResult struct {
	s   *backend.Subscription
	err error
}

// subBatch is one SUBSCRIBE sent for several calls; cancel stops waiting
// for its confirmation once every caller has given up.
type subBatch struct {
	live   int // callers still waiting (guarded by Hub.mu)
	cancel context.CancelFunc
}

// Subscribe implements backend.Backend.Subscribe, with the ordering the
// package documentation describes. Calls made while a SUBSCRIBE is on its
// way share the next one (one round trip for all of them), so many
// waiters subscribing at once do not queue behind each other's round
// trips. A call waits at most until ctx ends; when every call sharing a
// SUBSCRIBE in flight has given up, the SUBSCRIBE is taken back before
// they return, and otherwise as soon as it is confirmed.
func (h *Hub) Subscribe(ctx context.Context, channel string) (*backend.Subscription, error) {
	return h.subscribe(ctx, &subRequest{channel: channel, done: make(chan subResult, 1)})
}

// attach arms s, delivered to by deliver, on this hub's connection, as
// Subscribe arms a new Subscription; h.unsubscribe(s) takes it back.
func (h *Hub) attach(ctx context.Context, s *backend.Subscription, deliver func(backend.Event)) error {
	_, err := h.subscribe(ctx, &subRequest{channel: s.Channel(), done: make(chan subResult, 1), s: s, deliver: deliver})
	return err
}

func (h *Hub) subscribe(ctx context.Context, r *subRequest) (*backend.Subscription, error) {
	channel := r.channel
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pubsub: subscribe %q: %w", channel, err)
	}
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return nil, backend.ErrClosed
	}
	h.pending = append(h.pending, r)
	if !h.flushing {
		h.flushing = true
		h.wg.Add(1)
		go h.flush()
	}
	h.mu.Unlock()
	select {
	case res := <-r.done:
		return res.s, res.err
	case <-ctx.Done():
	}
	if res, answered := h.abandon(r); answered {
		return res.s, res.err
	}
	return nil, fmt.Errorf("pubsub: subscribe %q: %w", channel, ctx.Err())
}

// abandon gives up r, whose caller's context ended. When the flush had
// answered already it returns that answer. A request not sent yet is
// dropped; the last caller of a SUBSCRIBE in flight stops it and waits
// until the flush has taken it back.
func (h *Hub) abandon(r *subRequest) (subResult, bool) {
	h.mu.Lock()
	select {
	case res := <-r.done:
		h.mu.Unlock()
		return res, true
	default:
	}
	r.abandoned = true
	last := false
	if r.batch == nil {
		for i, p := range h.pending {
			if p == r {
				h.pending = append(h.pending[:i], h.pending[i+1:]...)
				break
			}
		}
	} else {
		r.batch.live--
		if last = r.batch.live == 0; last {
			r.batch.cancel()
		}
	}
	h.mu.Unlock()
	if last {
		<-r.done // taken back
	}
	return subResult{}, false
}

// flush sends the pending SUBSCRIBEs, one batch at a time, until none is
// left.
func (h *Hub) flush() {
	defer h.wg.Done()
	for {
		h.mu.Lock()
		batch := h.pending
		h.pending = nil
		if len(batch) == 0 {
			h.flushing = false
			h.mu.Unlock()
			return
		}
		ctx, cancel := context.WithTimeout(h.ctx, subscribeTimeout)
		b := &subBatch{live: len(batch), cancel: cancel}
		for _, r := range batch {
			r.batch = b
		}
		h.mu.Unlock()
		h.subscribeBatch(ctx, batch)
		cancel()
	}
}

// subscribeBatch sends one SUBSCRIBE for the batch's channels and answers
// each call: armed only once the server confirmed it, so everything the
// reader passed on before was published before the call. Channels nobody
// listens to afterwards (every caller gave up, or the SUBSCRIBE failed)
// are taken back - the SUBSCRIBE may have reached the server - before the
// callers that wait for that are told.
func (h *Hub) subscribeBatch(ctx context.Context, batch []*subRequest) {
	chans := channelsOf(batch)
	h.lockWireNoCtx()
	defer h.unlockWire()
	h.mu.Lock()
	for _, ch := range chans {
		h.inflight[ch]++
	}
	h.mu.Unlock()
	// onConn answers ErrClosed once the hub is closed or handed off.
	failed := h.subscribeGroups(chans, func(group []string) error {
		return h.onConn(ctx, func(c Conn) error { return c.Subscribe(ctx, group...) })
	})
	h.mu.Lock()
	h.landedLocked(chans, failed)
	abandoned := h.answerLocked(batch, failed)
	err := errors.Join(slices.Collect(maps.Values(failed))...)
	var unheard []string
	for _, ch := range chans {
		if len(h.subs[ch]) == 0 {
			unheard = append(unheard, ch)
		}
	}
	h.mu.Unlock()
	if len(unheard) > 0 && h.conn != nil && !errors.Is(err, backend.ErrClosed) {
		h.unsubscribeLocked(unheard...)
	}
	for _, r := range abandoned {
		r.done <- subResult{err: context.Canceled}
	}
}

// channelsOf returns the batch's channels, each once, in order.
func channelsOf(batch []*subRequest) []string {
	seen := make(map[string]bool, len(batch))
	chans := make([]string, 0, len(batch))
	for _, r := range batch {
		if !seen[r.channel] {
			seen[r.channel] = true
			chans = append(chans, r.channel)
		}
	}
	return chans
}

// landedLocked counts a batch's SUBSCRIBEs off the wire; a channel the
// server unsubscribed meanwhile (dropped) and that nobody else subscribes
// failed with errMovedAway. The caller holds h.mu.
func (h *Hub) landedLocked(chans []string, failed map[string]error) {
	for _, ch := range chans {
		if h.inflight[ch]--; h.inflight[ch] == 0 {
			delete(h.inflight, ch)
			if h.dropped[ch] && failed[ch] == nil {
				failed[ch] = errMovedAway
			}
			delete(h.dropped, ch)
		}
	}
}

// answerLocked answers each call of the batch whose caller still waits:
// its Subscription, armed, or its channel's error. It returns the calls
// whose callers gave up, answered only once their channels are taken
// back. The caller holds h.mu.
func (h *Hub) answerLocked(batch []*subRequest, failed map[string]error) (abandoned []*subRequest) {
	for _, r := range batch {
		err := failed[r.channel]
		switch {
		case r.abandoned:
			abandoned = append(abandoned, r)
		case err != nil:
			r.done <- subResult{err: fmt.Errorf("pubsub: subscribe %q: %w", r.channel, err)}
		case r.s != nil:
			h.addLocked(h.subs, r.s, r.deliver)
			r.done <- subResult{s: r.s}
		default:
			var s *backend.Subscription
			s, deliver := backend.NewSubscription(r.channel, func() { h.unsubscribe(s) })
			h.addLocked(h.subs, s, deliver)
			r.done <- subResult{s: s}
		}
	}
	return abandoned
}

// groups splits chans into the sets one SUBSCRIBE or UNSUBSCRIBE takes:
// all of them, or one set per cluster slot on a hub that subscribes by
// slot.
func (h *Hub) groups(chans []string) [][]string {
	if h.bySlot {
		return GroupBySlot(chans)
	}
	return [][]string{chans}
}

// subscribeGroups runs subscribe for each of chans' groups and returns the
// error of each channel whose group failed.
func (h *Hub) subscribeGroups(chans []string, subscribe func([]string) error) map[string]error {
	failed := map[string]error{}
	for _, g := range h.groups(chans) {
		if err := subscribe(g); err != nil {
			for _, ch := range g {
				failed[ch] = err
			}
		}
	}
	return failed
}

// GroupBySlot splits chans by cluster slot, in the order of their first
// channel: the hubs of a ShardedHub call Conn.Subscribe and Unsubscribe
// with one group at a time.
func GroupBySlot(chans []string) [][]string {
	at := map[uint16]int{}
	var groups [][]string
	for _, ch := range chans {
		slot := backend.Slot(ch)
		i, ok := at[slot]
		if !ok {
			i = len(groups)
			at[slot] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], ch)
	}
	return groups
}

// listened reports whether a Subscription listens to channel.
func (h *Hub) listened(channel string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs[channel]) > 0
}

// unsubscribe stops delivery to s at once, then sends UNSUBSCRIBE, beside
// the caller, when it was the channel's last Subscription and no other has
// armed by the time the UNSUBSCRIBE can go out. Subscription.Close never
// waits for the connection: a SUBSCRIBE that stalls holds the wire for up
// to subscribeTimeout, and a Close that waited for it kept lock.Client's
// Close waiting 9.3 s (TestStalledSubscriptionConnection). A SUBSCRIBE of
// the channel made meanwhile takes the wire in turn, so the server ends up
// subscribed exactly when a Subscription listens. Close waits for the
// UNSUBSCRIBE, or stops it.
func (h *Hub) unsubscribe(s *backend.Subscription) {
	if !h.drop(h.subs, s) {
		return
	}
	h.beside(func() {
		if h.conn != nil && !h.listened(s.Channel()) {
			h.unsubscribeLocked(s.Channel())
		}
	})
}

// beside runs f on the wire in a goroutine of the hub's, which Close waits
// for: once the wire is free, or not at all when Close begins first.
func (h *Hub) beside(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		select {
		case h.wire <- struct{}{}:
		case <-h.stop:
			return
		}
		defer h.unlockWire()
		f()
	}()
}

// unsubscribeLocked sends UNSUBSCRIBE (one per cluster slot on a hub that
// subscribes by slot: SUNSUBSCRIBE takes the channels of one slot too),
// bounded by unsubscribeTimeout. An error means the connection is going
// away; the re-subscribe after reconnecting uses the current channel set,
// without these. The caller holds the wire.
func (h *Hub) unsubscribeLocked(channels ...string) {
	ctx, cancel := context.WithTimeout(h.ctx, unsubscribeTimeout)
	defer cancel()
	for _, g := range h.groups(channels) {
		_ = h.conn.Unsubscribe(ctx, g...)
	}
}

// WatchKey implements backend.KeyWatcher when the adapter's Conn
// implements KeyTracker; otherwise it returns backend.ErrNotSupported.
// While another call holds the connection, it waits at most until ctx
// ends.
func (h *Hub) WatchKey(ctx context.Context, key string) (*backend.Subscription, error) {
	if err := h.lockWire(ctx); err != nil {
		return nil, fmt.Errorf("pubsub: watch key %q: %w", key, err)
	}
	defer h.unlockWire()
	if h.closed {
		return nil, backend.ErrClosed
	}
	var s *backend.Subscription
	s, deliver := backend.NewSubscription(key, func() { h.drop(h.keys, s) })
	// Registered before tracking starts, so no invalidation slips past.
	h.add(h.keys, s, deliver)
	var exists bool
	err := h.onConn(ctx, func(c Conn) error {
		tracker, ok := c.(KeyTracker)
		if !ok {
			return backend.ErrNotSupported
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
		deliver(backend.Event{})
	}
	return s, nil
}

// onConn runs do on the connection, dialing one first if needed. When do
// fails for another reason than ctx, ErrNotSupported or the server's
// refusal (a *backend.ServerError, such as NOPERM for a channel the user
// may not subscribe to: the connection is fine), the connection may have
// died without telling us yet (the server restarted): it is replaced once
// - the new one subscribes every channel - and do runs again. The caller
// holds the wire.
func (h *Hub) onConn(ctx context.Context, do func(Conn) error) error {
	if h.closed || h.handedOff.Load() {
		return backend.ErrClosed
	}
	if err := h.connectLocked(ctx); err != nil {
		return err
	}
	err := do(h.conn)
	var refused *backend.ServerError
	if err == nil || ctx.Err() != nil || errors.Is(err, backend.ErrNotSupported) || errors.As(err, &refused) {
		return err
	}
	h.conn.Close()
	h.conn = nil
	if err := h.connectLocked(ctx); err != nil {
		return err
	}
	return do(h.conn)
}

// add puts s, delivered to by deliver, in m under its name.
func (h *Hub) add(m listeners, s *backend.Subscription, deliver func(backend.Event)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.addLocked(m, s, deliver)
}

func (h *Hub) addLocked(m listeners, s *backend.Subscription, deliver func(backend.Event)) {
	set := m[s.Channel()]
	if set == nil {
		set = make(map[*backend.Subscription]func(backend.Event))
		m[s.Channel()] = set
	}
	set[s] = deliver
}

// drop takes s out of m and reports whether it was there.
func (h *Hub) drop(m listeners, s *backend.Subscription) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	set, ok := m[s.Channel()]
	if !ok {
		return false
	}
	if _, ok := set[s]; !ok {
		return false
	}
	delete(set, s)
	if len(set) == 0 {
		delete(m, s.Channel())
	}
	return true
}

// Deliver implements Sink: it hands a message to the channel's
// Subscriptions without blocking.
func (h *Hub) Deliver(channel, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, deliver := range h.subs[channel] {
		deliver(backend.Event{Payload: payload})
	}
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
		for _, deliver := range h.keys[k] {
			deliver(backend.Event{})
		}
		delete(h.keys, k)
	}
}

// Unsubscribed implements Sink. A hub with a lost function hands the
// channel's Subscriptions to it after telling them to re-check; another
// tells them and subscribes the channel again.
func (h *Hub) Unsubscribed(channel string) {
	h.mu.Lock()
	set := h.subs[channel]
	if h.lost != nil {
		delete(h.subs, channel)
		if h.inflight[channel] > 0 {
			h.dropped[channel] = true
		}
	}
	for _, deliver := range set {
		deliver(backend.Event{Reconnect: true})
	}
	h.mu.Unlock()
	if len(set) == 0 {
		return
	}
	if h.lost != nil {
		h.lost(channel, set)
		return
	}
	h.beside(func() {
		if h.closed || !h.listened(channel) {
			return
		}
		ctx, cancel := context.WithTimeout(h.ctx, subscribeTimeout)
		defer cancel()
		_ = h.onConn(ctx, func(c Conn) error { return c.Subscribe(ctx, channel) })
	})
}

// handOffAll hands every channel's Subscriptions to lost, once the
// connection of a hub that does not re-dial has ended, and closes the
// hub to new Subscriptions.
func (h *Hub) handOffAll() {
	h.lockWireNoCtx()
	h.handedOff.Store(true)
	h.unlockWire()
	h.mu.Lock()
	h.ended = true
	subs := h.subs
	h.subs = make(listeners)
	h.mu.Unlock()
	for ch, set := range subs {
		h.lost(ch, set)
	}
}

// isHandedOff reports whether the hub handed its channels off for good.
func (h *Hub) isHandedOff() bool { return h.handedOff.Load() }

func (h *Hub) broadcastReconnect() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range []listeners{h.subs, h.keys} {
		for _, set := range m {
			for _, deliver := range set {
				deliver(backend.Event{Reconnect: true})
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
// channel that has Subscriptions. The caller holds the wire.
func (h *Hub) connectLocked(ctx context.Context) error {
	if h.conn != nil {
		return nil
	}
	conn, done, err := h.dial(ctx, h)
	if err != nil {
		return fmt.Errorf("pubsub: open subscription connection: %w", err)
	}
	if chans := h.channels(); len(chans) > 0 {
		failed := h.subscribeGroups(chans, func(group []string) error { return conn.Subscribe(ctx, group...) })
		if err := errors.Join(slices.Collect(maps.Values(failed))...); err != nil {
			conn.Close()
			return fmt.Errorf("pubsub: re-subscribe: %w", err)
		}
	}
	h.conn = conn
	h.wg.Add(1)
	go h.watch(conn, done)
	return nil
}

// Reconnect back-off bounds: from minRedial, doubling, to maxRedial.
const (
	minRedial = 20 * time.Millisecond
	maxRedial = 2 * time.Second
)

// newBackOff returns a back-off from first, doubling, to at most most,
// exact (no jitter).
func newBackOff(first, most time.Duration) *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{InitialInterval: first, Multiplier: 2, MaxInterval: most}
}

// pause waits b's next interval, and reports false when stop closes
// first.
func pause(b *backoff.ExponentialBackOff, stop <-chan struct{}) bool {
	t := time.NewTimer(b.NextBackOff())
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	}
}

// watch waits for conn to end, tells every Subscription to re-check, then
// re-dials until it succeeds or the hub closes, and tells them again.
func (h *Hub) watch(conn Conn, done <-chan error) {
	defer h.wg.Done()
	select {
	case <-done:
	case <-h.stop:
		return
	}
	h.lockWireNoCtx()
	if h.conn == conn {
		h.conn = nil
	}
	h.unlockWire()
	conn.Close()
	h.broadcastReconnect()
	if h.lost != nil {
		h.handOffAll()
		return
	}
	redial := newBackOff(minRedial, maxRedial)
	for {
		h.lockWireNoCtx()
		if h.closed {
			h.unlockWire()
			return
		}
		ctx, cancel := context.WithTimeout(h.ctx, maxRedial+time.Second)
		err := h.connectLocked(ctx)
		cancel()
		h.unlockWire()
		if err == nil {
			h.broadcastReconnect()
			return
		}
		if !pause(redial, h.stop) {
			return
		}
	}
}

// Close closes the connection and stops re-dialing; Subscribe then returns
// backend.ErrClosed. Open Subscriptions stop receiving events.
func (h *Hub) Close() error {
	h.cancel() // a call on the wire that stalls gives it back now
	h.lockWireNoCtx()
	if h.closed {
		h.unlockWire()
		return nil
	}
	h.closed = true
	close(h.stop)
	conn := h.conn
	h.conn = nil
	h.unlockWire()
	h.mu.Lock()
	h.ended = true
	h.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
	h.wg.Wait()
	return nil
}
