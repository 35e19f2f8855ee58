package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/lockbench"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

// The cluster benchmark (-cluster): a fresh Redis Cluster of 3 primaries
// with a replica each on loopback, and one standalone server beside it, to
// measure what fairlock costs past one server: cluster-bus messages and
// pub/sub commands per acquisition on each node with broadcast and sharded
// wake-ups, throughput and hand-over on one server against the cluster,
// memory per lock name, held lock and waiter, and a model of larger
// deployments from those figures (model.go). It writes benchmarks/cluster.json,
// benchmarks/cluster.svg and its section of BENCHMARKS.md.

// publishMode is how lock clients wake waiters on a cluster: the one
// parameter of the bus measurements.
type publishMode string

const (
	// broadcast: PUBLISH, which Redis Cluster sends over the bus to every
	// node; waiters SUBSCRIBE at any node.
	publishBroadcast publishMode = "broadcast"
	// sharded: SPUBLISH, which stays inside the slot's shard (its primary
	// and replicas).
	publishSharded publishMode = "sharded"
)

var publishModes = []publishMode{publishBroadcast, publishSharded}

// modeOptions returns the lock options of mode on a cluster client.
func modeOptions(m publishMode) []lock.Option {
	switch m {
	case publishSharded:
		return []lock.Option{lock.WithPublish(lock.PublishSharded)}
	default:
		return []lock.Option{lock.WithPublish(lock.PublishPlain)}
	}
}

// modeNote says what a mode is with the lock options modeOptions gives.
func modeNote(m publishMode) string {
	switch m {
	case publishSharded:
		return "lock.WithPublish(lock.PublishSharded), the default on a Redis 7 cluster: the scripts send SPUBLISH; waiters SSUBSCRIBE at the slot's primary"
	default:
		return "lock.WithPublish(lock.PublishPlain): the scripts send PUBLISH; waiters SUBSCRIBE at any node"
	}
}

// clusterSettings bound the cluster benchmark.
type clusterSettings struct {
	Primaries     int           `json:"primaries"`
	Replicas      int           `json:"replicas_each"`
	Rounds        int           `json:"rounds"`
	Contenders    []int         `json:"contenders"`
	Hold          time.Duration `json:"hold_ns"`
	ContendedFor  time.Duration `json:"contended_for_ns"`
	Drain         time.Duration `json:"drain_ns"`
	ManyWorkers   int           `json:"many_workers"`
	ManyLocks     int           `json:"many_locks"`
	ManyFor       time.Duration `json:"many_for_ns"`
	MemoryNames   int           `json:"memory_names"`
	MemoryWaiters []int         `json:"memory_waiters"`
	MemoryWorkers int           `json:"memory_workers"`
}

// clusterFull is the measured run. Five rounds, each running the
// standalone server and the cluster one after the other: on 2 cores a
// round now and then runs every hand-over ~150 µs slower, on one server
// as on the cluster (scheduling under load), and the median of five
// rounds is not moved by one such round as the median of three was.
var clusterFull = clusterSettings{
	Primaries: 3, Replicas: 1, Rounds: 5,
	Contenders: []int{4, 16}, Hold: 200 * time.Microsecond, ContendedFor: 2 * time.Second, Drain: 2 * time.Second,
	ManyWorkers: 64, ManyLocks: 1024, ManyFor: 2 * time.Second,
	MemoryNames: 100_000, MemoryWaiters: []int{10, 100, 1000}, MemoryWorkers: 128,
}

var clusterQuick = clusterSettings{
	Primaries: 3, Replicas: 1, Rounds: 1,
	Contenders: []int{4}, Hold: 200 * time.Microsecond, ContendedFor: 300 * time.Millisecond, Drain: time.Second,
	ManyWorkers: 16, ManyLocks: 256, ManyFor: 300 * time.Millisecond,
	MemoryNames: 2000, MemoryWaiters: []int{10, 200}, MemoryWorkers: 32,
}

// target is where a run's lock clients point: the standalone server or
// the cluster with one publish mode.
type target struct {
	Name    string      `json:"name"` // "standalone", "cluster broadcast", "cluster sharded"
	Cluster bool        `json:"cluster"`
	Mode    publishMode `json:"mode,omitempty"`
}

// clusterResults is everything the cluster benchmark measured;
// benchmarks/cluster.json holds it.
type clusterResults struct {
	Meta      meta              `json:"meta"`
	Settings  clusterSettings   `json:"settings"`
	Nodes     []string          `json:"nodes"` // p1..pN, r1..rN
	Modes     map[string]string `json:"modes"` // publish mode: what it is today
	Contended []clusterRun      `json:"contended"`
	Many      []clusterRun      `json:"many_locks"`
	Memory    *memoryResult     `json:"memory,omitempty"`
	Errors    []string          `json:"errors"`
}

// clusterRun is one contended or many-locks run on one target.
type clusterRun struct {
	Target       target            `json:"target"`
	Round        int               `json:"round"`
	Contenders   int               `json:"contenders,omitempty"` // contended runs
	Acquisitions int               `json:"acquisitions"`
	Throughput   float64           `json:"throughput_per_s"`
	Handover     lockbench.Summary `json:"handover"` // contended runs
	Lock         lockbench.Summary `json:"lock"`     // many-locks runs
	// Owner is the index (in Nodes) of the primary owning the lock's slot
	// (contended runs on the cluster).
	Owner int `json:"owner"`
	// PerNode are the counters' deltas over the run, node by node (the
	// cluster) or the one server.
	PerNode []nodeDelta `json:"per_node"`
}

// nodeDelta is what one node did over a run.
type nodeDelta struct {
	Bus   busStats     `json:"bus"`
	Calls commandCalls `json:"command_calls"`
}

// nodeSnap is one node's counters at a moment.
type nodeSnap struct {
	bus   busStats
	calls commandCalls
}

func snapNodes(ctx context.Context, nodes []*redisServer, cluster bool) ([]nodeSnap, error) {
	out := make([]nodeSnap, len(nodes))
	for i, n := range nodes {
		var err error
		if cluster {
			if out[i].bus, err = n.busStats(ctx); err != nil {
				return nil, err
			}
		}
		if out[i].calls, err = n.commandCalls(ctx); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func deltas(before, after []nodeSnap) []nodeDelta {
	out := make([]nodeDelta, len(before))
	for i := range before {
		calls := after[i].calls.since(before[i].calls)
		for k := range calls {
			// This program's CLUSTER INFO and the clients' topology
			// refreshes (CLUSTER SLOTS/SHARDS) are not the lock's.
			if strings.HasPrefix(k, "cluster") {
				delete(calls, k)
			}
		}
		out[i] = nodeDelta{Bus: after[i].bus.minus(before[i].bus), Calls: calls}
	}
	return out
}

// clusterBench is one run of the cluster benchmark.
type clusterBench struct {
	set     clusterSettings
	cluster *redisCluster
	single  *redisServer
	seq     int
	log     func(format string, a ...any)
}

func (b *clusterBench) name(scenario string) string {
	b.seq++
	return fmt.Sprintf("cbench:%s:%d", scenario, b.seq)
}

// connect opens one rueidis client on t (a cluster client on the cluster)
// and a lock client on it with t's publish mode and extra options.
func (b *clusterBench) connect(t target, extra ...lock.Option) (*lock.Client, func(), error) {
	var addrs []string
	if t.Cluster {
		addrs = b.cluster.addrs()
	} else {
		addrs = []string{b.single.addr}
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs})
	if err != nil {
		return nil, nil, err
	}
	if t.Cluster != (rc.Mode() == rueidis.ClientModeCluster) {
		rc.Close()
		return nil, nil, fmt.Errorf("%s: rueidis client in mode %v", t.Name, rc.Mode())
	}
	be := rueidisbackend.New(rc)
	var opts []lock.Option
	if t.Cluster {
		opts = append(opts, modeOptions(t.Mode)...)
	}
	lc, err := lock.NewClient(be, append(opts, extra...)...)
	if err != nil {
		_ = be.Close()
		rc.Close()
		return nil, nil, err
	}
	return lc, func() { _ = lc.Close(); _ = be.Close(); rc.Close() }, nil
}

// clusterTargetName names the cluster target of publish mode m.
func clusterTargetName(m publishMode) string { return "cluster " + string(m) }

// clusterTarget is the cluster in publish mode m.
func clusterTarget(m publishMode) target {
	return target{Name: clusterTargetName(m), Cluster: true, Mode: m}
}

// clusterTargets are the standalone server, then the cluster in each
// publish mode.
func clusterTargets() []target {
	out := []target{{Name: "standalone"}}
	for _, m := range publishModes {
		out = append(out, clusterTarget(m))
	}
	return out
}

func (b *clusterBench) nodesOf(t target) []*redisServer {
	if t.Cluster {
		return b.cluster.nodes()
	}
	return []*redisServer{b.single}
}

// perNode runs f and returns what each node of t did meanwhile.
func (b *clusterBench) perNode(ctx context.Context, t target, f func() error) ([]nodeDelta, error) {
	before, err := snapNodes(ctx, b.nodesOf(t), t.Cluster)
	if err != nil {
		return nil, err
	}
	if err := f(); err != nil {
		return nil, err
	}
	after, err := snapNodes(ctx, b.nodesOf(t), t.Cluster)
	if err != nil {
		return nil, err
	}
	return deltas(before, after), nil
}

// contended runs n contenders, each with its own client, on one lock of t.
func (b *clusterBench) contended(ctx context.Context, t target, n int) (clusterRun, error) {
	r := clusterRun{Target: t, Contenders: n, Owner: -1}
	name := b.name("contended")
	if t.Cluster {
		r.Owner = b.cluster.primaryOf(int(backend.Slot(name)))
	}
	lockers := make([]lockbench.Locker, n)
	for i := range n {
		lc, closeFn, err := b.connect(t)
		if err != nil {
			return r, err
		}
		defer closeFn()
		m, err := lc.NewMutex(name)
		if err != nil {
			return r, err
		}
		lockers[i] = lockbench.MutexLocker(m)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = lockbench.Uncontended(wctx, lockers[i], 1, 0)
		cancel()
		if err != nil {
			return r, fmt.Errorf("warm-up: %w", err)
		}
	}
	var run *lockbench.ContendedRun
	perNode, err := b.perNode(ctx, t, func() (err error) {
		run, err = lockbench.Contended(ctx, lockers, lockbench.Contention{Duration: b.set.ContendedFor, Drain: b.set.Drain, Hold: b.set.Hold})
		return err
	})
	if err != nil {
		return r, err
	}
	r.PerNode = perNode
	r.Acquisitions, r.Throughput = len(run.Acquisitions), run.Throughput()
	r.Handover = lockbench.Summarize(run.Handovers())
	return r, nil
}

// many runs ManyWorkers goroutines over ManyLocks names on one client of t.
func (b *clusterBench) many(ctx context.Context, t target) (clusterRun, error) {
	r := clusterRun{Target: t, Owner: -1}
	lc, closeFn, err := b.connect(t)
	if err != nil {
		return r, err
	}
	defer closeFn()
	prefix := b.name("many")
	newLocker := func(_, k int) (lockbench.Locker, error) {
		m, err := lc.NewMutex(fmt.Sprintf("%s:%d", prefix, k))
		if err != nil {
			return nil, err
		}
		return lockbench.MutexLocker(m), nil
	}
	if _, err := lockbench.ManyLocks(ctx, newLocker, lockbench.Spread{Workers: b.set.ManyWorkers, Locks: b.set.ManyLocks, Acquisitions: 200, Duration: time.Second}); err != nil {
		return r, fmt.Errorf("warm-up: %w", err)
	}
	var run *lockbench.ManyLocksRun
	perNode, err := b.perNode(ctx, t, func() (err error) {
		run, err = lockbench.ManyLocks(ctx, newLocker, lockbench.Spread{Workers: b.set.ManyWorkers, Locks: b.set.ManyLocks, Duration: b.set.ManyFor, Drain: b.set.Drain})
		return err
	})
	if err != nil {
		return r, err
	}
	r.PerNode = perNode
	r.Acquisitions, r.Throughput, r.Lock = run.Pairs, run.Throughput(), run.Lock.Summary()
	return r, nil
}

// runCluster is the cluster benchmark: -cluster.
func runCluster(ctx context.Context, set clusterSettings, binary, out, chart, raw string) error {
	start := time.Now()
	res := &clusterResults{Settings: set, Meta: collectMeta(ctx, start), Modes: map[string]string{}}
	for _, m := range publishModes {
		res.Modes[string(m)] = modeNote(m)
	}
	dir, err := os.MkdirTemp("", "fairlock-cluster-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	single, err := startRedis(binary, dir)
	if err != nil {
		return err
	}
	defer single.stop()
	res.Meta.Redis = single.version
	cluster, err := startCluster(ctx, binary, dir, set.Primaries, set.Replicas)
	if err != nil {
		return err
	}
	defer cluster.stop()
	for i := range cluster.nodes() {
		res.Nodes = append(res.Nodes, cluster.nodeName(i))
	}
	logf("redis-server %s: standalone at %s, cluster of %d primaries and %d replicas (%s); GOMAXPROCS %d, cluster up in %v",
		single.version, single.addr, len(cluster.primaries), len(cluster.replicas), strings.Join(cluster.addrs(), " "), runtime.GOMAXPROCS(0), time.Since(start).Round(time.Millisecond))
	b := &clusterBench{set: set, cluster: cluster, single: single, log: logf}
	fail := func(what string, err error) {
		msg := what + ": " + err.Error()
		logf("FAILED %s", msg)
		res.Errors = append(res.Errors, msg)
	}
	for round := 1; round <= set.Rounds && ctx.Err() == nil; round++ {
		for _, n := range set.Contenders {
			for _, t := range clusterTargets() {
				r, err := b.contended(ctx, t, n)
				if err != nil {
					fail(fmt.Sprintf("round %d: contended %s, %d contenders", round, t.Name, n), err)
					continue
				}
				r.Round = round
				logf("round %d: contended %-17s %2d contenders: %6.0f/s, hand-over p50 %v p99 %v; %s",
					round, t.Name, n, r.Throughput, r.Handover.P50, r.Handover.P99, busLine(r))
				res.Contended = append(res.Contended, r)
			}
		}
		for _, t := range clusterTargets() {
			if ctx.Err() != nil {
				break
			}
			r, err := b.many(ctx, t)
			if err != nil {
				fail(fmt.Sprintf("round %d: many locks %s", round, t.Name), err)
				continue
			}
			r.Round = round
			logf("round %d: many locks %-17s %6.0f/s, Lock p50 %v p99 %v; %s", round, t.Name, r.Throughput, r.Lock.P50, r.Lock.P99, busLine(r))
			res.Many = append(res.Many, r)
		}
	}
	if ctx.Err() == nil {
		m, err := b.memory(ctx)
		if err != nil {
			fail("memory", err)
		}
		res.Memory = m
	}
	return finishRun(ctx, start, &res.Meta, &res.Errors, res, out, chart, raw, func() error { return writeClusterReport(res, out, chart) })
}

// busLine sums a run's bus publish messages and pub/sub commands per
// acquisition over every node, for the log.
func busLine(r clusterRun) string {
	if r.Acquisitions == 0 {
		return "no acquisitions"
	}
	var bus, shard int64
	calls := map[string]int64{}
	for _, d := range r.PerNode {
		bus += d.Bus.PublishSent
		shard += d.Bus.ShardSent
		for k, v := range d.Calls {
			calls[k] += v.Calls
		}
	}
	a := float64(r.Acquisitions)
	var cmds []string
	for _, k := range []string{"evalsha", "publish", "spublish", "subscribe", "ssubscribe"} {
		if calls[k] > 0 {
			cmds = append(cmds, fmt.Sprintf("%s %.2f", k, float64(calls[k])/a))
		}
	}
	slices.Sort(cmds)
	return fmt.Sprintf("bus publish sent %.2f, publishshard sent %.2f; %s (per acquisition, all nodes)", float64(bus)/a, float64(shard)/a, strings.Join(cmds, ", "))
}
