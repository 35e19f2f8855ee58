package sim

import (
	"runtime"
	"strings"
	"testing"
	"testing/cryptotest"
	"time"

	"github.com/fairlock/fairlock/internal/soak"
)

// TestReplay runs one seed twice and compares the two runs. The switch's
// decision for a connection's n-th message follows from the seed, the
// connection's label and n alone, so every decision both runs took for
// the same message number must agree (this fails if the random streams
// were shared between goroutines). Which request is a connection's n-th,
// and so the history, depends on Go's scheduling too: the runs are on one
// processor, as soak.sh runs histories, where the order follows mostly
// from the seed (not under -race, which shuffles the scheduler), and the
// test logs how far they agree. What still differs between runs, and
// nothing here can seed: the order Go picks among ready select cases and
// map entries, and the lock's retry back-off jitter (math/rand/v2).
func TestReplay(t *testing.T) {
	cfg := DefaultConfig(42)
	cfg.Duration = 30 * time.Second
	cfg.Trace = true
	a := runAlone(t, cfg)
	b := runAlone(t, cfg)
	type key struct {
		conn string
		up   bool
		n    int
	}
	first := map[key]Decision{}
	for _, d := range a.Trace {
		first[key{d.Conn, d.Up, d.N}] = d
	}
	var both, sameCmd int
	for _, d := range b.Trace {
		e, ok := first[key{d.Conn, d.Up, d.N}]
		if !ok {
			continue
		}
		both++
		if e.What != d.What || e.Delay != d.Delay {
			t.Errorf("message %v: run 1 %s, run 2 %s", key{d.Conn, d.Up, d.N}, e, d)
		}
		if e.Cmd == d.Cmd {
			sameCmd++
		}
	}
	if both == 0 {
		t.Fatal("the runs share no message")
	}
	same, total, diverged := agreement(a.History.Ops(), b.History.Ops())
	t.Logf("decisions: %d and %d; %d message numbers in both, all decided alike; the same command at %d (%.1f%%)",
		len(a.Trace), len(b.Trace), both, sameCmd, 100*float64(sameCmd)/float64(both))
	t.Logf("operations: %d of %d alike, owner by owner, before each owner's first difference (kind, lock, times, result); the first difference at %s virtual",
		same, total, diverged)
}

// agreement compares two histories owner by owner: how many operations
// agree before each owner's first difference, of how many, and the
// earliest call time at which some owner's operations differ.
func agreement(a, b []*soak.Op) (same, total int, first time.Duration) {
	by := func(ops []*soak.Op) map[string][]*soak.Op {
		m := map[string][]*soak.Op{}
		for _, op := range ops {
			k := op.Client + "|" + op.Owner[strings.LastIndexByte(op.Owner, ':')+1:] + "|" + op.Lock
			m[k] = append(m[k], op)
		}
		return m
	}
	ma, mb := by(a), by(b)
	first = -1
	for k, xs := range ma {
		ys := mb[k]
		total += len(xs)
		i := 0
		for i < len(xs) && i < len(ys) && alike(xs[i], ys[i]) {
			i++
		}
		same += i
		if i < len(xs) && (first < 0 || xs[i].Call < first) {
			first = xs[i].Call
		}
	}
	return same, total, first
}

// alike compares what two runs' operations did, not the client IDs
// (random per run) in their owner fields.
func alike(x, y *soak.Op) bool {
	token := func(op *soak.Op) int64 {
		if op.Hold == nil {
			return 0
		}
		return op.Hold.Token
	}
	errOf := func(op *soak.Op) string {
		client, _, _ := strings.Cut(op.Owner, ":")
		return strings.ReplaceAll(op.Err, client, "")
	}
	return x.Kind == y.Kind && x.Call == y.Call && x.Return == y.Return && errOf(x) == errOf(y) && token(x) == token(y)
}

// runAlone runs cfg's history as soak.sh runs histories, on one
// processor, with client IDs that follow from the seed.
func runAlone(t *testing.T, cfg Config) Result {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	cryptotest.SetGlobalRandom(t, cfg.Seed)
	return Run(t, cfg, t.TempDir())
}

// TestDelayedFailureLastsUntilItFails: a message the switch fails or
// loses after a delay is recorded as a fault that lasts until the
// failure, not one at the moment it was sent: it holds its connection up
// that long (a 654 ms hold, then the connection failed, in seed
// 123653965350671, where a call 1.5 s after the failure was judged with
// no fault near). That seed's first 10 virtual seconds then check at 0
// violations (1 before, on one processor).
func TestDelayedFailureLastsUntilItFails(t *testing.T) {
	w := &world{rec: newRecorder(1)}
	for _, what := range []string{"fail", "lose", "delay"} {
		w.fault("rueidis#1", Decision{What: what, Delay: 654 * time.Millisecond})
	}
	for _, f := range w.rec.h.Faults() {
		if got := f.End - f.Start; got < 654*time.Millisecond {
			t.Errorf("%s fault recorded for %v, want the message's delay, 654ms", f.Kind, got)
		}
	}
	cfg := DefaultConfig(123653965350671)
	cfg.Duration = 10 * time.Second
	res := runAlone(t, cfg)
	for _, v := range res.Report.Violations {
		t.Errorf("seed %d: %v", cfg.Seed, v)
	}
}
