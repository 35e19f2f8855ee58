package sim

import (
	"strings"
	"testing"
	"time"
)

// TestRenderReport: the section sums the processes' summaries and says
// the violations by check.
func TestRenderReport(t *testing.T) {
	a, b := newSummary(10, 2), newSummary(11, 2)
	a.LastSeed, b.LastSeed = 14, 13
	a.Histories, a.Ops, a.Checks, a.Virtual, a.Wall = 3, 1000, 50, 30*time.Minute, 10*time.Second
	b.Histories, b.Ops, b.Checks, b.Virtual, b.Wall = 2, 500, 30, 20*time.Minute, 11*time.Second
	a.Faults["reset"], b.Faults["reset"], b.Faults["restart"] = 4, 1, 2
	a.Decisions["lose"], b.Decisions["lose"] = 7, 3
	b.Violations["fifo"], b.Violations["invariant"] = 2, 1
	got := renderReport([]Summary{*a, *b}, time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC))
	for _, want := range []string{
		reportStart, reportEnd,
		"Run 2026-12-07 04:00 UTC, 11s of wall time in 2 processes",
		"seeds 10 to 14 and 11 to 13, step 2",
		"| 5 | 1500 | 136 | 0.8 h | 7 | 80 | 3 (fifo 2, invariant 1) |",
		"Faults by kind: reset 5, restart 2.",
		"lose 10",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the section lacks %q:\n%s", want, got)
		}
	}
}
