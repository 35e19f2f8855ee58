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

// fakeCluster stands in for a cluster's nodes and their sharded
// subscription connections: each slot has an owner; SSUBSCRIBE at another
// node is answered MOVED; a slot moved away makes its old owner
// SUNSUBSCRIBE the slot's channels; a killed node ends its connections
// and refuses new ones.
type fakeCluster struct {
	mu     sync.Mutex
	owner  map[uint16]string
	dead   map[string]bool
	conns  map[string][]*shardConn
	dials  map[string]int
	byDial []string
	// crossSlot counts the SUNSUBSCRIBEs of channels of several slots,
	// which a server refuses (CROSSSLOT).
	crossSlot int
	// frozen, when set, is the slot map the cluster reports (out of date
	// once slots move); else it reports the owners as they are.
	frozen []pubsub.SlotRange
	loads  int // slot maps reported
	moved  int // MOVED replies
	// replicaOf names each replica's primary: as Redis does, a replica
	// accepts SSUBSCRIBE for its primary's slots.
	replicaOf map[string]string
}

func newFakeCluster(nodes ...string) *fakeCluster {
	return &fakeCluster{owner: map[uint16]string{}, dead: map[string]bool{}, conns: map[string][]*shardConn{}, dials: map[string]int{}, byDial: nodes}
}

// ownerOf is the node that owns slot: set by move, else the first node.
func (c *fakeCluster) ownerOf(slot uint16) string {
	if o, ok := c.owner[slot]; ok {
		return o
	}
	return c.byDial[0]
}

// slotMap is the hub's pubsub.SlotMap: the slot owners as they are, or
// the frozen map.
func (c *fakeCluster) slotMap(context.Context) ([]pubsub.SlotRange, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loads++
	if c.frozen != nil {
		return c.frozen, nil
	}
	return c.rangesLocked(), nil
}

// rangesLocked returns the slot owners as ranges.
func (c *fakeCluster) rangesLocked() []pubsub.SlotRange {
	var out []pubsub.SlotRange
	for slot := range 16384 {
		owner := c.ownerOf(uint16(slot))
		if n := len(out); n > 0 && out[n-1].Primary == owner {
			out[n-1].Last = uint16(slot)
			continue
		}
		out = append(out, pubsub.SlotRange{First: uint16(slot), Last: uint16(slot), Primary: owner})
	}
	return out
}

// freeze makes the cluster report its slot map as it is now, whatever
// moves later.
func (c *fakeCluster) freeze() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen = c.rangesLocked()
}

func (c *fakeCluster) nodes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.byDial...)
}

func (c *fakeCluster) dial(ctx context.Context, addr string, sink pubsub.Sink) (pubsub.Conn, <-chan error, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead[addr] {
		return nil, nil, fmt.Errorf("dial %s: connection refused", addr)
	}
	sc := &shardConn{c: c, addr: addr, sink: sink, channels: map[string]bool{}, done: make(chan error, 1)}
	c.conns[addr] = append(c.conns[addr], sc)
	c.dials[addr]++
	return sc, sc.done, nil
}

// publish is SPUBLISH at the slot's owner: it reaches that node's
// subscribers of channel only.
func (c *fakeCluster) publish(channel, payload string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, sc := range c.conns[c.ownerOf(backend.Slot(channel))] {
		if sc.channels[channel] {
			sc.sink.Deliver(channel, payload)
		}
	}
}

// move gives slot to node; the old owner unsubscribes the slot's channels.
func (c *fakeCluster) move(slot uint16, node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.ownerOf(slot)
	c.owner[slot] = node
	for _, sc := range c.conns[old] {
		for ch := range sc.channels {
			if backend.Slot(ch) == slot {
				delete(sc.channels, ch)
				sc.sink.Unsubscribed(ch)
			}
		}
	}
}

// kill ends node's connections and refuses new ones.
func (c *fakeCluster) kill(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dead[node] = true
	for _, sc := range c.conns[node] {
		sc.end()
	}
	c.conns[node] = nil
}

// subscribers returns how many connections of node listen to channel.
func (c *fakeCluster) subscribers(node, channel string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, sc := range c.conns[node] {
		if sc.channels[channel] {
			n++
		}
	}
	return n
}

type shardConn struct {
	c        *fakeCluster
	addr     string
	sink     pubsub.Sink
	channels map[string]bool // guarded by c.mu
	done     chan error
	once     sync.Once
}

func (sc *shardConn) Subscribe(_ context.Context, channels ...string) error {
	sc.c.mu.Lock()
	defer sc.c.mu.Unlock()
	slot := backend.Slot(channels[0])
	for _, ch := range channels[1:] {
		if backend.Slot(ch) != slot {
			return &backend.ServerError{Message: "CROSSSLOT Keys in request don't hash to the same slot"}
		}
	}
	if owner := sc.c.ownerOf(slot); owner != sc.addr && sc.c.replicaOf[sc.addr] != owner {
		sc.c.moved++
		return &backend.ServerError{Message: fmt.Sprintf("MOVED %d %s", slot, owner)}
	}
	for _, ch := range channels {
		sc.channels[ch] = true
	}
	return nil
}

func (sc *shardConn) Unsubscribe(_ context.Context, channels ...string) error {
	sc.c.mu.Lock()
	defer sc.c.mu.Unlock()
	for _, ch := range channels[1:] {
		if backend.Slot(ch) != backend.Slot(channels[0]) {
			sc.c.crossSlot++
			return &backend.ServerError{Message: "CROSSSLOT Keys in request don't hash to the same slot"}
		}
	}
	for _, ch := range channels {
		delete(sc.channels, ch)
	}
	return nil
}

func (sc *shardConn) end() {
	sc.once.Do(func() {
		sc.done <- errors.New("connection reset")
		close(sc.done)
	})
}

func (sc *shardConn) Close() { sc.end() }

// nextEvent waits for s's next event.
func nextEvent(t *testing.T, s *backend.Subscription, what string) backend.Event {
	t.Helper()
	select {
	case e := <-s.Events():
		return e
	case <-time.After(within):
		t.Fatalf("no event within %v: %s", within, what)
		return backend.Event{}
	}
}

// heard waits until a message published on s's channel reaches s,
// publishing again every few milliseconds (a moved subscription may still
// be on its way to the new owner).
func heard(t *testing.T, c *fakeCluster, s *backend.Subscription, payload string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		c.publish(s.Channel(), payload)
		select {
		case e := <-s.Events():
			if e.Payload == payload {
				return
			}
		case <-time.After(5 * time.Millisecond):
		}
	}
	t.Fatalf("%q never reached the subscription of %s", payload, s.Channel())
}

// TestShardedSubscribeFollowsMovedToTheOwner: a slot map out of date
// names the wrong node, whose MOVED reply names the owner.
func TestShardedSubscribeFollowsMovedToTheOwner(t *testing.T) {
	c := newFakeCluster("n1:1", "n2:2", "n3:3")
	ch := "wake:{a}:1"
	c.freeze()
	c.move(backend.Slot(ch), "n2:2")
	h := pubsub.NewShardedHub(c.dial, c.slotMap)
	defer h.Close()
	s, err := h.Subscribe(context.Background(), ch)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := c.subscribers("n2:2", ch); got != 1 {
		t.Fatalf("the slot's owner has %d subscribers, want 1", got)
	}
	if c.subscribers("n1:1", ch)+c.subscribers("n3:3", ch) != 0 {
		t.Fatal("a node that does not own the slot has the channel")
	}
	c.publish(ch, "0")
	if e := nextEvent(t, s, "the message"); e.Payload != "0" {
		t.Fatalf("got %+v, want the message", e)
	}
	s.Close() // the SUNSUBSCRIBE goes out beside Close
	waitFor(t, "Close to take the subscription off the slot's owner", func() bool { return c.subscribers("n2:2", ch) == 0 })
}

func TestShardedSubscribeGroupsChannelsBySlot(t *testing.T) {
	c := newFakeCluster("n1:1", "n2:2", "n3:3")
	h := pubsub.NewShardedHub(c.dial, c.slotMap)
	defer h.Close()
	chans := []string{"wake:{a}:1", "wake:{b}:1", "wake:{a}:2", "wake:{c}:1"}
	var wg sync.WaitGroup
	subs := make([]*backend.Subscription, len(chans))
	errs := make([]error, len(chans))
	for i, ch := range chans {
		wg.Go(func() { subs[i], errs[i] = h.Subscribe(context.Background(), ch) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("subscribe %s: %v", chans[i], err)
		}
		defer subs[i].Close()
		c.publish(chans[i], "0")
		if e := nextEvent(t, subs[i], chans[i]); e.Payload != "0" {
			t.Fatalf("%s got %+v", chans[i], e)
		}
	}
}

func TestShardedSubscriptionFollowsAMovedSlot(t *testing.T) {
	c := newFakeCluster("n1:1", "n2:2", "n3:3")
	ch := "wake:{a}:1"
	h := pubsub.NewShardedHub(c.dial, c.slotMap)
	defer h.Close()
	s, err := h.Subscribe(context.Background(), ch)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c.move(backend.Slot(ch), "n3:3")
	if e := nextEvent(t, s, "the move's Reconnect"); !e.Reconnect {
		t.Fatalf("got %+v, want a Reconnect event", e)
	}
	heard(t, c, s, "after the move")
	if got := c.subscribers("n3:3", ch); got != 1 {
		t.Fatalf("the new owner has %d subscribers, want 1", got)
	}
}

func TestShardedSubscriptionFollowsAFailover(t *testing.T) {
	c := newFakeCluster("n1:1", "n2:2", "n3:3")
	ch := "wake:{a}:1"
	other := "wake:{b}:1" // on the same node, another slot
	h := pubsub.NewShardedHub(c.dial, c.slotMap)
	defer h.Close()
	s, err := h.Subscribe(context.Background(), ch)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	o, err := h.Subscribe(context.Background(), other)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	c.kill("n1:1")
	for _, sub := range []*backend.Subscription{s, o} {
		if e := nextEvent(t, sub, "the drop's Reconnect"); !e.Reconnect {
			t.Fatalf("got %+v, want a Reconnect event", e)
		}
	}
	// The replica on n2 takes the slots over, as a failover does.
	c.move(backend.Slot(ch), "n2:2")
	c.move(backend.Slot(other), "n2:2")
	heard(t, c, s, "after the failover")
	heard(t, c, o, "after the failover")
}

func TestShardedHubCloseStopsFollowing(t *testing.T) {
	c := newFakeCluster("n1:1", "n2:2", "n3:3")
	ch := "wake:{a}:1"
	h := pubsub.NewShardedHub(c.dial, c.slotMap)
	s, err := h.Subscribe(context.Background(), ch)
	if err != nil {
		t.Fatal(err)
	}
	// Every node dead: the subscription follows its slot in vain until
	// the hub closes, which must not wait for the back-off to run out.
	for _, n := range c.nodes() {
		c.kill(n)
	}
	nextEvent(t, s, "the drop's Reconnect")
	done := make(chan struct{})
	go func() { h.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(within):
		t.Fatal("Close did not return")
	}
	if _, err := h.Subscribe(context.Background(), ch); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("Subscribe after Close: %v, want ErrClosed", err)
	}
}

func TestShardedSubscribeFailsOverToAnotherKnownNode(t *testing.T) {
	c := newFakeCluster("n1:1", "n2:2", "n3:3")
	ch := "wake:{a}:1"
	c.move(backend.Slot(ch), "n2:2")
	c.kill("n1:1") // the first node the client knows is gone
	h := pubsub.NewShardedHub(c.dial, c.slotMap)
	defer h.Close()
	var s *backend.Subscription
	var err error
	for range 3 { // the caller retries, as the lock does
		if s, err = h.Subscribe(context.Background(), ch); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("subscribe with the first node dead: %v", err)
	}
	defer s.Close()
	heard(t, c, s, "0")
}

// TestShardedUnsubscribeBySlot: channels of several slots that a node
// answered MOVED together (a batch of Subscribe calls) are taken back
// there with one SUNSUBSCRIBE per slot, as they were subscribed.
func TestShardedUnsubscribeBySlot(t *testing.T) {
	c := newFakeCluster("n1:1", "n2:2", "n3:3")
	var chans []string
	c.freeze()
	for i := 0; len(chans) < 40; i++ {
		ch := fmt.Sprintf("wake:{%d}", i)
		c.move(backend.Slot(ch), "n3:3")
		chans = append(chans, ch)
	}
	h := pubsub.NewShardedHub(c.dial, c.slotMap)
	defer h.Close()
	var wg sync.WaitGroup
	for _, ch := range chans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := h.Subscribe(context.Background(), ch)
			if err != nil {
				t.Errorf("Subscribe %s: %v", ch, err)
				return
			}
			s.Close()
		}()
	}
	wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crossSlot > 0 {
		t.Fatalf("%d SUNSUBSCRIBEs of channels of several slots", c.crossSlot)
	}
}

// TestShardedSubscribeGoesToTheSlotsPrimary: the first SSUBSCRIBE of a
// slot goes to the primary the slot map names - no MOVED, no other node
// dialed. A replica, which accepts SSUBSCRIBE for its primary's slots
// and hears each message only after it crossed the cluster bus, is never
// asked: the map names primaries only.
func TestShardedSubscribeGoesToTheSlotsPrimary(t *testing.T) {
	c := newFakeCluster("n1:1", "n2:2", "n3:3", "r2:4")
	c.replicaOf = map[string]string{"r2:4": "n2:2"}
	chans := []string{"wake:{a}:1", "wake:{b}:1", "wake:{c}:1"}
	owners := []string{"n2:2", "n3:3", "n1:1"}
	for i, ch := range chans {
		c.move(backend.Slot(ch), owners[i])
	}
	h := pubsub.NewShardedHub(c.dial, c.slotMap)
	defer h.Close()
	for i, ch := range chans {
		s, err := h.Subscribe(context.Background(), ch)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if got := c.subscribers(owners[i], ch); got != 1 {
			t.Fatalf("%s: its primary %s has %d subscribers, want 1", ch, owners[i], got)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.moved != 0 || c.loads != 1 {
		t.Fatalf("%d MOVED replies and %d slot maps loaded, want 0 and 1", c.moved, c.loads)
	}
	for _, n := range owners {
		if c.dials[n] != 1 {
			t.Fatalf("%s dialed %d times, want once: %v", n, c.dials[n], c.dials)
		}
	}
	if c.dials["r2:4"] != 0 {
		t.Fatal("the replica was dialed")
	}
}

// TestShardedSlotMapReloadedWhenOutOfDate: a MOVED reply shows the slot
// map out of date; the next slot of unknown owner is looked for in a
// fresh one, not at the node the old map names.
func TestShardedSlotMapReloadedWhenOutOfDate(t *testing.T) {
	c := newFakeCluster("n1:1", "n2:2", "n3:3")
	a, b := "wake:{a}:1", "wake:{b}:1"
	c.freeze()
	c.move(backend.Slot(a), "n2:2")
	c.move(backend.Slot(b), "n3:3")
	h := pubsub.NewShardedHub(c.dial, c.slotMap)
	defer h.Close()
	sa, err := h.Subscribe(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Close()
	c.mu.Lock()
	c.frozen = nil // the cluster now reports its slots as they are
	movedBefore := c.moved
	c.mu.Unlock()
	sb, err := h.Subscribe(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	heard(t, c, sb, "0")
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.moved != movedBefore || c.loads != 2 {
		t.Fatalf("the second slot met %d MOVED replies, %d slot maps loaded in all; want 0 and 2", c.moved-movedBefore, c.loads)
	}
}
