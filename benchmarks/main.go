// Command benchmarks compares fairlock, on each of its adapters, with other
// Redis lock libraries in one run against a redis-server it starts itself,
// and writes BENCHMARKS.md, its summary docs/benchmarks.md, a chart and the
// raw figures. Run it with scripts/benchmarks.sh from the repository root;
// -render writes the same files again from the raw figures of a run.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/fairlock/fairlock/lockbench"
)

func main() {
	var (
		out     = flag.String("out", "BENCHMARKS.md", "the report to write; its summary goes to docs/benchmarks.md beside it")
		chart   = flag.String("chart", "benchmarks/contention.svg", "the chart to write (SVG); the report links to it by its path relative to the report")
		raw     = flag.String("json", "benchmarks/results.json", "the raw figures to write")
		binary  = flag.String("redis-server", "redis-server", "the redis-server binary")
		quick   = flag.Bool("quick", false, "tiny settings: a smoke test of the whole run, not a measurement")
		render  = flag.String("render", "", "measure nothing: write the report and chart from this raw-figures file of an earlier run")
		timeout = flag.Duration("timeout", 9*time.Minute, "stop everything after this long")
		cluster = flag.Bool("cluster", false, "run the cluster benchmark instead (a 3-primary cluster with replicas and a standalone server): writes its section of the report, -cluster-chart and -cluster-json")
		cchart  = flag.String("cluster-chart", "benchmarks/cluster.svg", "the cluster benchmark's chart (SVG)")
		cjson   = flag.String("cluster-json", "benchmarks/cluster.json", "the cluster benchmark's raw figures; a run of the other benchmarks keeps the report's cluster section from them")
		scripts = flag.String("scripts", "lock/internal/wire/scripts", "the lock package's Lua scripts, sent bare beside the locks (the many-locks and uncontended bounds)")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var err error
	switch {
	case *cluster && *render != "":
		err = renderClusterFrom(*render, *out, *cchart)
	case *cluster:
		set := clusterFull
		if *quick {
			set = clusterQuick
		}
		err = runCluster(ctx, set, *binary, *out, *cchart, *cjson)
	default:
		clusterJSON, clusterChart = *cjson, *cchart
		if *render != "" {
			err = renderFrom(*render, *out, *chart)
			break
		}
		set := fullSettings
		if *quick {
			set = quickSettings
		}
		err = run(ctx, set, *binary, *scripts, *out, *chart, *raw)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchmarks:", err)
		os.Exit(1)
	}
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
}

func run(ctx context.Context, set settings, binary, scriptsDir, out, chart, raw string) error {
	start := time.Now()
	res := newResults(set)
	res.Meta = collectMeta(ctx, start)
	dir, err := os.MkdirTemp("", "fairlock-benchmarks-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := startRedis(binary, dir)
	if err != nil {
		return err
	}
	defer srv.stop()
	res.Meta.Redis = srv.version
	logf("redis-server %s at %s; %d rounds; GOMAXPROCS %d", srv.version, srv.addr, set.Rounds, runtime.GOMAXPROCS(0))
	b := &bench{srv: srv, kinds: lockKinds(), set: set, log: logf, profiled: map[string]bool{}, scriptsDir: scriptsDir}
	for _, k := range b.kinds {
		res.Kinds = append(res.Kinds, kindInfo{Name: k.name, Module: k.module, Version: moduleVersion(k.module), Settings: k.settings, Fairlock: k.fairlock, Client: k.client})
	}
	if b.scripts, err = b.calibrateScripts(ctx, b.kinds[0]); err != nil {
		res.Errors = append(res.Errors, "naming fairlock's scripts: "+err.Error())
		logf("naming fairlock's scripts: %v", err)
	}
	for round := 1; round <= set.Rounds && ctx.Err() == nil; round++ {
		b.round(ctx, round, res)
	}
	return finishRun(ctx, start, &res.Meta, &res.Errors, res, out, chart, raw, func() error { return writeReport(res, out, chart) })
}

// finishRun ends a run: it completes the metadata, notes a run stopped
// early, writes the raw figures (res) to raw, then the report and chart
// with write, and logs what it wrote.
func finishRun(ctx context.Context, start time.Time, m *meta, errs *[]string, res any, out, chart, raw string, write func() error) error {
	m.LoadAfter = loadAverage()
	m.Elapsed = time.Since(start)
	if err := ctx.Err(); err != nil {
		*errs = append(*errs, "run stopped early: "+err.Error())
	}
	if err := writeJSON(raw, res); err != nil {
		return err
	}
	if err := write(); err != nil {
		return err
	}
	logf("wrote %s, %s and %s in %v", out, chart, raw, time.Since(start).Round(time.Second))
	return nil
}

// renderFrom writes the report, its summary and the chart from the raw
// figures of a run.
func renderFrom(raw, out, chart string) error {
	res, err := readResults(raw)
	if err != nil {
		return err
	}
	return writeReport(res, out, chart)
}

// readResults reads the raw figures of a run, moving what older files
// keep elsewhere to where the report reads it.
func readResults(raw string) (*results, error) {
	var res results
	if err := readJSON(raw, &res); err != nil {
		return nil, err
	}
	if len(res.UncontendedFloor) > 0 && len(res.reportFloor()) == 0 {
		res.ClientFloors = map[string][]lockbench.Latency{floorClients[0].name: res.UncontendedFloor}
	}
	return &res, nil
}

// clusterJSON is the cluster benchmark's raw figures, whose section
// writeReport keeps in the report ("" or a missing file: none).
var clusterJSON, clusterChart string

// writeReport writes the chart, the summary (summaryPath) and the report,
// which links to the chart by its path relative to the report.
func writeReport(res *results, out, chart string) error {
	rel := relPath(out, chart)
	if err := os.WriteFile(chart, []byte(renderChart(res)), 0o644); err != nil {
		return err
	}
	summary := summaryPath(out)
	if err := os.MkdirAll(filepath.Dir(summary), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(summary, []byte(renderSummary(res, relPath(summary, out))), 0o644); err != nil {
		return err
	}
	text := renderReport(res, rel)
	// The cluster benchmark's section, from its own run's figures.
	if section, err := clusterSectionFrom(clusterJSON, out, clusterChart); err != nil {
		return err
	} else if section != "" {
		text = spliceCluster(text, section)
	}
	return os.WriteFile(out, []byte(text), 0o644)
}

// relPath is target's path relative to the report's directory, with
// forward slashes (the report links to it).
func relPath(report, target string) string {
	rel := target
	if absOut, err := filepath.Abs(report); err == nil {
		if abs, err := filepath.Abs(target); err == nil {
			if r, err := filepath.Rel(filepath.Dir(absOut), abs); err == nil {
				rel = r
			}
		}
	}
	return filepath.ToSlash(rel)
}

// round runs every scenario once, every lock in turn, so that a slow
// stretch of the machine spreads over all locks rather than one.
func (b *bench) round(ctx context.Context, round int, res *results) {
	kinds := b.inRound(round)
	fail := func(what string, err error) {
		msg := fmt.Sprintf("round %d: %s: %v", round, what, err)
		logf("FAILED %s", msg)
		res.Errors = append(res.Errors, msg)
	}
	logf("round %d: PING round trip", round)
	if rtt, err := b.srv.pingRTT(ctx, b.set.PingSamples); err != nil {
		fail("ping", err)
	} else {
		res.Ping = append(res.Ping, pingRound{RTT: lockbench.Summarize(rtt)})
	}
	logf("round %d: uncontended, every lock in turn", round)
	lat, floors, bare, err := b.uncontendedInterleaved(ctx)
	if err != nil {
		fail("uncontended, interleaved", err)
	} else {
		if res.ClientFloors == nil {
			res.ClientFloors = make(map[string][]lockbench.Latency)
		}
		for name, f := range floors {
			res.ClientFloors[name] = append(res.ClientFloors[name], f)
		}
		res.UncontendedBare = append(res.UncontendedBare, bare)
	}
	for _, k := range kinds {
		logf("round %d: uncontended: %s", round, k.name)
		if r, err := b.uncontended(ctx, k); err != nil {
			fail("uncontended "+k.name, err)
		} else {
			if l, ok := lat[k.name]; ok {
				r.Interleaved = &l
			}
			res.Uncontended[k.name] = append(res.Uncontended[k.name], r)
		}
	}
	for _, n := range b.set.Contenders {
		for _, k := range kinds {
			if ctx.Err() != nil {
				return
			}
			r, err := b.contended(ctx, k, n, false)
			if err != nil {
				fail(fmt.Sprintf("contended %s, %d contenders", k.name, n), err)
				continue
			}
			logf("round %d: contended: %-16s %2d contenders: %8.0f/s, hand-over p50 %v, %.1f commands/acquisition, Jain %.2f",
				round, k.name, n, r.Throughput, r.Handover.P50, r.CommandsPerAcq, r.Fairness)
			res.addContended(k.name, r)
		}
	}
	for _, k := range kinds {
		if !k.fairlock {
			continue
		}
		r, err := b.contended(ctx, k, b.set.Headline, true)
		if err != nil {
			fail("FIFO check "+k.name, err)
			continue
		}
		logf("round %d: FIFO check: %s: %d violations in %d checked (%d snapshots)", round, k.name, r.FIFOViolations, r.FIFOChecked, r.FIFOSnapshots)
		res.FIFO[k.name] = append(res.FIFO[k.name], r)
	}
	for _, k := range kinds {
		if ctx.Err() != nil {
			return
		}
		r, err := b.idleHandover(ctx, k)
		if err != nil {
			fail("idle hand-over "+k.name, err)
			continue
		}
		logf("round %d: idle hand-over: %-16s p50 %v", round, k.name, r.Handover.P50)
		res.Idle[k.name] = append(res.Idle[k.name], r)
	}
	for _, k := range kinds {
		if ctx.Err() != nil {
			return
		}
		first := len(res.Many[k.name]) == 0
		r, err := b.manyLocks(ctx, k, first && (k.fairlock || k.name == reference))
		if err != nil {
			fail("many locks "+k.name, err)
			continue
		}
		logf("round %d: many locks: %-16s %8.0f/s, Lock p99 %v", round, k.name, r.Throughput, r.Lock.P99)
		res.Many[k.name] = append(res.Many[k.name], r)
	}
	if ctx.Err() == nil {
		if r, err := b.manyBare(ctx, len(res.ManyBare) == 0); err != nil {
			fail("many locks, "+bareName, err)
		} else {
			logf("round %d: many locks: %s: %8.0f/s, Lock p99 %v", round, bareName, r.Throughput, r.Lock.P99)
			res.ManyBare = append(res.ManyBare, r)
		}
	}
	for _, k := range kinds {
		if !k.fairlock || ctx.Err() != nil {
			continue
		}
		s, err := b.manySlow(ctx, k)
		if err != nil {
			fail("many locks, observed "+k.name, err)
			continue
		}
		logf("round %d: many locks, observed: %s: %d of %d Lock calls over %v, %d of them woken by a message", round, k.name, s.Slow, s.Calls, s.Threshold, s.Woken)
		res.ManySlow[k.name] = append(res.ManySlow[k.name], s)
	}
	if ctx.Err() != nil {
		return
	}
	logf("round %d: queue scaling: %s", round, b.kinds[0].name)
	if r, err := b.queueScaling(ctx, b.kinds[0]); err != nil {
		fail("queue scaling", err)
	} else {
		res.Queue = append(res.Queue, r)
	}
	for _, k := range b.waiterKinds() {
		if ctx.Err() != nil {
			return
		}
		r, err := b.idleWaiters(ctx, k, b.set.IdleWaiters)
		if err != nil {
			fail("idle waiters "+k.name, err)
			continue
		}
		logf("round %d: %d idle waiters: %-16s server CPU %.3fs, client CPU %v, %d commands in %v",
			round, r.Waiters, k.name, r.ServerCPU, r.ClientCPU.Round(time.Millisecond), r.Commands, r.Window.Round(time.Millisecond))
		res.Waiters[k.name] = append(res.Waiters[k.name], r)
	}
}

// inRound is the order the locks run in, round after round: as listed
// in odd rounds, reversed in even ones, so that no lock always runs at the
// same point of a round while the machine's speed drifts.
func (b *bench) inRound(round int) []lockKind {
	kinds := slices.Clone(b.kinds)
	if round%2 == 0 {
		slices.Reverse(kinds)
	}
	return kinds
}

// waiterKinds are the locks of the idle-waiter scenario: fairlock on its
// first adapter and rueidislock.
func (b *bench) waiterKinds() []lockKind {
	var out []lockKind
	for _, k := range b.kinds {
		if k.name == b.kinds[0].name || k.name == "rueidislock" {
			out = append(out, k)
		}
	}
	return out
}

// readJSON reads the raw figures at path into v.
func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
