package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lockbench"
)

func TestSpreadCell(t *testing.T) {
	for _, tc := range []struct {
		xs     []float64
		format func(float64) string
		want   string
	}{
		{nil, fmtDur, "-"},
		{[]float64{float64(250 * time.Microsecond)}, fmtDur, "250µs"},
		{[]float64{float64(200 * time.Microsecond), float64(300 * time.Microsecond)}, fmtDur, "250µs (200–300µs)"},
		{[]float64{float64(900 * time.Microsecond), float64(1500 * time.Microsecond)}, fmtDur, "1.20ms (900µs–1.50ms)"},
		{[]float64{-16e3, 99e3}, fmtDur, "42µs (-16–99µs)"},
		{[]float64{1095, 1480, 2000}, fmtRate, "1,480/s (1,095–2,000/s)"},
		{[]float64{0.5, 0.5}, fmtF(2), "0.50"},
	} {
		if got := spreadOf(tc.xs).cell(tc.format); got != tc.want {
			t.Errorf("cell(%v) = %q, want %q", tc.xs, got, tc.want)
		}
	}
}

func TestTopCommands(t *testing.T) {
	calls := commandCalls{"evalsha": {Calls: 20}, "get": {Calls: 10}, "set": {Calls: 10}, "del": {Calls: 4}}
	if got, want := topCommands(calls, 10, 2), "4.4 in all: EVALSHA 2.00, GET 1.00, others 1.40"; got != want {
		t.Errorf("topCommands = %q, want %q", got, want)
	}
}

func TestCommandCallsSince(t *testing.T) {
	before := commandCalls{"evalsha": {Calls: 5, Usec: 50}, "info": {Calls: 3}}
	after := commandCalls{"evalsha": {Calls: 8, Usec: 80}, "info": {Calls: 9}, "slowlog|get": {Calls: 1}, "ping": {Calls: 2, Usec: 1}}
	d := after.since(before)
	if len(d) != 2 || d["evalsha"] != (commandStat{Calls: 3, Usec: 30}) || d["ping"].Calls != 2 || d.total() != 5 {
		t.Errorf("since = %+v", d)
	}
}

func TestSpreadMedian(t *testing.T) {
	if s := spreadOf([]float64{3, 1, 2}); s.med != 2 || s.lo != 1 || s.hi != 3 {
		t.Errorf("odd: %+v", s)
	}
	if s := spreadOf([]float64{4, 1}); math.Abs(s.med-2.5) > 1e-9 {
		t.Errorf("even: %+v", s)
	}
}

func TestServerSplit(t *testing.T) {
	// 1,000 pairs in a second: 40 ms of server CPU (40µs a pair), the
	// scripts 30 ms (30µs), the 10,000 commands in them 10 ms (10µs).
	rounds := []manyRound{{
		Acquisitions: 1000, Wall: time.Second, ServerCPU: 0.040,
		Commands: commandCalls{"evalsha": {Calls: 2000, Usec: 30000}, "set": {Calls: 4000, Usec: 6000}, "get": {Calls: 6000, Usec: 4000}},
	}}
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-6*math.Max(1, math.Abs(want)) }
	s, ok := splitOf(firstMany(rounds))
	if !ok || !near(s.busy, 0.04) || !near(s.cpu, 40e3) || !near(s.scripts, 30e3) || !near(s.calls, 10) || !near(s.inside, 10e3) ||
		strings.Join(s.top, ", ") != "SET 6µs, GET 4µs" || nearLimit(s.busy) {
		t.Errorf("split = %+v, %v", s, ok)
	}
	tab := &boundTable{cols: []string{"x", "none"}}
	tab.addSplit("pair", func(c string) serverSample {
		if c == "x" {
			return firstMany(rounds)
		}
		return firstMany(nil)
	})
	wantAll(t, "split rows", tablesText(tab),
		"| command thread busy (first round) | 4.0% | - |",
		"| server CPU per pair (first round) | 40µs | - |",
		"| the scripts ran | 30µs | - |",
		"| the commands in them, their own time | 10.0 commands, 10µs | - |",
		"| the longest of those | SET 6µs, GET 4µs | - |",
		"| the rest of the scripts' time | 20µs | - |",
		"| outside the scripts | 10µs | - |")
	rounds[0].ServerCPU = 0.8
	if s, _ := splitOf(firstMany(rounds)); !nearLimit(s.busy) {
		t.Errorf("a thread 80%% busy not near its limit: %+v", s)
	}
	if _, ok := splitOf(firstMany(nil)); ok {
		t.Error("a split without rounds")
	}
	// A contended run: 500 acquisitions, the same window, per acquisition.
	c := []contendedRound{{Acquisitions: 500, Wall: time.Second, ServerCPU: 0.1, TopCommands: rounds[0].Commands}}
	if s, ok := splitOf(firstContended(c)); !ok || !near(s.busy, 0.1) || !near(s.cpu, 200e3) || !near(s.scripts, 60e3) || !near(s.calls, 20) || !near(s.inside, 20e3) {
		t.Errorf("contended split = %+v", s)
	}
	if _, ok := splitOf(firstContended(nil)); ok {
		t.Error("a contended split without rounds")
	}
	// An uncontended window of 2,000 pairs: its round does not count them.
	u := []uncontendedRound{{Wall: time.Second, ServerCPU: 0.1, Commands: rounds[0].Commands}}
	if s, ok := splitOf(firstUncontended(u, 2000)); !ok || !near(s.cpu, 50e3) || !near(s.scripts, 15e3) || !near(s.calls, 5) {
		t.Errorf("uncontended split = %+v", s)
	}
}

func TestOverFloors(t *testing.T) {
	lat := func(p50 time.Duration) lockbench.Latency { return lockbench.Latency{Pair: lockbench.Summary{P50: p50}} }
	un := func(p50 time.Duration) []uncontendedRound {
		return []uncontendedRound{{UncontendedResult: lockbench.UncontendedResult{Latency: lat(p50)}}}
	}
	res := &results{
		Kinds:        []kindInfo{{Name: "fairlock/go-redis", Fairlock: true, Client: "go-redis"}, {Name: "redislock", Client: "go-redis"}, {Name: "rueidislock", Client: "rueidis"}},
		Uncontended:  map[string][]uncontendedRound{"fairlock/go-redis": un(140 * time.Microsecond), "redislock": un(110 * time.Microsecond), "rueidislock": un(190 * time.Microsecond)},
		ClientFloors: map[string][]lockbench.Latency{"go-redis": {lat(90 * time.Microsecond)}, "rueidis": {lat(86 * time.Microsecond)}},
	}
	r := &report{results: res}
	pair := func(rounds []uncontendedRound) float64 {
		return durSpread(rounds, func(x uncontendedRound) time.Duration { return pick(x, "p50") }).med
	}
	got, ok := r.overFloors("fairlock/go-redis", "p50", pair)
	want := floorSplit{client: "go-redis", floor: 90e3, added: 50e3, peer: "redislock", peerClient: "go-redis", peerFloor: 90e3, peerAdded: 20e3}
	if !ok || got != want {
		t.Errorf("overFloors = %+v, want %+v", got, want)
	}
	res.ClientFloors = nil
	if _, ok := r.overFloors("fairlock/go-redis", "p50", pair); ok {
		t.Error("a floor split without floors")
	}
}

// tablesText is the Markdown of bound tables.
func tablesText(tables ...*boundTable) string {
	var b strings.Builder
	for _, tab := range tables {
		tab.write(&b)
	}
	return b.String()
}

// wantAll fails for each of wants that text, what's Markdown, lacks.
func wantAll(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(text, want) {
			t.Errorf("%s has no %q:\n%s", what, want, text)
		}
	}
}
