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
// clients.
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
	return clients, err
}

// slotMap implements pubsub.SlotMap with the cluster client's CLUSTER
// SLOTS: each range's primary, the first node go-redis lists.
func (b *Backend) slotMap(ctx context.Context) ([]pubsub.SlotRange, error) {
	slots, err := b.cluster.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, mapError(err)
	}
	ranges := make([]pubsub.SlotRange, 0, len(slots))
	for _, s := range slots {
		if len(s.Nodes) > 0 && s.Nodes[0].Addr != "" {
			ranges = append(ranges, pubsub.SlotRange{First: uint16(s.Start), Last: uint16(s.End), Primary: s.Nodes[0].Addr})
		}
	}
	return ranges, nil
}
