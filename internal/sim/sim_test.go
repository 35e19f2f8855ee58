package sim

import (
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"testing/cryptotest"
	"time"

	"github.com/fairlock/fairlock/internal/soak"
)

var (
	seconds    = flag.Int("sim.seconds", 0, "TestSimulate: simulate histories for this many seconds of wall time (0: one short history)")
	seedArg    = flag.Uint64("sim.seed", 0, "TestSimulate: the first history's seed (0: a fresh one, printed); history i has seed+i*stride")
	stride     = flag.Uint64("sim.stride", 1, "TestSimulate: the step between the histories' seeds (processes sharing out seeds)")
	parallel   = flag.Int("sim.parallel", runtime.GOMAXPROCS(0), "TestSimulate: histories simulated at once (with -sim.seconds)")
	outDir     = flag.String("sim.out", "", "TestSimulate: keep each history here as history-<seed>.json.gz (soak's format: go test ./internal/soak -run TestRecheck -soak.history FILE)")
	shared     = flag.Bool("sim.shared", false, "TestSimulate: each client's first owner on each lock is two goroutines on one Mutex")
	checkEvery = flag.Int("sim.check-every", 1, "TestSimulate: check the server's invariants after every n-th script that wrote")
	virtual    = flag.Duration("sim.virtual", 10*time.Minute, "TestSimulate: each history's length in virtual time")
	summary    = flag.String("sim.summary", "", "TestSimulate: write the run's sums here as JSON (scripts/soak.sh --simulate --report merges them)")
)

// TestSimulate simulates histories, each of -sim.virtual virtual time,
// on -sim.parallel workers until -sim.seconds of wall time have passed
// (the histories still running then end early), and ends with the soak's
// line "soak: H histories, O operations, F faults, V violations". Without
// -sim.seconds it simulates one history: of a minute, or -sim.virtual
// when given (a replay).
func TestSimulate(t *testing.T) {
	seed := *seedArg
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	length, workers := *virtual, *parallel
	var stop chan struct{}
	if *seconds <= 0 {
		workers = 1
		if !flagSet("sim.virtual") {
			length = time.Minute
		}
	} else {
		stop = make(chan struct{})
		time.AfterFunc(time.Duration(*seconds)*time.Second, func() { close(stop) })
	}
	// The simulation allocates fast; collecting less often buys time.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	start := time.Now()
	var mu sync.Mutex
	var next uint64
	started := 0
	sum := newSummary(seed, *stride)
	t.Run("workers", func(t *testing.T) {
		for w := 0; w < workers; w++ {
			t.Run(fmt.Sprint(w), func(t *testing.T) {
				if workers > 1 {
					t.Parallel()
				}
				for {
					mu.Lock()
					if started > 0 && (*seconds <= 0 || time.Since(start) >= time.Duration(*seconds)*time.Second) {
						mu.Unlock()
						return
					}
					cfg := DefaultConfig(seed + next*(*stride))
					next++
					started++
					mu.Unlock()
					cfg.Duration, cfg.Stop = length, stop
					cfg.SharedOwner = *shared
					cfg.CheckEvery = *checkEvery
					dir := *outDir
					if dir == "" {
						dir = t.TempDir()
					}
					if workers == 1 {
						// Client IDs from crypto/rand then follow from
						// the seed (a process-wide source: one worker).
						cryptotest.SetGlobalRandom(t, cfg.Seed)
					}
					res := Run(t, cfg, dir)
					mu.Lock()
					sum.add(cfg.Seed, res)
					mu.Unlock()
					t.Logf("seed %d: %d operations, %d faults, %d invariant checks, switch %v, %d violations, %d broken invariants",
						cfg.Seed, res.Ops, res.Faults, res.Checks, res.Counts, len(res.Report.Violations), len(res.Broken))
					report(t, cfg, res)
				}
			})
		}
	})
	sum.Wall = time.Since(start)
	fmt.Printf("sim: seeds %d to %d (step %d): %d operations in %s of wall time: %.0f operations/s\n",
		sum.FirstSeed, sum.LastSeed, sum.Stride, sum.Ops, sum.Wall.Round(time.Millisecond), float64(sum.Ops)/sum.Wall.Seconds())
	fmt.Printf("soak: %d histories, %d operations, %d faults, %d violations\n", sum.Histories, sum.Ops, sum.faults(), sum.violations())
	if *summary != "" {
		if err := sum.write(*summary); err != nil {
			t.Fatal(err)
		}
	}
}

// flagSet reports whether the flag named was given.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// replayCommand is the command that simulates cfg's history alone, as
// long as its actors ran. On one processor (GOMAXPROCS=1, as soak.sh
// runs the histories) a history's goroutines run in an order that
// follows mostly from the seed: the replay is the same history for a long
// stretch, often to its end, but not always (see TestReplay).
func replayCommand(cfg Config, ranFor time.Duration) string {
	cmd := fmt.Sprintf("GOMAXPROCS=1 go test -count=1 -run '^TestSimulate$' ./internal/sim/ -args -sim.seed %d -sim.virtual %s", cfg.Seed, ranFor)
	if cfg.SharedOwner {
		cmd += " -sim.shared"
	}
	if cfg.CheckEvery > 1 {
		cmd += fmt.Sprintf(" -sim.check-every %d", cfg.CheckEvery)
	}
	return cmd
}

// report prints a history's violations with their slices of the history.
func report(t *testing.T, cfg Config, res Result) {
	seed := cfg.Seed
	if n := len(res.Broken) + len(res.Report.Violations); n > 0 {
		t.Errorf("seed %d: %d violations (virtual end %s); replay: %s", seed, n, res.VirtualEnd, replayCommand(cfg, res.RanFor))
	}
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
