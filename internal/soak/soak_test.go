package soak

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

var (
	seconds = flag.Int("soak.seconds", 0, "run the soak for this many seconds (0: TestSoak does not run; scripts/soak.sh sets it)")
	seed    = flag.Uint64("soak.seed", 0, "the run's seed (0: a fresh one, printed)")
	out     = flag.String("soak.out", "", "directory for violation reports (default: a temporary one)")
	report  = flag.String("soak.report", "", "rewrite this file's generated soak section (RELIABILITY.md) from the run")
	saved   = flag.String("soak.history", "", "TestRecheck: check this saved history (history-<seed>.json.gz) again")
	only    = flag.String("soak.adapters", "", "TestSoak: the adapters to run, by name, comma-separated (default: all; scripts/soak.sh --adapters)")
	without = flag.String("soak.without", "", "TestSoak: fault kinds the nemesis leaves out, comma-separated (eviction, long-pause: standalone; reply-lost, held-back, notice-burst: both; scripts/soak.sh --without)")
	cluster = flag.Bool("soak.cluster", false, "TestSoak: run on a Redis Cluster (3 primaries, a replica each) under cluster faults (RunCluster; scripts/soak.sh --cluster)")
)

// TestSoak runs the soak when -soak.seconds is set (scripts/soak.sh). It
// ends with one line "soak: H histories, O operations, F faults, V
// violations" and fails on any violation, printing the seed, the command
// that replays it and each violation's slice of the history.
func TestSoak(t *testing.T) {
	if *seconds <= 0 {
		t.Skip("run by scripts/soak.sh (-soak.seconds)")
	}
	s := *seed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	run, mode := Run, ""
	if *cluster {
		run, mode = RunCluster, " --cluster"
	}
	cfg := Config{Seed: s, Duration: time.Duration(*seconds) * time.Second}
	if *only != "" {
		all := Adapters
		if *cluster {
			all = ClusterAdapters
		}
		cfg.Adapters = pick(t, all, *only)
		mode += " --adapters " + *only
	}
	if *without != "" {
		for _, k := range strings.Split(*without, ",") {
			cfg.Without = append(cfg.Without, FaultKind(k))
		}
		mode += " --without " + *without
	}
	t.Logf("soak: seed %d, %d s; replay: bash scripts/soak.sh%s --seed %d --seconds %d", s, *seconds, mode, s, *seconds)
	res := run(t, cfg)
	faults := 0
	var kinds []string
	for k, n := range res.Faults {
		faults += n
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(kinds)
	t.Logf("faults by kind: %s", strings.Join(kinds, ", "))
	var longest time.Duration
	stalls := res.History.Stalls()
	for _, st := range stalls {
		longest = max(longest, st.Late)
	}
	t.Logf("the process ran its timers late %d times (%v or more), at worst by %v", len(stalls), stallMin, longest.Round(time.Millisecond))
	logNotices(t, res.Report.Notices)
	dir, err := reportDir(*out, s, len(res.Report.Violations) > 0)
	if err != nil {
		t.Errorf("soak: %v", err)
	}
	logExceptions(t, res.History, res.Exceptions, dir)
	if dir != "" {
		hpath := filepath.Join(dir, fmt.Sprintf("history-%d.json.gz", s))
		if err := res.History.Save(hpath, res.Bounds); err != nil {
			t.Errorf("saving the history: %v", err)
		}
		t.Logf("history saved: %s (check again: go test ./internal/soak -run TestRecheck -soak.history %s)", hpath, hpath)
	}
	if len(res.Report.Violations) > 0 {
		path := filepath.Join(dir, fmt.Sprintf("soak-%d.txt", s))
		if err := os.WriteFile(path, []byte(Explain(res.History, res.Report.Violations)), 0o644); err != nil {
			t.Log(err)
		}
		for l, html := range res.Report.Visual {
			vpath := filepath.Join(dir, fmt.Sprintf("soak-%d-%s.html", s, strings.ReplaceAll(l, ":", "_")))
			if err := os.WriteFile(vpath, html, 0o644); err != nil {
				t.Log(err)
			}
			t.Logf("porcupine's visualisation of %s: %s", l, vpath)
		}
		logFirsts(t, res.History, res.Report.Violations)
		for i, v := range res.Report.Violations {
			if i == 20 {
				t.Logf("... and %d more", len(res.Report.Violations)-20)
				break
			}
			t.Errorf("violation: %v", v)
		}
		t.Errorf("seed %d; replay: bash scripts/soak.sh%s --seed %d --seconds %d; shrunk histories in %s", s, mode, s, *seconds, path)
		fmt.Print(Slice(res.History, res.Report.Violations[0]))
	}
	if *report != "" {
		if err := WriteReport(*report, res, time.Duration(*seconds)*time.Second, *cluster); err != nil {
			t.Errorf("report: %v", err)
		}
	}
	fmt.Printf("soak: 1 histories, %d operations, %d faults, %d violations\n", res.Ops, faults, len(res.Report.Violations))
}

// reportDir returns the directory for a run's reports and history: out,
// made if missing; with none, a new one under the system's temporary
// directory when the run found violations (not t.TempDir, which goes
// when the test ends: the files the run names must outlive it), else "".
func reportDir(out string, seed uint64, violations bool) (string, error) {
	if out != "" {
		return out, os.MkdirAll(out, 0o755)
	}
	if !violations {
		return "", nil
	}
	return os.MkdirTemp("", fmt.Sprintf("soak-%d-", seed))
}

// pick returns the adapters of all named in names (comma-separated), in
// that order.
func pick(t *testing.T, all []Adapter, names string) []Adapter {
	var out []Adapter
	for _, n := range strings.Split(names, ",") {
		i := slices.IndexFunc(all, func(a Adapter) bool { return a.Name == n })
		if i < 0 {
			t.Fatalf("soak: no adapter %q", n)
		}
		out = append(out, all[i])
	}
	return out
}

// TestRecheck runs the checkers again over a history TestSoak saved
// (-soak.history), with the bounds it was checked against, and fails on
// each violation they find - without servers, so a checker's change or a
// violation's explanation can be tried at once.
func TestRecheck(t *testing.T) {
	if *saved == "" {
		t.Skip("needs -soak.history")
	}
	h, b, err := LoadHistory(*saved)
	if err != nil {
		t.Fatal(err)
	}
	r := Check(h, b)
	if len(failovers(h)) > 0 {
		// A cluster run's history: what a failover without replica acks
		// may do is counted apart, as RunCluster does.
		var exceptions []Violation
		r.Violations, exceptions = splitExceptions(h, r.Violations, b)
		logExceptions(t, h, exceptions, "")
	}
	logNotices(t, r.Notices)
	logFirsts(t, h, r.Violations)
	for _, v := range r.Violations {
		t.Errorf("violation: %v", v)
	}
	if len(r.Violations) > 0 {
		fmt.Print(Explain(h, r.Violations))
	}
	fmt.Printf("recheck: %d operations, %d violations\n", len(h.Ops()), len(r.Violations))
}

// TestReportDir: with no -soak.out, the directory a run with violations
// names in its report (the shrunk histories, the saved history) is still
// there after the test ends; a run without violations gets none; -soak.out
// is made when missing.
func TestReportDir(t *testing.T) {
	var dir string
	t.Run("a run with violations", func(t *testing.T) {
		d, err := reportDir("", 1, true)
		if err != nil {
			t.Fatal(err)
		}
		dir = d
		if err := os.WriteFile(filepath.Join(dir, "soak-1.txt"), []byte("report"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	defer os.RemoveAll(dir)
	if _, err := os.Stat(filepath.Join(dir, "soak-1.txt")); err != nil {
		t.Errorf("the report after the test ended: %v", err)
	}
	if d, err := reportDir("", 1, false); d != "" || err != nil {
		t.Errorf("a run without violations: %q, %v; want none", d, err)
	}
	out := filepath.Join(t.TempDir(), "a", "b")
	if d, err := reportDir(out, 1, false); d != out || err != nil {
		t.Errorf("-soak.out %s: %q, %v", out, d, err)
	}
	if _, err := os.Stat(out); err != nil {
		t.Errorf("-soak.out not made: %v", err)
	}
}
