package goredisbackend_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/goredisbackend"
	"github.com/fairlock/fairlock/redistest"
	"github.com/redis/go-redis/v9"
)

// clusterBackend returns a Backend on a go-redis cluster client of c, made
// as redis.NewUniversalClient makes it for cluster options.
func clusterBackend(t *testing.T, c *redistest.Cluster) *goredisbackend.Backend {
	t.Helper()
	b := goredisbackend.Dial(&redis.UniversalOptions{Addrs: c.Addrs(), IsClusterMode: true})
	t.Cleanup(func() { b.Close() })
	return b
}

// shardChannels returns the shard channels node has subscribers for.
func shardChannels(t *testing.T, node *redistest.Server) []string {
	t.Helper()
	reply, _ := node.Do(t, "PUBSUB", "SHARDCHANNELS").([]any)
	var out []string
	for _, c := range reply {
		out = append(out, c.(string))
	}
	return out
}

// payloadWithin waits at most d for a message on s, skipping Reconnect
// events, and returns its payload.
func payloadWithin(t *testing.T, s *backend.Subscription, d time.Duration) string {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case e := <-s.Events():
			if !e.Reconnect {
				return e.Payload
			}
		case <-deadline:
			t.Fatalf("no message within %v", d)
			return ""
		}
	}
}

// TestSSubscribeListensAtTheSlotOwner: on a cluster client SSubscribe
// subscribes at the primary that owns the channel's slot - whatever node
// the adapter asks first - and only there, and a message SPUBLISHed there
// right after SSubscribe returns is delivered.
func TestSSubscribeListensAtTheSlotOwner(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	nodes := cluster.Nodes()
	b := clusterBackend(t, cluster)
	if !b.Sharded() {
		t.Fatal("Sharded() = false on a cluster client")
	}
	ctx := context.Background()
	// One channel per node's range, so that at least two of them are
	// first looked for at a node that answers MOVED.
	for _, ch := range []string{"{a}:wake", "{b}:wake", "{c}:wake", "{d}:wake", "{e}:wake"} {
		sub, err := b.SSubscribe(ctx, ch)
		if err != nil {
			t.Fatalf("SSubscribe %q: %v", ch, err)
		}
		at := slices.Index(nodes, cluster.PrimaryForSlot(t, redistest.SlotOf(ch)))
		for i, node := range nodes {
			if has := slices.Contains(shardChannels(t, node), ch); has != (i == at) {
				t.Errorf("%q (slot %d, owner node %d): PUBSUB SHARDCHANNELS on node %d lists it: %v", ch, backend.Slot(ch), at, i, has)
			}
		}
		if n := nodes[at].Do(t, "SPUBLISH", ch, "m"); n != int64(1) {
			t.Fatalf("SPUBLISH %q right after SSubscribe reached %v subscribers, want 1", ch, n)
		}
		if p := payloadWithin(t, sub, 2*time.Second); p != "m" {
			t.Fatalf("%q: payload %q, want m", ch, p)
		}
		sub.Close()
		redistest.Eventually(t, 5*time.Second, "SUNSUBSCRIBE after Close", func() bool {
			return !slices.Contains(shardChannels(t, nodes[at]), ch)
		})
	}
}

// TestSSubscribeFollowsAMigratedSlot: when the channel's slot migrates to
// another primary, the server unsubscribes the channel by itself
// (SUNSUBSCRIBE); the Subscription gets a Reconnect event and then
// listens at the new owner.
func TestSSubscribeFollowsAMigratedSlot(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	nodes := cluster.Nodes()
	b := clusterBackend(t, cluster)
	ctx := context.Background()
	const ch = "{moving}:wake"
	slot := backend.Slot(ch)
	from := slices.Index(nodes, cluster.PrimaryForSlot(t, int(slot)))
	to := (from + 1) % len(nodes)
	src, dst := nodes[from], nodes[to]
	sub, err := b.SSubscribe(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	if n := src.Do(t, "SPUBLISH", ch, "before"); n != int64(1) {
		t.Fatalf("SPUBLISH before the move reached %v subscribers, want 1", n)
	}
	if p := payloadWithin(t, sub, 2*time.Second); p != "before" {
		t.Fatalf("payload %q, want before", p)
	}
	// A key in the slot, so that MIGRATE has something to move.
	src.Do(t, "SET", "{moving}:key", "v")

	cluster.BeginMigration(t, int(slot), dst).Assign(t)

	select {
	case e := <-sub.Events():
		if !e.Reconnect {
			t.Fatalf("event %+v after the slot moved, want Reconnect", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no Reconnect event within 5s of the slot's move")
	}
	redistest.Eventually(t, 10*time.Second, "the channel subscribed at the new owner", func() bool {
		return slices.Contains(shardChannels(t, dst), ch)
	})
	if slices.Contains(shardChannels(t, src), ch) {
		t.Errorf("the old owner still lists %q", ch)
	}
	// The server lists the channel once it handled the SSUBSCRIBE; the
	// Subscription listens from when the adapter read the confirmation,
	// a moment later: publish until a message arrives.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if n := dst.Do(t, "SPUBLISH", ch, "after"); n != int64(1) {
			t.Fatalf("SPUBLISH at the new owner reached %v subscribers, want 1", n)
		}
		select {
		case e := <-sub.Events():
			if e.Payload == "after" {
				return
			}
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no message SPUBLISHed at the new owner arrived within 10s")
		}
	}
}

// TestEvalWaitOnCluster: on a cluster client EvalWait runs the script and
// WAIT at the primary that owns the keys' slot; without replicas WAIT
// counts none.
func TestEvalWaitOnCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	b := clusterBackend(t, cluster)
	ctx := context.Background()
	s := backend.NewScript("set", "redis.call('SET', KEYS[1], ARGV[1]); return ARGV[1]")
	for _, key := range []string{"{a}:k", "{b}:k", "{c}:k"} {
		start := time.Now()
		reply, acked, err := b.EvalWait(ctx, s, []string{key}, []string{"v"}, 1, 50*time.Millisecond)
		if err != nil {
			t.Fatalf("EvalWait %q: %v", key, err)
		}
		if reply.Str != "v" || acked != 0 {
			t.Errorf("EvalWait %q: %v, %d acked; want v, 0 acked", key, reply, acked)
		}
		if d := time.Since(start); d < 50*time.Millisecond {
			t.Errorf("EvalWait %q returned after %v: WAIT did not wait for its timeout", key, d)
		}
		if v := cluster.PrimaryForSlot(t, redistest.SlotOf(key)).Do(t, "GET", key); v != "v" {
			t.Errorf("GET %q at its slot's owner: %v, want v", key, v)
		}
	}
}

// TestEvalWaitMovedOnCluster: a slot that moved away from the node the
// client's view names gets the server's MOVED back from EvalWait (the lock
// retries), and a later EvalWait reaches the new owner.
func TestEvalWaitMovedOnCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	nodes := cluster.Nodes()
	b := clusterBackend(t, cluster)
	ctx := context.Background()
	const key = "{moved}:k"
	s := backend.NewScript("get", "return redis.call('GET', KEYS[1])")
	if _, _, err := b.EvalWait(ctx, s, []string{key}, nil, 0, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	slot := backend.Slot(key)
	from := slices.Index(nodes, cluster.PrimaryForSlot(t, int(slot)))
	cluster.BeginMigration(t, int(slot), nodes[(from+1)%len(nodes)]).Assign(t)
	_, _, err := b.EvalWait(ctx, s, []string{key}, nil, 0, 10*time.Millisecond)
	var se *backend.ServerError
	if !errors.As(err, &se) || !strings.HasPrefix(se.Message, "MOVED ") {
		t.Fatalf("EvalWait after the slot moved: %v, want the server's MOVED", err)
	}
	redistest.Eventually(t, 5*time.Second, "EvalWait at the new owner", func() bool {
		_, _, err := b.EvalWait(ctx, s, []string{key}, nil, 0, 10*time.Millisecond)
		return err == nil
	})
}

// TestSSubscribeNotSupported: on standalone and Sentinel clients the
// Backend is not sharded, and SSubscribe says so.
func TestSSubscribeNotSupported(t *testing.T) {
	srv := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rc.Close() })
	b := goredisbackend.New(rc)
	t.Cleanup(func() { b.Close() })
	if b.Sharded() {
		t.Error("Sharded() = true on a standalone client")
	}
	if _, err := b.SSubscribe(context.Background(), "c"); !errors.Is(err, backend.ErrNotSupported) {
		t.Errorf("SSubscribe on a standalone client: %v, want backend.ErrNotSupported", err)
	}
}

// TestEvalWaitOnClusterWithReplicas: on a cluster whose primaries have a
// replica each, WAIT after the script counts the replica of the slot's
// primary.
func TestEvalWaitOnClusterWithReplicas(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, redistest.WithReplicas(1))
	b := clusterBackend(t, cluster)
	ctx := context.Background()
	s := backend.NewScript("set", "redis.call('SET', KEYS[1], ARGV[1]); return ARGV[1]")
	for _, key := range []string{"{a}:k", "{b}:k", "{c}:k"} {
		reply, acked, err := b.EvalWait(ctx, s, []string{key}, []string{"v"}, 1, 5*time.Second)
		if err != nil {
			t.Fatalf("EvalWait %q: %v", key, err)
		}
		if reply.Str != "v" || acked != 1 {
			t.Errorf("EvalWait %q: %v, %d acked; want v, 1 acked", key, reply, acked)
		}
		if v := cluster.PrimaryForSlot(t, int(backend.Slot(key))).Do(t, "GET", key); v != "v" {
			t.Errorf("GET %q at its slot's primary: %v, want v", key, v)
		}
	}
}
