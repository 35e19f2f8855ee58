package conformance

import (
	"context"
	"time"

	"github.com/fairlock/fairlock/backend"
)

// capable is the backend under test as the suite's wrappers embed it: a
// Backend that also says whether it subscribes by shard
// (backend.ShardedSubscriber). The lock looks for that to choose how it
// wakes waiters (lock.WithPublish), so a wrapper that hid it would make
// its client wake and listen unlike the others on a cluster.
type capable interface {
	backend.Backend
	backend.ShardedSubscriber
}

// capableOf returns b when it is capable already, and otherwise b with a
// ShardedSubscriber that reports no cluster; that wrapper passes b's key
// watches and replica waits on.
func capableOf(b backend.Backend) capable {
	if c, ok := b.(capable); ok {
		return c
	}
	return unsharded{b}
}

// unsharded is a backend without sharded pub/sub.
type unsharded struct{ backend.Backend }

func (unsharded) Sharded() bool { return false }

func (unsharded) SSubscribe(context.Context, string) (*backend.Subscription, error) {
	return nil, backend.ErrNotSupported
}

// WatchKey passes on to the backend, or reports backend.ErrNotSupported.
func (b unsharded) WatchKey(ctx context.Context, key string) (*backend.Subscription, error) {
	return watchKeyOf(ctx, b.Backend, key)
}

// EvalWait passes on to the backend, or reports backend.ErrNotSupported.
func (b unsharded) EvalWait(ctx context.Context, s *backend.Script, keys, args []string, replicas int, timeout time.Duration) (backend.Reply, int, error) {
	if rw, ok := b.Backend.(backend.ReplicaWaiter); ok {
		return rw.EvalWait(ctx, s, keys, args, replicas, timeout)
	}
	return backend.Reply{}, 0, backend.ErrNotSupported
}

// wakeCmd is the command that reaches a waiter of a client on b with the
// default lock.PublishAuto: SPUBLISH on a cluster (the suite's servers
// are Redis 7 or later), PUBLISH elsewhere.
func wakeCmd(b capable) string {
	if b.Sharded() {
		return "spublish"
	}
	return "publish"
}
