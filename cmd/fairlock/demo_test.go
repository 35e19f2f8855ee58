package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// demoJSON is the demo's --json output, as documented (decoded separately
// from the types that write it, so the field names are checked too).
type demoJSON struct {
	Server   string `json:"server"`
	Embedded bool   `json:"embedded"`
	Backend  string `json:"backend"`
	Tracking bool   `json:"client_tracking"`
	Lock     string `json:"lock"`
	Events   []struct {
		Event  string   `json:"event"`
		Worker string   `json:"worker"`
		Token  int64    `json:"token"`
		Holder string   `json:"holder"`
		Queue  []string `json:"queue"`
		Detail string   `json:"detail"`
	} `json:"events"`
	Workers []struct {
		Name     string  `json:"name"`
		Owner    string  `json:"owner"`
		Position int     `json:"position"`
		Token    int64   `json:"token"`
		Waited   float64 `json:"waited_ms"`
		Held     float64 `json:"held_ms"`
	} `json:"workers"`
	Arrival        []string `json:"arrival_order"`
	Acquisition    []string `json:"acquisition_order"`
	FIFOViolations int      `json:"fifo_violations"`
	Violations     []struct {
		Position int64  `json:"position"`
		Expected string `json:"expected"`
		Got      string `json:"got"`
	} `json:"violations"`
	Wait struct {
		Count int `json:"count"`
	} `json:"wait"`
	Handovers []struct {
		From    string  `json:"from"`
		To      string  `json:"to"`
		Latency float64 `json:"latency_ms"`
	} `json:"handovers"`
	LeaseExpiry struct {
		Lease           float64 `json:"lease_ms"`
		CrasherToken    int64   `json:"crasher_token"`
		WaiterToken     int64   `json:"waiter_token"`
		Takeover        float64 `json:"takeover_ms"`
		CrasherUnlocked bool    `json:"crasher_unlocked"`
		CrasherHoldErr  string  `json:"crasher_hold_err"`
		OK              bool    `json:"ok"`
	} `json:"lease_expiry"`
	OK bool `json:"ok"`
}

func decodeDemo(t *testing.T, out string) demoJSON {
	t.Helper()
	var rep demoJSON
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("demo --json output is not JSON: %v\n%s", err, out)
	}
	return rep
}

func workerNames(n int) []string {
	var names []string
	for i := 1; i <= n; i++ {
		names = append(names, fmt.Sprintf("w%d", i))
	}
	return names
}

// checkGoodDemo checks a demo run in which the lock behaved: FIFO order,
// consecutive tokens, a hand-over per worker, and the lease takeover.
func checkGoodDemo(t *testing.T, rep demoJSON, workers int, lease time.Duration) {
	t.Helper()
	want := workerNames(workers)
	if !rep.OK || rep.FIFOViolations != 0 || len(rep.Violations) != 0 {
		t.Errorf("ok %v, %d FIFO violations %+v; want ok and none", rep.OK, rep.FIFOViolations, rep.Violations)
	}
	if !reflect.DeepEqual(rep.Arrival, want) || !reflect.DeepEqual(rep.Acquisition, want) {
		t.Errorf("arrival %v, acquisition %v; want both %v", rep.Arrival, rep.Acquisition, want)
	}
	if len(rep.Workers) != workers {
		t.Fatalf("%d workers reported, want %d", len(rep.Workers), workers)
	}
	for i, w := range rep.Workers {
		if w.Name != want[i] || w.Position != i || w.Token != rep.Workers[0].Token+int64(i) || w.Owner == "" {
			t.Errorf("worker %d = %+v; want %s at queue position %d with token %d", i, w, want[i], i, rep.Workers[0].Token+int64(i))
		}
	}
	if len(rep.Handovers) != workers-1 || rep.Wait.Count != workers {
		t.Errorf("%d hand-overs, %d waits; want %d, %d", len(rep.Handovers), rep.Wait.Count, workers-1, workers)
	}
	for i, h := range rep.Handovers {
		if h.From != want[i] || h.To != want[i+1] || h.Latency <= 0 {
			t.Errorf("hand-over %d = %+v", i, h)
		}
	}
	le := rep.LeaseExpiry
	if !le.OK || le.CrasherUnlocked || le.Takeover < float64(lease.Milliseconds()) ||
		le.WaiterToken != le.CrasherToken+1 || !strings.Contains(le.CrasherHoldErr, "lease") {
		t.Errorf("lease expiry %+v; want ok, a takeover after at least %v, the next token, a lost hold", le, lease)
	}
	var lost, crasherUnlock bool
	for _, ev := range rep.Events {
		lost = lost || (ev.Event == "lost" && ev.Worker == "crasher")
		crasherUnlock = crasherUnlock || (ev.Event == "unlock" && ev.Worker == "crasher")
	}
	if !lost || crasherUnlock {
		t.Errorf("events: crasher lost %v, crasher unlocked %v; want lost and never unlocked", lost, crasherUnlock)
	}
}

func TestDemo_EmbeddedServer(t *testing.T) {
	checkNoLeaks(t)
	r := runCLI(t, nil, "demo", "--json", "--workers", "4", "--hold", "20ms", "--lease", "300ms")
	if r.code != exitOK {
		t.Fatalf("exit %d\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
	}
	rep := decodeDemo(t, r.stdout)
	if !rep.Embedded || !strings.Contains(rep.Server, "embedded miniredis") || rep.Backend != "rueidis" || rep.Tracking {
		t.Errorf("server %q embedded %v backend %q tracking %v", rep.Server, rep.Embedded, rep.Backend, rep.Tracking)
	}
	checkGoodDemo(t, rep, 4, 300*time.Millisecond)

	// go-redis too (miniredis has no INFO cluster).
	r = runCLI(t, nil, "demo", "--json", "--workers", "3", "--hold", "20ms", "--lease", "300ms", "--backend", "goredis")
	if r.code != exitOK {
		t.Fatalf("goredis: exit %d\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
	}
	if rep = decodeDemo(t, r.stdout); rep.Backend != "goredis" {
		t.Errorf("backend %q, want goredis", rep.Backend)
	}
	checkGoodDemo(t, rep, 3, 300*time.Millisecond)
}

// The live table and the summary, read as a person would.
func TestDemo_TextOutput(t *testing.T) {
	checkNoLeaks(t)
	r := runCLI(t, nil, "demo", "--workers", "3", "--hold", "20ms", "--lease", "200ms", "--backend", "valkey")
	if r.code != exitOK {
		t.Fatalf("exit %d\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
	}
	var acquired []string
	summary := make(map[string]string)
	for line := range strings.Lines(r.stdout) {
		f := strings.Fields(line)
		if len(f) >= 4 && strings.HasSuffix(f[0], "s") && f[1] == "acquire" {
			acquired = append(acquired, f[2])
		}
		for _, label := range []string{"arrival order", "acquisition order", "FIFO violations"} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), label); ok {
				summary[label] = strings.TrimSpace(rest)
			}
		}
	}
	if want := []string{"w1", "w2", "w3", "crasher", "waiter"}; !reflect.DeepEqual(acquired, want) {
		t.Errorf("acquire rows %v, want %v\n%s", acquired, want, r.stdout)
	}
	if summary["FIFO violations"] != "0" || summary["arrival order"] != "w1 w2 w3" || summary["acquisition order"] != "w1 w2 w3" {
		t.Errorf("summary %q\n%s", summary, r.stdout)
	}
	for _, want := range []string{"backend valkey", "hand-over", "lost     crasher", "lease ran out, no unlock", "Result: OK"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestDemo_RealRedis(t *testing.T) {
	checkNoLeaks(t)
	s := startRedis(t)
	for _, b := range []string{backendRueidis, backendValkey} {
		t.Run(b, func(t *testing.T) {
			name := "demo-" + b
			r := runCLI(t, nil, "demo", "--addr", s.addr, "--backend", b, "--name", name,
				"--json", "--workers", "3", "--hold", "20ms", "--lease", "300ms")
			if r.code != exitOK {
				t.Fatalf("exit %d\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
			}
			rep := decodeDemo(t, r.stdout)
			if rep.Embedded || rep.Server != s.addr || rep.Lock != name || !rep.Tracking {
				t.Errorf("server %q embedded %v lock %q tracking %v; want client tracking on Redis", rep.Server, rep.Embedded, rep.Lock, rep.Tracking)
			}
			checkGoodDemo(t, rep, 3, 300*time.Millisecond)
		})
	}
	// REDIS_URL names the server when --addr is not given.
	r := runCLI(t, map[string]string{"REDIS_URL": "redis://" + s.addr + "/0"}, "demo", "--json", "--workers", "2", "--hold", "0s", "--lease", "200ms")
	if r.code != exitOK {
		t.Fatalf("REDIS_URL: exit %d\nstderr: %s", r.code, r.stderr)
	}
	if rep := decodeDemo(t, r.stdout); rep.Embedded || rep.Server != s.addr {
		t.Errorf("REDIS_URL: server %q embedded %v", rep.Server, rep.Embedded)
	}
}

// swapQueueHead returns a hook that swaps the first two owners in the
// lock's queue on the server, so that the second one is served first.
func swapQueueHead(t *testing.T, addr, name string) func(ctx context.Context) error {
	rc := rawClient(t, addr)
	key := "redisson_lock_queue:{" + name + "}"
	return func(ctx context.Context) error {
		q, err := rc.Do(ctx, rc.B().Lrange().Key(key).Start(0).Stop(1).Build()).AsStrSlice()
		if err != nil || len(q) != 2 {
			return fmt.Errorf("queue head %v, %v", q, err)
		}
		for i, owner := range []string{q[1], q[0]} {
			if err := rc.Do(ctx, rc.B().Lset().Key(key).Index(int64(i)).Element(owner).Build()).Error(); err != nil {
				return err
			}
		}
		return nil
	}
}

// The demo's FIFO check must fail when the order is broken: here the queue
// is reordered on the server behind the lock's back.
func TestDemo_ReportsBrokenFIFOOrder(t *testing.T) {
	checkNoLeaks(t)
	forEachServer(t, func(t *testing.T, s testServer) {
		var out bytes.Buffer
		e := env{stdout: &out, stderr: &bytes.Buffer{}, getenv: func(string) string { return "" }}
		cfg, err := parseDemo(e, []string{"--addr", s.addr, "--json", "--workers", "4", "--hold", "10ms", "--lease", "200ms"})
		if err != nil {
			t.Fatal(err)
		}
		cfg.allQueued = swapQueueHead(t, s.addr, cfg.name)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err = cfg.run(ctx, e)
		if err == nil || !strings.Contains(err.Error(), "FIFO order violated: 2 violation(s)") {
			t.Fatalf("run error %v, want 2 FIFO violations", err)
		}
		if code := e.report(ctx, "demo", err); code != exitFailure {
			t.Errorf("exit code %d, want %d", code, exitFailure)
		}
		rep := decodeDemo(t, out.String())
		if rep.OK || rep.FIFOViolations != 2 || !reflect.DeepEqual(rep.Acquisition, []string{"w1", "w3", "w2", "w4"}) {
			t.Fatalf("ok %v, %d violations, acquisition %v; want not ok, 2, [w1 w3 w2 w4]", rep.OK, rep.FIFOViolations, rep.Acquisition)
		}
		if v := rep.Violations[0]; v.Position != 2 || v.Expected != "w2" || v.Got != "w3" {
			t.Errorf("first violation %+v, want position 2: expected w2, got w3", v)
		}
		// miniredis has no CLIENT TRACKING: the client was made again without.
		if wantTracking := s.mr == nil; rep.Tracking != wantTracking {
			t.Errorf("client tracking %v, want %v", rep.Tracking, wantTracking)
		}
	})
}

// An interrupted demo exits with 130 and leaves nobody holding or queued.
func TestDemo_InterruptLeavesNoState(t *testing.T) {
	checkNoLeaks(t)
	s := startRedis(t)
	var errb bytes.Buffer
	e := env{stdout: &bytes.Buffer{}, stderr: &errb, getenv: func(string) string { return "" }}
	cfg, err := parseDemo(e, []string{"--addr", s.addr, "--workers", "4", "--hold", "10ms"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg.allQueued = func(context.Context) error { cancel(); return nil } // Ctrl-C with everyone queued
	_, err = cfg.run(ctx, e)
	if code := e.report(ctx, "demo", err); code != exitInterrupted {
		t.Fatalf("exit %d (%v), want %d", code, err, exitInterrupted)
	}
	if !strings.Contains(errb.String(), "interrupted") {
		t.Errorf("stderr %q", errb.String())
	}
	st, err := mustMutex(t, lockClient(t, s.addr), cfg.name).Inspect(context.Background(), 10)
	if err != nil || st.Locked() || st.QueueLength != 0 {
		t.Fatalf("after the interrupt: %+v, %v; want the lock free and nobody queued", st, err)
	}
}

func TestDemo_LockInUse(t *testing.T) {
	checkNoLeaks(t)
	s := startMiniredis(t)
	m := mustMutex(t, lockClient(t, s.addr), "busy")
	if _, err := m.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, nil, "demo", "--addr", s.addr, "--name", "busy")
	if r.code != exitFailure || !strings.Contains(r.stderr, `lock "busy" is in use`) {
		t.Fatalf("exit %d, stderr %q; want %d and \"in use\"", r.code, r.stderr, exitFailure)
	}
}
