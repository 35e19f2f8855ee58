package lock

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock/internal/wire"
)

// Client is one lock client: a client ID (a random UUID, as Redisson's),
// one watchdog for all its holds, and a backend. Create Mutexes from it.
// It is safe for concurrent use. Close it when done; Close closes the
// backend too.
type Client struct {
	b       backend.Backend
	id      string
	cfg     config
	scripts *wire.Scripts

	nextOwner  atomic.Int64
	requests   requestIDs         // names unlock latches
	keyWatcher backend.KeyWatcher // the backend's, nil when it has none
	noKeyWatch atomic.Bool        // the backend said it cannot watch keys
	memory     memoryPolicy       // the server's memory policy, as last read (X18)

	attemptBound *sharedBound // bounds each acquire attempt (attemptTimeout)
	unlockBound  *sharedBound // bounds an Unlock's retries (unlockRetryWindow)

	mu     sync.Mutex
	owners map[string]*entry // owners with a call in flight, a live hold or a parked subscription
	holds  map[*Hold]holdRef // live holds, for the watchdog
	// byHash has the same holds by lock hash (a watch or a notice names
	// one lock): a short list, one hold per owner of the client holding
	// the lock (a slice, not a set: a new one costs one allocation, not
	// two).
	byHash map[string][]*Hold
	// early holds the loss notices that matched no hold: the grant's
	// reply may still be on its way (evicted, track).
	early  map[lossKey]time.Time
	wakes  localWakes // heads told when a hold of this client on their lock ends (localwake.go)
	parked int        // owners with a parked subscription (park.go)
	closed bool

	closing chan struct{}  // closed by Close: waiting calls stop
	calls   sync.WaitGroup // calls in flight; Close waits for their cleanup
	wg      sync.WaitGroup // a waiter's calls beside its loop, lingering subscriptions

	// The background components, each with its own start and close.
	dog       *watchdog    // renews the holds
	listener  *reconnects  // tells the watchdog of reconnects
	watches   *hashWatches // checks holds whose hash changed
	describer *job         // WithDescription: keeps the description alive; nil without
}

// holdRef is what the watchdog needs of a live hold: its Mutex (keys,
// owner field) and owner.
type holdRef struct {
	m *Mutex
	o *owner
}

// NewClient returns a Client that talks to Redis through b, and takes b:
// Client.Close closes it (when NewClient fails, b stays the caller's).
// Defaults: lease 30 s (renewed every 10 s), waiter timeout 5 s, no key
// prefix, PUBLISH wake-ups, no observer, no description. NewClient reads
// the server's memory policy, one script call bounded by 5 s, and fails
// with ErrEvictionPolicy when the server may evict lock keys (see
// WithEvictionRisk); a server that does not tell, or cannot be reached
// then, is let through. With WithDescription the client writes its
// description in the background.
func NewClient(b backend.Backend, opts ...Option) (*Client, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: nil backend", ErrInvalidArgument)
	}
	cfg := config{lease: defaultLease, waiterTimeout: defaultWaiterTimeout, redissonSlack: defaultRedissonSlack}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidArgument)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if _, ok := b.(backend.ReplicaWaiter); cfg.replicas > 0 && !ok {
		return nil, fmt.Errorf("%w: WithReplicaAcks needs a backend.ReplicaWaiter backend", ErrInvalidArgument)
	}
	id, err := newUUID()
	if err != nil {
		return nil, fmt.Errorf("lock: client id: %w", err)
	}
	var requestPrefix [8]byte
	if _, err := rand.Read(requestPrefix[:]); err != nil {
		return nil, fmt.Errorf("lock: request ids: %w", err)
	}
	scripts := wire.NewScripts()
	if err := cfg.settle(b, scripts); err != nil {
		return nil, err
	}
	kw, _ := b.(backend.KeyWatcher)
	c := &Client{
		b:       b,
		id:      id,
		cfg:     cfg,
		scripts: scripts,
		owners:  make(map[string]*entry),
		holds:   make(map[*Hold]holdRef),
		byHash:  make(map[string][]*Hold),
		early:   make(map[lossKey]time.Time),
		closing: make(chan struct{}),
		wakes:   localWakes{heads: make(map[string][]chan struct{})},

		requests:   requestIDs{prefix: requestPrefix},
		keyWatcher: kw,

		attemptBound: newSharedBound(attemptTimeout, attemptGrain),
		unlockBound:  newSharedBound(unlockRetryWindow, unlockRetryGrain),
	}
	c.dog = startWatchdog(c)
	c.listener = startReconnects(c, c.dog)
	c.watches = startHashWatches(c)
	if cfg.description != nil {
		c.describer = startJob(c.describe)
	}
	return c, nil
}

// ID returns the client ID, the first half of every owner field this client
// writes ("<ID>:<ownerID>").
func (c *Client) ID() string { return c.id }

// NewMutex returns the Mutex for lock name, acting for a new owner unless
// WithOwnerID says otherwise. It checks the name (ErrInvalidName) and sends
// nothing to Redis. After Close it returns ErrClosed.
func (c *Client) NewMutex(name string, opts ...MutexOption) (*Mutex, error) {
	if c.isClosed() {
		return nil, fmt.Errorf("lock %q: %w", name, ErrClosed)
	}
	var mc mutexConfig
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil mutex option", ErrInvalidArgument)
		}
		if err := o(&mc); err != nil {
			return nil, err
		}
	}
	if name == "" {
		return nil, fmt.Errorf("%w: empty name", ErrInvalidName)
	}
	k, ok := wire.Derive(c.cfg.keyPrefix + name)
	if !ok {
		return nil, fmt.Errorf("%w: %q: its queue and lock keys would hash to different cluster slots (use one non-empty {tag} or none)", ErrInvalidName, c.cfg.keyPrefix+name)
	}
	if !mc.ownerIDSet {
		mc.ownerID = c.nextOwner.Add(1)
	}
	field := c.id + ":" + strconv.FormatInt(mc.ownerID, 10)
	return &Mutex{
		c:        c,
		name:     name,
		keys:     k,
		field:    field,
		channel:  k.OwnerChannel(field),
		ownerKey: k.Hash + "\x00" + field,
	}, nil
}

// Close wakes every waiting call, which leaves the queue and returns
// ErrClosed, waits for the calls in flight to finish (an acquire granted
// meanwhile is given back, so nothing is left held by nobody), then stops
// the watchdog. Holds are not released: they end with ErrClosed on
// Hold.Err and their locks free themselves when their leases run out.
// Calls after Close return ErrClosed. With WithDescription, Close deletes
// the client's description (waiting at most a second for Redis). Last,
// Close closes the backend and returns what that returned.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.closing)
	c.mu.Unlock()
	c.calls.Wait()
	if c.describer != nil {
		c.describer.close()
	}
	c.listener.close()
	c.watches.close()
	c.dog.close()
	c.wg.Wait()
	c.attemptBound.close()
	c.unlockBound.close()
	c.mu.Lock()
	holds := c.holds
	c.holds = make(map[*Hold]holdRef)
	c.byHash = make(map[string][]*Hold)
	c.mu.Unlock()
	for h, ref := range holds {
		ref.o.end(h, ErrClosed)
	}
	return c.b.Close()
}

// begin counts a call in flight, or returns ErrClosed after Close. The
// caller calls end when it is done. (A returned c.calls.Done would cost
// an allocation per call.)
func (c *Client) begin() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	c.calls.Add(1)
	return nil
}

// end ends a call counted by begin.
func (c *Client) end() { c.calls.Done() }

func (c *Client) isClosed() bool {
	select {
	case <-c.closing:
		return true
	default:
		return false
	}
}

// track hands a new hold to the watchdog and counts it as a reference to
// its owner state until it ends (untrack). It returns ErrClosed after
// Close, the hold's own error when the hold has ended already (its
// deadline passed before the grant's reply was applied), and ErrLockLost
// when a notice that someone ended it came before the reply: an ended
// hold is never tracked, so nothing keeps it.
func (c *Client) track(h *Hold, m *Mutex, o *owner) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	// holdEnded untracks under c.mu: a hold that ends after this check is
	// untracked after it is tracked.
	if err := h.Err(); err != nil {
		return err
	}
	if c.takeEarlyLocked(lossKey{m.keys.Hash, h.token}) {
		return errEvicted(true)
	}
	c.holds[h] = holdRef{m: m, o: o}
	on := c.byHash[m.keys.Hash]
	if on == nil {
		c.watches.held(m.keys.Hash)
	}
	c.byHash[m.keys.Hash] = append(on, h)
	c.owners[o.key].refs++
	return nil
}

// lossKey names one hold in a loss notice: its lock hash and token.
type lossKey struct {
	hash  string
	token int64
}

// earlyLossKeep is how long a loss notice that matched no hold is kept
// for a grant whose reply is still on its way: longer than an attempt
// may take (attemptTimeout).
const earlyLossKeep = 2 * attemptTimeout

// errEvicted is the error of a hold someone else force-unlocked or
// deleted; early: before the grant's reply reached the client.
func errEvicted(early bool) error {
	if early {
		return fmt.Errorf("%w: lock force-unlocked or deleted by another client before its grant reached this client", ErrLockLost)
	}
	return fmt.Errorf("%w: lock force-unlocked or deleted by another client", ErrLockLost)
}

// evicted ends the hold of token on the lock whose hash is key: someone
// else force-unlocked or deleted it. A notice for a hold the client does
// not have yet is kept for earlyLossKeep, for the grant on its way.
func (c *Client) evicted(key string, token int64) {
	c.mu.Lock()
	var found *Hold
	var ref holdRef
	for _, h := range c.byHash[key] {
		if h.token == token {
			found, ref = h, c.holds[h]
			break
		}
	}
	if found == nil {
		c.keepEarlyLocked(lossKey{key, token})
	}
	c.mu.Unlock()
	if found != nil {
		ref.o.end(found, errEvicted(false))
	}
}

// keepEarlyLocked keeps a notice that matched no hold, and forgets those
// kept too long. The caller holds c.mu.
func (c *Client) keepEarlyLocked(k lossKey) {
	now := time.Now()
	for old, until := range c.early {
		if now.After(until) {
			delete(c.early, old)
		}
	}
	c.early[k] = now.Add(earlyLossKeep)
}

// takeEarlyLocked reports (and forgets) a kept notice for k. The caller
// holds c.mu.
func (c *Client) takeEarlyLocked(k lossKey) bool {
	until, ok := c.early[k]
	delete(c.early, k)
	return ok && time.Now().Before(until)
}

// holdsOn returns the live holds on the lock whose hash is hash.
func (c *Client) holdsOn(hash string) []*Hold {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.byHash[hash])
}

// liveHolds returns the holds the watchdog renews.
func (c *Client) liveHolds() []*Hold {
	c.mu.Lock()
	defer c.mu.Unlock()
	hs := make([]*Hold, 0, len(c.holds))
	for h := range c.holds {
		hs = append(hs, h)
	}
	return hs
}

// untrack forgets a hold that ended, and wakes this client's heads
// waiting on its lock (localwake.go).
func (c *Client) untrack(h *Hold) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ref, ok := c.holds[h]; ok {
		delete(c.holds, h)
		if on := c.byHash[ref.m.keys.Hash]; len(on) > 1 {
			c.byHash[ref.m.keys.Hash] = slices.DeleteFunc(on, func(x *Hold) bool { return x == h })
		} else {
			delete(c.byHash, ref.m.keys.Hash)
			c.watches.released(ref.m.keys.Hash)
		}
		c.holdEndedOnLocked(ref.m.keys.Hash)
		c.releaseLocked(ref.o)
	}
}

// watcher returns the backend's KeyWatcher, or nil when it has none or
// has said it cannot watch keys.
func (c *Client) watcher() backend.KeyWatcher {
	if c.noKeyWatch.Load() {
		return nil
	}
	return c.keyWatcher
}

// newUUID returns a random (version 4) UUID from crypto/rand.
func newUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32], nil
}

// requestIDs names a client's unlock requests, 16 bytes each (sent in hex,
// as Redisson's request IDs): 8 random bytes drawn when the client starts,
// then a count of the client's requests. A request ID only has to differ
// from every other release's of the same lock while its latch lives, a
// few seconds; this needs no random bytes, and no system call, per
// Unlock.
type requestIDs struct {
	prefix [8]byte
	n      atomic.Uint64
}

// next returns a request ID no earlier call returned.
func (r *requestIDs) next() [16]byte {
	var id [16]byte
	copy(id[:8], r.prefix[:])
	binary.BigEndian.PutUint64(id[8:], r.n.Add(1))
	return id
}

// cleanupTimeout bounds the best-effort queue cleanup after a cancelled
// or failed wait (X5).
const cleanupTimeout = 2 * time.Second

// cleanupContext keeps ctx's values (trace spans) but not its cancellation.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(withoutCancel(ctx), cleanupTimeout)
}

// withoutCancel is context.WithoutCancel, but returns ctx itself when it
// has no cancellation or deadline to drop (Background, TODO, values on
// them), which saves an allocation.
func withoutCancel(ctx context.Context) context.Context {
	if _, ok := ctx.Deadline(); !ok && ctx.Done() == nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

// subscribe subscribes to a lock's wake-up channel the way the client
// listens: SSUBSCRIBE at the lock's shard when it wakes waiters sharded
// (WithPublish), SUBSCRIBE otherwise.
func (c *Client) subscribe(ctx context.Context, channel string) (*backend.Subscription, error) {
	if c.cfg.sharded {
		return c.b.(backend.ShardedSubscriber).SSubscribe(ctx, channel)
	}
	return c.b.Subscribe(ctx, channel)
}
