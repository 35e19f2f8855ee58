package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

func TestIsWrite(t *testing.T) {
	for _, c := range []string{"set", "SET", "hset", "hdel", "del", "incr", "pexpire", "expire", "lpush", "rpush", "lpop", "rpop", "lrem", "zadd", "zrem", "unlink", "getdel"} {
		if !isWrite(c) {
			t.Errorf("%s is a write", c)
		}
	}
	for _, c := range []string{"evalsha", "eval", "fcall", "get", "hget", "lindex", "pttl", "time", "publish", "spublish", "subscribe", "ping", "exists", "zscore", "config|set", "client|tracking", "info"} {
		if isWrite(c) {
			t.Errorf("%s is not a write", c)
		}
	}
}

// fairlock's uncontended pair in the issue: 13 commands, 6 writes.
var fairlockPair = commandCalls{
	"evalsha": {Calls: 2, Usec: 30}, "lindex": {Calls: 2}, "pexpire": {Calls: 2}, "del": {Calls: 1},
	"get": {Calls: 1}, "hget": {Calls: 1}, "hset": {Calls: 1}, "incr": {Calls: 1}, "set": {Calls: 1}, "time": {Calls: 1},
}

func TestCostOf(t *testing.T) {
	scale := func(c commandCalls, n int64) commandCalls {
		out := commandCalls{}
		for k, v := range c {
			out[k] = commandStat{Calls: v.Calls * n, Usec: v.Usec * n}
		}
		return out
	}
	c := costOf(1000, scale(fairlockPair, 1000), 0.034, float64(42*time.Millisecond), true, 41000, 2_800_000)
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-6*math.Max(1, math.Abs(want)) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	near("server CPU", c.ServerCPU, 34e3)
	near("client CPU", c.ClientCPU, 42e3)
	near("commands", c.Commands, 13)
	near("writes", c.Writes, 6)
	near("scripts", c.Scripts, 2)
	near("script run", c.ScriptRun, 30e3)
	near("allocs", c.Allocs, 41)
	near("bytes", c.Bytes, 2800)
	if !c.CPU || !c.Alloc {
		t.Errorf("measured flags: %+v", c)
	}
	// Not measured: no CPU, no allocations; no pairs: nothing.
	c = costOf(10, fairlockPair, 1, 1, false, -1, -1)
	if c.CPU || c.Alloc || c.ServerCPU != 0 || c.Allocs != 0 || c.Commands != 1.3 {
		t.Errorf("unmeasured: %+v", c)
	}
	if c := costOf(0, fairlockPair, 1, 1, true, 1, 1); c != (pairCost{}) {
		t.Errorf("no pairs: %+v", c)
	}
}

func TestRoundCosts(t *testing.T) {
	u := uncontendedRound{Commands: fairlockPair, ServerCPU: 34e-6, ClientCPU: 42 * time.Microsecond, Wall: time.Millisecond}
	u.AllocsPerPair, u.BytesPerPair = 41, 2800
	if c := u.cost(1); !c.CPU || math.Abs(c.ServerCPU-34e3) > 1e-6 || math.Abs(c.ClientCPU-42e3) > 1e-6 || c.Allocs != 41 || c.Writes != 6 {
		t.Errorf("uncontended: %+v", c)
	}
	// An older results file: no window, so no CPU.
	u.Wall = 0
	if c := u.cost(1); c.CPU {
		t.Errorf("old uncontended round: %+v", c)
	}
	m := manyRound{Acquisitions: 2, Commands: fairlockPair, ServerCPU: 1e-4, ClientCPU: 50 * time.Microsecond, Wall: time.Second}
	if c := m.cost(); c.Alloc || !c.CPU || math.Abs(c.ServerCPU-5e4) > 1e-6 || c.Writes != 3 {
		t.Errorf("many, no allocations measured: %+v", c)
	}
	m.Allocs, m.Bytes = 100, 1000
	if c := m.cost(); !c.Alloc || c.Allocs != 50 || c.Bytes != 500 {
		t.Errorf("many: %+v", c)
	}
	// The per-pair figures are in the raw results.
	data, err := json.Marshal(manyRound{PerPair: m.cost()})
	if err != nil || !strings.Contains(string(data), `"per_pair":{"server_cpu_ns":50000,"client_cpu_ns":25000,"commands":6.5,"writes":3,`) {
		t.Errorf("JSON: %s %v", data, err)
	}
}

func TestCostTable(t *testing.T) {
	by := map[string]costs{
		"fairlock/rueidis": {
			{ServerCPU: 30e3, ClientCPU: 40e3, Commands: 13, Writes: 6, Scripts: 2, ScriptRun: 20e3, CommandRun: 8e3, Allocs: 41, Bytes: 2800, CPU: true, Alloc: true},
			{ServerCPU: 38e3, ClientCPU: 44e3, Commands: 13, Writes: 6, Scripts: 2, ScriptRun: 22e3, CommandRun: 8e3, Allocs: 41, Bytes: 2800, CPU: true, Alloc: true},
		},
		"rueidislock": {
			{ServerCPU: 12e3, ClientCPU: 25e3, Commands: 6, Writes: 2, Scripts: 2, ScriptRun: 4e3, CommandRun: 5e3, Allocs: 38, Bytes: 2641, CPU: true, Alloc: true},
		},
		"old": {{Commands: 5, Writes: 2, Scripts: 2}},
	}
	var b strings.Builder
	costTable(&b, []string{"fairlock/rueidis", "rueidislock", "old", "missing"}, by, "rueidislock")
	// rueidislock's commands' time is more than its scripts' (commands of
	// its own): its rest is 0, never negative.
	want := `| lock | server CPU/pair | client CPU/pair | server vs rueidislock | client vs rueidislock | commands/pair | writes/pair | scripts/pair | script time/pair | commands' time/pair | scripts' rest/pair | allocs/pair | bytes/pair |
| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| fairlock/rueidis | 34µs (30–38µs) | 42µs (40–44µs) | 2.83x | 1.68x | 13.0 | 6.0 | 2.0 | 21µs (20–22µs) | 8µs | 13µs (12–14µs) | 41 | 2,800 |
| rueidislock | 12µs | 25µs | 1.00x | 1.00x | 6.0 | 2.0 | 2.0 | 4µs | 5µs | 0 | 38 | 2,641 |
| old | - | - | - | - | 5.0 | 2.0 | 2.0 | 0 | - | - | - | - |
| missing | - | - | - | - | - | - | - | - | - | - | - | - |
`
	if got := b.String(); got != want {
		t.Errorf("costTable:\n%s\nwant:\n%s", got, want)
	}
}

func TestCPUTargets(t *testing.T) {
	ref := spreadOf([]float64{12e3})
	for _, tc := range []struct {
		xs    []float64
		limit float64
		ok    bool
		cell  string
	}{
		{[]float64{34e3}, 1.3, false, "34µs vs 12µs: 2.83x"},
		{[]float64{15e3, 16e3}, 1.3, true, "16µs (15–16µs) vs 12µs: 1.29x"},
		{[]float64{15.6e3}, 1.3, true, "16µs vs 12µs: 1.30x"},
		{nil, 1.3, false, "- vs 12µs: -"},
	} {
		s := spreadOf(tc.xs)
		if got := within(s, ref, tc.limit); got != tc.ok {
			t.Errorf("within(%v) = %v", tc.xs, got)
		}
		if got := cpuVsRef(s, ref); got != tc.cell {
			t.Errorf("cpuVsRef(%v) = %q, want %q", tc.xs, got, tc.cell)
		}
	}
}

func TestWritesLine(t *testing.T) {
	if got, want := writesLine(fairlockPair, 1), "writes 6.0 in all: PEXPIRE 2.00, DEL 1.00, HSET 1.00, INCR 1.00, SET 1.00"; got != want {
		t.Errorf("writesLine = %q, want %q", got, want)
	}
	if got := writesLine(commandCalls{"get": {Calls: 3}}, 1); got != "no writes" {
		t.Errorf("writesLine, reads only = %q", got)
	}
}

func TestCPUTargetRows(t *testing.T) {
	set := fullSettings
	set.UncontendedOps = 1
	res := newResults(set)
	res.Kinds = []kindInfo{{Name: "fairlock/rueidis", Fairlock: true}, {Name: "fairlock/valkey", Fairlock: true}, {Name: "rueidislock"}}
	round := func(server, client time.Duration, calls commandCalls) uncontendedRound {
		u := uncontendedRound{Commands: calls, ServerCPU: server.Seconds(), ClientCPU: client, Wall: time.Millisecond}
		u.AllocsPerPair = 40
		return u
	}
	res.Uncontended["fairlock/rueidis"] = []uncontendedRound{round(34*time.Microsecond, 42*time.Microsecond, fairlockPair)}
	res.Uncontended["fairlock/valkey"] = []uncontendedRound{round(15*time.Microsecond, 29*time.Microsecond, fairlockPair)}
	res.Uncontended["rueidislock"] = []uncontendedRound{round(12*time.Microsecond, 25*time.Microsecond, commandCalls{"evalsha": {Calls: 2}, "get": {Calls: 2}, "set": {Calls: 1}, "del": {Calls: 1}})}
	r := &report{results: res}
	r.targets()
	text := r.b.String()
	for _, want := range []string{
		"| server CPU per uncontended pair <= 1.3x rueidislock's | fairlock/rueidis | 34µs vs 12µs: 2.83x | **no** |",
		"| client CPU per uncontended pair <= 1.2x rueidislock's | fairlock/rueidis | 42µs vs 25µs: 1.68x | **no** |",
		"| server CPU per uncontended pair <= 1.3x rueidislock's | fairlock/valkey | 15µs vs 12µs: 1.25x | yes |",
		"| client CPU per uncontended pair <= 1.2x rueidislock's | fairlock/valkey | 29µs vs 25µs: 1.16x | yes |",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("targets have no %q:\n%s", want, text)
		}
	}
	var cpu []string
	for _, m := range missed {
		if strings.HasPrefix(m, "cpu") {
			cpu = append(cpu, m)
		}
	}
	if strings.Join(cpu, " ") != "cpuserver:fairlock/rueidis cpuclient:fairlock/rueidis" {
		t.Errorf("missed: %q", cpu)
	}
	wantAll(t, "CPU bounds", tablesText(r.serverCPUBounds([]string{"fairlock/rueidis"}), r.clientCPUBounds([]string{"fairlock/rueidis"})),
		"| figure | fairlock/rueidis | rueidislock | what it says |",
		"| server CPU per pair | 34µs | 12µs |",
		"| against rueidislock's | 2.83x | 1.00x |",
		"| commands per pair | 13.0 | 6.0 |",
		"| writes among them | 6.0 | 2.0 |",
		"| client CPU per pair | 42µs | 25µs |",
		"| against rueidislock's | 1.68x | 1.00x |",
		"| allocations per pair | 40 | 40 |")
}

func TestAcquisitionTable(t *testing.T) {
	calls := commandCalls{
		"evalsha": {Calls: 200, Usec: 18000},
		"zadd":    {Calls: 300, Usec: 2000},
		"publish": {Calls: 100, Usec: 1000},
	}
	// 100 acquisitions: 2 scripts, 3 ZADDs and a PUBLISH each; the
	// scripts take 180µs, their commands 30µs of it.
	c := costOf(100, calls, 0.025, 30e6, true, -1, -1)
	if c.Scripts != 2 || c.Commands != 6 || c.ScriptRun != 180e3 || c.CommandRun != 30e3 || c.scriptRest() != 150e3 {
		t.Errorf("costOf: %+v", c)
	}
	var b strings.Builder
	acquisitionTable(&b, []string{"fairlock/rueidis", "missing"}, map[string]costs{"fairlock/rueidis": {c}})
	want := `| lock | commands/acq | scripts/acq | script time/acq | commands' time/acq | scripts' rest/acq | server CPU/acq | client CPU/acq |
| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| fairlock/rueidis | 6.0 | 2.00 | 180µs | 30µs | 150µs | 250µs | 300µs |
| missing | - | - | - | - | - | - | - |
`
	if got := b.String(); got != want {
		t.Errorf("acquisitionTable:\n%s\nwant:\n%s", got, want)
	}
}
