package soak

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/goredisbackend"
	"github.com/fairlock/fairlock/internal/backendtest"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/fairlock/fairlock/valkeybackend"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"
)

// The cluster soak (RunCluster): the standalone workload on a Redis
// Cluster of 3 primaries with a replica each, every client in cluster
// mode and every other one with replica acks; the nemesis moves a shared
// lock's slot, fails a primary over and pauses one, and between those
// faults single messages of the Go clients as the standalone nemesis
// does (messageFaults). No proxies: cluster clients follow the nodes' own
// addresses, so the other faults are the servers'.

const (
	// clusterNodeTimeout is every node's cluster-node-timeout: a failover
	// takes about this plus a second or two. A pause stays under half of
	// it, so that no one fails a paused primary over.
	clusterNodeTimeout = 2 * time.Second
	// clusterAckTimeout is WithReplicaAcks' WAIT, as in faultsuite.
	clusterAckTimeout = 500 * time.Millisecond
	// ackMark marks the label of a client with replica acks.
	ackMark = "+acks"
)

// ClusterAdapters are Adapters in cluster mode: each Dial takes the
// nodes' addresses joined by commas.
var ClusterAdapters = []Adapter{
	{"rueidis", true, func(addrs string) (backend.Backend, error) {
		return rueidisbackend.Dial(rueidis.ClientOption{InitAddress: strings.Split(addrs, ",")})
	}},
	{"rueidis-nocache", false, func(addrs string) (backend.Backend, error) {
		return rueidisbackend.Dial(rueidis.ClientOption{InitAddress: strings.Split(addrs, ","), DisableCache: true})
	}},
	{"valkey-go", true, func(addrs string) (backend.Backend, error) {
		return valkeybackend.Dial(valkey.ClientOption{InitAddress: strings.Split(addrs, ",")})
	}},
	{"go-redis", true, func(addrs string) (backend.Backend, error) {
		return goredisbackend.Dial(&redis.UniversalOptions{Addrs: strings.Split(addrs, ","), IsClusterMode: true, ContextTimeoutEnabled: true}), nil
	}},
	{"go-redis-new", true, func(addrs string) (backend.Backend, error) {
		return goredisbackend.New(redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ","), ContextTimeoutEnabled: true})), nil
	}},
}

// RunCluster runs one soak on a new Redis Cluster and checks its
// history; what a failover without replica acks may do is counted apart
// (Result.Exceptions). The Redisson-model owners run too: the model
// wakes waiters with SPUBLISH on a cluster, as Redisson 3.22+ does. It
// must be called from the test's goroutine.
func RunCluster(t *testing.T, cfg Config) Result {
	if cfg.Adapters == nil {
		cfg.Adapters = ClusterAdapters
	}
	cfg = cfg.withDefaults()
	backendtest.QuietGoRedis(t)
	c := redistest.StartCluster(t, 3, redistest.WithReplicas(1), redistest.WithNodeTimeout(clusterNodeTimeout))
	addrs := strings.Join(c.Addrs(), ",")
	admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true}) // a DEL by hand returns by its deadline
	defer admin.Close()

	w := newWorkload(cfg)
	for i, a := range cfg.Adapters {
		lbl, extra := label(a, i), []lock.Option(nil)
		if (uint64(i)+cfg.Seed)%2 == 1 {
			lbl = fmt.Sprintf("%s%s#%d", a.Name, ackMark, i)
			extra = []lock.Option{lock.WithReplicaAcks(1, clusterAckTimeout)}
		}
		w.addClient(t, a, lbl, addrs, extra)
	}
	w.startOwners()
	if !cfg.NoJava {
		w.startJavas(t, func() (backend.Backend, error) { return ClusterAdapters[0].Dial(addrs) }, true)
	}
	defer w.closeJavas()
	ad := w.startAdmin(admin)

	stalls := watchStalls(w.h)
	defer stalls()
	// The clients wake waiters sharded: PublishAuto on a Redis 7+
	// cluster (redistest's servers are).
	nm := newClusterNemesis(w.messageFaults(t, admin, ad, true), c, lockNames(len(w.clients)))
	runFaults(cfg, nm.step)
	w.finish()
	c.WaitSettled(t)
	res := w.result(t, admin, nm.count)
	res.Report.Violations, res.Exceptions = splitExceptions(w.h, res.Report.Violations, res.Bounds)
	return res
}

// allKeys lists every key raw's server holds; on a cluster client, every
// primary's (KEYS answers for one node only).
func allKeys(ctx context.Context, raw redis.UniversalClient) ([]string, error) {
	cc, ok := raw.(*redis.ClusterClient)
	if !ok {
		return raw.Keys(ctx, "*").Result()
	}
	var (
		mu   sync.Mutex
		keys []string
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		ks, err := node.Keys(ctx, "*").Result()
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, ks...)
		return err
	})
	return keys, err
}

// placement maps each lock to the primary that serves its slot.
type placement map[string]*redistest.Server

// clusterNemesis injects one cluster fault at a time, on the primary of
// a shared lock's slot, with faults on single messages between them
// (messageFaults), and notices failovers nobody asked for.
type clusterNemesis struct {
	*messageFaults
	c        *redistest.Cluster
	names    []string // every lock
	count    map[FaultKind]int
	placed   placement     // after the last step
	placedAt time.Duration // when placed was read
}

// newClusterNemesis returns a nemesis for cluster c and the locks names,
// which faults single messages with mf.
func newClusterNemesis(mf *messageFaults, c *redistest.Cluster, names []string) *clusterNemesis {
	n := &clusterNemesis{messageFaults: mf, c: c, names: names, count: map[FaultKind]int{}}
	n.placed, n.placedAt = n.placement(), n.h.Now()
	return n
}

// placement reads where every lock is served now.
func (n *clusterNemesis) placement() placement {
	p := placement{}
	for _, name := range n.names {
		p[name] = n.c.PrimaryForSlot(n.t, redistest.SlotOf(name))
	}
	return p
}

// step waits a little, then runs one cluster fault, never past left.
// Halfway through the wait it takes a turn of faults on single messages,
// which runs some one time in two (messageTurn): they come between the
// cluster faults and leave their pace as it was.
func (n *clusterNemesis) step(left time.Duration) {
	quiet := time.Duration(2000+n.rnd.IntN(4000)) * time.Millisecond
	if quiet >= left {
		time.Sleep(left)
		return
	}
	end := time.Now().Add(quiet)
	time.Sleep(quiet / 2) // the quiet time between faults is the schedule, not a synchronisation
	n.messageTurn()
	time.Sleep(time.Until(end)) // what is left of it, if any
	before := n.placement()
	n.unasked(n.placed, before, n.placedAt)
	name := sharedNames[n.rnd.IntN(len(sharedNames))]
	primary := before[name]
	f := Fault{Target: "server", Start: n.h.Now()}
	expect := maps.Clone(before)
	switch r := n.rnd.IntN(10); {
	case r < 4:
		f.Kind = FaultMigrate
		n.migrate(name, primary, expect)
	case r < 7:
		f.Kind = FaultFailover
		n.failOver(primary, expect)
	default:
		f.Kind = FaultPause
		primary.Pause(n.t)
		time.Sleep(time.Duration(200+n.rnd.IntN(800)) * time.Millisecond) // the pause's length
		primary.Resume(n.t)
	}
	f.End = n.h.Now()
	if f.Kind == FaultFailover {
		f.Locks = on(before, primary)
		n.t.Logf("soak: failover of %s [%s, %s]: %s", primary.Addr(), ms(f.Start), ms(f.End), strings.Join(f.Locks, ", "))
	}
	n.h.AddFault(f)
	n.count[f.Kind]++
	n.placed = n.placement()
	n.unasked(expect, n.placed, f.Start)
	n.placedAt = n.h.Now()
}

// messageTurn runs faults on single messages of one Go client, drawn
// as the standalone nemesis draws them (messageFault: one turn in two,
// more while a shared owner's calls at once are in flight), and records
// them.
func (n *clusterNemesis) messageTurn() {
	target := n.clients[n.rnd.IntN(len(n.clients))].label
	fs, _ := n.messageFault(target)
	for _, f := range fs {
		n.h.AddFault(f)
		n.count[f.Kind]++
	}
}

// on returns the locks p places on primary, sorted.
func on(p placement, primary *redistest.Server) []string {
	var out []string
	for name, s := range p {
		if s == primary {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// migrate moves name's slot from primary to another primary as Redis
// documents it, with the keys split between the two for a moment (every
// script on the lock meets TRYAGAIN then); expect learns the new place.
func (n *clusterNemesis) migrate(name string, primary *redistest.Server, expect placement) {
	var others []*redistest.Server
	for _, p := range n.c.Primaries(n.t) {
		if p != primary {
			others = append(others, p)
		}
	}
	to := others[n.rnd.IntN(len(others))]
	slot := redistest.SlotOf(name)
	m := n.c.BeginMigration(n.t, slot, to)
	time.Sleep(time.Duration(100+n.rnd.IntN(300)) * time.Millisecond) // MIGRATING/IMPORTING for a while: the fault's length
	if m.MoveKeys(n.t, 1) > 0 {
		time.Sleep(time.Duration(100+n.rnd.IntN(500)) * time.Millisecond) // the keys split: the fault's length
	}
	m.Finish(n.t)
	for l := range expect {
		if redistest.SlotOf(l) == slot {
			expect[l] = to
		}
	}
}

// failOver kills primary, waits until its replica serves its slots, and
// rejoins it as that replica's replica; expect learns the new places.
func (n *clusterNemesis) failOver(primary *redistest.Server, expect placement) {
	primary.Kill(n.t) // here, not in WaitFailover: the fault starts at the kill
	promoted := n.c.WaitFailover(n.t, primary)
	n.c.Rejoin(n.t, primary)
	for l, s := range expect {
		if s == primary {
			expect[l] = promoted
		}
	}
}

// unasked records a failover nobody asked for: the locks whose primary
// is not the one expect says, seen in [from, now].
func (n *clusterNemesis) unasked(expect, got placement, from time.Duration) {
	var locks []string
	for name, s := range got {
		if expect[name] != s {
			locks = append(locks, name)
		}
	}
	if len(locks) == 0 {
		return
	}
	sort.Strings(locks)
	f := Fault{Kind: FaultUnasked, Target: "server", Start: from, End: n.h.Now(), Locks: locks}
	n.h.AddFault(f)
	n.count[f.Kind]++
	n.t.Logf("soak: a failover nobody asked for, between %s and %s: %s moved", ms(f.Start), ms(f.End), strings.Join(locks, ", "))
}

// The documented exception (RULES.md X9, RELIABILITY.md "The limits,
// honestly"): replication is asynchronous, so a primary that dies may take
// its last writes with it, and the replica promoted in its place grants
// again what it never heard was granted - a fencing token repeats or goes
// backwards, two owners both believe they hold. WithReplicaAcks rolls back
// an acquire no replica acknowledged, so with acks neither may happen.
// A tokens, exclusion or linearizability violation is such an exception
// when the grant the failover may have forgotten was made by a client
// without replica acks (or by Redisson's model, which never waits),
// shortly before the kill of its lock's primary, and the violation shows
// after the kill, within a lease of the failover's end. Anything else is
// a violation.

// replicaLag bounds how long before a primary died a write it answered
// may have been that its replica never received: a settled replica lags
// by milliseconds; a second is far beyond.
const replicaLag = time.Second

// withAcks reports whether the client labelled client waits for replica
// acks (RunCluster marks its label); Java's never does.
func withAcks(client string) bool { return strings.Contains(client, ackMark) }

// exceptionRule judges violations against the failovers of one run.
type exceptionRule struct {
	failovers []Fault
	bounds    Bounds
	reach     time.Duration // after a failover's end, how long a forgotten grant may still show: the lease
	byID      map[int]*Op
	holds     []*Hold
}

// splitExceptions splits vs, the violations h was found with against b,
// into those that stay violations and the documented exceptions of h's
// failovers (asked for or not).
func splitExceptions(h *History, vs []Violation, b Bounds) (violations, exceptions []Violation) {
	x := exceptionRule{failovers: failovers(h), bounds: b, reach: b.Lease, byID: map[int]*Op{}, holds: h.Holds()}
	for _, op := range h.Ops() {
		x.byID[op.ID] = op
	}
	exceptions = []Violation{} // counted, even when none
	for _, v := range vs {
		if x.excuses(v) {
			exceptions = append(exceptions, v)
		} else {
			violations = append(violations, v)
		}
	}
	return violations, exceptions
}

// failovers returns h's failovers, asked for or not.
func failovers(h *History) []Fault {
	var out []Fault
	for _, f := range h.Faults() {
		if f.Kind == FaultFailover || f.Kind == FaultUnasked {
			out = append(out, f)
		}
	}
	return out
}

// excuses reports whether v is the documented exception.
func (x *exceptionRule) excuses(v Violation) bool {
	switch v.Check {
	case "tokens":
		if len(v.Ops) != 2 || x.byID[v.Ops[0]] == nil || x.byID[v.Ops[1]] == nil {
			return false
		}
		a, b := x.byID[v.Ops[0]], x.byID[v.Ops[1]]
		return x.forgottenBefore(a.Lock, a.Client, a.Call, a.Return, b.Return) ||
			x.forgottenBefore(b.Lock, b.Client, b.Call, b.Return, a.Return)
	case "exclusion":
		if len(v.Ops) != 1 || x.byID[v.Ops[0]] == nil {
			return false
		}
		a := x.byID[v.Ops[0]]
		held := x.believedHeld(a)
		for _, h := range held {
			if !x.forgottenBefore(h.Lock, h.Client, h.Called, h.Acquired, a.Return) {
				return false
			}
		}
		return len(held) > 0
	case "linearizable":
		for _, h := range x.holds {
			if h.Lock == v.Lock && x.forgottenBefore(h.Lock, h.Client, h.Called, h.Acquired, v.At) {
				return true
			}
		}
	}
	return false
}

// forgottenBefore reports whether a failover of lock's primary may have
// forgotten a grant that client, without replica acks, was made between
// call and ret, and that shows at: the primary died after the call and
// within replicaLag of the return, and at is after the kill and within
// reach of the failover's end.
func (x *exceptionRule) forgottenBefore(lock, client string, call, ret, at time.Duration) bool {
	if withAcks(client) {
		return false
	}
	for _, f := range x.failovers {
		if slices.Contains(f.Locks, lock) && call <= f.Start && ret+replicaLag >= f.Start &&
			at >= f.Start && at <= f.End+x.reach {
			return true
		}
	}
	return false
}

// believedHeld returns the holds of other owners on a's lock that their
// owners still believed they held when a, a new hold, was granted: not
// released, not ended in time to be told (the notice bound, the tick
// for a client that watches no keys), a Java lease not run out.
func (x *exceptionRule) believedHeld(a *Op) []*Hold {
	var out []*Hold
	for _, h := range x.holds {
		if h.Lock != a.Lock || h == a.Hold || h.Owner == a.Owner || h.Acquired >= a.Return {
			continue
		}
		if u := h.Unlocking(); u > 0 && u < a.Return {
			continue
		}
		if h.Java {
			if h.Acquired+h.Lease > a.Return {
				out = append(out, h)
			}
			continue
		}
		bound := x.bounds.Tick
		if h.Watches {
			bound = x.bounds.Notice
		}
		if done, _ := h.Done(); done == 0 || done > a.Return+bound {
			out = append(out, h)
		}
	}
	return out
}

// logExceptions prints a run's exceptions, when it counts them: how many
// by check, then each (the first 20); with a directory, it writes each
// one's slice of h to soak-<seed>-exceptions.txt there.
func logExceptions(t *testing.T, h *History, exceptions []Violation, dir string) {
	if exceptions == nil {
		return
	}
	t.Logf("documented exceptions (a failover without replica acks, RULES.md X9): %s", countByCheck(exceptions))
	for i, v := range exceptions {
		if i == 20 {
			t.Logf("... and %d more", len(exceptions)-20)
			break
		}
		t.Logf("exception: %v", v)
	}
	if dir == "" || len(exceptions) == 0 {
		return
	}
	path := filepath.Join(dir, fmt.Sprintf("soak-%d-exceptions.txt", h.Seed))
	if err := os.WriteFile(path, []byte(Explain(h, exceptions)), 0o644); err != nil {
		t.Log(err)
		return
	}
	t.Logf("the exceptions' slices of the history: %s", path)
}

// countByCheck counts vs by check: "N (check n, ...)", or "0".
func countByCheck(vs []Violation) string {
	if len(vs) == 0 {
		return "0"
	}
	n := map[string]int{}
	for _, v := range vs {
		n[v.Check]++
	}
	var parts []string
	for c, k := range n {
		parts = append(parts, fmt.Sprintf("%s %d", c, k))
	}
	sort.Strings(parts)
	return fmt.Sprintf("%d (%s)", len(vs), strings.Join(parts, ", "))
}
