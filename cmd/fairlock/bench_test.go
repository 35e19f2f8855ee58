package main

import (
	"context"
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// benchJSON is bench's --json output, as documented.
type benchJSON struct {
	Server   string `json:"server"`
	Embedded bool   `json:"embedded"`
	Ops      int    `json:"ops"`
	Workers  int    `json:"workers"`
	Locks    int    `json:"locks"`
	Results  []struct {
		Backend     string `json:"backend"`
		Uncontended struct {
			Lock   benchStatsJSON `json:"lock"`
			Unlock benchStatsJSON `json:"unlock"`
		} `json:"uncontended"`
		Contended struct {
			Acquisitions   int            `json:"acquisitions"`
			Throughput     float64        `json:"throughput_per_s"`
			Wait           benchStatsJSON `json:"wait"`
			Handover       benchStatsJSON `json:"handover"`
			Snapshots      int            `json:"queue_snapshots"`
			FIFOChecked    int            `json:"fifo_checked"`
			FIFOViolations int            `json:"fifo_violations"`
		} `json:"contended"`
		ManyLocks struct {
			Locks      int            `json:"locks"`
			Ops        int            `json:"ops"`
			Throughput float64        `json:"throughput_per_s"`
			Lock       benchStatsJSON `json:"lock"`
		} `json:"many_locks"`
	} `json:"results"`
	OK bool `json:"ok"`
}

type benchStatsJSON struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
}

// checkBench checks one bench run of ops operations per measurement.
func checkBench(t *testing.T, out string, backends []string, ops, locks int) {
	t.Helper()
	var rep benchJSON
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("bench --json output is not JSON: %v\n%s", err, out)
	}
	if !rep.OK || rep.Ops != ops || rep.Locks != locks || len(rep.Results) != len(backends) {
		t.Fatalf("report %+v", rep)
	}
	for i, r := range rep.Results {
		u, c, m := r.Uncontended, r.Contended, r.ManyLocks
		switch {
		case r.Backend != backends[i]:
			t.Errorf("result %d is for %q, want %q", i, r.Backend, backends[i])
		case u.Lock.Count != ops || u.Unlock.Count != ops || u.Lock.P50 <= 0 || u.Lock.P99 < u.Lock.P50:
			t.Errorf("%s uncontended %+v", r.Backend, u)
		case c.Acquisitions != ops || c.Wait.Count != ops || c.Throughput <= 0 || c.Handover.Count == 0:
			t.Errorf("%s contended %+v", r.Backend, c)
		case c.FIFOViolations != 0 || c.Snapshots == 0 || c.FIFOChecked == 0:
			t.Errorf("%s FIFO: %d violations, %d of %d acquisitions checked in %d snapshots", r.Backend, c.FIFOViolations, c.FIFOChecked, ops, c.Snapshots)
		case m.Ops != ops || m.Locks != locks || m.Lock.Count != ops || m.Throughput <= 0:
			t.Errorf("%s many locks %+v", r.Backend, m)
		}
	}
}

func TestBench_EmbeddedServer(t *testing.T) {
	checkNoLeaks(t)
	r := runCLI(t, nil, "bench", "--json", "--ops", "40", "--workers", "3", "--locks", "4")
	if r.code != exitOK {
		t.Fatalf("exit %d\nstderr: %s", r.code, r.stderr)
	}
	checkBench(t, r.stdout, []string{backendRueidis, backendValkey}, 40, 4)
	if !strings.Contains(r.stderr, "embedded miniredis") {
		t.Errorf("no note about the embedded server on stderr: %s", r.stderr)
	}
}

func TestBench_RealRedis(t *testing.T) {
	checkNoLeaks(t)
	s := startRedis(t)
	r := runCLI(t, nil, "bench", "--addr", s.addr, "--json", "--ops", "40", "--workers", "3", "--locks", "4", "--prefix", "app:")
	if r.code != exitOK {
		t.Fatalf("exit %d\nstderr: %s", r.code, r.stderr)
	}
	checkBench(t, r.stdout, []string{backendRueidis, backendValkey}, 40, 4)

	// The table: one column per client library, no FIFO violation.
	r = runCLI(t, nil, "bench", "--addr", s.addr, "--ops", "20", "--workers", "2", "--locks", "2", "--backend", "valkey")
	if r.code != exitOK {
		t.Fatalf("exit %d\nstderr: %s", r.code, r.stderr)
	}
	rows := make(map[string][]string)
	for line := range strings.Lines(r.stdout) {
		label, cells, ok := strings.Cut(line, "   ")
		if ok {
			rows[strings.TrimSpace(label)] = strings.Fields(cells)
		}
	}
	if got := rows["FIFO violations / checked"]; len(got) != 3 || got[0] != "0" {
		t.Errorf("FIFO row %q\n%s", got, r.stdout)
	}
	if got := rows["contended throughput (1 lock)"]; len(got) != 1 || !strings.HasSuffix(got[0], "/s") {
		t.Errorf("throughput row %q\n%s", got, r.stdout)
	}

	// Every lock key the bench made is gone; only unlock latches, which
	// expire by themselves, may remain.
	rc := rawClient(t, s.addr)
	keys, err := rc.Do(context.Background(), rc.B().Keys().Pattern("*").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, k := range keys {
		if !strings.HasPrefix(k, "redisson_unlock_latch:") {
			left = append(left, k)
		}
	}
	if !reflect.DeepEqual(left, []string(nil)) {
		t.Errorf("keys left behind: %q", left)
	}
}

// go-redis is a --backend choice like the others.
func TestBench_GoRedis(t *testing.T) {
	checkNoLeaks(t)
	s := startRedis(t)
	r := runCLI(t, nil, "bench", "--addr", s.addr, "--backend", "goredis,rueidis", "--json", "--ops", "30", "--workers", "3", "--locks", "3")
	if r.code != exitOK {
		t.Fatalf("exit %d\nstderr: %s", r.code, r.stderr)
	}
	checkBench(t, r.stdout, []string{backendGoRedis, backendRueidis}, 30, 3)
}

// On a terminal, bench reports how far each measurement has got; --quiet
// and a stderr that is not a terminal (progressEvery 0) show no progress.
func TestBench_Progress(t *testing.T) {
	checkNoLeaks(t)
	s := startRedis(t)
	args := []string{"bench", "--addr", s.addr, "--backend", "valkey", "--ops", "300", "--workers", "2", "--locks", "2"}
	progressLine := regexp.MustCompile(`(?m)^  valkey: (uncontended|contended|many locks): [0-9,]+ / 300 \([0-9]+%\), [0-9,]+/s, [0-9]+s elapsed$`)

	r := runCLIEnv(t, env{progressEvery: 5 * time.Millisecond}, args...)
	if r.code != exitOK {
		t.Fatalf("exit %d\nstderr: %s", r.code, r.stderr)
	}
	if !progressLine.MatchString(r.stderr) || !strings.Contains(r.stderr, "valkey: contended, 2 workers, 300 acquisitions on one lock") {
		t.Errorf("no progress lines on stderr:\n%s", r.stderr)
	}
	for _, tc := range []struct {
		name  string
		e     env
		extra []string
	}{
		{"not a terminal", env{}, nil},
		{"quiet", env{progressEvery: 5 * time.Millisecond}, []string{"--quiet"}},
	} {
		r := runCLIEnv(t, tc.e, append(args, tc.extra...)...)
		if r.code != exitOK || progressLine.MatchString(r.stderr) {
			t.Errorf("%s: exit %d, stderr:\n%s", tc.name, r.code, r.stderr)
		}
		if tc.name == "quiet" && r.stderr != "" {
			t.Errorf("quiet: stderr %q, want nothing", r.stderr)
		}
	}
}
