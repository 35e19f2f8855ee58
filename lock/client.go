package lock

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
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

	nextOwner atomic.Int64
	requests  requestIDs   // names unlock latches
	watcher   keyWatcher   // the backend's key watches, while it can (keywatch.go)
	memory    memoryPolicy // the server's memory policy, as last read (X18)

	attemptBound *sharedBound // bounds each acquire attempt (attemptTimeout)
	unlockBound  *sharedBound // bounds an Unlock's retries (unlockRetryWindow)

	// The client's parts, each under its own lock (DESIGN.md, Who owns
	// what).
	life   lifetime    // open or closed; the calls and goroutines Close waits for
	owners owners      // the owners in use (owners.go)
	holds  holdIndex   // the live holds (holds.go)
	wakes  localWakes  // heads told when a hold of this client on their lock ends (localwake.go)
	floor  serverFloor // a lower bound of the server's clock, for leaves (serverfloor.go)

	// The background components, each with its own start and close.
	dog       *watchdog    // renews the holds
	listener  *reconnects  // tells the watchdog of reconnects
	watches   *hashWatches // checks holds whose hash changed
	describer *job         // WithDescription: keeps the description alive; nil without
}

// NewClient returns a Client that talks to Redis through b, and takes b:
// Client.Close closes it (when NewClient fails, b stays the caller's).
// Defaults: lease 30 s (renewed every 10 s), waiter timeout 5 s, no key
// prefix, PUBLISH wake-ups, no observer, no description. NewClient reads
// the server's memory policy, one script call bounded by 5 s, and fails
// with ErrEvictionPolicy when the server may evict lock keys (see
// WithEvictionRisk); a server that does not tell, or cannot be reached
// then, is let through. It starts listening on the client's notice
// channel and waits for that first Subscribe, at most a second. With
// WithDescription the client writes its description in the background.
func NewClient(b backend.Backend, opts ...Option) (*Client, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: nil backend", ErrInvalidArgument)
	}
	cfg, err := newConfig(b, opts)
	if err != nil {
		return nil, err
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
		b:            b,
		id:           id,
		cfg:          cfg,
		scripts:      scripts,
		requests:     requestIDs{prefix: requestPrefix},
		watcher:      keyWatcher{kw: kw},
		attemptBound: newSharedBound(attemptTimeout, attemptGrain),
		unlockBound:  newSharedBound(unlockRetryWindow, unlockRetryGrain),
		life:         lifetime{closing: make(chan struct{})},
		wakes:        localWakes{heads: make(map[string][]chan struct{})},
	}
	c.owners.init(&c.life)
	c.watches = startHashWatches(c)
	c.holds.init(c.watches)
	c.dog = startWatchdog(c)
	c.listener = startReconnects(c, c.dog)
	c.listener.awaitFirst(listenWait)
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
	if c.life.isClosed() {
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
// the client's description (waiting at most a second for Redis). Then
// Close closes the backend, and returns what that returned once the
// client's goroutines have ended.
//
// Close returns within 14.5 s whatever the server does (closeBound): it
// waits for the calls in flight at most 7.5 s, the longest an acquire's
// tail takes by X5 (an attempt's reply awaited 5.5 s, then its cleanup
// 2 s). If some are still waiting for the server then, it ends their
// attempts and unlocks in flight and closes the backend under them: they
// send nothing more, a cleanup already sent gives up by its own bound
// (2 s), and what they could not clean up - a grant, a queue entry - frees
// itself by its lease or liveness deadline, as the holds Close ends do.
// Otherwise its other steps wait for the server at most 2 s (the
// description's last write and its delete). 5 s are left for the
// backend's own close (rueidis and valkey-go give up a silent server's
// connections after a second each, one after another: four on one server
// by default).
func (c *Client) Close() error {
	if !c.life.close() {
		return nil
	}
	closeBackend := sync.OnceValue(c.b.Close)
	calls := c.life.callsDone()
	if !waitAtMost(calls, closeCallsWait) {
		// The server has kept the calls waiting that long: end their
		// attempts and unlocks in flight, and close the backend under
		// them, so that none sends again (one owner's calls send one
		// after another); a cleanup already sent ends by its own bound.
		c.attemptBound.abandon()
		c.unlockBound.abandon()
		closeBackend()
	}
	if c.describer != nil {
		c.describer.close()
	}
	c.listener.close()
	c.watches.close()
	c.dog.close()
	// Before waiting for the goroutines beside the calls: a Subscribe on a
	// subscription connection that stalls gives up only once the backend
	// has taken its SUBSCRIBE back, which a closed backend does at once
	// (Close took 4.3 s in TestStalledSubscriptionConnection otherwise).
	err := closeBackend()
	<-calls
	c.life.goroutines.Wait()
	c.attemptBound.close()
	c.unlockBound.close()
	for h, ref := range c.holds.takeAll() {
		ref.o.end(h, ErrClosed)
	}
	return err
}

// lifetime is the client's own state: open or closed, and the calls and
// goroutines Close waits for. Its lock, lifetime.mu, is taken alone. A
// call or goroutine is counted only while the client is open, so Close's
// waits see every one.
type lifetime struct {
	mu         sync.Mutex
	closed     bool
	closing    chan struct{}  // closed by Close: waiting calls stop
	calls      sync.WaitGroup // calls in flight; Close waits for their cleanup
	goroutines sync.WaitGroup // beside the calls: a waiter's Subscribe and WatchKey, parked subscriptions, memory re-checks
}

// callsDone returns a channel closed once the calls in flight have
// ended; the client must be closed (no call begins any more).
func (l *lifetime) callsDone() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		l.calls.Wait()
		close(done)
	}()
	return done
}

// close marks the client closed and wakes the waiting calls. It reports
// false when the client was closed already.
func (l *lifetime) close() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.closed = true
	close(l.closing)
	return true
}

// begin counts a call in flight, or returns ErrClosed after Close. The
// caller calls end when it is done. (A returned calls.Done would cost
// an allocation per call.)
func (l *lifetime) begin() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	l.calls.Add(1)
	return nil
}

// end ends a call counted by begin.
func (l *lifetime) end() { l.calls.Done() }

func (l *lifetime) isClosed() bool {
	select {
	case <-l.closing:
		return true
	default:
		return false
	}
}

// spawn runs f in a goroutine Close waits for, and reports whether it
// did: not once the client is closed.
func (l *lifetime) spawn(f func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.goroutines.Add(1)
	go func() {
		defer l.goroutines.Done()
		f()
	}()
	return true
}

// track hands h, a new hold of m's owner o, to the parts that keep a
// live hold: the hold index (the watchdog, the hash watch, loss notices)
// and the owner registry, where the hold counts as a use of o until it
// ends (untrack). It returns ErrClosed after Close, and otherwise what
// the index refuses: an ended hold is never tracked, so nothing keeps it.
// A hold whose grant was on its way while notices were missed is checked
// first (checkNew).
func (c *Client) track(h *Hold, m *Mutex, o *owner) error {
	if c.life.isClosed() {
		return ErrClosed
	}
	c.owners.acquire(m) // before the index has it: its untrack gives this back
	check, err := c.holds.track(h, holdRef{m: m, o: o})
	if err != nil {
		c.owners.release(o)
		return err
	}
	if check {
		return c.checkNew(h)
	}
	return nil
}

// checkNew asks the server whether it still has h, a hold just tracked
// whose grant was on its way when the client's loss notices were
// summarised or lost (X16): its notice, if one was sent, is gone, and the
// re-check that followed did not know h yet. It returns h's error when
// the server no longer has it (h has ended then), so the acquire reports
// the loss instead of handing out a hold that ended. When the server does
// not answer, the watchdog re-checks every hold, until it does.
func (c *Client) checkNew(h *Hold) error {
	if !c.dog.checkHolds([]*Hold{h}) {
		c.dog.reconnected()
		return nil
	}
	return h.Err()
}

// untrack forgets a hold that ended: the index drops it, this client's
// heads waiting on its lock are woken (localwake.go), and the registry
// counts it no more.
func (c *Client) untrack(h *Hold) {
	ref, ok := c.holds.untrack(h)
	if !ok {
		return
	}
	c.wakes.holdEnded(ref.m.keys.Hash)
	c.owners.release(ref.o)
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

// closeCallsWait bounds how long Close waits for the calls in flight
// before it closes the backend under them: an acquire's longest tail (an
// attempt's reply awaited, then the cleanup), so that every grant made
// while Close waits is given back when the server answers by then.
const closeCallsWait = attemptTimeout + attemptGrain + cleanupTimeout

// closeBound is how long Close may take whatever the server does:
// closeCallsWait, then the backend's own close, which gives up a silent
// server's connections (rueidis and valkey-go: a second each, one after
// another; four on one server by default), and before it the description's
// last write and its delete (describeTimeout each) - or, when calls are
// still waiting, after it a cleanup sent while it closed (cleanupTimeout).
const closeBound = closeCallsWait + closeBackendAllowance + max(2*describeTimeout, cleanupTimeout)

// closeBackendAllowance is what closeBound allows for the backend's own
// close.
const closeBackendAllowance = 5 * time.Second

// waitAtMost waits until done is closed, or d has passed, and reports
// whether done was closed.
func waitAtMost(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// listenWait bounds how long NewClient waits for the client's first
// Subscribe to its notice channel to return.
const listenWait = time.Second

// cleanupContext keeps ctx's values (trace spans) but not its cancellation.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(withoutCancel(ctx), cleanupTimeout)
}

// graceContext is cleanupContext, ended cleanupGrace after ctx's deadline
// when that comes sooner: cleanup inside a call that must return by its
// deadline (X5).
func graceContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d := cleanupTimeout
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl)+cleanupGrace)
	}
	return context.WithTimeout(withoutCancel(ctx), d)
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
