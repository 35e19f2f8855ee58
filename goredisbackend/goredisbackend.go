// Package goredisbackend adapts a github.com/redis/go-redis/v9 client to
// backend.Backend, so package lock can run on it.
//
// # Clients
//
// New takes a redis.UniversalClient: redis.NewClient (standalone),
// redis.NewFailoverClient (Sentinel), redis.NewClusterClient, or what
// redis.NewUniversalClient returns for those, with or without hooks such as
// redisotel's. A redis.Ring is not supported: it spreads channels over
// independent servers, so its Subscribe returns backend.ErrNotSupported.
// Set Options.ContextTimeoutEnabled: without it go-redis ignores context
// deadlines on the socket, and a call to a server that hangs waits for
// ReadTimeout (5 s by default) instead of the lock's deadline.
//
// # Scripts and retries
//
// Eval sends EVALSHA with the script's digest (then EVAL on
// NOSCRIPT). EvalBatch sends its calls as one pipeline (Pipelined), one
// write per node, and runs a call the server answered with NOSCRIPT again
// with EVAL.
//
// go-redis retries a command after a network error or a read timeout
// (Options.MaxRetries, 3 by default), even when the command was written and
// only its reply was lost. The adapter sends every script as a command go-redis never retries
// (Cmder.NoRetry), whatever MaxRetries says; the client's other commands
// keep their retries. The backend contract requires it (a network error
// leaves the outcome unknown, and Eval must not retry on its own), and not
// every script tolerates a second run. acquire, unlock, renew and leave
// do: they carry the token and count of the hold the client knows (unlock
// also a request latch), so a second run never counts or releases twice. But
// force_unlock and delete act on whoever holds the lock: the first run
// hands the lock to the head waiter, and a retry would evict that new
// holder too. And TryLock with no wait promises a single attempt. The lock retries
// what is safe itself, with back-off (RULES.md, X14). For the same reason
// a standalone or Sentinel client made by Dial dials once before it
// reports a connection it cannot open (DialerRetries 1, unless the options
// say otherwise), not 5 times 100 ms apart as go-redis does by default.
//
// # Combined scripts
//
// go-redis sends each command on a pooled connection of its own and
// waits for its reply before that connection serves another, so under
// load (many goroutines locking at once) every script paid a write, a
// read and a server wake-up of its own. On a standalone or Sentinel
// client Eval therefore sends a script at once only when no other Eval of
// the Backend is on its way; otherwise the script is queued, and goes out
// in a pipeline (EvalBatch) with the other scripts queued when that
// pipeline leaves: at most 128 scripts a pipeline, at most 2 pipelines on
// their way at once, not counting one that has been on its way for over
// 100 ms, so that scripts queued behind a pipeline stuck on a dead
// connection go out on another. rueidis and valkey-go pipeline this way
// by themselves. An uncontended lock waits for nobody. In the benchmark of
// 64 goroutines over 1,024 locks this took the pairs a second from 0.38x
// rueidislock's to 0.63-0.68x and halved the client's and the server's
// CPU per pair (BENCHMARKS.md).
// On a cluster client every script goes out alone, as before: a pipeline
// there spans nodes and returns when the slowest has answered, so one
// primary failing over would hold up the scripts of every other.
//
// A combined script is still never retried (pipelines holding a NoRetry
// command are not), and a caller whose context ends returns at once:
// while its script is queued, the script is dropped (a pipeline leaving
// also drops the queued scripts whose context has ended); once the
// pipeline has taken it, the reply is abandoned and the outcome unknown,
// as after a network error (rueidis and valkey-go do the same with a
// command still in their queue). The pipeline runs until the latest
// deadline of its callers, or under go-redis' ReadTimeout and
// WriteTimeout when one of them has none, with the values of its oldest
// caller's context: go-redis' hooks see a pipeline there (redisotel: one
// span, under that caller's span) instead of each command.
//
// # Wake-ups
//
// Wake-ups arrive on one redis.PubSub at a time per Backend, shared by every
// channel through pubsub.Hub, which subscribes and unsubscribes channels
// at run time. Subscribe returns once the server confirmed the channel (the
// subscribe reply read by the receive loop), not when go-redis wrote the
// command. go-redis re-dials a PubSub by itself when its connection fails,
// and messages published meanwhile are lost without a word; so the adapter
// treats anything that makes go-redis reconnect (a failed read or write,
// or a subscribe reply nobody asked for, which is go-redis re-subscribing)
// as the end of the connection: the Hub tells every subscriber (a Reconnect
// event), opens a new PubSub and subscribes it again. The adapter also
// sends a PING after a second of silence and ends the connection when
// nothing comes back within 3 s, so a server that hangs or a dead network
// path is noticed in about 4.5 s, not at TCP's keepalive timeout.
//
// On a *redis.ClusterClient the Backend also implements
// backend.ShardedSubscriber (Sharded reports true, and package lock wakes
// waiters with SPUBLISH): SSubscribe listens with SSUBSCRIBE through a
// pubsub.ShardedHub, on one redis.PubSub per primary that owns a
// subscribed channel's slot, each made from the cluster client's own
// client for that node (not go-redis' cluster SSubscribe, which puts every
// channel of a PubSub on one node). A MOVED reply to SSUBSCRIBE sends the
// channel to the node it names; the server's own SUNSUBSCRIBE (the slot
// moved: a resharding or a failover) gives the channel's subscribers a
// Reconnect event and subscribes it again at the slot's new owner, as
// does the end of a node's connection. On other clients SSubscribe
// returns backend.ErrNotSupported.
//
// # Optional capabilities
//
// Backend implements backend.ReplicaWaiter: the script and WAIT run on one
// connection borrowed from the client (Client.Conn) - on a cluster client,
// from the client of the primary that owns the keys' slot
// (ClusterClient.MasterForKey) - pipelined when WAIT's timeout fits in the
// client's ReadTimeout, else one after the other. A MOVED reply there is
// returned, not followed (the lock retries).
//
// # Key watching
//
// A Backend made by Dial implements backend.KeyWatcher with go-redis'
// client-side caching (CSC), so the lock notices at once a lock hash that
// changes without publishing anything (a DEL by hand, an expiry, an
// eviction). Dial does not turn CSC on for the client it returns to the
// lock: at the first WatchKey it opens a second, small client from the same
// options (4 connections per node; go-redis' pipelines, which are not
// tracked, are off on it), whose CSC cache is the adapter's own and stores
// nothing:
//   - standalone: a redis.Client;
//   - Sentinel: a standalone redis.Client whose dialer asks the sentinels
//     (SentinelAddrs, in order) for the master at each dial, since
//     go-redis' failover client never attaches CSC; after a failover its
//     connections to the old master keep working (a replica reports the
//     changes it replicates) until they drop, and new ones go to the new
//     master;
//   - cluster: a redis.ClusterClient with CSC on every node client
//     (ClusterOptions.NewClient), routing to primaries.
//
// go-redis runs CLIENT TRACKING ON on each of that client's connections.
// WatchKey sends one EXISTS through it: the server then reports the key's
// next change on the connection that read it, and go-redis hands the
// report to the adapter's cache (DeleteByRedisKey), which wakes the watch.
// go-redis reads a busy connection's reports before its next command and
// an idle one's every DrainInterval, 2 ms here unless
// opt.ClientSideCacheConfig sets its DrainInterval: on loopback a DEL
// reaches the watcher in about 1.5 ms (p50) to 5 ms (p99). When a tracked
// connection is closed, found dead by that drain, re-initialised or lent
// out, go-redis tells the cache (EvictByConn): the watches it carried get a
// Reconnect event. The other client-side caching options of opt
// (ClientSideCache, RefreshOnInvalidate, CoalesceMisses,
// InvalidationBatchWindow) apply to the main client only, as before.
//
// A Backend made by New watches keys the same way, with a watch client
// made from the given client's own options (Options(): its address or
// dialer, credentials, TLS, timeouts): for a *redis.Client (standalone, or
// a failover client, whose dialer asks the sentinels) and a
// *redis.ClusterClient. Closing the Backend closes that watch client, not
// the given one. Any other client (one wrapped by the caller's own type)
// watches nothing.
//
// WatchKey returns backend.ErrNotSupported, and the lock falls back to its
// heartbeat for such changes, where the adapter has no watch client (a
// client New cannot read options from) and where go-redis does not attach
// CSC: Protocol 2, DB other than 0, a credentials provider, or a server
// that refuses HELLO 3 or CLIENT TRACKING (found out at the first
// WatchKey: go-redis then runs the EXISTS around the cache).
package goredisbackend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/backend/pubsub"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Backend implements backend.Backend on a go-redis client.
type Backend struct {
	client  redis.UniversalClient
	scripts *combiner // Eval's scripts, combined under load; nil on a cluster client
	owned   bool      // made by Dial: Close closes the client too
	hub     *pubsub.Hub
	cluster *redis.ClusterClient // the client, when it is one
	shards  *pubsub.ShardedHub   // SSubscribe; nil unless cluster is set
	watch   *watcher             // key watching; nil without a watch client
	closing sync.Once
}

var (
	_ backend.Backend           = (*Backend)(nil)
	_ backend.KeyWatcher        = (*Backend)(nil)
	_ backend.ReplicaWaiter     = (*Backend)(nil)
	_ backend.ShardedSubscriber = (*Backend)(nil)
)

// New returns a Backend using client. Closing the Backend does not close
// the client.
//
// The client's dial retries are its own: with go-redis' default
// (DialerRetries 5, 100 ms apart) each connection the client cannot open
// costs 0.4 s before the error reaches the lock, so a TryLock with no
// wait on a stopped server takes about 0.8 s. Build the client with
// DialerRetries: 1 to have it report a refused dial at once, as Dial does.
//
// On a server without maintenance notifications (Redis before 8, Valkey),
// build the client with MaintNotificationsConfig's Mode set to
// maintnotifications.ModeDisabled, as Dial does: in go-redis' default auto
// mode, v9.23.0 writes the options a client shares with the connections
// it lends (Conn) under each one's own lock, a data race, and EvalWait
// lends one when WAIT's timeout does not fit in the client's ReadTimeout.
func New(client redis.UniversalClient) *Backend {
	b := &Backend{client: client}
	b.hub = pubsub.NewHub(b.dial)
	if cc, ok := client.(*redis.ClusterClient); ok {
		b.cluster = cc
		b.shards = pubsub.NewShardedHub(b.dialNode, b.slotMap)
	} else {
		b.scripts = &combiner{one: b.evalOne, batch: b.EvalBatch, stallAfter: stallAfter}
	}
	if opt, ok := optionsOf(client); ok && cscPossible(opt) {
		b.watch = newWatcher(opt)
	}
	return b
}

// optionsOf returns the options a watch client for client is made from:
// those of a *redis.Client (standalone or failover) or a
// *redis.ClusterClient.
func optionsOf(client redis.UniversalClient) (*redis.UniversalOptions, bool) {
	switch c := client.(type) {
	case *redis.Client:
		o := c.Options()
		if o.Network == "unix" {
			return nil, false
		}
		return &redis.UniversalOptions{Addrs: []string{o.Addr}, Dialer: o.Dialer, ClientName: o.ClientName, DB: o.DB,
			Protocol: o.Protocol, Username: o.Username, Password: o.Password,
			CredentialsProvider: o.CredentialsProvider, CredentialsProviderContext: o.CredentialsProviderContext,
			StreamingCredentialsProvider: o.StreamingCredentialsProvider,
			DialTimeout:                  o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
			ContextTimeoutEnabled: o.ContextTimeoutEnabled, TLSConfig: o.TLSConfig}, true
	case *redis.ClusterClient:
		o := c.Options()
		return &redis.UniversalOptions{Addrs: o.Addrs, IsClusterMode: true, Dialer: o.Dialer, ClientName: o.ClientName,
			Protocol: o.Protocol, Username: o.Username, Password: o.Password,
			CredentialsProvider: o.CredentialsProvider, CredentialsProviderContext: o.CredentialsProviderContext,
			StreamingCredentialsProvider: o.StreamingCredentialsProvider,
			DialTimeout:                  o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
			ContextTimeoutEnabled: o.ContextTimeoutEnabled, TLSConfig: o.TLSConfig}, true
	}
	return nil, false
}

// Dial returns a Backend on a new client made from opt
// (redis.NewUniversalClient: standalone, sentinel or cluster, by the
// options); closing the Backend closes that client too. The Backend can
// watch keys (WatchKey): at its first WatchKey it opens a second, small
// client from opt with client-side caching, see the package
// documentation. opt is not modified.
//
// For a standalone or Sentinel client, where opt leaves DialerRetries 0,
// Dial sets it to 1: a connection that cannot be opened is reported at
// once (TryLock with no wait returns ErrUnavailable within milliseconds of
// a refused dial), instead of after go-redis' default of 5 tries 100 ms
// apart, which took one TryLock 0.81-1.61 s. The lock, and the
// subscription connection, retry with back-off of their own. The price:
// after PoolSize failed dials go-redis stops dialling and probes once a
// second, and failing fast gets there sooner, so after a server restart
// (an outage of 0.3-1.5 s, 4 goroutines locking) the first hold came
// 0.6-0.9 s after the server was back, against 0-0.5 s with go-redis'
// default; set DialerRetries to 5 to prefer that. A DialerRetries set in
// opt is kept, and a cluster client keeps go-redis' default: there the
// lock's next hold after a failover came 0.9-1.3 s after the cluster
// settled instead of 0.1-0.2 s (internal/faultsuite TestClusterFailover).
//
// Where opt leaves MaintNotificationsConfig nil, Dial turns go-redis'
// maintenance notifications off (maintnotifications.ModeDisabled) rather
// than leave them in go-redis' auto mode: on a server without them (Redis
// before 8, Valkey) auto mode's handshake fails on every new connection
// and go-redis v9.23.0 then writes the config its Client shares with each
// Conn it makes, under a lock of each own - a data race the race detector
// reports (the Backend's replica-acknowledged writes use a Conn;
// internal/faultsuite TestClusterFailover). Set MaintNotificationsConfig
// in opt to keep them, on a server that has them.
func Dial(opt *redis.UniversalOptions) *Backend {
	o := *opt
	cluster := o.MasterName == "" && (len(o.Addrs) > 1 || o.IsClusterMode)
	if o.DialerRetries == 0 && !cluster {
		o.DialerRetries = 1
	}
	if o.MaintNotificationsConfig == nil {
		o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	}
	b := New(redis.NewUniversalClient(&o))
	b.owned = true
	if cscPossible(&o) {
		b.watch = newWatcher(&o)
	}
	return b
}

// Eval implements backend.Backend: EVALSHA, and EVAL when the server
// answers NOSCRIPT. Neither is retried by go-redis. On a standalone or
// Sentinel client, a script that starts while another Eval of this Backend
// is on its way goes out in a pipeline with the others queued (EvalBatch;
// see the package documentation).
func (b *Backend) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	call := backend.Call{Script: s, Keys: keys, Args: args}
	var res backend.Result
	if b.scripts == nil {
		res = b.evalOne(ctx, call)
	} else {
		res = b.scripts.eval(ctx, call)
	}
	return res.Reply, res.Err
}

// evalOne runs one script on its own.
func (b *Backend) evalOne(ctx context.Context, c backend.Call) backend.Result {
	rep, err := convert(run(ctx, b.client, c.Script, c.Keys, c.Args))
	return backend.Result{Reply: rep, Err: backend.ScriptError(c.Script, err)}
}

// run sends s through p as EVALSHA, and as EVAL when the server answers
// NOSCRIPT or s has no SHA-1 (backend.NewScript in FIPS 140-only mode).
// The adapter computes no digest itself. Neither command is retried by
// go-redis.
func run(ctx context.Context, p processor, s *backend.Script, keys, args []string) *redis.Cmd {
	if s.SHA1 != "" {
		cmd := evalCmd(ctx, "evalsha", s.SHA1, keys, args)
		_ = p.Process(ctx, once{cmd})
		if !isNoScript(cmd.Err()) {
			return cmd
		}
	}
	cmd := evalCmd(ctx, "eval", s.Source, keys, args)
	_ = p.Process(ctx, once{cmd})
	return cmd
}

// EvalBatch implements backend.Backend with one pipeline; a call the
// server answers with NOSCRIPT runs again with EVAL.
func (b *Backend) EvalBatch(ctx context.Context, calls []backend.Call) []backend.Result {
	if len(calls) == 0 {
		return nil
	}
	cmds := make([]*redis.Cmd, len(calls))
	// Each command carries its own result; the pipeline's error is the
	// first of them.
	_, _ = b.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range calls {
			if c.Script.SHA1 == "" {
				cmds[i] = evalCmd(ctx, "eval", c.Script.Source, c.Keys, c.Args)
			} else {
				cmds[i] = evalCmd(ctx, "evalsha", c.Script.SHA1, c.Keys, c.Args)
			}
			_ = p.Process(ctx, once{cmds[i]})
		}
		return nil
	})
	out := make([]backend.Result, len(calls))
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			c := calls[i]
			cmd = evalCmd(ctx, "eval", c.Script.Source, c.Keys, c.Args)
			_ = b.client.Process(ctx, once{cmd})
		}
		out[i].Reply, out[i].Err = convert(cmd)
		out[i].Err = backend.ScriptError(calls[i].Script, out[i].Err)
	}
	return out
}

// waitMargin is the room left between WAIT's own timeout and the read
// timeout of the pipeline that carries it.
const waitMargin = time.Second

// singleConn is a client that runs a pipeline on one of its connections
// and can lend one: *redis.Client, standalone or Sentinel.
type singleConn interface {
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	Conn() *redis.Conn
	Options() *redis.Options
}

// EvalWait implements backend.ReplicaWaiter: the script and WAIT run on one
// connection of the client's, so WAIT counts the replicas that
// acknowledged the script's writes. On a cluster client that connection
// goes to the primary that owns the slot of keys[0] in the client's view
// (ClusterClient.MasterForKey), and is not redirected: a MOVED reply there
// (the slot moved) is returned as the script's *backend.ServerError, for
// the caller to retry, and makes go-redis reload its view; so is an ASK
// reply (the slot is migrating and the keys have left), until the
// migration ends. The script and WAIT go out as
// one pipeline when WAIT's timeout fits in the client's ReadTimeout (a
// pipeline reads every reply with that timeout), else one after the other.
// A client that cannot lend a connection (a redis.Ring) gets
// backend.ErrNotSupported.
func (b *Backend) EvalWait(ctx context.Context, s *backend.Script, keys, args []string, replicas int, timeout time.Duration) (backend.Reply, int, error) {
	sc, err := b.scriptConn(ctx, keys)
	if err != nil {
		return backend.Reply{}, 0, err
	}
	var (
		script *redis.Cmd
		wait   *redis.IntCmd
	)
	if rt := sc.Options().ReadTimeout; rt <= 0 || timeout+waitMargin <= rt {
		// The client runs a pipeline on one connection of its pool. A
		// lent connection (Conn) is kept for the other case: in go-redis'
		// default maintenance-notifications mode, on a server without them,
		// v9.23.0 writes the options a client shares with each Conn under
		// the Conn's own lock when a new connection's handshake fails - a
		// data race (TestEvalWaitOnAClientOfYoursInAutoMode).
		pipelined := func(name, payload string) {
			_, _ = sc.Pipelined(ctx, func(p redis.Pipeliner) error {
				script = evalCmd(ctx, name, payload, keys, args)
				_ = p.Process(ctx, once{script})
				wait = redis.NewIntCmd(ctx, "wait", replicas, timeout.Milliseconds())
				_ = p.Process(ctx, wait)
				return nil
			})
		}
		if s.SHA1 != "" {
			pipelined("evalsha", s.SHA1)
		}
		if script == nil || isNoScript(script.Err()) {
			pipelined("eval", s.Source)
		}
	} else {
		conn := sc.Conn()
		defer conn.Close()
		script = run(ctx, conn, s, keys, args)
		if script.Err() == nil || errors.Is(script.Err(), redis.Nil) {
			wait = conn.Wait(ctx, replicas, timeout)
		}
	}
	reply, err := convert(script)
	if err != nil {
		if _, moved := redis.IsMovedError(script.Err()); moved && b.cluster != nil {
			b.cluster.ReloadState(ctx)
		}
		return reply, 0, backend.ScriptError(s, err)
	}
	acked, err := wait.Result()
	if err != nil {
		return reply, 0, mapError(err)
	}
	return reply, int(acked), nil
}

// scriptConn returns the client EvalWait borrows a connection from: the
// client itself, or on a cluster client the primary of keys' slot.
func (b *Backend) scriptConn(ctx context.Context, keys []string) (singleConn, error) {
	if b.cluster != nil {
		key := ""
		if len(keys) > 0 {
			key = keys[0]
		}
		node, err := b.cluster.MasterForKey(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("goredisbackend: the primary of %q: %w", key, mapError(err))
		}
		return node, nil
	}
	sc, ok := b.client.(singleConn)
	if !ok {
		return nil, fmt.Errorf("%w: WAIT after a script needs one connection; %T cannot lend one", backend.ErrNotSupported, b.client)
	}
	return sc, nil
}

// Subscribe implements backend.Backend.
func (b *Backend) Subscribe(ctx context.Context, channel string) (*backend.Subscription, error) {
	return b.hub.Subscribe(ctx, channel)
}

// WatchKey implements backend.KeyWatcher with go-redis' client-side
// caching on a watch client of its own (see the package documentation),
// on a Backend made by Dial or by New from a *redis.Client or a
// *redis.ClusterClient. It returns backend.ErrNotSupported where there is
// no watch client (New given another client, or one on a unix socket),
// and where go-redis does not turn client-side caching on for it
// (Protocol 2, DB other than 0, a credentials provider, a server that
// refuses RESP3 or CLIENT TRACKING).
func (b *Backend) WatchKey(ctx context.Context, key string) (*backend.Subscription, error) {
	if b.watch == nil {
		return nil, fmt.Errorf("%w: goredisbackend watches keys with a *redis.Client or *redis.ClusterClient (New or Dial) over TCP, with RESP3, DB 0 and no credentials provider", backend.ErrNotSupported)
	}
	return b.watch.watchKey(ctx, key)
}

// Close closes the subscription connection and the watch client, and the
// client when Dial made it (not one passed to New).
func (b *Backend) Close() error {
	err := b.hub.Close()
	if b.shards != nil {
		err = errors.Join(err, b.shards.Close())
	}
	b.closing.Do(func() {
		if b.watch != nil {
			err = errors.Join(err, b.watch.close())
		}
		if b.owned {
			err = errors.Join(err, b.client.Close())
		}
	})
	return err
}

// once is a command go-redis sends at most once: after a network error it
// returns the error instead of sending the command again. Embedding the
// *redis.Cmd gives it the rest of redis.Cmder.
type once struct{ *redis.Cmd }

// NoRetry tells go-redis not to retry the command.
func (once) NoRetry() bool { return true }

// processor is what runs a command: a client, a Conn or a pipeline.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// evalCmd builds EVAL or EVALSHA as go-redis' own Eval does.
func evalCmd(ctx context.Context, name, payload string, keys, args []string) *redis.Cmd {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, name, payload, len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	for _, a := range args {
		cmdArgs = append(cmdArgs, a)
	}
	cmd := redis.NewCmd(ctx, cmdArgs...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // the cluster client routes by the first key
	}
	return cmd
}

func isNoScript(err error) bool {
	if err == nil {
		return false // without the two allocations the checks below make
	}
	return errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")
}

// convert maps a script's result to a backend reply: a nil reply becomes
// backend.Nil, server error replies *backend.ServerError.
func convert(cmd *redis.Cmd) (backend.Reply, error) {
	v, err := cmd.Result()
	if err != nil {
		if errors.Is(err, redis.Nil) {
			return backend.Reply{}, nil
		}
		return backend.Reply{}, mapError(err)
	}
	return fromValue(v)
}

// mapError maps a go-redis error: a server error reply becomes
// *backend.ServerError, a closed client wraps backend.ErrClosed; others
// (network, context) are returned as they are.
func mapError(err error) error {
	var rerr redis.Error
	switch {
	case errors.Is(err, redis.ErrClosed):
		return errors.Join(backend.ErrClosed, err)
	case errors.As(err, &rerr):
		return &backend.ServerError{Message: rerr.Error()}
	}
	return err
}

func fromValue(v any) (backend.Reply, error) {
	switch v := v.(type) {
	case nil:
		return backend.Reply{}, nil
	case int64:
		return backend.IntReply(v), nil
	case string:
		return backend.StringReply(v), nil
	case []any:
		elems := make([]backend.Reply, len(v))
		for i := range v {
			var err error
			if elems[i], err = fromValue(v[i]); err != nil {
				return backend.Reply{}, err
			}
		}
		return backend.ArrayReply(elems...), nil
	case bool: // Lua true and false, for a script that chose RESP3 replies
		if v {
			return backend.IntReply(1), nil
		}
		return backend.Reply{}, nil
	}
	return backend.Reply{}, fmt.Errorf("%w: %T in a script reply", backend.ErrUnexpectedReply, v)
}
