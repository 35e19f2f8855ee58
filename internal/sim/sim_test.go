package sim

import (
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/internal/soak"
)

var (
	seconds    = flag.Int("sim.seconds", 0, "TestSimulate: simulate histories for this many seconds of wall time (0: one short history)")
	seedArg    = flag.Uint64("sim.seed", 0, "TestSimulate: the first history's seed (0: a fresh one, printed); history i has seed+i")
	parallel   = flag.Int("sim.parallel", runtime.GOMAXPROCS(0), "TestSimulate: histories simulated at once (with -sim.seconds)")
	outDir     = flag.String("sim.out", "", "TestSimulate: keep each history here as history-<seed>.json.gz (soak's format: go test ./internal/soak -run TestRecheck -soak.history FILE)")
	shared     = flag.Bool("sim.shared", false, "TestSimulate: each client's first owner on each lock is two goroutines on one Mutex")
	checkEvery = flag.Int("sim.check-every", 1, "TestSimulate: run the server's invariant check after every n-th script reply")
	virtual    = flag.Duration("sim.virtual", 10*time.Minute, "TestSimulate: each history's length in virtual time")
)

// TestSimulate simulates histories, each of -sim.virtual virtual time,
// on -sim.parallel workers until -sim.seconds of wall time have passed
// (one short history without it), and ends with the soak's line "soak: H
// histories, O operations, F faults, V violations".
func TestSimulate(t *testing.T) {
	seed := *seedArg
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	length, workers := *virtual, *parallel
	if *seconds <= 0 {
		length, workers = time.Minute, 1
	}
	// The simulation allocates fast (a Lua state per script in
	// miniredis); collecting less often buys about a fifth of the time.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	start := time.Now()
	var mu sync.Mutex
	var next uint64
	var histories, ops, faults, violations int
	t.Run("workers", func(t *testing.T) {
		for w := 0; w < workers; w++ {
			t.Run(fmt.Sprint(w), func(t *testing.T) {
				t.Parallel()
				for {
					mu.Lock()
					if histories > 0 && time.Since(start) >= time.Duration(*seconds)*time.Second {
						mu.Unlock()
						return
					}
					cfg := DefaultConfig(seed + next)
					next++
					histories++
					mu.Unlock()
					cfg.Duration = length
					cfg.SharedOwner = *shared
					cfg.CheckEvery = *checkEvery
					dir := *outDir
					if dir == "" {
						dir = t.TempDir()
					}
					res := Run(t, cfg, dir)
					mu.Lock()
					ops += res.Ops
					faults += res.Faults
					violations += len(res.Report.Violations) + len(res.Broken)
					mu.Unlock()
					t.Logf("seed %d: %d operations, %d faults, %d invariant checks, switch %v, %d violations, %d broken invariants",
						cfg.Seed, res.Ops, res.Faults, res.Checks, res.Counts, len(res.Report.Violations), len(res.Broken))
					report(t, cfg.Seed, res)
				}
			})
		}
	})
	wall := time.Since(start)
	t.Logf("seeds %d to %d: %d operations in %s of wall time: %.0f operations/s", seed, seed+next-1, ops, wall.Round(time.Millisecond), float64(ops)/wall.Seconds())
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
