package goredisbackend

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/redis/go-redis/v9"
)

// Key watching (backend.KeyWatcher) rides on go-redis' client-side caching
// (CSC) in a second, small client that Dial builds beside the main one: a
// standalone redis.Client, one per node for a cluster (ClusterOptions.NewClient),
// or, for Sentinel, a standalone client whose dialer asks the sentinels
// for the master (go-redis' failover client never attaches CSC). Its
// ClientSideCache is a watchCache: go-redis turns CLIENT TRACKING on for
// every pool connection, runs the watch's EXISTS through the cache (Get,
// Reserve, then FulfillOwned with the connection that read it), and hands
// the server's invalidations to DeleteByRedisKey (Flush for FLUSHALL),
// read from busy connections at their next command and from idle ones by
// its background drainer every DrainInterval. When a tracked connection is
// closed, removed, re-initialised or lent out (Client.Conn), or CSC is
// turned off, go-redis calls EvictByConn for it: its server-side tracking
// is gone, so the watches it carried get a Reconnect event.
//
// watchCache stores no values: every Get misses, so each WatchKey sends
// one EXISTS (tracked on the connection that runs it), like the rueidis
// adapter's CLIENT CACHING YES + EXISTS.

// Defaults of the watch client.
const (
	// watchDrainInterval is how often go-redis reads idle tracked
	// connections for invalidations: the bound on a watch's extra latency.
	watchDrainInterval = 2 * time.Millisecond
	// watchPoolSize bounds the EXISTS a watch client (per node) runs at once.
	watchPoolSize = 4
	// trackAttempts bounds the EXISTS one WatchKey sends when go-redis
	// declines to record the reply as tracked (its connection was lent out
	// or replaced meanwhile).
	trackAttempts = 3
)

// probeCtxKey is the context key of a probe.
type probeCtxKey struct{}

// probe marks a WatchKey's EXISTS: watchCache.Get sees it in the context
// and records that go-redis ran the command through the cache.
type probe struct {
	mu   sync.Mutex
	seen bool
}

func (p *probe) saw() {
	p.mu.Lock()
	p.seen = true
	p.mu.Unlock()
}

func (p *probe) wasSeen() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen
}

// watch is one WatchKey's Subscription in the registry.
type watch struct {
	deliver func(backend.Event)
	fired   bool // guarded by watchCache.mu
}

// keyState is what the registry knows of one watched key.
type keyState struct {
	watches map[*backend.Subscription]*watch
	conns   map[uint64]struct{} // connections whose tracking covers the key
	armed   uint64              // tracked reads recorded (FulfillOwned)
}

// reservation is one EXISTS in flight (Reserve until FulfillOwned/Cancel).
type reservation struct {
	cacheKey string
	key      string // the Redis key, without go-redis' namespace
}

// watchCache implements redis.Cache for the watch client, and keeps the
// key watches.
type watchCache struct {
	prefix string // go-redis' namespace of Redis keys (DB 0, username)

	mu       sync.Mutex
	keys     map[string]*keyState
	conns    map[uint64]map[string]struct{} // connection -> keys it tracks
	reserved map[uint64]reservation         // by token
	token    uint64
	closed   bool
	// foreign is set when go-redis named a key outside prefix: its
	// namespace is not the one expected, and watches cannot be matched.
	foreign bool
}

var _ redis.Cache = (*watchCache)(nil)

func newWatchCache(username string) *watchCache {
	return &watchCache{
		// As go-redis' cscNamespacePrefix (csc_integration.go): CSC only
		// attaches to DB 0.
		prefix:   "0\x00" + strconv.Itoa(len(username)) + ":" + username + "\x00",
		keys:     make(map[string]*keyState),
		conns:    make(map[uint64]map[string]struct{}),
		reserved: make(map[uint64]reservation),
	}
}

// add registers a watch of key, before its EXISTS is sent, and returns the
// count of tracked reads recorded for key so far.
func (c *watchCache) add(key string, s *backend.Subscription, deliver func(backend.Event)) (*watch, uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, 0, backend.ErrClosed
	}
	ks := c.keys[key]
	if ks == nil {
		ks = &keyState{watches: make(map[*backend.Subscription]*watch), conns: make(map[uint64]struct{})}
		c.keys[key] = ks
	}
	w := &watch{deliver: deliver}
	ks.watches[s] = w
	return w, ks.armed, nil
}

// drop removes a watch (Subscription.Close); the key is forgotten with its
// last watch.
func (c *watchCache) drop(key string, s *backend.Subscription) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ks := c.keys[key]
	if ks == nil {
		return
	}
	delete(ks.watches, s)
	if len(ks.watches) == 0 {
		c.forgetLocked(key, ks)
	}
}

// armed reports whether w is sure to hear of key's next change: a tracked
// read of key was recorded since w was added (before counted before), or
// w has fired already.
func (c *watchCache) armed(key string, w *watch, before uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.fired {
		return true
	}
	ks := c.keys[key]
	return ks != nil && ks.armed > before
}

// fireLocked delivers e to every watch of key and forgets the key: the
// server reports a tracked key once.
func (c *watchCache) fireLocked(key string, e backend.Event) int {
	ks := c.keys[key]
	if ks == nil {
		return 0
	}
	for _, w := range ks.watches {
		w.fired = true
		w.deliver(e)
	}
	c.forgetLocked(key, ks)
	return 1
}

func (c *watchCache) forgetLocked(key string, ks *keyState) {
	for id := range ks.conns {
		if set := c.conns[id]; set != nil {
			delete(set, key)
			if len(set) == 0 {
				delete(c.conns, id)
			}
		}
	}
	delete(c.keys, key)
}

func (c *watchCache) fireAllLocked(e backend.Event) int {
	n := 0
	for key := range c.keys {
		n += c.fireLocked(key, e)
	}
	clear(c.reserved)
	return n
}

// close stops the registry; the watches open get a Reconnect event.
func (c *watchCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.fireAllLocked(backend.Event{Reconnect: true})
}

func (c *watchCache) isForeign() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.foreign
}

// Get implements redis.Cache: it never hits, so every EXISTS reaches the
// server and is tracked there. It notes the probe of a WatchKey.
func (c *watchCache) Get(ctx context.Context, _ string) ([]byte, bool) {
	if p, ok := ctx.Value(probeCtxKey{}).(*probe); ok {
		p.saw()
	}
	return nil, false
}

// Reserve implements redis.Cache: always this caller's to fetch.
func (c *watchCache) Reserve(cacheKey string, redisKeys []string) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.token++
	if len(redisKeys) == 1 {
		if key, ok := strings.CutPrefix(redisKeys[0], c.prefix); ok {
			c.reserved[c.token] = reservation{cacheKey: cacheKey, key: key}
		} else {
			c.foreign = true
		}
	}
	return c.token, true
}

// FulfillOwned implements redis.Cache. go-redis calls it only for a reply
// read on a connection whose tracking still covers it (its generation
// check, under the pool hook's lock); the key's watches now count on that
// connection. A reservation that an invalidation of its key removed
// meanwhile is not recorded: that invalidation fired the watches.
func (c *watchCache) FulfillOwned(cacheKey string, token, connID uint64, _ []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.reserved[token]
	if !ok || r.cacheKey != cacheKey {
		return false
	}
	delete(c.reserved, token)
	ks := c.keys[r.key]
	if ks == nil {
		return true // nobody watches any more
	}
	ks.armed++
	ks.conns[connID] = struct{}{}
	set := c.conns[connID]
	if set == nil {
		set = make(map[string]struct{})
		c.conns[connID] = set
	}
	set[r.key] = struct{}{}
	return true
}

// Cancel implements redis.Cache.
func (c *watchCache) Cancel(cacheKey string, token uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.reserved[token]; ok && r.cacheKey == cacheKey {
		delete(c.reserved, token)
		return true
	}
	return false
}

// DeleteByRedisKey implements redis.Cache: go-redis calls it for each key
// of an "invalidate" push. The key's watches fire.
func (c *watchCache) DeleteByRedisKey(redisKey string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	key, ok := strings.CutPrefix(redisKey, c.prefix)
	if !ok { // another namespace than expected: wake everyone
		return c.fireAllLocked(backend.Event{})
	}
	for t, r := range c.reserved {
		if r.key == key {
			delete(c.reserved, t)
		}
	}
	return c.fireLocked(key, backend.Event{})
}

// DeleteByCacheKey implements redis.Cache; nothing is stored.
func (c *watchCache) DeleteByCacheKey(string) bool { return false }

// EvictByConn implements redis.Cache: connID's tracking is gone (closed,
// removed, re-initialised, lent out, or CSC turned off), so the keys it
// covered get a Reconnect event.
func (c *watchCache) EvictByConn(connID uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for key := range c.conns[connID] {
		n += c.fireLocked(key, backend.Event{Reconnect: true})
	}
	delete(c.conns, connID)
	return n
}

// Flush implements redis.Cache (FLUSHALL, FLUSHDB): every watch fires.
func (c *watchCache) Flush() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fireAllLocked(backend.Event{})
}

// cscPossible reports whether go-redis may attach client-side caching to
// a client made from opt: RESP3, DB 0, fixed credentials (csc_integration.go,
// attachCSC). The server may still refuse, which WatchKey finds out.
func cscPossible(opt *redis.UniversalOptions) bool {
	return opt.Protocol != 2 && opt.DB == 0 && opt.CredentialsProvider == nil &&
		opt.CredentialsProviderContext == nil && opt.StreamingCredentialsProvider == nil
}

// watcher is a Backend's key watching: the cache and the client that feeds
// it, made on first use.
type watcher struct {
	opt   redis.UniversalOptions // a copy, taken by Dial
	cache *watchCache

	mu       sync.Mutex
	client   redis.UniversalClient
	sentinel []*redis.SentinelClient
	closed   bool
}

func newWatcher(opt *redis.UniversalOptions) *watcher {
	return &watcher{opt: *opt, cache: newWatchCache(opt.Username)}
}

// get returns the watch client, making it on first use.
func (w *watcher) get() (redis.UniversalClient, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, backend.ErrClosed
	}
	if w.client == nil {
		w.client = w.newClient()
	}
	return w.client, nil
}

func (w *watcher) close() error {
	w.mu.Lock()
	w.closed = true
	client, sentinels := w.client, w.sentinel
	w.client, w.sentinel = nil, nil
	w.mu.Unlock()
	var err error
	if client != nil {
		err = client.Close()
	}
	for _, s := range sentinels {
		err = errors.Join(err, s.Close())
	}
	w.cache.close()
	return err
}

// cscConfig is the watch client's cache configuration: only its
// DrainInterval matters (the watchCache stores nothing).
func (w *watcher) cscConfig() *redis.ClientSideCacheConfig {
	d := watchDrainInterval
	if cfg := w.opt.ClientSideCacheConfig; cfg != nil && cfg.DrainInterval > 0 {
		d = cfg.DrainInterval
	}
	return &redis.ClientSideCacheConfig{DrainInterval: d}
}

// withCSC sets o up as a watch client's (or cluster node's) options.
func (w *watcher) withCSC(o *redis.Options) {
	o.ClientSideCache = w.cache
	o.ClientSideCacheConfig = w.cscConfig()
	o.ClientSideCacheStrategy = redis.CSCStrategySharedTracking
	o.ClientSideCacheRefreshOnInvalidate = false
	o.ClientSideCacheCoalesceMisses = false
	o.ClientSideCacheInvalidationBatchWindow = 0
	o.PoolSize = watchPoolSize
	o.MinIdleConns = 0
	o.PipelinePoolSize = -1 // no pipelines: their connections are not tracked
}

// newClient builds the watch client the way redis.NewUniversalClient
// picks the main one. The caller holds mu.
func (w *watcher) newClient() redis.UniversalClient {
	opt := w.opt
	switch {
	case opt.MasterName != "":
		o := opt.Simple()
		w.withCSC(o)
		o.Addr = "sentinel:" + opt.MasterName // the dialer ignores it
		o.Dialer = w.sentinelDialer()
		return redis.NewClient(o)
	case len(opt.Addrs) > 1 || opt.IsClusterMode:
		co := opt.Cluster()
		co.ReadOnly, co.RouteByLatency, co.RouteRandomly = false, false, false
		co.PoolSize = watchPoolSize
		co.MinIdleConns = 0
		co.NewClient = func(o *redis.Options) *redis.Client {
			w.withCSC(o)
			return redis.NewClient(o)
		}
		return redis.NewClusterClient(co)
	default:
		o := opt.Simple()
		w.withCSC(o)
		return redis.NewClient(o)
	}
}

// sentinelDialer dials the master the sentinels name at the time. The
// caller holds mu.
func (w *watcher) sentinelDialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	fo := w.opt.Failover()
	for _, addr := range fo.SentinelAddrs {
		w.sentinel = append(w.sentinel, redis.NewSentinelClient(&redis.Options{
			Addr:        addr,
			Username:    fo.SentinelUsername,
			Password:    fo.SentinelPassword,
			DialTimeout: fo.DialTimeout,
			ReadTimeout: fo.ReadTimeout,
			TLSConfig:   fo.TLSConfig,
			Dialer:      fo.Dialer,
			Protocol:    2,
			PoolSize:    1,
		}))
	}
	sentinels := w.sentinel
	master, userDialer, tlsConfig, timeout := fo.MasterName, fo.Dialer, fo.TLSConfig, fo.DialTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		var errs error
		addr := ""
		for _, s := range sentinels {
			hp, err := s.GetMasterAddrByName(ctx, master).Result()
			if err == nil && len(hp) == 2 {
				addr = net.JoinHostPort(hp[0], hp[1])
				break
			}
			errs = errors.Join(errs, err)
		}
		if addr == "" {
			return nil, fmt.Errorf("goredisbackend: no sentinel named the master %q: %w", master, errs)
		}
		if userDialer != nil {
			return userDialer(ctx, network, addr)
		}
		nd := &net.Dialer{Timeout: timeout, KeepAlive: 5 * time.Minute}
		if tlsConfig == nil {
			return nd.DialContext(ctx, network, addr)
		}
		td := &tls.Dialer{NetDialer: nd, Config: tlsConfig}
		return td.DialContext(ctx, network, addr)
	}
}

// watchKey implements WatchKey for a Backend made by Dial.
func (w *watcher) watchKey(ctx context.Context, key string) (*backend.Subscription, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	client, err := w.get()
	if err != nil {
		return nil, err
	}
	var s *backend.Subscription
	s, deliver := backend.NewSubscription(key, func() { w.cache.drop(key, s) })
	// Registered before the EXISTS, so no invalidation slips past.
	wt, before, err := w.cache.add(key, s, deliver)
	if err != nil {
		return nil, err
	}
	for range trackAttempts {
		p := &probe{}
		n, err := client.Exists(context.WithValue(ctx, probeCtxKey{}, p), key).Result()
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("goredisbackend: watch key %q: %w", key, mapError(err))
		}
		if w.cache.armed(key, wt, before) {
			if n == 0 {
				deliver(backend.Event{})
			}
			return s, nil
		}
		if !p.wasSeen() || w.cache.isForeign() {
			// go-redis ran EXISTS around the cache: CSC is off for this
			// client (RESP2 or HELLO 3 refused, CLIENT TRACKING refused,
			// DB != 0, a credentials provider), or it namespaces keys
			// otherwise than this adapter expects.
			s.Close()
			return nil, fmt.Errorf("%w: goredisbackend: client-side caching is not active on the watch client (RESP3, CLIENT TRACKING, DB 0 and no credentials provider are required)", backend.ErrNotSupported)
		}
	}
	s.Close()
	return nil, fmt.Errorf("goredisbackend: watch key %q: go-redis did not record a tracked read in %d attempts", key, trackAttempts)
}
