package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
)

const (
	failoverTimeout = 30 * time.Second // from the kill until a replica serves the slots and all agree
	rejoinTimeout   = 30 * time.Second // from the restart until the node is a synced replica
	migrateTimeout  = 5 * time.Second  // MIGRATE's own timeout, per batch
	migrateBatch    = 100              // keys per MIGRATE in SlotMigration.MoveAll
)

// clusterConfig collects the settings applied by ClusterOptions.
type clusterConfig struct {
	replicas    int
	nodeTimeout time.Duration
	node        []Option
}

// nodeOptions returns the Options every node of the cluster starts with.
func (cfg clusterConfig) nodeOptions() []Option {
	opts := append([]Option(nil), cfg.node...)
	if cfg.nodeTimeout > 0 {
		ms := strconv.FormatInt(cfg.nodeTimeout.Milliseconds(), 10)
		opts = append([]Option{WithArgs("--cluster-node-timeout", ms)}, opts...)
	}
	return opts
}

// ClusterOption configures a cluster started by StartCluster.
type ClusterOption func(*clusterConfig)

// WithReplicas gives every primary r replicas (default 0: primaries only).
// A replica is what WaitFailover promotes when its primary dies; with two
// or more, the primary a failover promotes keeps a replica that
// acknowledges writes (WAIT) while the dead node is away.
func WithReplicas(r int) ClusterOption {
	return func(c *clusterConfig) { c.replicas = max(r, 0) }
}

// WithNodeTimeout sets every node's cluster-node-timeout (default:
// redis-server's, 15 s): how long a node may not answer before the others
// mark it failed and promote one of its replicas. A failover then takes
// about this plus one to two seconds of gossip and election. Below a
// second, a busy machine may see failovers nobody asked for.
func WithNodeTimeout(d time.Duration) ClusterOption {
	return func(c *clusterConfig) { c.nodeTimeout = d }
}

// WithNodeOptions applies opts (WithArgs, WithAOF, WithPassword - not
// WithTLS) to every node of the cluster.
func WithNodeOptions(opts ...Option) ClusterOption {
	return func(c *clusterConfig) { c.node = append(c.node, opts...) }
}

// replicate makes node n+i*r+j a replica of primary i, once it knows it.
func (c *Cluster) replicate(t testing.TB, r int) {
	t.Helper()
	for k, node := range c.nodes[c.primaries:] {
		primary := c.nodes[k/r]
		var last any
		// CLUSTER REPLICATE needs the primary known, which MEET's gossip
		// brings in a moment.
		ok := poll(clusterTimeout, func() bool {
			last = node.Do(t, "CLUSTER", "REPLICATE", c.ids[primary])
			return last == "OK"
		})
		if !ok {
			t.Fatalf("redistest: CLUSTER REPLICATE on %s of %s: %v%s", node.Addr(), primary.Addr(), last, node.logTail())
		}
	}
}

// waitReady waits at most timeout until the cluster has settled (see
// settled); otherwise it fails the test with "redistest: ", what, the
// timeout, what was not yet so and the nodes' log tails.
func (c *Cluster) waitReady(t testing.TB, timeout time.Duration, what string) {
	t.Helper()
	var status string
	if poll(timeout, func() bool {
		status = c.settled(c.view())
		return status == ""
	}) {
		return
	}
	t.Fatalf("redistest: %s %v: %s%s", what, timeout, status, c.logTails())
}

// logTails is every node's log tail, for failure messages.
func (c *Cluster) logTails() string {
	var tails strings.Builder
	for _, node := range c.nodes {
		tails.WriteString(node.logTail())
	}
	return tails.String()
}

// NodeID returns node's cluster node ID (CLUSTER MYID), which a node
// keeps across Restart.
func (c *Cluster) NodeID(node *Server) string { return c.ids[node] }

// nodeLine is one line of CLUSTER NODES.
type nodeLine struct {
	id     string
	flags  []string
	master string   // the primary's ID for a replica, "-" for a primary
	epoch  int64    // config epoch
	slots  []string // "lo-hi" or "slot"; "[slot->-id]" entries dropped
}

func (l nodeLine) has(flag string) bool {
	for _, f := range l.flags {
		if f == flag {
			return true
		}
	}
	return false
}

// owns reports whether the line claims slot.
func (l nodeLine) owns(slot int) bool {
	for _, r := range l.slots {
		lo, hi, found := strings.Cut(r, "-")
		if !found {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 == nil && err2 == nil && a <= slot && slot <= b {
			return true
		}
	}
	return false
}

// parseNodes parses a CLUSTER NODES reply.
func parseNodes(reply any) map[string]nodeLine {
	s, _ := reply.(string)
	out := map[string]nodeLine{}
	for line := range strings.SplitSeq(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		l := nodeLine{id: f[0], flags: strings.Split(f[2], ","), master: f[3]}
		l.epoch, _ = strconv.ParseInt(f[6], 10, 64)
		for _, r := range f[8:] {
			if !strings.HasPrefix(r, "[") {
				l.slots = append(l.slots, r)
			}
		}
		out[l.id] = l
	}
	return out
}

// view is what the running nodes say of the cluster: each one's CLUSTER
// NODES, keyed by the asking node's ID. A node that does not answer is
// left out.
type view map[string]map[string]nodeLine

// self is what node says of itself (ok false: it did not answer).
func (v view) self(id string) (nodeLine, bool) {
	l, ok := v[id][id]
	return l, ok
}

// view asks every running node for its CLUSTER NODES.
func (c *Cluster) view() view {
	v := view{}
	for _, node := range c.nodes {
		if !node.running() {
			continue
		}
		reply, err := roundTrip(node.link(), pingTimeout, "CLUSTER", "NODES")
		if err != nil {
			continue
		}
		if lines := parseNodes(reply); len(lines) > 0 {
			v[c.ids[node]] = lines
		}
	}
	return v
}

// running reports whether the server's process is up.
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.exited()
}

// settled returns "" when the running nodes agree: each reports
// cluster_state:ok with every slot served and knows every node; each
// running replica has its link to its primary up; and each sees every
// running node in the role, primary and slots that node claims, none
// flagged as failing. Otherwise it says what is not so. v is the nodes'
// view of the cluster (see view).
func (c *Cluster) settled(v view) string {
	for _, node := range c.nodes {
		if !node.running() {
			continue
		}
		id := c.ids[node]
		self, ok := v.self(id)
		if !ok {
			return fmt.Sprintf("node %s does not answer CLUSTER NODES", node.Addr())
		}
		info, err := roundTrip(node.link(), pingTimeout, "CLUSTER", "INFO")
		if err != nil {
			return fmt.Sprintf("node %s: CLUSTER INFO: %v", node.Addr(), err)
		}
		state, _ := infoField(info, "cluster_state")
		slots, _ := infoField(info, "cluster_slots_ok")
		known, _ := infoField(info, "cluster_known_nodes")
		if state != "ok" || slots != strconv.Itoa(clusterSlots) || known != strconv.Itoa(len(c.nodes)) {
			return fmt.Sprintf("node %s: cluster_state:%s cluster_slots_ok:%s cluster_known_nodes:%s",
				node.Addr(), state, slots, known)
		}
		if self.has("slave") {
			repl, err := roundTrip(node.link(), pingTimeout, "INFO", "replication")
			if status, _ := infoField(repl, "master_link_status"); err != nil || status != "up" {
				return fmt.Sprintf("replica %s: master_link_status:%s %v", node.Addr(), status, err)
			}
		}
		for asker, lines := range v {
			seen, ok := lines[id]
			switch {
			case !ok:
				return fmt.Sprintf("node %s does not know %s", asker, node.Addr())
			case seen.has("fail") || seen.has("fail?"):
				return fmt.Sprintf("node %s flags %s as failing", asker, node.Addr())
			case seen.has("master") != self.has("master") || seen.master != self.master:
				return fmt.Sprintf("node %s sees %s as %v of %s; it says %v of %s",
					asker, node.Addr(), seen.flags, seen.master, self.flags, self.master)
			case strings.Join(seen.slots, " ") != strings.Join(self.slots, " "):
				return fmt.Sprintf("node %s sees %s with slots %v; it claims %v", asker, node.Addr(), seen.slots, self.slots)
			}
		}
	}
	return ""
}

// Primaries returns the running nodes that say they are primaries, in the
// order of Nodes.
func (c *Cluster) Primaries(t testing.TB) []*Server {
	t.Helper()
	v := c.view()
	var out []*Server
	for _, node := range c.nodes {
		if self, ok := v.self(c.ids[node]); ok && self.has("master") {
			out = append(out, node)
		}
	}
	return out
}

// ReplicasOf returns the running nodes that say they replicate primary,
// in the order of Nodes.
func (c *Cluster) ReplicasOf(t testing.TB, primary *Server) []*Server {
	t.Helper()
	v := c.view()
	var out []*Server
	for _, node := range c.nodes {
		if self, ok := v.self(c.ids[node]); ok && self.has("slave") && self.master == c.ids[primary] {
			out = append(out, node)
		}
	}
	return out
}

// PrimaryForSlot returns the running primary that serves slot: of those
// that claim it, the one with the highest config epoch, as the cluster
// itself decides. During a SlotMigration that is the source until Finish.
// The test fails if no running node claims the slot.
func (c *Cluster) PrimaryForSlot(t testing.TB, slot int) *Server {
	t.Helper()
	if owner := c.primaryForSlot(c.view(), slot); owner != nil {
		return owner
	}
	t.Fatalf("redistest: no running primary claims slot %d", slot)
	return nil
}

func (c *Cluster) primaryForSlot(v view, slot int) *Server {
	var (
		owner *Server
		epoch int64 = -1
	)
	for _, node := range c.nodes {
		self, ok := v.self(c.ids[node])
		if ok && self.has("master") && self.owns(slot) && self.epoch > epoch {
			owner, epoch = node, self.epoch
		}
	}
	return owner
}

// SlotOf returns the cluster hash slot of key, as CLUSTER KEYSLOT computes
// it (backend.Slot).
func SlotOf(key string) int { return int(backend.Slot(key)) }

// SlotMigration is one slot on its way from one primary to another, moved
// step by step as Redis Cluster's resharding is documented: BeginMigration
// marks the slot IMPORTING on the target and MIGRATING on the source;
// MoveKeys moves keys with MIGRATE; Finish moves what is left and assigns
// the slot to the target (CLUSTER SETSLOT NODE). Between the steps clients
// meet ASK redirections and, for a multi-key command whose keys are split
// between the two nodes, TRYAGAIN.
type SlotMigration struct {
	c        *Cluster
	slot     int
	from, to *Server
}

// BeginMigration starts moving slot from its primary (PrimaryForSlot) to
// the primary to: CLUSTER SETSLOT slot IMPORTING on to, then MIGRATING on
// the source. The test fails if to already serves the slot or a command
// is refused.
func (c *Cluster) BeginMigration(t testing.TB, slot int, to *Server) *SlotMigration {
	t.Helper()
	from := c.PrimaryForSlot(t, slot)
	if from == to {
		t.Fatalf("redistest: BeginMigration: %s already serves slot %d", to.Addr(), slot)
	}
	s := strconv.Itoa(slot)
	to.mustDo(t, "CLUSTER", "SETSLOT", s, "IMPORTING", c.ids[from])
	from.mustDo(t, "CLUSTER", "SETSLOT", s, "MIGRATING", c.ids[to])
	return &SlotMigration{c: c, slot: slot, from: from, to: to}
}

// From returns the migration's source node.
func (m *SlotMigration) From() *Server { return m.from }

// To returns the migration's target node.
func (m *SlotMigration) To() *Server { return m.to }

// MoveKeys moves at most count of the slot's keys still on the source
// (CLUSTER GETKEYSINSLOT, then one MIGRATE ... KEYS, which keeps their
// TTLs) and returns how many it asked to move; 0 means none was left.
func (m *SlotMigration) MoveKeys(t testing.TB, count int) int {
	t.Helper()
	keys, _ := m.from.mustDo(t, "CLUSTER", "GETKEYSINSLOT", strconv.Itoa(m.slot), strconv.Itoa(max(count, 1))).([]any)
	if len(keys) == 0 {
		return 0
	}
	args := []string{"MIGRATE", "127.0.0.1", strconv.Itoa(m.to.Port()), "", "0",
		strconv.FormatInt(migrateTimeout.Milliseconds(), 10), "KEYS"}
	for _, k := range keys {
		key, _ := k.(string)
		args = append(args, key)
	}
	// NOKEY: every key expired between the two commands.
	if reply := m.from.mustDo(t, args...); reply != "OK" && reply != "NOKEY" {
		t.Fatalf("redistest: %s %q: %v", m.from.Addr(), args, reply)
	}
	return len(keys)
}

// MoveAll moves the slot's keys left on the source, in batches of 100
// (MoveKeys), until none is left; the test fails if some are still there
// after 45 s.
func (m *SlotMigration) MoveAll(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(clusterTimeout)
	for m.MoveKeys(t, migrateBatch) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("redistest: slot %d still has keys on %s after %v", m.slot, m.from.Addr(), clusterTimeout)
		}
	}
}

// Assign moves the keys left on the source (MoveAll), then
// assigns the slot to the target with CLUSTER SETSLOT slot NODE - on the
// target, then the source, then every other running primary. From then on
// the target serves the slot and the source answers MOVED; the other nodes
// (replicas) learn it by gossip: WaitSettled waits for that.
func (m *SlotMigration) Assign(t testing.TB) {
	t.Helper()
	m.MoveAll(t)
	s, id := strconv.Itoa(m.slot), m.c.ids[m.to]
	m.to.mustDo(t, "CLUSTER", "SETSLOT", s, "NODE", id)
	m.from.mustDo(t, "CLUSTER", "SETSLOT", s, "NODE", id)
	for _, p := range m.c.Primaries(t) {
		if p != m.from && p != m.to {
			p.mustDo(t, "CLUSTER", "SETSLOT", s, "NODE", id)
		}
	}
}

// Finish is Assign followed by WaitSettled; the test fails if the slot is
// then served by another node than the target.
func (m *SlotMigration) Finish(t testing.TB) {
	t.Helper()
	m.Assign(t)
	m.c.WaitSettled(t)
	if owner := m.c.PrimaryForSlot(t, m.slot); owner != m.to {
		t.Fatalf("redistest: slot %d served by %s after its migration to %s", m.slot, owner.Addr(), m.to.Addr())
	}
}

// WaitSettled waits (at most 45 s) until the running nodes agree: each
// reports cluster_state:ok with every slot served and knows every node;
// each running replica has its link to its primary up; and each sees
// every running node in the role, primary and slots that node claims, none
// flagged as failing. The test fails if they do not in time.
func (c *Cluster) WaitSettled(t testing.TB) {
	t.Helper()
	c.waitReady(t, clusterTimeout, "cluster not ready after")
}

// MigrateSlot moves slot to the primary to in one go: BeginMigration,
// then Finish.
func (c *Cluster) MigrateSlot(t testing.TB, slot int, to *Server) {
	t.Helper()
	c.BeginMigration(t, slot, to).Finish(t)
}

// WaitFailover kills primary (SIGKILL) and waits (at most 30 s) until one
// of its replicas has been promoted - it says it is a primary - and the
// running nodes agree again (every slot served, cluster_state:ok on each,
// the other replicas following the new primary); it returns the promoted
// replica. How long that takes is set by WithNodeTimeout. The test fails
// if primary has no replica or none is promoted in time.
func (c *Cluster) WaitFailover(t testing.TB, primary *Server) *Server {
	t.Helper()
	replicas := c.ReplicasOf(t, primary)
	if len(replicas) == 0 {
		t.Fatalf("redistest: WaitFailover: %s has no replica (StartCluster with WithReplicas)", primary.Addr())
	}
	primary.Kill(t)
	var (
		promoted *Server
		status   string
	)
	ok := poll(failoverTimeout, func() bool {
		v := c.view()
		promoted = nil
		for _, r := range replicas {
			if self, ok := v.self(c.ids[r]); ok && self.has("master") {
				promoted = r
			}
		}
		if promoted == nil {
			status = "no replica of " + primary.Addr() + " promoted yet"
			return false
		}
		status = c.settled(v)
		return status == ""
	})
	if !ok {
		t.Fatalf("redistest: no failover of %s within %v: %s%s", primary.Addr(), failoverTimeout, status, c.logTails())
	}
	return promoted
}

// Rejoin restarts node after Kill or WaitFailover (Server.Restart: same
// port, directory and nodes.conf, so the same node ID) and waits (at most
// 30 s) until the running nodes agree again. A former primary whose slots
// a failover gave to its replica comes back as that replica's replica,
// synced, so a later WaitFailover can promote it in turn.
func (c *Cluster) Rejoin(t testing.TB, node *Server) {
	t.Helper()
	node.Restart(t)
	c.waitReady(t, rejoinTimeout, node.Addr()+" did not rejoin within")
}
