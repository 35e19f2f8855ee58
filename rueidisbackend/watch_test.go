package rueidisbackend_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/redistest"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// watchTimeout bounds the wait for an event that must come.
const watchTimeout = 10 * time.Second

// clusterClient returns a new client of the cluster, closed at cleanup.
func clusterClient(t *testing.T, c *redistest.Cluster, opt rueidis.ClientOption) rueidis.Client {
	t.Helper()
	opt.InitAddress = c.Addrs()
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	t.Cleanup(rc.Close)
	return rc
}

// clusterBackend returns a Backend made by New on a new cluster client;
// both are closed at cleanup.
func clusterBackend(t *testing.T, c *redistest.Cluster, opt rueidis.ClientOption) *rueidisbackend.Backend {
	t.Helper()
	b := rueidisbackend.New(clusterClient(t, c, opt))
	t.Cleanup(func() { b.Close() })
	return b
}

// keysByNode returns, for each of the n nodes of a cluster made by
// redistest.StartCluster (node i owns the i-th slot range), perNode keys
// in distinct slots that it serves.
func keysByNode(t *testing.T, rc rueidis.Client, n, perNode int) [][]string {
	t.Helper()
	out := make([][]string, n)
	seen := make(map[uint16]bool)
	for i := 0; ; i++ {
		key := fmt.Sprintf("%s:%d", t.Name(), i)
		cmd := rc.B().Get().Key(key).Build()
		slot := cmd.Slot()
		node := 0
		for int(slot) > (node+1)*clusterSlots/n-1 {
			node++
		}
		if seen[slot] || len(out[node]) == perNode {
			continue
		}
		seen[slot] = true
		out[node] = append(out[node], key)
		done := true
		for _, keys := range out {
			done = done && len(keys) == perNode
		}
		if done {
			return out
		}
	}
}

func set(t *testing.T, rc rueidis.Client, key string) {
	t.Helper()
	if err := rc.Do(context.Background(), rc.B().Set().Key(key).Value("1").Build()).Error(); err != nil {
		t.Fatalf("SET %s: %v", key, err)
	}
}

func del(t *testing.T, rc rueidis.Client, key string) {
	t.Helper()
	if err := rc.Do(context.Background(), rc.B().Del().Key(key).Build()).Error(); err != nil {
		t.Fatalf("DEL %s: %v", key, err)
	}
}

func watch(t *testing.T, b *rueidisbackend.Backend, key string) *backend.Subscription {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), watchTimeout)
	defer cancel()
	s, err := b.WatchKey(ctx, key)
	if err != nil {
		t.Fatalf("WatchKey %s: %v", key, err)
	}
	t.Cleanup(s.Close)
	return s
}

// noEvent fails when s has an event pending.
func noEvent(t *testing.T, s *backend.Subscription) {
	t.Helper()
	select {
	case e := <-s.Events():
		t.Fatalf("watch of %s: unexpected event %+v", s.Channel(), e)
	default:
	}
}

// await waits for s's next event.
func await(t *testing.T, s *backend.Subscription, what string) backend.Event {
	t.Helper()
	timer := time.NewTimer(watchTimeout)
	defer timer.Stop()
	select {
	case e := <-s.Events():
		return e
	case <-timer.C:
		t.Fatalf("watch of %s: no event after %v (%s)", s.Channel(), watchTimeout, what)
		return backend.Event{}
	}
}

// TestWatchKeyClusterDelete: on a cluster client passed to New, watches
// of keys served by each node fire when another client deletes the keys.
// It logs the time from sending the DEL to the event.
func TestWatchKeyClusterDelete(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	b := clusterBackend(t, cluster, rueidis.ClientOption{})
	other := clusterClient(t, cluster, rueidis.ClientOption{})
	byNode := keysByNode(t, other, 3, 4)
	var keys []string
	for _, k := range byNode {
		keys = append(keys, k...)
	}
	const trials = 50
	lat := make([]time.Duration, 0, trials)
	for i := range trials {
		key := keys[i%len(keys)]
		set(t, other, key)
		s := watch(t, b, key)
		noEvent(t, s)
		start := time.Now()
		del(t, other, key)
		e := await(t, s, "after DEL")
		lat = append(lat, time.Since(start))
		if e.Reconnect {
			t.Fatalf("watch of %s: Reconnect, want the DEL's invalidation", key)
		}
		s.Close()
	}
	slices.Sort(lat)
	t.Logf("DEL to event over %d trials on %d keys (3 nodes): p50 %v, p90 %v, p99 %v, max %v",
		trials, len(keys), lat[trials/2], lat[trials*90/100], lat[trials*99/100], lat[trials-1])
}

// TestWatchKeyClusterWrite: a write fires the watch as a DEL does, and
// several watches of one key all fire.
func TestWatchKeyClusterWrite(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	b := clusterBackend(t, cluster, rueidis.ClientOption{})
	other := clusterClient(t, cluster, rueidis.ClientOption{})
	key := keysByNode(t, other, 3, 1)[2][0]
	set(t, other, key)
	s1, s2 := watch(t, b, key), watch(t, b, key)
	noEvent(t, s1)
	noEvent(t, s2)
	set(t, other, key)
	for _, s := range []*backend.Subscription{s1, s2} {
		if e := await(t, s, "after SET"); e.Reconnect {
			t.Fatalf("Reconnect, want the SET's invalidation")
		}
	}
}

// TestWatchKeyClusterMissing: the watch of a key that does not exist
// fires at once, on every node.
func TestWatchKeyClusterMissing(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	b := clusterBackend(t, cluster, rueidis.ClientOption{})
	for _, keys := range keysByNode(t, clusterClient(t, cluster, rueidis.ClientOption{}), 3, 2) {
		for _, key := range keys {
			s := watch(t, b, key)
			select {
			case e := <-s.Events():
				if e.Reconnect {
					t.Fatalf("watch of missing %s: Reconnect, want a plain event", key)
				}
			default:
				t.Fatalf("watch of missing %s: no event when WatchKey returned", key)
			}
		}
	}
}

// TestWatchKeyClusterConnKilled: when a node closes the tracking
// connection (CLIENT KILL), the watches of its keys get Reconnect, those on
// other nodes keep working, and a new watch on that node works.
func TestWatchKeyClusterConnKilled(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	b := clusterBackend(t, cluster, rueidis.ClientOption{})
	other := clusterClient(t, cluster, rueidis.ClientOption{})
	byNode := keysByNode(t, other, 3, 1)
	k0, k1 := byNode[0][0], byNode[1][0]
	set(t, other, k0)
	set(t, other, k1)
	s0, s1 := watch(t, b, k0), watch(t, b, k1)
	noEvent(t, s0)
	noEvent(t, s1)
	if n, ok := cluster.Nodes()[0].Do(t, "CLIENT", "KILL", "TYPE", "normal").(int64); !ok || n == 0 {
		t.Fatalf("CLIENT KILL TYPE normal killed %v connections", n)
	}
	if e := await(t, s0, "after CLIENT KILL"); !e.Reconnect {
		t.Fatalf("watch of %s on the node that killed the connection: %+v, want Reconnect", k0, e)
	}
	// The other node's watch still works.
	del(t, other, k1)
	if e := await(t, s1, "after DEL"); e.Reconnect {
		t.Fatalf("watch of %s on another node: Reconnect, want the DEL's invalidation", k1)
	}
	// Armed again, the first node's watch works on a new connection. (A
	// new client deletes: the kill closed other's connection to the node
	// too, and the client does not retry a write that failed.)
	s0.Close()
	s0 = watch(t, b, k0)
	noEvent(t, s0)
	del(t, clusterClient(t, cluster, rueidis.ClientOption{}), k0)
	if e := await(t, s0, "after DEL on a new connection"); e.Reconnect {
		t.Fatalf("watch of %s armed again: Reconnect, want the DEL's invalidation", k0)
	}
}

// TestWatchKeyClusterSlotMoved: a slot moves to another node while a key
// of it is watched. The migration deletes the key from the old node, which
// fires the watch; armed again, the watch follows the MOVED reply to the
// new node and fires there.
func TestWatchKeyClusterSlotMoved(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	b := clusterBackend(t, cluster, rueidis.ClientOption{})
	other := clusterClient(t, cluster, rueidis.ClientOption{})
	key := keysByNode(t, other, 3, 1)[0][0]
	cmd := other.B().Get().Key(key).Build()
	slot := fmt.Sprint(cmd.Slot())
	set(t, other, key)
	s := watch(t, b, key)
	noEvent(t, s)

	nodes := cluster.Nodes()
	src, dst := nodes[0], nodes[1]
	id := func(n *redistest.Server) string {
		s, ok := n.Do(t, "CLUSTER", "MYID").(string)
		if !ok {
			t.Fatalf("CLUSTER MYID on %s: not a string", n.Addr())
		}
		return s
	}
	srcID, dstID := id(src), id(dst)
	mustOK := func(n *redistest.Server, args ...string) {
		t.Helper()
		if r := n.Do(t, args...); r != "OK" {
			t.Fatalf("%s %q: %v", n.Addr(), args, r)
		}
	}
	mustOK(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID)
	mustOK(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID)
	mustOK(src, "MIGRATE", "127.0.0.1", fmt.Sprint(dst.Port()), key, "0", "5000")
	for _, n := range nodes {
		mustOK(n, "CLUSTER", "SETSLOT", slot, "NODE", dstID)
	}
	if e := await(t, s, "after MIGRATE"); e.Reconnect {
		t.Fatalf("watch of %s: Reconnect, want the migration's invalidation", key)
	}
	s.Close()

	s = watch(t, b, key)
	noEvent(t, s)
	del(t, other, key)
	if e := await(t, s, "after DEL on the new node"); e.Reconnect {
		t.Fatalf("watch of %s on the new node: Reconnect, want the DEL's invalidation", key)
	}
}

// TestWatchKeyClusterDisableCache: without client-side caching a cluster
// client cannot watch keys.
func TestWatchKeyClusterDisableCache(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	b := clusterBackend(t, cluster, rueidis.ClientOption{DisableCache: true})
	ctx, cancel := context.WithTimeout(context.Background(), watchTimeout)
	defer cancel()
	s, err := b.WatchKey(ctx, t.Name())
	if !errors.Is(err, backend.ErrNotSupported) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("WatchKey with DisableCache: %v, want backend.ErrNotSupported", err)
	}
}

// TestWatchKeyClusterClose: Close closes the tracking connections; a
// watch then fails with backend.ErrClosed.
func TestWatchKeyClusterClose(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	rc := clusterClient(t, cluster, rueidis.ClientOption{})
	b := rueidisbackend.New(rc)
	for _, keys := range keysByNode(t, rc, 3, 1) {
		set(t, rc, keys[0])
		watch(t, b, keys[0])
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.WatchKey(context.Background(), t.Name()); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("WatchKey after Close: %v, want backend.ErrClosed", err)
	}
}
