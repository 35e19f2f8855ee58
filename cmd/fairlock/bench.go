package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/lockbench"
	"github.com/spf13/cobra"
)

const benchDoc = `
Measures, for each client library in --backend:
  uncontended     Lock and Unlock latency (p50, p99) of one owner on one lock, --ops times
  contended       --workers owners on one lock, --ops acquisitions in all: throughput,
                  wait, hand-over latency (one owner's Unlock returning to the next one's
                  Lock returning) and FIFO violations, checked against atomic snapshots
                  of the queue. A hand-over can be negative: the release grants the lock
                  to the next owner in its wake-up message, which can reach that owner
                  before the release's own reply reaches the previous one
  many locks      --workers owners on --locks locks picked at random, --ops lock/unlock
                  pairs in all: throughput and Lock latency
and prints a table (or --json). Latencies are kept in HDR histograms (percentiles within
0.1%). The locks are named fairlock-bench:<random>:... and their keys are deleted
afterwards; unlock latches (redisson_unlock_latch:*) expire within 3s.

On a terminal, stderr shows each measurement as it starts and, once a second, how far it
has got; --quiet leaves only the result (and errors).

Without --addr or REDIS_URL it runs against an embedded miniredis, which measures miniredis,
not Redis. Exit code 1 when a FIFO violation is found.`

// benchCommand is "fairlock bench". do runs the parsed configuration; nil
// runs the benchmark.
func benchCommand(e env, do func(context.Context, benchConfig) error) *cobra.Command {
	if do == nil {
		do = func(ctx context.Context, cfg benchConfig) error {
			_, err := cfg.run(ctx, e)
			return err
		}
	}
	var cfg benchConfig
	cmd := &cobra.Command{
		Use:   "bench [flags]",
		Short: "measure lock latency, throughput, hand-over latency and FIFO order",
		Long:  benchDoc,
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := cfg.check(); err != nil {
				return err
			}
			return do(c.Context(), cfg)
		},
	}
	cfg.conn.register(cmd, true, backendRueidis, backendValkey)
	fs := cmd.Flags()
	fs.IntVar(&cfg.ops, "ops", 2000, "operations per measurement")
	fs.IntVar(&cfg.workers, "workers", 8, "concurrent owners in the contended and many-locks runs")
	fs.IntVar(&cfg.locks, "locks", 64, "locks in the many-locks run")
	fs.BoolVar(&cfg.json, "json", false, "print JSON instead of a table")
	fs.BoolVarP(&cfg.quiet, "quiet", "q", false, "no progress on stderr")
	return cmd
}

// benchConfig is the bench command's flags.
type benchConfig struct {
	conn    connFlags
	ops     int
	workers int
	locks   int
	json    bool
	quiet   bool
}

// check checks the values of the flags.
func (cfg benchConfig) check() error {
	switch {
	case cfg.ops < 1 || cfg.ops > 10_000_000:
		return usageError("--ops must be from 1 to 10000000, got %d", cfg.ops)
	case cfg.workers < 2 || cfg.workers > 1000:
		return usageError("--workers must be from 2 to 1000, got %d", cfg.workers)
	case cfg.locks < 1 || cfg.locks > 100_000:
		return usageError("--locks must be from 1 to 100000, got %d", cfg.locks)
	}
	return nil
}

// benchReport is what bench measured; --json prints it.
type benchReport struct {
	Server   string        `json:"server"`
	Embedded bool          `json:"embedded"`
	Ops      int           `json:"ops"`
	Workers  int           `json:"workers"`
	Locks    int           `json:"locks"`
	Results  []benchResult `json:"results"`
	OK       bool          `json:"ok"` // no FIFO violations
}

// benchResult is one client library's measurements.
type benchResult struct {
	Backend        string            `json:"backend"`
	ClientTracking bool              `json:"client_tracking"`
	Uncontended    uncontendedResult `json:"uncontended"`
	Contended      contendedResult   `json:"contended"`
	ManyLocks      manyLocksResult   `json:"many_locks"`
}

type uncontendedResult struct {
	Lock   durStats `json:"lock"`
	Unlock durStats `json:"unlock"`
}

type contendedResult struct {
	Acquisitions   int             `json:"acquisitions"`
	Seconds        float64         `json:"seconds"`
	Throughput     float64         `json:"throughput_per_s"`
	Wait           durStats        `json:"wait"`
	Handover       durStats        `json:"handover"`
	Snapshots      int             `json:"queue_snapshots"`
	FIFOChecked    int             `json:"fifo_checked"` // acquisitions predicted by a snapshot
	FIFOViolations int             `json:"fifo_violations"`
	Violations     []fifoViolation `json:"violations"`
}

type manyLocksResult struct {
	Locks      int      `json:"locks"`
	Ops        int      `json:"ops"`
	Seconds    float64  `json:"seconds"`
	Throughput float64  `json:"throughput_per_s"`
	Lock       durStats `json:"lock"`
}

func (cfg benchConfig) run(ctx context.Context, e env) (benchReport, error) {
	rep := benchReport{Ops: cfg.ops, Workers: cfg.workers, Locks: cfg.locks}
	srv, err := cfg.conn.server(e, true)
	if err != nil {
		return rep, err
	}
	defer srv.Close()
	rep.Server, rep.Embedded = srv.String(), srv.embedded != nil
	runID, err := randomHex(4)
	if err != nil {
		return rep, err
	}
	progress := &benchProgress{w: e.stderr, every: e.progressEvery}
	if cfg.quiet {
		progress.w, progress.every = io.Discard, 0
	}
	fmt.Fprintf(progress.w, "fairlock bench: %s, %d ops per run, %d workers, %d locks\n", srv, cfg.ops, cfg.workers, cfg.locks)
	if rep.Embedded {
		fmt.Fprintf(e.stderr, "note: no --addr or REDIS_URL: measuring the embedded miniredis, not Redis\n")
	}
	for _, name := range cfg.conn.backends.names {
		res, err := cfg.runBackend(ctx, srv, name, runID, progress)
		if err != nil {
			return rep, fmt.Errorf("%s: %w", name, err)
		}
		rep.Results = append(rep.Results, res)
	}
	rep.OK = true
	for _, r := range rep.Results {
		rep.OK = rep.OK && r.Contended.FIFOViolations == 0
	}
	if cfg.json {
		if err := writeJSON(e.stdout, rep); err != nil {
			return rep, err
		}
	} else {
		printBench(e.stdout, rep)
	}
	if !rep.OK {
		return rep, fmt.Errorf("FIFO order violated under contention (see the table)")
	}
	return rep, nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// runBackend runs the three measurements with one client library. The
// keys of every lock it used are deleted afterwards.
func (cfg benchConfig) runBackend(ctx context.Context, srv *server, name, runID string, progress *benchProgress) (res benchResult, err error) {
	res.Backend = name
	ep, err := srv.open(name)
	if err != nil {
		return res, err
	}
	defer ep.Close()
	res.ClientTracking = ep.tracking
	c, err := lock.NewClient(ep.backend, cfg.conn.lockOptions()...)
	if err != nil {
		return res, usageError("%v", err)
	}
	defer c.Close()

	base := "fairlock-bench:" + runID + ":" + name + ":"
	var used []string
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		for _, n := range used {
			m, derr := c.NewMutex(n)
			if derr == nil {
				derr = ep.del(cctx, m.Keys()...)
			}
			if derr != nil && err == nil {
				err = fmt.Errorf("deleting the bench's keys: %w", derr)
			}
		}
	}()

	phase := progress.start(ctx, name+": uncontended", fmt.Sprintf("%d Lock/Unlock pairs", cfg.ops), cfg.ops)
	used = append(used, base+"uncontended")
	res.Uncontended, err = benchUncontended(phase.ctx, c, base+"uncontended", cfg.ops)
	phase.stop()
	if err != nil {
		return res, err
	}
	phase = progress.start(ctx, name+": contended", fmt.Sprintf("%d workers, %d acquisitions on one lock", cfg.workers, cfg.ops), cfg.ops)
	used = append(used, base+"contended")
	res.Contended, err = benchContended(phase.ctx, c, base+"contended", cfg.workers, cfg.ops)
	phase.stop()
	if err != nil {
		return res, err
	}
	phase = progress.start(ctx, name+": many locks", fmt.Sprintf("%d workers, %d locks, %d Lock/Unlock pairs", cfg.workers, cfg.locks, cfg.ops), cfg.ops)
	var names []string
	for i := range cfg.locks {
		names = append(names, fmt.Sprintf("%smany-%d", base, i))
	}
	used = append(used, names...)
	res.ManyLocks, err = benchManyLocks(phase.ctx, c, names, cfg.workers, cfg.ops)
	phase.stop()
	return res, err
}

// benchUncontended times Lock and Unlock of one owner on a free lock, after
// a short warm-up (script loading, connection set-up).
func benchUncontended(ctx context.Context, c *lock.Client, name string, ops int) (uncontendedResult, error) {
	var res uncontendedResult
	m, err := c.NewMutex(name)
	if err != nil {
		return res, usageError("%v", err)
	}
	u, err := lockbench.Uncontended(ctx, lockbench.MutexLocker(m), ops, min(ops, 20))
	if err != nil {
		return res, err
	}
	res.Lock, res.Unlock = statsOf(u.Lock), statsOf(u.Unlock)
	return res, nil
}

// benchContended runs workers owners that lock and unlock one lock until
// ops acquisitions are done, while a sampler takes atomic snapshots of the
// queue to check FIFO order with (lockbench.CheckSnapshots).
func benchContended(ctx context.Context, c *lock.Client, name string, workers, ops int) (contendedResult, error) {
	res := contendedResult{Acquisitions: ops}
	spy, err := c.NewMutex(name)
	if err != nil {
		return res, usageError("%v", err)
	}
	lockers := make([]lockbench.Locker, workers)
	owners := make([]string, workers)
	for i := range lockers {
		m, err := c.NewMutex(name)
		if err != nil {
			return res, err
		}
		lockers[i], owners[i] = lockbench.MutexLocker(m), m.Owner()
	}
	// The sampler reads the queue about every millisecond while the
	// workers run: each snapshot predicts the next acquisitions. Every
	// queued owner gets the lock before the run ends (a count-bound run
	// cancels nobody), as the check requires.
	stop := lockbench.SampleQueue(ctx, spy, workers, time.Millisecond)
	run, err := lockbench.Contended(ctx, lockers, lockbench.Contention{Acquisitions: ops})
	snaps := stop()
	if err != nil {
		return res, err
	}
	acquiredBy := make(map[int64]string, ops)
	for _, a := range run.Acquisitions {
		acquiredBy[a.Token] = owners[a.Contender]
	}
	res.Seconds = run.End.Sub(run.Start).Seconds()
	res.Throughput = run.Throughput()
	res.Wait, res.Handover = statsOf(lockbench.Summarize(run.Waits())), statsOf(lockbench.Summarize(run.Handovers()))
	res.Snapshots = len(snaps)
	res.FIFOChecked, res.Violations = checkSnapshots(snaps, acquiredBy)
	res.FIFOViolations = len(res.Violations)
	if res.Violations == nil {
		res.Violations = []fifoViolation{}
	}
	return res, nil
}

// benchManyLocks runs workers owners that lock and unlock locks picked at
// random from names until ops pairs are done.
func benchManyLocks(ctx context.Context, c *lock.Client, names []string, workers, ops int) (manyLocksResult, error) {
	res := manyLocksResult{Locks: len(names), Ops: ops}
	run, err := lockbench.ManyLocks(ctx, func(_, k int) (lockbench.Locker, error) {
		m, err := c.NewMutex(names[k])
		if err != nil {
			return nil, err
		}
		return lockbench.MutexLocker(m), nil
	}, lockbench.Spread{Workers: workers, Locks: len(names), Acquisitions: ops})
	if err != nil {
		return res, err
	}
	res.Seconds = run.Elapsed.Seconds()
	res.Throughput = run.Throughput()
	res.Lock = statsOf(run.Lock.Summary())
	return res, nil
}

// statsOf converts a lockbench summary for the table and JSON.
func statsOf(s lockbench.Summary) durStats {
	return durStats{
		Count: s.Count, Min: millis(s.Min), P50: millis(s.P50), P99: millis(s.P99), Max: millis(s.Max),
		min: s.Min, p50: s.P50, p99: s.P99, max: s.Max,
	}
}

// printBench prints the results as a table, one column per client library.
func printBench(w io.Writer, rep benchReport) {
	fmt.Fprintf(w, "fairlock bench: %s, %d ops per run, %d workers, %d locks\n\n", rep.Server, rep.Ops, rep.Workers, rep.Locks)
	tw := newTable(w)
	row := func(label string, cell func(r benchResult) string) {
		fmt.Fprint(tw, label)
		for _, r := range rep.Results {
			fmt.Fprint(tw, "\t"+cell(r))
		}
		fmt.Fprintln(tw)
	}
	pair := func(a, b time.Duration) string { return fmtDur(a) + " / " + fmtDur(b) }
	row("", func(r benchResult) string { return r.Backend })
	row("uncontended Lock p50 / p99", func(r benchResult) string { return pair(r.Uncontended.Lock.p50, r.Uncontended.Lock.p99) })
	row("uncontended Unlock p50 / p99", func(r benchResult) string { return pair(r.Uncontended.Unlock.p50, r.Uncontended.Unlock.p99) })
	row("contended throughput (1 lock)", func(r benchResult) string { return fmtRate(r.Contended.Throughput) })
	row("contended wait p50 / p99", func(r benchResult) string { return pair(r.Contended.Wait.p50, r.Contended.Wait.p99) })
	row("hand-over p50 / p99", func(r benchResult) string { return pair(r.Contended.Handover.p50, r.Contended.Handover.p99) })
	row("FIFO violations / checked", func(r benchResult) string {
		return fmt.Sprintf("%d / %s", r.Contended.FIFOViolations, fmtInt(int64(r.Contended.FIFOChecked)))
	})
	row(fmt.Sprintf("many-locks throughput (%d locks)", rep.Locks), func(r benchResult) string { return fmtRate(r.ManyLocks.Throughput) })
	row("many-locks Lock p50 / p99", func(r benchResult) string { return pair(r.ManyLocks.Lock.p50, r.ManyLocks.Lock.p99) })
	_ = tw.Flush()
	fmt.Fprintln(w, "\nhand-over: from one owner's Unlock returning to the next one's Lock returning;\nbelow 0 when the grant message beats the Unlock's reply (see fairlock help bench)")
	for _, r := range rep.Results {
		for _, v := range r.Contended.Violations {
			fmt.Fprintf(w, "%s: FIFO violation: token %d went to %s, expected %s\n", r.Backend, v.Position, v.Got, v.Expected)
		}
	}
}

// benchProgress reports on stderr what bench is measuring: a line when a
// measurement starts, and with every > 0 a line every that often with how
// far it has got.
type benchProgress struct {
	w     io.Writer
	every time.Duration
}

// benchPhase is one measurement being reported on; run it with ctx, then
// call stop.
type benchPhase struct {
	ctx  context.Context
	stop func()
}

// start reports the start of a measurement of total operations and, with
// every > 0, reports on it from a goroutine of its own until stop, which
// waits for that goroutine.
func (p *benchProgress) start(ctx context.Context, label, detail string, total int) benchPhase {
	fmt.Fprintf(p.w, "%s, %s\n", label, detail)
	if p.every <= 0 {
		return benchPhase{ctx: ctx, stop: func() {}}
	}
	var count lockbench.Progress
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(p.every)
		defer t.Stop()
		start, last, lastAt := time.Now(), int64(0), time.Now()
		for {
			select {
			case <-quit:
				return
			case now := <-t.C:
				done := count.Done()
				rate := float64(done-last) / now.Sub(lastAt).Seconds()
				last, lastAt = done, now
				fmt.Fprintf(p.w, "  %s: %s / %s (%d%%), %s, %s elapsed\n", label, fmtInt(done), fmtInt(int64(total)),
					done*100/int64(total), fmtRate(rate), now.Sub(start).Round(time.Second))
			}
		}
	}()
	return benchPhase{
		ctx:  lockbench.WithProgress(ctx, &count),
		stop: func() { close(quit); <-finished },
	}
}
