// Package backend is the small contract between the fair lock and a Redis
// client library. An adapter (rueidisbackend, valkeybackend, goredisbackend,
// or your own) implements Backend, and optionally KeyWatcher,
// ShardedSubscriber and ReplicaWaiter; package lock depends on nothing else.
//
// A backend runs Lua scripts by SHA-1 (EVALSHA), loading a script when the
// server answers NOSCRIPT so that a server restart or SCRIPT FLUSH never
// reaches the caller, and it hands out pub/sub messages as Subscriptions.
// Implement Subscribe yourself with NewSubscription, or use pubsub.Hub
// (package github.com/fairlock/fairlock/backend/pubsub), which multiplexes
// every channel over one subscription connection, re-dials and
// re-subscribes after a drop, and keeps Subscribe's ordering promise, so
// that the adapter only moves bytes; the three adapters in this module
// use the Hub.
//
// Run conformance.Run against a new backend to check it.
package backend

import (
	"context"
	"crypto/fips140"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors returned by backends. Adapters wrap them with %w.
var (
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("backend: closed")
	// ErrUnexpectedReply is returned when a reply has another shape than the caller expected.
	ErrUnexpectedReply = errors.New("backend: unexpected reply")
	// ErrNotSupported is returned by an optional capability (KeyWatcher)
	// the connection or server cannot provide.
	ErrNotSupported = errors.New("backend: not supported")
)

// ServerError is an error reply sent by the server (for example a Lua
// runtime error). Connection problems are returned as other errors.
type ServerError struct {
	Message string
}

// Error returns the server's message.
func (e *ServerError) Error() string { return "backend: server error: " + e.Message }

// Script is a Lua script and its SHA-1 digest, computed once.
type Script struct {
	// Name names the script in errors and traces, e.g. "acquire".
	Name string
	// Source is the Lua source.
	Source string
	// SHA1 is the lower-case hex SHA-1 of Source, the name EVALSHA uses.
	// Empty means unknown: the backend sends Source (EVAL) every time.
	SHA1 string
}

// NewScript returns a Script for source with its SHA-1 - except in Go's
// FIPS 140-only mode (GODEBUG=fips140=only), which forbids SHA-1: there
// SHA1 is left empty, and the backend sends the source with each call.
// Package lock's scripts carry digests computed when the module was built,
// and use EVALSHA in every mode.
func NewScript(name, source string) *Script {
	s := &Script{Name: name, Source: source}
	if !fips140.Enforced() {
		sum := sha1.Sum([]byte(source))
		s.SHA1 = hex.EncodeToString(sum[:])
	}
	return s
}

// Call is one script invocation in a batch.
type Call struct {
	Script *Script
	Keys   []string
	Args   []string
}

// Result is the outcome of one Call in a batch.
type Result struct {
	Reply Reply
	Err   error
}

// Backend is what package lock needs from a Redis client. Implementations
// must be safe for concurrent use.
type Backend interface {
	// Eval runs the script with EVALSHA and, when the server does not know
	// the script (NOSCRIPT), loads it and runs it once more; a script
	// without SHA1 runs with EVAL. All keys must
	// hash to one cluster slot. A network error leaves the outcome unknown:
	// Eval must not retry a script on its own.
	Eval(ctx context.Context, s *Script, keys, args []string) (Reply, error)
	// EvalBatch runs several scripts pipelined (one write per node where
	// the client allows it) and returns their results in order.
	EvalBatch(ctx context.Context, calls []Call) []Result
	// Subscribe starts delivering wake-ups for channel; it returns once the
	// server has confirmed the subscription, so a message published after
	// Subscribe returns is not missed (unless the connection drops, which
	// is reported as a Reconnect event). A message published before
	// Subscribe was called is not delivered to the new Subscription, even
	// when the channel was already subscribed for someone else and the
	// message is still on its way; one published while Subscribe runs may
	// or may not be.
	Subscribe(ctx context.Context, channel string) (*Subscription, error)
	// Close releases what the backend opened (its subscription
	// connection); it does not close a client the caller passed in.
	Close() error
}

// KeyWatcher is an optional Backend capability: being told when a key is
// written, deleted or expires, through client-side caching invalidations
// (CLIENT TRACKING). Package lock uses it, when present, to wake the head
// waiter as soon as the lock hash changes in a way that publishes nothing,
// such as a DEL by hand, and to check a hold at once when its lock hash
// changes (deleted by hand, evicted, force-unlocked by a Redisson client):
// one watch per held lock, re-armed after each event.
type KeyWatcher interface {
	// WatchKey arms one notification for key: the returned Subscription
	// receives an event at the key's next change (or at once when the key
	// does not exist, or on a reconnect), after which the caller closes it
	// and calls WatchKey again to keep watching. It returns ErrNotSupported
	// when the server or connection cannot track keys.
	WatchKey(ctx context.Context, key string) (*Subscription, error)
}

// ShardedSubscriber is an optional Backend capability of cluster clients:
// sharded pub/sub (SSUBSCRIBE; Redis 7.0+, Valkey 7.2+), where a message
// published with SPUBLISH stays inside the shard that owns its channel's
// slot instead of crossing the cluster bus to every node. On a backend
// that reports Sharded, package lock wakes waiters with SPUBLISH and
// listens with SSubscribe by default (lock.WithPublish).
type ShardedSubscriber interface {
	// Sharded reports whether the client talks to a cluster. It sends
	// nothing to the server.
	Sharded() bool
	// SSubscribe is Subscribe with SSUBSCRIBE, on a connection to the node
	// that owns channel's slot, with Subscribe's ordering promise. When
	// the slot moves (the server's own SUNSUBSCRIBE after a resharding or
	// a failover) or the node's connection drops, the Subscription gets a
	// Reconnect event, follows the slot to its new owner, and gets another
	// Reconnect event once it listens there again.
	SSubscribe(ctx context.Context, channel string) (*Subscription, error)
}

// ReplicaWaiter is an optional Backend capability for replica safety (RULES.md
// X9): a script and a WAIT sent together on one connection, so the WAIT
// counts the replicas that acknowledged that script's writes.
type ReplicaWaiter interface {
	// EvalWait runs the script as Eval does, then WAIT replicas timeout on
	// the same connection (on a cluster, the connection to the primary that
	// owns the keys' slot), and returns the script's reply and the number
	// of replicas that acknowledged. It returns ErrNotSupported where one
	// connection cannot carry both.
	EvalWait(ctx context.Context, s *Script, keys, args []string, replicas int, timeout time.Duration) (Reply, int, error)
}

// ScriptError names script s in the server's error reply err (a
// *ServerError), since a NOPERM for a key the user may not touch names no
// command: "script acquire (EVALSHA): ...". Other errors, and nil, pass
// unchanged. Adapters wrap what Eval, EvalBatch and EvalWait return with it.
func ScriptError(s *Script, err error) error {
	if err == nil {
		return nil // before errors.As, whose target would escape: no allocation per call
	}
	var se *ServerError
	if errors.As(err, &se) {
		return fmt.Errorf("script %s (EVALSHA): %w", s.Name, err)
	}
	return err
}
