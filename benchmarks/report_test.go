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
	got := serverSplit("x", "pair", firstMany(rounds))
	for _, want := range []string{"one command thread 4.0% busy", "of 40µs of server CPU per pair", "the scripts ran 30µs", "the 10.0 commands in them 10µs of their own (SET 6µs, GET 4µs)", "the rest 20µs", "and 10µs went to reading"} {
		if !strings.Contains(got, want) {
			t.Errorf("serverSplit = %q, want it to say %q", got, want)
		}
	}
	if strings.Contains(got, "close to the most") {
		t.Errorf("a thread 4%% busy called near its limit: %q", got)
	}
	rounds[0].ServerCPU = 0.8
	if got := serverSplit("x", "pair", firstMany(rounds)); !strings.Contains(got, "80.0% busy - close to the most one thread does") {
		t.Errorf("a thread 80%% busy: %q", got)
	}
	if got := serverSplit("x", "pair", firstMany(nil)); got != "" {
		t.Errorf("no rounds: %q", got)
	}
	// A contended run: 500 acquisitions, the same window, per acquisition.
	c := []contendedRound{{Acquisitions: 500, Wall: time.Second, ServerCPU: 0.1, TopCommands: rounds[0].Commands}}
	got = serverSplit("y", "acquisition", firstContended(c))
	for _, want := range []string{"one command thread 10.0% busy", "of 200µs of server CPU per acquisition", "the scripts ran 60µs", "the 20.0 commands in them 20µs", "and 140µs went to reading"} {
		if !strings.Contains(got, want) {
			t.Errorf("contended serverSplit = %q, want it to say %q", got, want)
		}
	}
	if got := serverSplit("y", "acquisition", firstContended(nil)); got != "" {
		t.Errorf("no contended rounds: %q", got)
	}
	// An uncontended window of 2,000 pairs: its round does not count them.
	u := []uncontendedRound{{Wall: time.Second, ServerCPU: 0.1, Commands: rounds[0].Commands}}
	got = serverSplit("z", "pair", firstUncontended(u, 2000))
	for _, want := range []string{"of 50µs of server CPU per pair", "the scripts ran 15µs", "the 5.0 commands in them 5µs"} {
		if !strings.Contains(got, want) {
			t.Errorf("uncontended serverSplit = %q, want it to say %q", got, want)
		}
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
	got := r.overFloors("fairlock/go-redis", "p50", pair)
	want := " Over the floor on its own client, go-redis (90µs), it adds 50µs; the best peer, redislock, 20µs over the floor on go-redis (90µs)."
	if got != want {
		t.Errorf("overFloors = %q, want %q", got, want)
	}
	res.ClientFloors = nil
	if got := r.overFloors("fairlock/go-redis", "p50", pair); got != "" {
		t.Errorf("without floors: %q", got)
	}
}
