package main

import (
	"testing"
	"time"
)

func TestFmtDur(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0"},
		{412 * time.Microsecond, "412µs"},
		{999_499 * time.Nanosecond, "999µs"},
		{999_500 * time.Nanosecond, "1.00ms"},
		{2_345 * time.Microsecond, "2.35ms"},
		{9_995 * time.Microsecond, "10.0ms"},
		{412_340 * time.Microsecond, "412.3ms"},
		{999_960 * time.Microsecond, "1.00s"},
		{-1_610 * time.Millisecond, "-1.61s"},
		{299_450 * time.Millisecond, "4m59s"},
	}
	for _, tc := range tests {
		if got := fmtDur(tc.d); got != tc.want {
			t.Errorf("fmtDur(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestFmtIntAndPercentile(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -45678: "-45,678"} {
		if got := fmtInt(n); got != want {
			t.Errorf("fmtInt(%d) = %q, want %q", n, got, want)
		}
	}
	var sample []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		sample = append(sample, time.Duration(i)*time.Millisecond)
	}
	s := summarise(sample)
	if s.Count != 100 || s.Min != 1 || s.P50 != 50 || s.P99 != 99 || s.Max != 100 {
		t.Errorf("summarise = %+v", s)
	}
}
