package goredisbackend

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/backend/pubsub"
	"github.com/redis/go-redis/v9"
)

// Sharded pub/sub (backend.ShardedSubscriber) on a redis.ClusterClient:
// a pubsub.ShardedHub keeps one subscription connection per cluster node
// that owns a subscribed channel's slot, and follows MOVED replies and
// slots that move. Each connection is a redis.PubSub of the cluster
// client's own client for that node (found with ForEachMaster), made
// with no channel, so go-redis never routes it by itself: its cluster
// SSubscribe picks one node for every channel of a PubSub (go-redis
// #3717). The adapter sends SSUBSCRIBE and SUNSUBSCRIBE on it as the
// ShardedHub asks, and passes the server's own "sunsubscribe" (the slot
// moved) to the hub.

// Sharded implements backend.ShardedSubscriber: the client is a
// *redis.ClusterClient (as redis.NewUniversalClient returns for cluster
// options).
func (b *Backend) Sharded() bool { return b.cluster != nil }

// SSubscribe implements backend.ShardedSubscriber, on a connection to the
// node that owns channel's slot. It returns backend.ErrNotSupported
// unless the client is a *redis.ClusterClient.
func (b *Backend) SSubscribe(ctx context.Context, channel string) (*backend.Subscription, error) {
	if b.shards == nil {
		return nil, fmt.Errorf("%w: SSUBSCRIBE needs a *redis.ClusterClient, not %T", backend.ErrNotSupported, b.client)
	}
	if len(b.nodes.get()) == 0 {
		// The first slot is looked for at the primaries the cluster
		// reports, not at a seed address that may name no node.
		_, _ = b.masters(ctx)
	}
	return b.shards.Subscribe(ctx, channel)
}

// dialNode opens a sharded subscription connection to the primary at addr,
// as the ShardedHub asks, through the cluster client's own client for that
// node. The cluster's view is reloaded first (one CLUSTER SLOTS): addr
// came from a MOVED reply or from that view. A node the view does not
// list as a primary is an error; the hub looks for the slot again later.
func (b *Backend) dialNode(ctx context.Context, addr string, sink pubsub.Sink) (pubsub.Conn, <-chan error, error) {
	masters, err := b.masters(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("goredisbackend: cluster nodes: %w", mapError(err))
	}
	i := slices.IndexFunc(masters, func(c *redis.Client) bool {
		return c.NodeAddress() == addr || c.Options().Addr == addr
	})
	if i < 0 {
		return nil, nil, fmt.Errorf("goredisbackend: %s is not a primary of the cluster (yet)", addr)
	}
	return openConn(ctx, masters[i].Subscribe(ctx), sink, true) // no channels: nothing sent yet
}

// masters reloads the cluster client's view and returns its primaries'
// clients, and notes their addresses for nodeList.
func (b *Backend) masters(ctx context.Context) ([]*redis.Client, error) {
	var (
		mu      sync.Mutex
		clients []*redis.Client
	)
	err := b.cluster.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		clients = append(clients, c)
		return nil
	})
	if err != nil {
		return nil, err
	}
	addrs := make([]string, len(clients))
	for i, c := range clients {
		addrs[i] = c.NodeAddress()
	}
	slices.Sort(addrs)
	b.nodes.set(addrs)
	return clients, nil
}

// nodeList returns the cluster's primaries as last seen, or the client's
// seed addresses before the first look: where the ShardedHub looks for a
// slot it has not seen yet (a MOVED reply then names the owner). It sends
// nothing: the hub calls it holding its lock.
func (b *Backend) nodeList() []string {
	if addrs := b.nodes.get(); len(addrs) > 0 {
		return addrs
	}
	return b.cluster.Options().Addrs
}

// addrList is a list of addresses, replaced as a whole.
type addrList struct {
	mu    sync.Mutex
	addrs []string
}

func (l *addrList) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.addrs
}

func (l *addrList) set(addrs []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.addrs = addrs
}
