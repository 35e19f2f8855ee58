// Package rueidisbackend adapts a github.com/redis/rueidis client to
// backend.Backend, so package lock can run on it.
//
// Scripts run as EVALSHA with the digest the Script carries (and EVAL on
// NOSCRIPT, which loads the script and runs it in the same round trip),
// on the client's auto-pipelined connections: concurrent lock calls share
// one write. Watchdog renewals go out as one DoMulti per tick. Wake-ups
// arrive on one dedicated connection per Backend (Dedicate plus
// SetPubSubHooks), which subscribes and unsubscribes channels at run time
// and is re-dialled, with every channel re-subscribed, when it drops. Key
// watches (WatchKey) use that connection too, except on a cluster client,
// whose dedicated connections are bound to one node: there each node that
// serves a watched key gets one tracking connection of its own.
//
// On a cluster client the Backend is a backend.ShardedSubscriber: sharded
// wake-ups (SSubscribe) arrive on one dedicated connection per node that
// owns a subscribed channel's slot (pubsub.ShardedHub), and replica acks
// (EvalWait) run the script and WAIT on one connection to the primary that
// owns the keys' slot.
//
// Client options: any standalone, sentinel or cluster client works, and so
// does a client wrapped by rueidisotel. On servers without CLIENT TRACKING
// (miniredis, some proxies) set ClientOption.DisableCache; for miniredis
// also ForceSingleClient. Client-side caching serves two things: the head
// waiter's watch on the lock hash (WatchKey), and, opt-in, lock reads for
// dashboards (CachedRead, used by lock.WithCachedReads); by default every
// lock read runs a script and sees the server's current state.
package rueidisbackend

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/backend/pubsub"
	"github.com/redis/rueidis"
)

// Backend implements backend.Backend on a rueidis.Client.
type Backend struct {
	client  rueidis.Client
	owned   bool   // made by Dial: Close closes the client too
	dials   *dials // made by Dial: the client's dials in progress; nil otherwise
	hub     *pubsub.Hub
	nodes   *nodeWatcher       // key watches of a cluster client; nil otherwise
	shards  *pubsub.ShardedHub // sharded wake-ups of a cluster client; nil otherwise
	closing sync.Once
}

var (
	_ backend.Backend       = (*Backend)(nil)
	_ backend.KeyWatcher    = (*Backend)(nil)
	_ backend.ReplicaWaiter = (*Backend)(nil)

	_ backend.ShardedSubscriber = (*Backend)(nil)
)

// New returns a Backend using client. Closing the Backend does not close
// the client.
func New(client rueidis.Client) *Backend {
	b := &Backend{client: client}
	b.hub = pubsub.NewHub(b.dial)
	if client.Mode() == rueidis.ClientModeCluster {
		b.nodes = newNodeWatcher(client)
		d := &shardDialer{client: client, named: make(map[string]string)}
		b.shards = pubsub.NewShardedHub(d.dial, d.slotMap)
	}
	return b
}

// Dial returns a Backend on a new client made from opt; closing the
// Backend closes that client too.
//
// A Backend made by Dial runs each call on the caller's goroutine: it
// watches the client's dials (opt.DialCtxFn, wrapping the one opt names),
// and ends them when a call's context ends while the call waits for one.
// New's, on a client it did not make, runs each call that has a context
// that can end on a goroutine of its own (byDeadline).
func Dial(opt rueidis.ClientOption) (*Backend, error) {
	d := &dials{pending: make(map[*dialing]struct{})}
	opt.DialCtxFn = d.wrap(opt.DialCtxFn, opt.DialFn, opt.DisableTCPNoDelay)
	opt.DialFn = nil
	client, err := rueidis.NewClient(opt)
	if err != nil {
		if !opt.DisableCache && strings.Contains(strings.ToUpper(err.Error()), "CLIENT") {
			// The client turns CLIENT TRACKING on for every connection.
			return nil, fmt.Errorf("%w (a server without CLIENT TRACKING needs ClientOption.DisableCache: true; the lock then notices a hash deleted by hand at its periodic checks)", err)
		}
		return nil, err
	}
	b := New(client)
	b.owned = true
	b.dials = d
	return b, nil
}

// Eval implements backend.Backend: EVALSHA with the script's digest, and
// EVAL when the server answers NOSCRIPT (which loads the script and runs
// it in the same round trip) or the script has no digest
// (backend.NewScript in FIPS 140-only mode). The adapter hashes nothing.
func (b *Backend) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	res, err := byDeadline(ctx, b.dials, func() rueidis.RedisResult {
		res := b.client.Do(ctx, b.evalCmd(s, keys, args))
		if isNoScript(res) {
			res = b.client.Do(ctx, b.evalSource(s, keys, args))
		}
		return res
	})
	if err != nil {
		return backend.Reply{}, err
	}
	rep, err := convert(res)
	return rep, backend.ScriptError(s, err)
}

// result is the client's result of one command.
type result = rueidis.RedisResult

// byDeadline returns f's result, or ctx's error when ctx ends first. The
// client honours a context everywhere but in one place: a call that finds
// its connection being dialled again by another call waits for that dial
// whatever its own context (v1.0.79, mux._pipe), and a dial to a server
// that accepts but does not answer lasts until the dialling call's
// context or the dial timeout ends - an Unlock with a 3 s deadline
// returned after 6.3 s in the soak (seed 203821236997882).
//
// Without the client's dials watched (New), f runs on a goroutine of its
// own, and the call returns when ctx ends; the call left behind sends
// nothing once the dial ends: the client sends no command whose context
// has ended. A goroutine per call costs the caller about 20 µs of CPU a
// call on a 2-core machine (wake-ups of idle threads), more than the rest
// of the call.
//
// With them watched (d, Dial), f runs on the caller's goroutine whenever
// no dial is in progress as it starts, and so cannot be waiting for one
// begun before. If one begins after and f waits for it, f is still
// running stuckAfter past ctx's end, when the client has let every other
// call go: then the dials in progress end (dials.abort), f with them, and
// the call returns ctx's error. A call that starts while a dial is in
// progress runs on a goroutine of its own, as without the watch, so a
// slow dial is never ended by calls whose deadlines are shorter than it.
// A context that cannot end costs neither.
func byDeadline[T any](ctx context.Context, d *dials, f func() T) (T, error) {
	if ctx.Done() == nil {
		return f(), nil
	}
	if d != nil && d.inProgress.Load() == 0 {
		var returned atomic.Bool
		stop := context.AfterFunc(ctx, func() {
			time.AfterFunc(stuckAfter, func() {
				if !returned.Load() {
					d.abort()
				}
			})
		})
		r := f()
		returned.Store(true)
		if !stop() {
			// ctx ended while f ran: its result may be a dial's failure.
			var zero T
			return zero, ctx.Err()
		}
		return r, nil
	}
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case r := <-done:
		return r, nil
	case <-ctx.Done():
	}
	select {
	case r := <-done:
		return r, nil
	default:
		var zero T
		return zero, ctx.Err()
	}
}

// stuckAfter is how long past its context's end a call may run on the
// caller's goroutine before byDeadline takes it for waiting on a dial.
const stuckAfter = 100 * time.Millisecond

// dials is the client's dials in progress, from the start of a connection
// until the server's first reply on it (the handshake's), or until it
// closes.
type dials struct {
	mu         sync.Mutex
	pending    map[*dialing]struct{}
	inProgress atomic.Int32 // len(pending), read without mu
}

// dialing is one dial in progress: cancel ends the connect, conn (nil
// until connected) is closed to end the handshake.
type dialing struct {
	cancel context.CancelFunc
	conn   net.Conn
}

// wrap returns a DialCtxFn that dials with dialCtx, or dial (the
// deprecated DialFn), or as the client does without either, and keeps each
// dial in d until the server first answers on the connection. The client
// sees the connection wrapped, so it cannot turn Nagle's algorithm on
// (ClientOption.DisableTCPNoDelay) as a connection enters pipelining: with
// nagle, wrap turns it on at once, for the connection's whole life.
func (d *dials) wrap(dialCtx func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error),
	dial func(string, *net.Dialer, *tls.Config) (net.Conn, error), nagle bool) func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
	connect := func(ctx context.Context, dst string, dialer *net.Dialer, cfg *tls.Config) (net.Conn, error) {
		switch {
		case dialCtx != nil:
			return dialCtx(ctx, dst, dialer, cfg)
		case dial != nil:
			return dial(dst, dialer, cfg)
		case cfg != nil:
			return (&tls.Dialer{NetDialer: dialer, Config: cfg}).DialContext(ctx, "tcp", dst)
		}
		return dialer.DialContext(ctx, "tcp", dst)
	}
	return func(ctx context.Context, dst string, dialer *net.Dialer, cfg *tls.Config) (net.Conn, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel() // a connection outlives its dial's context
		p := &dialing{cancel: cancel}
		d.mu.Lock()
		d.pending[p] = struct{}{}
		d.inProgress.Store(int32(len(d.pending)))
		d.mu.Unlock()
		conn, err := connect(ctx, dst, dialer, cfg)
		d.mu.Lock()
		_, live := d.pending[p]
		if err != nil || !live {
			delete(d.pending, p)
			d.inProgress.Store(int32(len(d.pending)))
			d.mu.Unlock()
			if err == nil {
				conn.Close()
				err = fmt.Errorf("dial %s: ended by a call whose context ended while it waited for this dial", dst)
			}
			return nil, err
		}
		p.conn = conn
		d.mu.Unlock()
		if nagle {
			setNagle(conn)
		}
		return &watchedConn{Conn: conn, dials: d, dialing: p}, nil
	}
}

// setNagle turns Nagle's algorithm on for conn, as the client does for
// ClientOption.DisableTCPNoDelay (there, once the connection pipelines).
func setNagle(conn net.Conn) {
	if c, ok := conn.(*tls.Conn); ok {
		conn = c.NetConn()
	}
	if c, ok := conn.(*net.TCPConn); ok {
		_ = c.SetNoDelay(false)
	}
}

// done takes p out of the dials in progress.
func (d *dials) done(p *dialing) {
	d.mu.Lock()
	delete(d.pending, p)
	d.inProgress.Store(int32(len(d.pending)))
	d.mu.Unlock()
}

// abort ends every dial in progress: it takes them out under mu, and
// cancels and closes them after (closing a TLS connection may write).
func (d *dials) abort() {
	d.mu.Lock()
	ended := make([]dialing, 0, len(d.pending))
	for p := range d.pending {
		ended = append(ended, *p) // conn as it is now, read under mu
		delete(d.pending, p)
	}
	d.inProgress.Store(0)
	d.mu.Unlock()
	for _, p := range ended {
		p.cancel()
		if p.conn != nil {
			p.conn.Close()
		}
	}
}

// watchedConn is a connection whose dial is in progress until its first
// read returns data or it closes.
type watchedConn struct {
	net.Conn
	dials    *dials
	dialing  *dialing
	answered atomic.Bool
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.answered.Load() {
		c.answered.Store(true)
		c.dials.done(c.dialing)
	}
	return n, err
}

func (c *watchedConn) Close() error {
	c.dials.done(c.dialing)
	return c.Conn.Close()
}

// evalCmd is EVALSHA for s, or EVAL when s has no digest.
func (b *Backend) evalCmd(s *backend.Script, keys, args []string) rueidis.Completed {
	if s.SHA1 == "" {
		return b.evalSource(s, keys, args)
	}
	return b.client.B().Evalsha().Sha1(s.SHA1).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

// evalSource is EVAL with s's source.
func (b *Backend) evalSource(s *backend.Script, keys, args []string) rueidis.Completed {
	return b.client.B().Eval().Script(s.Source).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

func isNoScript(res rueidis.RedisResult) bool {
	rerr, ok := rueidis.IsRedisErr(res.Error())
	return ok && rerr.IsNoScript()
}

// EvalBatch implements backend.Backend with one DoMulti; a call the server
// answers with NOSCRIPT runs again through Eval.
func (b *Backend) EvalBatch(ctx context.Context, calls []backend.Call) []backend.Result {
	if len(calls) == 0 {
		return nil
	}
	cmds := make(rueidis.Commands, len(calls))
	for i, c := range calls {
		cmds[i] = b.evalCmd(c.Script, c.Keys, c.Args)
	}
	out, err := byDeadline(ctx, b.dials, func() []backend.Result { return b.evalBatch(ctx, calls, cmds) })
	if err != nil {
		out = make([]backend.Result, len(calls))
		for i := range out {
			out[i].Err = err
		}
	}
	return out
}

// evalBatch sends cmds, the calls' EVALSHAs, in one DoMulti, and a call
// the server answers with NOSCRIPT once more with its source.
func (b *Backend) evalBatch(ctx context.Context, calls []backend.Call, cmds rueidis.Commands) []backend.Result {
	out := make([]backend.Result, len(calls))
	for i, res := range b.client.DoMulti(ctx, cmds...) {
		if isNoScript(res) {
			c := calls[i]
			out[i].Reply, out[i].Err = convert(b.client.Do(ctx, b.evalSource(c.Script, c.Keys, c.Args)))
			out[i].Err = backend.ScriptError(c.Script, out[i].Err)
			continue
		}
		out[i].Reply, out[i].Err = convert(res)
		out[i].Err = backend.ScriptError(calls[i].Script, out[i].Err)
	}
	return out
}

// EvalWait implements backend.ReplicaWaiter: EVALSHA (EVAL on NOSCRIPT)
// and WAIT go out in one DoMulti on one connection - the client's own
// choice for a standalone or sentinel client, since WAIT blocks, and a
// dedicated connection to the primary that owns the keys' slot for a
// cluster client, where WAIT then counts that primary's replicas.
func (b *Backend) EvalWait(ctx context.Context, s *backend.Script, keys, args []string, replicas int, timeout time.Duration) (backend.Reply, int, error) {
	res, err := byDeadline(ctx, b.dials, func() []rueidis.RedisResult {
		if b.client.Mode() == rueidis.ClientModeCluster {
			return b.clusterEvalWait(ctx, s, keys, args, replicas, timeout)
		}
		return b.evalWait(ctx, b.client.DoMulti, s, keys, args, replicas, timeout)
	})
	if err != nil {
		return backend.Reply{}, 0, err
	}
	reply, err := convert(res[0])
	if err != nil {
		return reply, 0, backend.ScriptError(s, err)
	}
	// A server error here (a server without WAIT) is a *backend.ServerError,
	// which the lock does not retry.
	waited, err := convert(res[1])
	if err != nil {
		return reply, 0, fmt.Errorf("WAIT after the %s script: %w", s.Name, err)
	}
	acked, err := waited.AsInt()
	return reply, int(acked), err
}

// evalWait sends the script and WAIT in one DoMulti with do, and once more
// with the script's source when the server answers NOSCRIPT.
func (b *Backend) evalWait(ctx context.Context, do func(context.Context, ...rueidis.Completed) []rueidis.RedisResult,
	s *backend.Script, keys, args []string, replicas int, timeout time.Duration) []rueidis.RedisResult {
	wait := func() rueidis.Completed {
		return b.client.B().Wait().Numreplicas(int64(replicas)).Timeout(timeout.Milliseconds()).Build()
	}
	res := do(ctx, b.evalCmd(s, keys, args), wait())
	if isNoScript(res[0]) {
		res = do(ctx, b.evalSource(s, keys, args), wait())
	}
	return res
}

// maxMoved bounds the MOVED replies one EvalWait follows.
const maxMoved = 3

// clusterEvalWait runs evalWait on a dedicated connection of the cluster
// client, which the client binds to the node that owns the slot of its
// first command's keys. A MOVED reply (the client's slot map is out of
// date; the script did not run) is followed to the node it names, on a
// dedicated connection of that node's own client.
func (b *Backend) clusterEvalWait(ctx context.Context, s *backend.Script, keys, args []string, replicas int, timeout time.Duration) []rueidis.RedisResult {
	var res []rueidis.RedisResult
	run := func(dc rueidis.DedicatedClient) error {
		res = b.evalWait(ctx, dc.DoMulti, s, keys, args, replicas, timeout)
		return nil
	}
	_ = b.client.Dedicated(run)
	for range maxMoved {
		rerr, ok := rueidis.IsRedisErr(res[0].Error())
		if !ok || len(keys) == 0 {
			return res
		}
		addr, moved := rerr.IsMoved()
		if !moved {
			return res
		}
		node, _, err := nodeClient(ctx, b.client, addr, keys[0])
		if err != nil {
			return res
		}
		_ = node.Dedicated(run)
	}
	return res
}

// Subscribe implements backend.Backend.
func (b *Backend) Subscribe(ctx context.Context, channel string) (*backend.Subscription, error) {
	return b.hub.Subscribe(ctx, channel)
}

// WatchKey implements backend.KeyWatcher with client-side caching
// invalidations: on the subscription connection, or, on a cluster client,
// on a tracking connection to the node that serves the key (see
// nodeWatcher). It returns backend.ErrNotSupported with DisableCache and
// on servers without CLIENT TRACKING.
func (b *Backend) WatchKey(ctx context.Context, key string) (*backend.Subscription, error) {
	if b.nodes != nil {
		return b.nodes.watch(ctx, key)
	}
	return b.hub.WatchKey(ctx, key)
}

// Sharded implements backend.ShardedSubscriber: it reports whether the
// client is a cluster client.
func (b *Backend) Sharded() bool { return b.shards != nil }

// SSubscribe implements backend.ShardedSubscriber on a cluster client: the
// channel is subscribed (SSUBSCRIBE) on a dedicated connection to the node
// that owns its slot, one per node, shared by the Subscriptions of every
// channel that node serves (pubsub.ShardedHub). Other clients get
// backend.ErrNotSupported.
func (b *Backend) SSubscribe(ctx context.Context, channel string) (*backend.Subscription, error) {
	if b.shards == nil {
		return nil, fmt.Errorf("%w: SSUBSCRIBE on a client that is not a cluster client", backend.ErrNotSupported)
	}
	return b.shards.Subscribe(ctx, channel)
}

// Close closes the subscription connections and the tracking connections,
// and the client when Dial made it (not one passed to New).
func (b *Backend) Close() error {
	err := b.hub.Close()
	if b.shards != nil {
		b.shards.Close()
	}
	if b.nodes != nil {
		b.nodes.close()
	}
	if b.owned {
		b.closing.Do(b.client.Close)
	}
	return err
}

func (b *Backend) dial(ctx context.Context, sink pubsub.Sink) (pubsub.Conn, <-chan error, error) {
	dc, done, err := dedicate(ctx, b.client, func(dc rueidis.DedicatedClient) <-chan error {
		dc.SetPubSubHooks(rueidis.PubSubHooks{
			OnMessage: func(m rueidis.PubSubMessage) { sink.Deliver(m.Channel, m.Message) },
		})
		// SetOnInvalidations keeps the message hook and replaces the channel
		// that reports the connection's end.
		return dc.SetOnInvalidations(func(keys []rueidis.RedisMessage) {
			if keys == nil {
				sink.Invalidate(nil)
				return
			}
			names := make([]string, 0, len(keys))
			for _, k := range keys {
				if name, err := k.ToString(); err == nil {
					names = append(names, name)
				}
			}
			sink.Invalidate(names)
		})
	})
	if err != nil {
		return nil, nil, err
	}
	return pubSubConn{dc: dc}, done, nil
}

// dedicate opens a dedicated connection of client, sets its hooks with
// hook (which returns the channel that reports the connection's end), and
// makes sure the connection is up with a PING before handing it out - a
// second connection when the first fails, since an idle pooled connection
// may have died unseen.
func dedicate(ctx context.Context, client rueidis.Client, hook func(rueidis.DedicatedClient) <-chan error) (rueidis.DedicatedClient, <-chan error, error) {
	for try := 0; ; try++ {
		dc, _ := client.Dedicate()
		done := hook(dc)
		err := dc.Do(ctx, dc.B().Ping().Build()).Error()
		if err == nil {
			return dc, done, nil
		}
		dc.Close()
		if try == 1 || ctx.Err() != nil {
			return nil, nil, err
		}
	}
}

type pubSubConn struct {
	dc rueidis.DedicatedClient
}

// Subscribe implements pubsub.Conn: the client resolves a SUBSCRIBE when
// its reader reads the confirmation, after running the message hook for
// every message read before it.
func (c pubSubConn) Subscribe(ctx context.Context, channels ...string) error {
	return serverError(c.dc.Do(ctx, c.dc.B().Subscribe().Channel(channels...).Build()).Error())
}

// Unsubscribe implements pubsub.Conn.
func (c pubSubConn) Unsubscribe(ctx context.Context, channels ...string) error {
	return serverError(c.dc.Do(ctx, c.dc.B().Unsubscribe().Channel(channels...).Build()).Error())
}

// serverError makes the server's error reply (NOPERM for a channel the
// user may not use) a *backend.ServerError, which the lock does not retry;
// other errors pass unchanged.
func serverError(err error) error {
	if rerr, ok := rueidis.IsRedisErr(err); ok {
		return &backend.ServerError{Message: rerr.Error()}
	}
	return err
}

// Track implements pubsub.KeyTracker with the tracking (OPTIN) the client
// turns on for every connection unless DisableCache is set: CLIENT CACHING
// YES makes the server track the EXISTS that follows. Cluster clients do
// not come here: a dedicated connection is bound to one node, so their
// keys are tracked by nodeWatcher, on a connection to each node.
func (c pubSubConn) Track(ctx context.Context, key string) (bool, error) {
	return track(ctx, c.dc, key)
}

// track sends CLIENT CACHING YES and EXISTS key on dc, so that the server
// reports key's next change on dc, and reports whether key exists. An
// error reply to CLIENT CACHING (tracking is off, or the server has no
// CLIENT TRACKING) is backend.ErrNotSupported; one to EXISTS (MOVED, on a
// cluster node) is returned as it is.
func track(ctx context.Context, dc rueidis.DedicatedClient, key string) (bool, error) {
	res := dc.DoMulti(ctx, dc.B().ClientCaching().Yes().Build(), dc.B().Exists().Key(key).Build())
	if err := res[0].Error(); err != nil {
		if _, ok := rueidis.IsRedisErr(err); ok {
			return false, fmt.Errorf("%w: %v", backend.ErrNotSupported, err)
		}
		return false, err
	}
	n, err := res[1].AsInt64()
	return n == 1, err
}

func (c pubSubConn) Close() { c.dc.Close() }

// Key watches on a cluster client. A dedicated connection of a cluster
// client is bound to one node, so nodeWatcher keeps a tracking connection
// per node, opened on first use: the client's Nodes gives the node's own
// client, and Dedicate on that a connection to it, with CLIENT TRACKING
// (OPTIN) on as on every connection of a client without DisableCache. A
// key is tracked on the node that last served its slot (at first on any
// node the watcher or the client knows); a MOVED reply to the EXISTS names
// the node to try next, and the watcher remembers it for the slot. An ASK
// reply - the slot is migrating and the key is not on its old node - is
// returned as an error, for the caller to try again later, when the slot
// has moved or the key is back.
//
// When a node's tracking connection drops (the node died or was told to
// close it), each watch on it gets a Reconnect event, and the caller's
// next WatchKey dials again, or is routed to another node by MOVED. The
// watcher holds state per node and per slot, and per key only for the
// watches armed.
type nodeWatcher struct {
	client rueidis.Client

	mu     sync.Mutex
	closed bool
	conns  map[string]*trackConn // by node address: open or being opened
	slots  map[uint16]string     // by slot: the node that served it last
	wg     sync.WaitGroup        // one goroutine per connection
}

// trackConn is one node's tracking connection.
type trackConn struct {
	addr  string
	ready chan struct{} // closed when the dial has ended, with dc or err set
	dc    rueidis.DedicatedClient
	err   error

	// guarded by nodeWatcher.mu
	watches map[string]map[*backend.Subscription]func(backend.Event) // by key
	dead    bool                                                     // dropped: no new watches
}

const (
	// trackDialTimeout bounds opening a node's tracking connection.
	trackDialTimeout = 5 * time.Second
	// maxTrackTries bounds the attempts of one WatchKey on a cluster: the
	// nodes tried, MOVED replies followed and connections re-dialled.
	maxTrackTries = 5
)

// errTrackConnGone: the connection dropped between dial and use.
var errTrackConnGone = errors.New("tracking connection closed")

func newNodeWatcher(client rueidis.Client) *nodeWatcher {
	return &nodeWatcher{client: client, conns: make(map[string]*trackConn), slots: make(map[uint16]string)}
}

// watch implements backend.KeyWatcher.WatchKey on a cluster client.
func (w *nodeWatcher) watch(ctx context.Context, key string) (*backend.Subscription, error) {
	probe := w.client.B().Exists().Key(key).Build()
	slot := probe.Slot()
	addr := w.route(slot)
	var err error
	for range maxTrackTries {
		if addr == "" {
			if addr = w.anyNode(); addr == "" {
				return nil, fmt.Errorf("watch key %q: the client knows no cluster node", key)
			}
		}
		var c *trackConn
		if c, err = w.conn(ctx, addr, key); err != nil {
			if ctx.Err() != nil || errors.Is(err, backend.ErrClosed) {
				return nil, fmt.Errorf("watch key %q: %w", key, err)
			}
			// Unreachable: the node may be gone. Ask another.
			w.forget(slot, addr)
			addr = ""
			continue
		}
		var s *backend.Subscription
		if s, err = w.track(ctx, c, key); err == nil {
			w.learn(slot, addr)
			return s, nil
		}
		if errors.Is(err, backend.ErrNotSupported) || ctx.Err() != nil {
			return nil, fmt.Errorf("watch key %q: %w", key, err)
		}
		if rerr, ok := rueidis.IsRedisErr(err); ok {
			if to, moved := rerr.IsMoved(); moved {
				w.learn(slot, to)
				addr = to
				continue
			}
			// ASK, CLUSTERDOWN, TRYAGAIN: the caller tries again later.
			return nil, fmt.Errorf("watch key %q on %s: %w", key, addr, &backend.ServerError{Message: rerr.Error()})
		}
		// The connection broke: drop it (its watches get Reconnect) and
		// dial again.
		w.discard(c)
	}
	return nil, fmt.Errorf("watch key %q: gave up after %d tries: %w", key, maxTrackTries, err)
}

// track arms a watch of key on c. The watch listens from before the
// EXISTS, as pubsub.Hub's do: an early invalidation costs a re-check, a
// missed one the wake-up.
func (w *nodeWatcher) track(ctx context.Context, c *trackConn, key string) (*backend.Subscription, error) {
	var s *backend.Subscription
	s, deliver := backend.NewSubscription(key, func() { w.unwatch(c, s) })
	w.mu.Lock()
	if c.dead {
		w.mu.Unlock()
		return nil, errTrackConnGone
	}
	set := c.watches[key]
	if set == nil {
		set = make(map[*backend.Subscription]func(backend.Event))
		c.watches[key] = set
	}
	set[s] = deliver
	w.mu.Unlock()
	exists, err := track(ctx, c.dc, key)
	if err != nil {
		s.Close()
		return nil, err
	}
	if !exists {
		deliver(backend.Event{})
	}
	return s, nil
}

// unwatch stops delivery to s, a watch of c.
func (w *nodeWatcher) unwatch(c *trackConn, s *backend.Subscription) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if set := c.watches[s.Channel()]; set != nil {
		delete(set, s)
		if len(set) == 0 {
			delete(c.watches, s.Channel())
		}
	}
}

// invalidate is c's invalidation hook, called by its reader: it wakes the
// watches of keys and forgets them, since the server reports a tracked key
// once. nil (a flush, or the connection's end) ends the tracking of every
// key: each watch gets a Reconnect event.
func (w *nodeWatcher) invalidate(c *trackConn, keys []rueidis.RedisMessage) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	if keys == nil {
		for key, set := range c.watches {
			for _, deliver := range set {
				deliver(backend.Event{Reconnect: true})
			}
			delete(c.watches, key)
		}
		return
	}
	for _, k := range keys {
		key, err := k.ToString()
		if err != nil {
			continue
		}
		for _, deliver := range c.watches[key] {
			deliver(backend.Event{})
		}
		delete(c.watches, key)
	}
}

// conn returns the tracking connection to addr, dialing it when there is
// none. It waits for a dial in progress at most until ctx ends.
func (w *nodeWatcher) conn(ctx context.Context, addr, key string) (*trackConn, error) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil, backend.ErrClosed
	}
	c := w.conns[addr]
	if c == nil {
		c = &trackConn{addr: addr, ready: make(chan struct{}), watches: make(map[string]map[*backend.Subscription]func(backend.Event))}
		w.conns[addr] = c
		w.wg.Add(1)
		go w.run(c, key)
	}
	w.mu.Unlock()
	select {
	case <-c.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if c.err != nil {
		return nil, c.err
	}
	return c, nil
}

// run dials c, then waits for its end and drops it.
func (w *nodeWatcher) run(c *trackConn, key string) {
	defer w.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), trackDialTimeout)
	dc, done, err := w.open(ctx, c, key)
	cancel()
	w.mu.Lock()
	if err == nil && w.closed {
		dc.Close()
		err = backend.ErrClosed
	}
	if err != nil {
		c.err = fmt.Errorf("open tracking connection to %s: %w", c.addr, err)
		c.dead = true
		if w.conns[c.addr] == c {
			delete(w.conns, c.addr)
		}
		w.mu.Unlock()
		close(c.ready)
		return
	}
	c.dc = dc
	w.mu.Unlock()
	close(c.ready)
	for range done { // at most one error, then closed
	}
	w.drop(c)
	dc.Close()
}

// open dials addr's tracking connection, and closes the idle connections
// to nodes the client no longer knows.
func (w *nodeWatcher) open(ctx context.Context, c *trackConn, key string) (rueidis.DedicatedClient, <-chan error, error) {
	node, nodes, err := nodeClient(ctx, w.client, c.addr, key)
	if err != nil {
		return nil, nil, err
	}
	w.prune(nodes)
	return dedicate(ctx, node, func(dc rueidis.DedicatedClient) <-chan error {
		return dc.SetOnInvalidations(func(keys []rueidis.RedisMessage) { w.invalidate(c, keys) })
	})
}

// nodeClient returns the own client of the cluster node at addr, and every
// node the client knows. The client learns of a node it does not know yet
// (named by a MOVED before the client's next refresh) when it follows the
// same redirection for a command on a key of the same slot: for an addr it
// does not know, nodeClient sends EXISTS key first, unless key is empty.
func nodeClient(ctx context.Context, client rueidis.Client, addr, key string) (rueidis.Client, map[string]rueidis.Client, error) {
	nodes := client.Nodes()
	if node, ok := nodes[addr]; ok {
		return node, nodes, nil
	}
	if key != "" {
		if err := client.Do(ctx, client.B().Exists().Key(key).Build()).Error(); ctx.Err() != nil {
			return nil, nil, err
		}
		nodes = client.Nodes()
		if node, ok := nodes[addr]; ok {
			return node, nodes, nil
		}
	}
	return nil, nil, fmt.Errorf("the client does not know node %s", addr)
}

// prune closes the connections without watches to nodes not in nodes.
func (w *nodeWatcher) prune(nodes map[string]rueidis.Client) {
	var idle []*trackConn
	w.mu.Lock()
	for addr, c := range w.conns {
		if _, ok := nodes[addr]; !ok && c.dc != nil && len(c.watches) == 0 {
			idle = append(idle, c)
		}
	}
	w.mu.Unlock()
	for _, c := range idle {
		w.discard(c)
	}
}

// discard closes c; its goroutine then drops it.
func (w *nodeWatcher) discard(c *trackConn) {
	w.drop(c)
	c.dc.Close()
}

// drop takes c out of use and gives each of its watches a Reconnect event.
func (w *nodeWatcher) drop(c *trackConn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c.dead = true
	if w.conns[c.addr] == c {
		delete(w.conns, c.addr)
	}
	for key, set := range c.watches {
		if !w.closed {
			for _, deliver := range set {
				deliver(backend.Event{Reconnect: true})
			}
		}
		delete(c.watches, key)
	}
}

// route returns the node that served slot last, or "".
func (w *nodeWatcher) route(slot uint16) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.slots[slot]
}

// learn notes that addr serves slot.
func (w *nodeWatcher) learn(slot uint16, addr string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.slots[slot] = addr
}

// forget forgets that addr serves slot.
func (w *nodeWatcher) forget(slot uint16, addr string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.slots[slot] == addr {
		delete(w.slots, slot)
	}
}

// anyNode returns a node to try for a slot of unknown owner: one with an
// open tracking connection, else one the client knows.
func (w *nodeWatcher) anyNode() string {
	w.mu.Lock()
	for addr, c := range w.conns {
		if c.dc != nil && !c.dead {
			w.mu.Unlock()
			return addr
		}
	}
	w.mu.Unlock()
	for addr := range w.client.Nodes() {
		return addr
	}
	return ""
}

// close closes the tracking connections; their watches get no more
// events.
func (w *nodeWatcher) close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	var open []rueidis.DedicatedClient
	for _, c := range w.conns {
		if c.dc != nil {
			open = append(open, c.dc)
		}
	}
	w.mu.Unlock()
	for _, dc := range open {
		dc.Close()
	}
	w.wg.Wait()
}

// Sharded wake-ups on a cluster client. shardDialer is the
// pubsub.NodeDialer of the Backend's ShardedHub: a node's connection is a
// dedicated connection of the node's own client (the client's Nodes), with
// pub/sub hooks that pass shard messages (smessage, which the client hands
// to OnMessage) to the hub and the server's own SUNSUBSCRIBE of a channel -
// its slot moved - to Sink.Unsubscribed.
type shardDialer struct {
	client rueidis.Client

	mu    sync.Mutex
	named map[string]string // by node address: a channel a MOVED sent there
}

// slotMap implements pubsub.SlotMap with one CLUSTER SLOTS through the
// client: each range's primary, as "host:port". A node that does not
// know its own address reports an empty host; that range is left out
// (a MOVED names its owner) unless the client knows one node only.
func (d *shardDialer) slotMap(ctx context.Context) ([]pubsub.SlotRange, error) {
	entries, err := d.client.Do(ctx, d.client.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return nil, serverError(err)
	}
	var only string
	if nodes := d.client.Nodes(); len(nodes) == 1 {
		for addr := range nodes {
			only, _, _ = net.SplitHostPort(addr)
		}
	}
	ranges := make([]pubsub.SlotRange, 0, len(entries))
	for _, e := range entries {
		r, known, err := slotRange(e, only)
		if err != nil {
			return nil, err
		}
		if known {
			ranges = append(ranges, r)
		}
	}
	return ranges, nil
}

// slotRange reads one CLUSTER SLOTS entry, [first, last, [host, port,
// ...], replicas...]; known is false when its primary's host is unknown
// ("" with no fallback host, or "?").
func slotRange(e rueidis.RedisMessage, fallback string) (r pubsub.SlotRange, known bool, err error) {
	malformed := fmt.Errorf("CLUSTER SLOTS: unexpected entry %v", e)
	f, err := e.ToArray()
	if err != nil || len(f) < 3 {
		return r, false, malformed
	}
	first, err1 := f[0].AsInt64()
	last, err2 := f[1].AsInt64()
	primary, err3 := f[2].ToArray()
	if errors.Join(err1, err2, err3) != nil || len(primary) < 2 {
		return r, false, malformed
	}
	host, _ := primary[0].ToString()
	port, err := primary[1].AsInt64()
	if err != nil {
		return r, false, malformed
	}
	if host == "" {
		host = fallback
	}
	r = pubsub.SlotRange{First: uint16(first), Last: uint16(last), Primary: net.JoinHostPort(host, strconv.FormatInt(port, 10))}
	return r, host != "" && host != "?", nil
}

// dial implements pubsub.NodeDialer. A node named by a MOVED that the
// client does not know yet is learned through a command on the channel
// that was sent there (see nodeClient).
func (d *shardDialer) dial(ctx context.Context, addr string, sink pubsub.Sink) (pubsub.Conn, <-chan error, error) {
	d.mu.Lock()
	key := d.named[addr]
	d.mu.Unlock()
	node, _, err := nodeClient(ctx, d.client, addr, key)
	if err != nil {
		return nil, nil, err
	}
	leaving := &pubsub.Leaving{}
	dc, done, err := dedicate(ctx, node, func(dc rueidis.DedicatedClient) <-chan error {
		return dc.SetPubSubHooks(rueidis.PubSubHooks{
			OnMessage: func(m rueidis.PubSubMessage) { sink.Deliver(m.Channel, m.Message) },
			OnSubscription: func(s rueidis.PubSubSubscription) {
				// The server's own SUNSUBSCRIBE (the slot moved), not the
				// confirmation of the hub's.
				if s.Kind == "sunsubscribe" && !leaving.Confirmed(s.Channel) {
					sink.Unsubscribed(s.Channel)
				}
			},
		})
	})
	if err != nil {
		return nil, nil, err
	}
	return shardConn{dc: dc, d: d, leaving: leaving}, done, nil
}

// shardConn is one node's sharded subscription connection.
type shardConn struct {
	dc      rueidis.DedicatedClient
	d       *shardDialer
	leaving *pubsub.Leaving // SUNSUBSCRIBEs whose confirmations are to come
}

// Subscribe implements pubsub.Conn with SSUBSCRIBE of the channels of one
// slot (the ShardedHub's node hubs send one slot at a time: the server
// refuses several in one, and the node client's builder panics on them).
// The client resolves an SSUBSCRIBE when its reader reads the first
// confirmation (the server sends the others right after it), after
// running the message hook for every message read before. A MOVED reply
// is a *backend.ServerError ("MOVED <slot> <host:port>").
func (c shardConn) Subscribe(ctx context.Context, channels ...string) error {
	err := c.dc.Do(ctx, c.dc.B().Ssubscribe().Channel(channels...).Build()).Error()
	if rerr, ok := rueidis.IsRedisErr(err); ok {
		if addr, moved := rerr.IsMoved(); moved {
			c.d.mu.Lock()
			c.d.named[addr] = channels[0]
			c.d.mu.Unlock()
		}
	}
	return serverError(err)
}

// Unsubscribe implements pubsub.Conn with SUNSUBSCRIBE of the channels of
// one slot, counted in leaving first: the reader takes their
// confirmations for the hub's, not the server's.
func (c shardConn) Unsubscribe(ctx context.Context, channels ...string) error {
	c.leaving.Sent(channels...)
	err := c.dc.Do(ctx, c.dc.B().Sunsubscribe().Channel(channels...).Build()).Error()
	if err != nil {
		c.leaving.Unsent(channels...)
	}
	return serverError(err)
}

func (c shardConn) Close() { c.dc.Close() }

// convert maps a rueidis result to a backend reply: server error replies
// become *backend.ServerError, a nil reply becomes backend.Nil.
func convert(res rueidis.RedisResult) (backend.Reply, error) {
	if err := res.Error(); err != nil {
		if rueidis.IsRedisNil(err) {
			return backend.Reply{}, nil
		}
		if rerr, ok := rueidis.IsRedisErr(err); ok {
			return backend.Reply{}, &backend.ServerError{Message: rerr.Error()}
		}
		if errors.Is(err, rueidis.ErrClosing) {
			return backend.Reply{}, errors.Join(backend.ErrClosed, err)
		}
		return backend.Reply{}, err
	}
	msg, err := res.ToMessage()
	if err != nil {
		return backend.Reply{}, err
	}
	return fromMessage(msg)
}

// fromMessage maps a reply with RESP2's shapes, whichever protocol the
// connection speaks: a RESP3 map becomes a flat array of keys and values
// (in no particular order), a double its decimal string, a boolean 1 or
// nil, and an error reply inside an array *backend.ServerError.
func fromMessage(m rueidis.RedisMessage) (backend.Reply, error) {
	switch {
	case m.IsNil():
		return backend.Reply{}, nil
	case m.Error() != nil:
		return backend.Reply{}, &backend.ServerError{Message: m.Error().Error()}
	case m.IsInt64():
		n, err := m.AsInt64()
		return backend.IntReply(n), err
	case m.IsString():
		s, err := m.ToString()
		return backend.StringReply(s), err
	case m.IsFloat64():
		f, err := m.ToFloat64()
		return backend.StringReply(strconv.FormatFloat(f, 'f', -1, 64)), err
	case m.IsArray():
		arr, err := m.ToArray()
		if err != nil {
			return backend.Reply{}, err
		}
		elems := make([]backend.Reply, len(arr))
		for i := range arr {
			if elems[i], err = fromMessage(arr[i]); err != nil {
				return backend.Reply{}, err
			}
		}
		return backend.ArrayReply(elems...), nil
	case m.IsMap():
		kv, err := m.ToMap()
		if err != nil {
			return backend.Reply{}, err
		}
		elems := make([]backend.Reply, 0, 2*len(kv))
		for k, v := range kv {
			r, err := fromMessage(v)
			if err != nil {
				return backend.Reply{}, err
			}
			elems = append(elems, backend.StringReply(k), r)
		}
		return backend.ArrayReply(elems...), nil
	case m.IsBool():
		v, err := m.AsBool()
		if v {
			return backend.IntReply(1), err
		}
		return backend.Reply{}, err
	}
	return backend.Reply{}, backend.ErrUnexpectedReply
}
