package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/redistest"
)

// TestQuickRun runs every scenario with tiny settings against a real
// redis-server and checks that the report, chart and raw figures come out
// whole. It needs redis-server (FAIRLOCK_REDIS_SERVER, PATH or
// /usr/bin/redis-server) and takes about half a minute.
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("a whole quick run takes about half a minute")
	}
	binary, err := redistest.Binary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out, chart, raw := filepath.Join(dir, "BENCHMARKS.md"), filepath.Join(dir, "contention.svg"), filepath.Join(dir, "results.json")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := run(ctx, quickSettings, binary, "../lock/internal/wire/scripts", out, chart, raw); err != nil {
		t.Fatal(err)
	}
	var res results
	data, err := os.ReadFile(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Errors) > 0 {
		t.Errorf("errors during the run: %q", res.Errors)
	}
	if len(res.ManyBare) != quickSettings.Rounds || len(res.UncontendedBare) != quickSettings.Rounds {
		t.Errorf("%s: %d many-locks rounds, %d uncontended", bareName, len(res.ManyBare), len(res.UncontendedBare))
	}
	for _, f := range floorClients {
		if fl := res.ClientFloors[f.name]; len(fl) != quickSettings.Rounds || fl[0].Pair.P50 <= 0 {
			t.Errorf("floor on %s: %+v", f.name, fl)
		}
	}
	for _, k := range res.Kinds {
		if len(res.ClientFloors[k.Client]) == 0 {
			t.Errorf("%s: no floor on its client %q", k.Name, k.Client)
		}
	}
	for _, m := range res.ManyBare {
		if c := m.PerPair; m.Acquisitions == 0 || c.ServerCPU <= 0 || c.Scripts < 2 || c.Writes <= 0 {
			t.Errorf("%s: many-locks %d pairs, cost per pair %+v", bareName, m.Acquisitions, c)
		}
	}
	if len(res.ManyBare) > 0 && (res.ManyBare[0].Profile == nil || res.Many[lockKinds()[0].name][0].Profile == nil) {
		t.Errorf("many locks, first round: no client CPU profile of %s or %s", bareName, lockKinds()[0].name)
	}
	for _, k := range lockKinds() {
		if len(res.Uncontended[k.name]) != quickSettings.Rounds || len(res.Many[k.name]) != quickSettings.Rounds || len(res.Idle[k.name]) != quickSettings.Rounds {
			t.Errorf("%s: rounds missing", k.name)
		}
		for _, u := range res.Uncontended[k.name] {
			if c := u.PerPair; c.ServerCPU <= 0 || c.ClientCPU <= 0 || c.Commands <= 0 || c.Writes <= 0 || c.Allocs <= 0 {
				t.Errorf("%s: uncontended cost per pair %+v", k.name, c)
			}
		}
		for _, m := range res.Many[k.name] {
			if c := m.PerPair; c.ServerCPU <= 0 || c.ClientCPU <= 0 || c.Commands <= 0 || c.Writes <= 0 || c.Allocs <= 0 {
				t.Errorf("%s: many-locks cost per pair %+v", k.name, c)
			}
		}
		for _, n := range quickSettings.Contenders {
			if len(res.Contended[k.name][n]) != quickSettings.Rounds {
				t.Errorf("%s, %d contenders: %d rounds", k.name, n, len(res.Contended[k.name][n]))
			}
		}
		if k.fairlock {
			for _, f := range res.FIFO[k.name] {
				if f.FIFOViolations != 0 || f.FIFOChecked == 0 {
					t.Errorf("%s: FIFO %d violations in %d checked", k.name, f.FIFOViolations, f.FIFOChecked)
				}
			}
		}
	}
	if len(res.Queue) != quickSettings.Rounds || len(res.Waiters) != 2 {
		t.Errorf("%d queue-scaling rounds, idle waiters for %d locks", len(res.Queue), len(res.Waiters))
	}
	report, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, section := range []string{"## Setup", "## Targets", "## 1. ", "## 2. ", "## 3. ", "## 4. ", "## 5. ", "## 6. ", "## What bounds it", "(contention.svg)", "### What a pair costs", "server CPU per uncontended pair <= 1.3x"} {
		if !strings.Contains(string(report), section) {
			t.Errorf("report has no %q", section)
		}
	}
	summary, err := os.ReadFile(summaryPath(out))
	if err != nil {
		t.Fatal(err)
	}
	for _, section := range []string{"(../BENCHMARKS.md)", "## Uncontended", "## 16 contenders", "## Idle hand-over", "## 64 goroutines", "## A long queue", " idle waiters\n"} {
		if !strings.Contains(string(summary), section) {
			t.Errorf("summary has no %q", section)
		}
	}
	if n := len(strings.Fields(string(summary))); n > summaryWords {
		t.Errorf("summary: %d words", n)
	}
	svg, err := os.ReadFile(chart)
	if err != nil || !strings.HasPrefix(string(svg), "<svg") || !strings.Contains(string(svg), "fairlock/rueidis") {
		t.Errorf("chart: %v\n%.200s", err, svg)
	}
}

// TestClusterQuickRun runs the cluster benchmark with tiny settings (a
// fresh 3-primary cluster with replicas and a standalone server) and
// checks its section, chart and raw figures. About 40 s.
func TestClusterQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("a quick cluster run takes about 40 s")
	}
	binary, err := redistest.Binary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out, chart, raw := filepath.Join(dir, "BENCHMARKS.md"), filepath.Join(dir, "cluster.svg"), filepath.Join(dir, "cluster.json")
	// The section goes after whatever the report holds.
	if err := os.WriteFile(out, []byte("# Benchmarks\n\nbefore\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := runCluster(ctx, clusterQuick, binary, out, chart, raw); err != nil {
		t.Fatal(err)
	}
	res, err := readClusterResults(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Errors) > 0 {
		t.Errorf("errors during the run: %q", res.Errors)
	}
	if want := 3 * len(clusterQuick.Contenders) * clusterQuick.Rounds; len(res.Contended) != want {
		t.Errorf("%d contended runs, want %d", len(res.Contended), want)
	}
	for _, r := range res.Contended {
		if r.Target.Cluster && (r.Owner < 0 || len(r.PerNode) != 6) {
			t.Errorf("%s: owner %d, %d nodes", r.Target.Name, r.Owner, len(r.PerNode))
		}
	}
	// Broadcast: every PUBLISH reaches the 5 other nodes over the bus.
	// Sharded: the scripts send SPUBLISH only.
	for _, mi := range modelFrom(res).Modes {
		switch publishMode(mi.Mode) {
		case publishSharded:
			if mi.SPublish < 0.5 || mi.Publish >= 0.1 {
				t.Errorf("%s: %.2f SPUBLISH, %.2f PUBLISH per acquisition at the slot's primary", mi.Mode, mi.SPublish, mi.Publish)
			}
		default:
			if mi.Publish < 0.5 {
				t.Errorf("%s: %.2f PUBLISH per acquisition at the slot's primary", mi.Mode, mi.Publish)
			}
		}
	}
	if m := res.Memory; m == nil || m.Held.Keys != int64(2*clusterQuick.MemoryNames) || m.Gone.Keys != 0 || len(m.Queued) != len(clusterQuick.MemoryWaiters) {
		t.Errorf("memory: %+v", res.Memory)
	}
	report, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Benchmarks\n\nbefore\n", clusterBegin, "### 7a.", "### 7d.", clusterEnd, "(cluster.svg)"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report has no %q", want)
		}
	}
	if svg, err := os.ReadFile(chart); err != nil || !strings.HasPrefix(string(svg), "<svg") {
		t.Errorf("chart: %v", err)
	}
}

func TestInRound(t *testing.T) {
	b := &bench{kinds: []lockKind{{name: "a"}, {name: "b"}, {name: "c"}}}
	names := func(ks []lockKind) string {
		var s string
		for _, k := range ks {
			s += k.name
		}
		return s
	}
	for round, want := range map[int]string{1: "abc", 2: "cba", 3: "abc", 4: "cba"} {
		if got := names(b.inRound(round)); got != want {
			t.Errorf("round %d: %s, want %s", round, got, want)
		}
	}
	if names(b.kinds) != "abc" {
		t.Errorf("inRound changed the bench's own order: %s", names(b.kinds))
	}
}
