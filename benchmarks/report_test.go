package main

import (
	"math"
	"testing"
	"time"
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
