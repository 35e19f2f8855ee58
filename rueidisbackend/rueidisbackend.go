// Package rueidisbackend adapts a github.com/redis/rueidis client to
// backend.Backend, so package lock can run on it.
//
// Scripts run through rueidis' own Lua support (EVALSHA, and EVAL on
// NOSCRIPT, which loads the script and runs it in the same round trip),
// on the client's auto-pipelined connections: concurrent lock calls share
// one write. Watchdog renewals go out as one DoMulti per tick. Wake-ups
// arrive on one dedicated connection per Backend (Dedicate plus
// SetPubSubHooks), which subscribes and unsubscribes channels at run time
// and is re-dialled, with every channel re-subscribed, when it drops.
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
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/backend/pubsub"
	"github.com/redis/rueidis"
)

// Backend implements backend.Backend on a rueidis.Client.
type Backend struct {
	client  rueidis.Client
	owned   bool // made by Dial: Close closes the client too
	hub     *pubsub.Hub
	scripts sync.Map // SHA1 -> *rueidis.Lua
	closing sync.Once
}

var (
	_ backend.Backend       = (*Backend)(nil)
	_ backend.KeyWatcher    = (*Backend)(nil)
	_ backend.ReplicaWaiter = (*Backend)(nil)
)

// New returns a Backend using client. Closing the Backend does not close
// the client.
func New(client rueidis.Client) *Backend {
	b := &Backend{client: client}
	b.hub = pubsub.NewHub(b.dial)
	return b
}

// Dial returns a Backend on a new client made from opt; closing the
// Backend closes that client too.
func Dial(opt rueidis.ClientOption) (*Backend, error) {
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, err
	}
	b := New(client)
	b.owned = true
	return b, nil
}

func (b *Backend) lua(s *backend.Script) *rueidis.Lua {
	if l, ok := b.scripts.Load(s.SHA1); ok {
		return l.(*rueidis.Lua)
	}
	l, _ := b.scripts.LoadOrStore(s.SHA1, rueidis.NewLuaScript(s.Source))
	return l.(*rueidis.Lua)
}

// Eval implements backend.Backend.
func (b *Backend) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	return convert(b.lua(s).Exec(ctx, b.client, keys, args))
}

// EvalBatch implements backend.Backend with one DoMulti; a call the server
// answers with NOSCRIPT runs again through Eval.
func (b *Backend) EvalBatch(ctx context.Context, calls []backend.Call) []backend.Result {
	if len(calls) == 0 {
		return nil
	}
	cmds := make(rueidis.Commands, len(calls))
	for i, c := range calls {
		cmds[i] = b.client.B().Evalsha().Sha1(c.Script.SHA1).Numkeys(int64(len(c.Keys))).Key(c.Keys...).Arg(c.Args...).Build()
	}
	out := make([]backend.Result, len(calls))
	for i, res := range b.client.DoMulti(ctx, cmds...) {
		if rerr, ok := rueidis.IsRedisErr(res.Error()); ok && rerr.IsNoScript() {
			out[i].Reply, out[i].Err = b.Eval(ctx, calls[i].Script, calls[i].Keys, calls[i].Args)
			continue
		}
		out[i].Reply, out[i].Err = convert(res)
	}
	return out
}

// EvalWait implements backend.ReplicaWaiter: EVALSHA (EVAL on NOSCRIPT)
// and WAIT go out in one DoMulti, which the client sends on one
// connection because WAIT blocks. Cluster clients would route WAIT to
// another node, so they get backend.ErrNotSupported.
func (b *Backend) EvalWait(ctx context.Context, s *backend.Script, keys, args []string, replicas int, timeout time.Duration) (backend.Reply, int, error) {
	if b.client.Mode() == rueidis.ClientModeCluster {
		return backend.Reply{}, 0, fmt.Errorf("%w: WAIT after a script on a cluster client", backend.ErrNotSupported)
	}
	wait := b.client.B().Wait().Numreplicas(int64(replicas)).Timeout(timeout.Milliseconds()).Build()
	script := b.client.B().Evalsha().Sha1(s.SHA1).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	res := b.client.DoMulti(ctx, script, wait)
	if rerr, ok := rueidis.IsRedisErr(res[0].Error()); ok && rerr.IsNoScript() {
		wait = b.client.B().Wait().Numreplicas(int64(replicas)).Timeout(timeout.Milliseconds()).Build()
		script = b.client.B().Eval().Script(s.Source).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
		res = b.client.DoMulti(ctx, script, wait)
	}
	reply, err := convert(res[0])
	if err != nil {
		return reply, 0, err
	}
	acked, err := res[1].AsInt64()
	return reply, int(acked), err
}

// Subscribe implements backend.Backend.
func (b *Backend) Subscribe(ctx context.Context, channel string) (*backend.Subscription, error) {
	return b.hub.Subscribe(ctx, channel)
}

// WatchKey implements backend.KeyWatcher with client-side caching
// invalidations on the subscription connection. It returns
// backend.ErrNotSupported with DisableCache, on servers without CLIENT
// TRACKING, and on cluster clients.
func (b *Backend) WatchKey(ctx context.Context, key string) (*backend.Subscription, error) {
	return b.hub.WatchKey(ctx, key)
}

// Close closes the subscription connection, and the client when Dial made
// it (not one passed to New).
func (b *Backend) Close() error {
	err := b.hub.Close()
	if b.owned {
		b.closing.Do(b.client.Close)
	}
	return err
}

func (b *Backend) dial(ctx context.Context, sink pubsub.Sink) (pubsub.Conn, <-chan error, error) {
	dc, _ := b.client.Dedicate()
	dc.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage: func(m rueidis.PubSubMessage) { sink.Deliver(m.Channel, m.Message) },
	})
	// SetOnInvalidations keeps the message hook and replaces the channel
	// that reports the connection's end.
	done := dc.SetOnInvalidations(func(keys []rueidis.RedisMessage) {
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
	// Make sure the connection is up before handing it out.
	if err := dc.Do(ctx, dc.B().Ping().Build()).Error(); err != nil {
		dc.Close()
		return nil, nil, err
	}
	return pubSubConn{dc: dc, cluster: b.client.Mode() == rueidis.ClientModeCluster}, done, nil
}

type pubSubConn struct {
	dc      rueidis.DedicatedClient
	cluster bool
}

// Subscribe implements pubsub.Conn: the client resolves a SUBSCRIBE when
// its reader reads the confirmation, after running the message hook for
// every message read before it.
func (c pubSubConn) Subscribe(ctx context.Context, channels ...string) error {
	return c.dc.Do(ctx, c.dc.B().Subscribe().Channel(channels...).Build()).Error()
}

// Unsubscribe implements pubsub.Conn.
func (c pubSubConn) Unsubscribe(ctx context.Context, channels ...string) error {
	return c.dc.Do(ctx, c.dc.B().Unsubscribe().Channel(channels...).Build()).Error()
}

// Track implements pubsub.KeyTracker with the tracking (OPTIN) the client
// turns on for every connection unless DisableCache is set: CLIENT CACHING
// YES makes the server track the EXISTS that follows. A cluster client's
// dedicated connection is bound to one node, so it tracks nothing.
func (c pubSubConn) Track(ctx context.Context, key string) (bool, error) {
	if c.cluster {
		return false, backend.ErrNotSupported
	}
	res := c.dc.DoMulti(ctx, c.dc.B().ClientCaching().Yes().Build(), c.dc.B().Exists().Key(key).Build())
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
