package redistest_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/redistest"
)

// TestSlotOf: SlotOf agrees with the server's CLUSTER KEYSLOT, hash tags
// included.
func TestSlotOf(t *testing.T) {
	srv := redistest.StartCluster(t, 3).Nodes()[0]
	keys := []string{"", "fairlock", "123456789", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap",
		"foo{bar}{zap}", "redisson_lock_queue:{fault:x}", "{", "}{", "\xff\x00k"}
	for i := range 200 {
		keys = append(keys, "key:"+strconv.Itoa(i))
	}
	for _, k := range keys {
		want, _ := srv.Do(t, "CLUSTER", "KEYSLOT", k).(int64)
		if got := redistest.SlotOf(k); int64(got) != want {
			t.Errorf("SlotOf(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}
}

// startReplicated starts 3 primaries with one replica each and a 1 s node
// timeout, as the failover tests do.
func startReplicated(t *testing.T) *redistest.Cluster {
	return redistest.StartCluster(t, 3, redistest.WithReplicas(1), redistest.WithNodeTimeout(time.Second))
}

// TestStartClusterReplicas: with WithReplicas every primary has its
// replica, synced, and the roles are reported as started; a write on the
// slot's primary reaches its replica.
func TestStartClusterReplicas(t *testing.T) {
	c := startReplicated(t)
	nodes := c.Nodes()
	if len(nodes) != 6 || len(c.Addrs()) != 6 {
		t.Fatalf("%d nodes, want 6", len(nodes))
	}
	if got := c.Primaries(t); !slices.Equal(got, nodes[:3]) {
		t.Fatalf("Primaries = %v, want the first three nodes %v", addrs(got), addrs(nodes[:3]))
	}
	for i, p := range nodes[:3] {
		if got := c.ReplicasOf(t, p); !slices.Equal(got, nodes[3+i:4+i]) {
			t.Fatalf("ReplicasOf(%s) = %v, want [%s]", p.Addr(), addrs(got), nodes[3+i].Addr())
		}
		if timeout := configGet(t, p, "cluster-node-timeout"); timeout != "1000" {
			t.Fatalf("cluster-node-timeout on %s = %q, want 1000", p.Addr(), timeout)
		}
		if id := c.NodeID(p); len(id) != 40 {
			t.Fatalf("NodeID(%s) = %q", p.Addr(), id)
		}
	}
	for i := range 3 {
		lo := i * 16384 / 3
		if got := c.PrimaryForSlot(t, lo); got != nodes[i] {
			t.Fatalf("PrimaryForSlot(%d) = %s, want %s", lo, got.Addr(), nodes[i].Addr())
		}
	}
	key := "fairlock"
	owner := c.PrimaryForSlot(t, redistest.SlotOf(key))
	if got := owner.Do(t, "SET", key, "v"); got != "OK" {
		t.Fatalf("SET on the slot's primary: %v", got)
	}
	replica := c.ReplicasOf(t, owner)[0]
	if got := owner.Do(t, "WAIT", "1", "5000"); got != int64(1) {
		t.Fatalf("WAIT 1 on %s = %v, want 1 replica", owner.Addr(), got)
	}
	redistest.Eventually(t, 5*time.Second, "the write to reach the replica", func() bool {
		return strings.Contains(fmt.Sprint(replica.Do(t, "INFO", "keyspace")), "keys=1")
	})
}

// TestMigrateSlot: a slot's keys move step by step; between the steps the
// source answers ASK for a key it no longer has and TRYAGAIN for a
// multi-key command whose keys are split; afterwards the target serves the
// slot, with every key and its TTL, and every node agrees.
func TestMigrateSlot(t *testing.T) {
	c := startReplicated(t)
	keys := []string{"{m}a", "{m}b", "{m}c"}
	slot := redistest.SlotOf(keys[0])
	from := c.PrimaryForSlot(t, slot)
	for _, k := range keys {
		if got := from.Do(t, "SET", k, k, "PX", "60000"); got != "OK" {
			t.Fatalf("SET %s: %v", k, got)
		}
	}
	var to *redistest.Server
	for _, p := range c.Primaries(t) {
		if p != from {
			to = p
			break
		}
	}
	m := c.BeginMigration(t, slot, to)
	if m.From() != from || m.To() != to {
		t.Fatalf("migration from %s to %s, want %s to %s", m.From().Addr(), m.To().Addr(), from.Addr(), to.Addr())
	}
	if n := m.MoveKeys(t, 1); n != 1 {
		t.Fatalf("MoveKeys(1) moved %d", n)
	}
	moved := 0
	for _, k := range keys {
		if n, _ := from.Do(t, "EXISTS", k).(int64); n == 0 {
			moved++
			if got := fmt.Sprint(from.Do(t, "GET", k)); !strings.HasPrefix(got, "ASK ") {
				t.Errorf("GET of the moved key %s on the source: %s, want ASK", k, got)
			}
		}
	}
	if moved != 1 {
		t.Fatalf("%d keys left the source, want 1", moved)
	}
	if got := fmt.Sprint(from.Do(t, "MGET", keys[0], keys[1], keys[2])); !strings.HasPrefix(got, "TRYAGAIN") {
		t.Errorf("MGET of split keys on the source: %s, want TRYAGAIN", got)
	}
	if got := c.PrimaryForSlot(t, slot); got != from {
		t.Errorf("PrimaryForSlot during the migration = %s, want the source %s", got.Addr(), from.Addr())
	}
	m.Finish(t)
	if got := c.PrimaryForSlot(t, slot); got != to {
		t.Fatalf("PrimaryForSlot after Finish = %s, want %s", got.Addr(), to.Addr())
	}
	for _, k := range keys {
		if got := to.Do(t, "GET", k); got != k {
			t.Errorf("GET %s on the target: %v", k, got)
		}
		if ttl, _ := to.Do(t, "PTTL", k).(int64); ttl <= 0 || ttl > 60000 {
			t.Errorf("PTTL %s on the target: %d, want the TTL kept", k, ttl)
		}
		if got := fmt.Sprint(from.Do(t, "GET", k)); !strings.HasPrefix(got, "MOVED "+strconv.Itoa(slot)) {
			t.Errorf("GET %s on the source after Finish: %s, want MOVED", k, got)
		}
	}
	// And back in one go.
	c.MigrateSlot(t, slot, from)
	if got := c.PrimaryForSlot(t, slot); got != from {
		t.Fatalf("PrimaryForSlot after MigrateSlot back = %s, want %s", got.Addr(), from.Addr())
	}
	if got := from.Do(t, "GET", keys[2]); got != keys[2] {
		t.Errorf("GET %s after moving back: %v", keys[2], got)
	}
}

// TestWaitFailover: killing a primary promotes its replica, which keeps
// the data; the killed node rejoins as the new primary's replica, and a
// second failover promotes it back.
func TestWaitFailover(t *testing.T) {
	c := startReplicated(t)
	key := "failover"
	slot := redistest.SlotOf(key)
	old := c.PrimaryForSlot(t, slot)
	replica := c.ReplicasOf(t, old)[0]
	if got := old.Do(t, "SET", key, "v"); got != "OK" {
		t.Fatalf("SET: %v", got)
	}
	if got := old.Do(t, "WAIT", "1", "5000"); got != int64(1) {
		t.Fatalf("WAIT = %v", got)
	}
	start := time.Now()
	promoted := c.WaitFailover(t, old)
	took := time.Since(start)
	if promoted != replica {
		t.Fatalf("promoted %s, want the replica %s", promoted.Addr(), replica.Addr())
	}
	if got := c.PrimaryForSlot(t, slot); got != promoted {
		t.Fatalf("PrimaryForSlot after the failover = %s, want %s", got.Addr(), promoted.Addr())
	}
	if got := promoted.Do(t, "GET", key); got != "v" {
		t.Fatalf("GET on the promoted replica: %v", got)
	}
	if slices.Contains(c.Primaries(t), old) {
		t.Fatal("the killed node is still listed as a primary")
	}
	c.Rejoin(t, old)
	if got := c.ReplicasOf(t, promoted); !slices.Equal(got, []*redistest.Server{old}) {
		t.Fatalf("ReplicasOf(new primary) after Rejoin = %v, want [%s]", addrs(got), old.Addr())
	}
	if back := c.WaitFailover(t, promoted); back != old {
		t.Fatalf("second failover promoted %s, want %s", back.Addr(), old.Addr())
	}
	if got := old.Do(t, "GET", key); got != "v" {
		t.Fatalf("GET after the second failover: %v", got)
	}
	t.Logf("failover with a 1 s node timeout took %v", took)
}

// TestWaitFailoverWithoutReplica: WaitFailover refuses a primary without
// replicas.
func TestWaitFailoverWithoutReplica(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.WaitFailover(f, c.Nodes()[0])
	}()
	<-done
	if !strings.Contains(f.fatal, "no replica") {
		t.Fatalf("WaitFailover without replicas: Fatalf message %q", f.fatal)
	}
	if got := c.Nodes()[0].Do(t, "PING"); got != "PONG" {
		t.Fatal("the primary was killed although it has no replica")
	}
}

func addrs(nodes []*redistest.Server) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Addr()
	}
	return out
}

func configGet(t *testing.T, s *redistest.Server, name string) string {
	t.Helper()
	reply, _ := s.Do(t, "CONFIG", "GET", name).([]any)
	if len(reply) != 2 {
		t.Fatalf("CONFIG GET %s = %v", name, reply)
	}
	v, _ := reply[1].(string)
	return v
}
