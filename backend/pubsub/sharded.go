package pubsub

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fairlock/fairlock/backend"
)

// NodeDialer opens a sharded subscription connection to the cluster node at
// addr ("host:port"), as a Dialer does: its Conn's Subscribe sends SSUBSCRIBE
// (for the channels of one slot) and Unsubscribe SUNSUBSCRIBE, and its
// reader passes shard messages to Sink.Deliver and the server's own
// SUNSUBSCRIBE of a channel to Sink.Unsubscribed. The server's MOVED reply
// to SSUBSCRIBE is a *backend.ServerError ("MOVED <slot> <host:port>").
type NodeDialer func(ctx context.Context, addr string, sink Sink) (Conn, <-chan error, error)

// ShardedHub implements backend.ShardedSubscriber's SSubscribe over one
// connection per cluster node that owns a subscribed channel's slot, each
// a Hub with the ordering the package documentation describes.
//
// A channel's slot is looked for at the node that last served it, at
// first at the primary the cluster's slot map names (SlotMap, loaded when
// first needed and again once a MOVED reply, a moved slot or a node that
// cannot be reached shows it out of date); a MOVED reply names the next
// node to try, and the hub remembers it for the slot. Only a primary is
// asked: a replica accepts SSUBSCRIBE for its primary's slots, and its
// subscribers hear each message only after it has crossed the cluster
// bus. When a node unsubscribes a channel by itself (its slot moved: a
// resharding or a failover) or the node's connection ends, each
// Subscription of the channel gets a Reconnect event, follows the slot to
// its new owner - retried with back-off while the cluster settles, for as
// long as the Subscription is open - and gets another Reconnect event once
// it listens there again. A connection that ended is not dialed again for
// the channels it had: they go wherever their slot is now.
type ShardedHub struct {
	dial    NodeDialer
	loadMap SlotMap

	mu     sync.Mutex
	routes map[uint16]string                // slot: the node that last served it
	owners []SlotRange                      // the slot map, by first slot; nil until loaded or once out of date
	hubs   map[string]*Hub                  // by node address
	subs   map[*backend.Subscription]*route // open Subscriptions
	closed bool

	stop chan struct{}
	wg   sync.WaitGroup
}

// route is where an open Subscription listens: hub, or nil while it
// follows its slot to another node.
type route struct {
	hub     *Hub
	deliver func(backend.Event)
}

// SlotRange is a range of cluster slots, First to Last inclusive, and
// the address ("host:port") of the primary that serves them.
type SlotRange struct {
	First, Last uint16
	Primary     string
}

// SlotMap returns the cluster's slot ranges and their primaries as one
// of its nodes tells (CLUSTER SLOTS, through the client's own
// connections).
type SlotMap func(ctx context.Context) ([]SlotRange, error)

// NewShardedHub returns a ShardedHub that dials nodes with dial, and
// looks for a slot it has not seen yet at the primary loadMap names.
func NewShardedHub(dial NodeDialer, loadMap SlotMap) *ShardedHub {
	return &ShardedHub{
		dial:    dial,
		loadMap: loadMap,
		routes:  make(map[uint16]string),
		hubs:    make(map[string]*Hub),
		subs:    make(map[*backend.Subscription]*route),
		stop:    make(chan struct{}),
	}
}

// Bounds of the search for a slot's owner.
const (
	maxRedirects   = 5                      // MOVED replies followed in one try
	minFollow      = 20 * time.Millisecond  // back-off while a moved channel looks for its slot
	maxFollow      = 500 * time.Millisecond //
	followTimeout  = 5 * time.Second        // bounds one try to subscribe a moved channel
	maxFollowTries = 1000                   // about 8 minutes at maxFollow
)

// Subscribe implements backend.ShardedSubscriber.SSubscribe. An error
// reaching the node is returned after one try (the caller retries), and
// the hub loads the slot map again next time.
func (h *ShardedHub) Subscribe(ctx context.Context, channel string) (*backend.Subscription, error) {
	var s *backend.Subscription
	s, deliver := backend.NewSubscription(channel, func() { h.release(s) })
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, backend.ErrClosed
	}
	h.subs[s] = &route{deliver: deliver}
	h.mu.Unlock()
	if err := h.place(ctx, s); err != nil {
		h.release(s)
		return nil, err
	}
	return s, nil
}

// place subscribes s at the node that owns its channel's slot, following
// MOVED replies.
func (h *ShardedHub) place(ctx context.Context, s *backend.Subscription) error {
	slot := backend.Slot(s.Channel())
	for range maxRedirects {
		nh, addr, err := h.hubFor(ctx, slot)
		if err != nil {
			return err
		}
		err = nh.attach(ctx, s, h.deliverer(s))
		if err == nil {
			if !h.settle(s, nh) {
				nh.unsubscribe(s) // closed meanwhile
			}
			return nil
		}
		if to, ok := moved(err); ok {
			h.setRoute(slot, to)
			continue
		}
		if errors.Is(err, errMovedAway) {
			h.dropRoute(slot, addr)
			continue
		}
		var refused *backend.ServerError
		if errors.As(err, &refused) || ctx.Err() != nil {
			return err
		}
		h.forget(addr, nh)
		if errors.Is(err, backend.ErrClosed) && nh.isHandedOff() {
			continue // its connection ended just now: try anew
		}
		// The node cannot be reached: the caller tries again, and the
		// slot is looked for in a fresh slot map then.
		return err
	}
	return fmt.Errorf("pubsub: ssubscribe %q: more than %d MOVED replies", s.Channel(), maxRedirects)
}

// deliverer returns s's deliver function (a no-op once s closed).
func (h *ShardedHub) deliverer(s *backend.Subscription) func(backend.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r := h.subs[s]; r != nil {
		return r.deliver
	}
	return func(backend.Event) {}
}

// settle records that s listens at nh, and reports whether s is still
// open.
func (h *ShardedHub) settle(s *backend.Subscription, nh *Hub) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.subs[s]
	if r == nil {
		return false
	}
	r.hub = nh
	return true
}

// hubFor returns the hub of the node that serves slot: the one that last
// did, else the primary the slot map names, the map loaded first if the
// hub has none.
func (h *ShardedHub) hubFor(ctx context.Context, slot uint16) (*Hub, string, error) {
	addr, known, err := h.routeOf(slot)
	if err != nil {
		return nil, "", err
	}
	if !known {
		ranges, err := h.loadMap(ctx)
		if err != nil {
			return nil, "", fmt.Errorf("pubsub: the cluster's slot map: %w", err)
		}
		if addr, known = h.setOwners(ranges, slot); !known {
			return nil, "", fmt.Errorf("pubsub: the cluster's slot map names no primary for slot %d", slot)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, "", backend.ErrClosed
	}
	nh := h.hubs[addr]
	if nh == nil {
		nh = NewHub(func(ctx context.Context, sink Sink) (Conn, <-chan error, error) {
			return h.dial(ctx, addr, sink)
		})
		nh.bySlot = true
		nh.lost = h.lost
		h.hubs[addr] = nh
	}
	return nh, addr, nil
}

// routeOf returns the node that last served slot, else the one the slot
// map names, if the hub has a map.
func (h *ShardedHub) routeOf(slot uint16) (string, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return "", false, backend.ErrClosed
	}
	if addr, ok := h.routes[slot]; ok {
		return addr, true, nil
	}
	addr, ok := ownerIn(h.owners, slot)
	return addr, ok, nil
}

// setOwners keeps ranges as the slot map and returns slot's primary in it.
func (h *ShardedHub) setOwners(ranges []SlotRange, slot uint16) (string, bool) {
	owners := slices.Clone(ranges)
	slices.SortFunc(owners, func(a, b SlotRange) int { return int(a.First) - int(b.First) })
	h.mu.Lock()
	defer h.mu.Unlock()
	h.owners = owners
	return ownerIn(owners, slot)
}

// ownerIn returns slot's primary in owners, sorted by first slot.
func ownerIn(owners []SlotRange, slot uint16) (string, bool) {
	i, _ := slices.BinarySearchFunc(owners, slot, func(r SlotRange, slot uint16) int {
		switch {
		case r.Last < slot:
			return -1
		case r.First > slot:
			return 1
		}
		return 0
	})
	if i < len(owners) && owners[i].First <= slot && slot <= owners[i].Last && owners[i].Primary != "" {
		return owners[i].Primary, true
	}
	return "", false
}

// staleLocked drops the slot map, out of date: the next slot of unknown
// owner loads it again. The caller holds h.mu.
func (h *ShardedHub) staleLocked() { h.owners = nil }

// setRoute notes that a MOVED reply names addr for slot: the slot map is
// out of date.
func (h *ShardedHub) setRoute(slot uint16, addr string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.routes[slot] = addr
	h.staleLocked()
}

// dropRoute forgets that addr serves slot.
func (h *ShardedHub) dropRoute(slot uint16, addr string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.routes[slot] == addr {
		delete(h.routes, slot)
	}
	h.staleLocked()
}

// forget drops nh, the hub of addr, every route to addr and the slot map.
func (h *ShardedHub) forget(addr string, nh *Hub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.staleLocked()
	for slot, a := range h.routes {
		if a == addr {
			delete(h.routes, slot)
		}
	}
	if h.hubs[addr] == nh {
		delete(h.hubs, addr)
		h.closeLocked(nh)
	}
}

// closeLocked closes nh beside the caller (which may be nh's own reader or
// watch, which Close waits for). The caller holds h.mu.
func (h *ShardedHub) closeLocked(nh *Hub) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		nh.Close()
	}()
}

// lost is the node hubs' hand-off: the Subscriptions of channel (told to
// re-check already) no longer listen at their node. They follow the slot
// beside the reader that called it.
func (h *ShardedHub) lost(channel string, subs map[*backend.Subscription]func(backend.Event)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	delete(h.routes, backend.Slot(channel))
	h.staleLocked()
	var moving []*backend.Subscription
	for s := range subs {
		if r := h.subs[s]; r != nil {
			r.hub = nil
			moving = append(moving, s)
		}
	}
	for nodeAddr, nh := range h.hubs {
		if nh.isHandedOff() {
			delete(h.hubs, nodeAddr)
			h.closeLocked(nh)
		}
	}
	for _, s := range moving {
		h.wg.Add(1)
		go h.follow(s)
	}
}

// follow subscribes s again wherever its slot is now, with back-off, until
// it listens there, s closes or the hub does; then s gets a Reconnect
// event, since messages published meanwhile were not delivered.
func (h *ShardedHub) follow(s *backend.Subscription) {
	defer h.wg.Done()
	retry := newBackOff(minFollow, maxFollow)
	for range maxFollowTries {
		if !h.open(s) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), followTimeout)
		err := h.place(ctx, s)
		cancel()
		if err == nil {
			h.deliverer(s)(backend.Event{Reconnect: true})
			return
		}
		if errors.Is(err, backend.ErrClosed) && h.isClosed() {
			return
		}
		if !pause(retry, h.stop) {
			return
		}
	}
}

func (h *ShardedHub) open(s *backend.Subscription) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.closed && h.subs[s] != nil
}

func (h *ShardedHub) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// release is s's Close: it stops delivery and unsubscribes s at its node.
func (h *ShardedHub) release(s *backend.Subscription) {
	h.mu.Lock()
	r := h.subs[s]
	delete(h.subs, s)
	h.mu.Unlock()
	if r != nil && r.hub != nil {
		r.hub.unsubscribe(s)
	}
}

// Close closes every node connection and stops following moved slots;
// Subscribe then returns backend.ErrClosed. Open Subscriptions stop
// receiving events.
func (h *ShardedHub) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	close(h.stop)
	hubs := h.hubs
	h.hubs = nil
	h.mu.Unlock()
	for _, nh := range hubs {
		nh.Close()
	}
	h.wg.Wait()
	return nil
}

// moved returns the node a MOVED reply names.
func moved(err error) (string, bool) {
	var se *backend.ServerError
	if !errors.As(err, &se) {
		return "", false
	}
	f := strings.Fields(se.Message)
	if len(f) != 3 || f[0] != "MOVED" {
		return "", false
	}
	return f[2], true
}
