package sim

import (
	"flag"
	"fmt"
	"runtime/debug"
	"testing"
	"time"

	"github.com/fairlock/fairlock/internal/soak"
)

var (
	seconds = flag.Int("sim.seconds", 0, "TestSimulate: simulate histories for this many seconds of wall time (0: one short history)")
	seedArg = flag.Uint64("sim.seed", 0, "TestSimulate: the first history's seed (0: a fresh one, printed); history i has seed+i")
	virtual = flag.Duration("sim.virtual", 10*time.Minute, "TestSimulate: each history's length in virtual time")
)

// TestSimulate simulates histories, each of -sim.virtual virtual time,
// until -sim.seconds of wall time have passed (one short history without
// it), and ends with the soak's line "soak: H histories, O operations, F
// faults, V violations".
func TestSimulate(t *testing.T) {
	seed := *seedArg
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	length := *virtual
	if *seconds <= 0 {
		length = time.Minute
	}
	// The simulation allocates fast (a Lua state per script in
	// miniredis); collecting less often buys about a fifth of the time.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	start := time.Now()
	var histories, ops, faults, violations int
	for i := uint64(0); histories == 0 || time.Since(start) < time.Duration(*seconds)*time.Second; i++ {
		cfg := DefaultConfig(seed + i)
		cfg.Duration = length
		res := Run(t, cfg, t.TempDir())
		histories++
		ops += res.Ops
		faults += res.Faults
		violations += len(res.Report.Violations) + len(res.Broken)
		t.Logf("seed %d: %d operations, %d faults, %d invariant checks, switch %v, %d violations, %d broken invariants",
			cfg.Seed, res.Ops, res.Faults, res.Checks, res.Counts, len(res.Report.Violations), len(res.Broken))
		report(t, cfg.Seed, res)
	}
	wall := time.Since(start)
	t.Logf("%d operations in %s of wall time: %.0f operations/s", ops, wall.Round(time.Millisecond), float64(ops)/wall.Seconds())
	fmt.Printf("soak: %d histories, %d operations, %d faults, %d violations\n", histories, ops, faults, violations)
}

// report prints a history's violations with their slices of the history.
func report(t *testing.T, seed uint64, res Result) {
	for _, b := range res.Broken {
		t.Errorf("seed %d: invariant: %s", seed, b)
	}
	for i, v := range res.Report.Violations {
		if i == 10 {
			t.Errorf("seed %d: ... %d more violations", seed, len(res.Report.Violations)-10)
			break
		}
		t.Errorf("seed %d: %s\n%s", seed, v, soak.Slice(res.History, v))
	}
}
