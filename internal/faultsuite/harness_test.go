package faultsuite

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

// Environment of a child process (holderChild): the test binary run again
// as a lock holder that the parent kills or pauses.
const (
	envChild = "FAULTSUITE_CHILD" // "holder"
	envAddr  = "FAULTSUITE_ADDR"
	envName  = "FAULTSUITE_NAME"
	envLease = "FAULTSUITE_LEASE" // a time.Duration
	envFence = "FAULTSUITE_FENCE" // a key: write the token there while holding
	// envReport names a RELIABILITY.md whose table the run rewrites.
	envReport = "FAIRLOCK_RELIABILITY"
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "holder" {
		os.Exit(holderChild())
	}
	code := m.Run()
	if path := os.Getenv(envReport); path != "" && code == 0 {
		if err := writeReport(path); err != nil {
			fmt.Fprintln(os.Stderr, "faultsuite:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// newLockClient returns a lock client on a new rueidis client for addr,
// closed at cleanup.
func newLockClient(t testing.TB, addr string, opts ...lock.Option) *lock.Client {
	t.Helper()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true})
	if err != nil {
		t.Fatalf("rueidis.NewClient(%s): %v", addr, err)
	}
	b := rueidisbackend.New(rc)
	c, err := lock.NewClient(b, opts...)
	if err != nil {
		t.Fatalf("lock.NewClient: %v", err)
	}
	t.Cleanup(func() {
		c.Close()
		b.Close()
		rc.Close()
	})
	return c
}

func newMutex(t testing.TB, c *lock.Client, name string) *lock.Mutex {
	t.Helper()
	m, err := c.NewMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func lockName(t testing.TB) string { return "fault:" + t.Name() }

// ---- history and model ----

// opKind is what an operation in the history did to the lock.
type opKind uint8

const (
	opAcquire      opKind = iota // a Lock that returned a hold (token)
	opAcquireMaybe               // a Lock that failed: it may have been granted
	opRelease                    // an Unlock that released the hold
	opReleaseMaybe               // the hold's end by other means: lost, crashed, an Unlock that failed
)

type opInput struct {
	kind  opKind
	owner int
}

type opOutput struct {
	token int64 // opAcquire
}

// lockState is the model's state: who holds the lock (-1: nobody) and the
// latest token issued.
type lockState struct {
	holder int
	token  int64
}

// lockModel is the sequential specification of the lock as its clients
// see it: one holder at a time, each new hold with a larger token. An
// operation whose outcome is unknown may or may not have taken effect; a
// hold's end that the client only observed (lost, crashed) takes effect
// at some point from the observation to the end of the history - which is
// the promise X12 makes: the server lets the lock go no earlier than the
// holder knows.
func lockModel() porcupine.Model {
	return porcupine.Model{
		Init: func() any { return lockState{holder: -1} },
		Step: func(st, in, out any) (bool, any) {
			s, i, o := st.(lockState), in.(opInput), out.(opOutput)
			switch i.kind {
			case opAcquire:
				if s.holder == -1 && o.token > s.token {
					return true, lockState{holder: i.owner, token: o.token}
				}
				return false, s
			case opRelease:
				if s.holder == i.owner {
					return true, lockState{holder: -1, token: s.token}
				}
				return false, s
			}
			return true, s // the "maybe" kinds are handled by Nondeterministic steps
		},
		Equal: func(a, b any) bool { return a == b },
		DescribeOperation: func(in, out any) string {
			i, o := in.(opInput), out.(opOutput)
			return fmt.Sprintf("%s o%d %d", [...]string{"acquire", "acquire?", "release", "end?"}[i.kind], i.owner, o.token)
		},
	}
}

// nondeterministicModel extends lockModel with the "maybe" operations,
// whose outcomes porcupine explores both ways.
func nondeterministicModel() porcupine.NondeterministicModel {
	m := lockModel()
	return porcupine.NondeterministicModel{
		Init: func() []any { return []any{m.Init()} },
		Step: func(st, in, out any) []any {
			s, i := st.(lockState), in.(opInput)
			switch i.kind {
			case opAcquireMaybe:
				if s.holder == -1 {
					// Granted with some newer token, or not at all.
					return []any{s, lockState{holder: i.owner, token: s.token + 1}}
				}
				return []any{s}
			case opReleaseMaybe:
				if s.holder == i.owner {
					return []any{lockState{holder: -1, token: s.token}}
				}
				return []any{s}
			}
			if ok, next := m.Step(s, in, out); ok {
				return []any{next}
			}
			return nil
		},
		Equal:             m.Equal,
		DescribeOperation: m.DescribeOperation,
	}
}

// history records operations with times since its start.
type history struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
	open  []int // ops whose return is the end of the history
}

func newHistory() *history { return &history{start: time.Now()} }

func (h *history) at(t time.Time) int64 { return int64(t.Sub(h.start)) }

func (h *history) add(owner int, kind opKind, call, ret time.Time, token int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: len(h.ops), Input: opInput{kind: kind, owner: owner},
		Call: h.at(call), Output: opOutput{token: token}, Return: h.at(ret)})
}

// addOpen records an operation that may take effect any time from call
// to the end of the history.
func (h *history) addOpen(owner int, kind opKind, call time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.open = append(h.open, len(h.ops))
	h.ops = append(h.ops, porcupine.Operation{ClientId: len(h.ops), Input: opInput{kind: kind, owner: owner},
		Call: h.at(call), Output: opOutput{}})
}

// check closes the history and checks it against the model.
func (h *history) check(t *testing.T) porcupine.CheckResult {
	t.Helper()
	h.mu.Lock()
	end := h.at(time.Now()) + 1
	ops := slices.Clone(h.ops)
	for _, i := range h.open {
		ops[i].Return = end
	}
	h.mu.Unlock()
	nm := nondeterministicModel()
	res := porcupine.CheckOperationsTimeout(nm.ToModel(), ops, 30*time.Second)
	switch res {
	case porcupine.Illegal:
		var b strings.Builder
		slices.SortFunc(ops, func(a, b porcupine.Operation) int { return int(a.Call - b.Call) })
		for _, op := range ops {
			fmt.Fprintf(&b, "  [%8.1f ms, %8.1f ms] %s\n", float64(op.Call)/1e6, float64(op.Return)/1e6,
				lockModel().DescribeOperation(op.Input, op.Output))
		}
		t.Errorf("the history of %d operations is not linearizable: two owners believed they held at once\n%s", len(ops), b.String())
	case porcupine.Unknown:
		t.Errorf("porcupine could not decide the history of %d operations in time", len(ops))
	}
	return res
}

func (h *history) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

// worker is one owner taking turns on a lock, recording what it did.
type worker struct {
	id int
	m  *lock.Mutex
	h  *history

	acquired, failed, lost int
}

// turn makes one Lock (bounded by wait), holds for work while watching
// Done, then Unlocks, recording each step. It reports whether it held.
func (w *worker) turn(wait, work time.Duration) bool {
	call := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	hold, err := w.m.Lock(ctx)
	cancel()
	ret := time.Now()
	if err != nil {
		w.failed++
		w.h.add(w.id, opAcquireMaybe, call, ret, 0)
		w.h.addOpen(w.id, opReleaseMaybe, call)
		return false
	}
	w.acquired++
	w.h.add(w.id, opAcquire, call, ret, hold.Token())
	t := time.NewTimer(work)
	defer t.Stop()
	select {
	case <-hold.Done():
		w.lost++
		w.h.addOpen(w.id, opReleaseMaybe, time.Now())
		return true
	case <-t.C:
	}
	call = time.Now()
	ctx, cancel = context.WithTimeout(context.Background(), wait)
	err = w.m.Unlock(ctx)
	cancel()
	switch {
	case err == nil:
		w.h.add(w.id, opRelease, call, time.Now(), 0)
	default:
		// Lost meanwhile, or failed: the lock frees by the lease.
		w.h.addOpen(w.id, opReleaseMaybe, call)
	}
	return true
}

// ---- report ----

// row is one line of RELIABILITY.md's table.
type row struct {
	order    int
	scenario string
	tried    string
	mustHold string
	held     bool
	figures  string
}

var (
	reportMu   sync.Mutex
	reportRows []row
)

// report records the scenario's line and prints its figures.
func report(t *testing.T, order int, tried, mustHold string, figures string) {
	t.Helper()
	t.Logf("%s\n  tried:  %s\n  must hold: %s\n  held: %t\n  figures: %s", t.Name(), tried, mustHold, !t.Failed(), figures)
	reportMu.Lock()
	defer reportMu.Unlock()
	reportRows = append(reportRows, row{order, t.Name(), tried, mustHold, !t.Failed(), figures})
}

const (
	tableStart = "<!-- fault table: generated by scripts/reliability.sh -->"
	tableEnd   = "<!-- end of fault table -->"
)

func writeReport(path string) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	before, rest, ok1 := strings.Cut(string(doc), tableStart)
	_, after, ok2 := strings.Cut(rest, tableEnd)
	if !ok1 || !ok2 {
		return fmt.Errorf("%s has no fault table markers", path)
	}
	reportMu.Lock()
	rows := slices.Clone(reportRows)
	reportMu.Unlock()
	slices.SortFunc(rows, func(a, b row) int { return a.order - b.order })
	var b strings.Builder
	b.WriteString(tableStart + "\n\n")
	fmt.Fprintf(&b, "Measured %s on %s.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), machine())
	b.WriteString("| scenario | what was tried | what must hold | held | figures |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		held := "yes"
		if !r.held {
			held = "**no**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", strings.TrimPrefix(r.scenario, "Test"), r.tried, r.mustHold, held, r.figures)
	}
	b.WriteString("\n" + tableEnd)
	return os.WriteFile(path, []byte(before+b.String()+after), 0o644)
}

func machine() string {
	out, err := exec.Command("redis-server", "--version").Output()
	v := "redis-server (version unknown)"
	if err == nil {
		v = strings.TrimSpace(string(out))
		if i := strings.Index(v, " sha="); i > 0 {
			v = v[:i]
		}
	}
	cpus := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		cpus = strconv.Itoa(strings.Count(string(b), "processor\t:"))
	}
	return fmt.Sprintf("%s cores, %s", cpus, v)
}

// ---- the child holder ----

// child is a holder in its own process, started by startHolder.
type child struct {
	cmd   *exec.Cmd
	lines chan string // its stdout, line by line
	token int64
	held  time.Time // when it said it held
}

// startHolder runs the test binary as a holder of name on addr with the
// given lease (fence: also write its token to that key while holding),
// and waits until it holds.
func startHolder(t *testing.T, addr, name string, lease time.Duration, fence string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=holder", envAddr+"="+addr, envName+"="+name,
		envLease+"="+lease.String(), envFence+"="+fence)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, lines: make(chan string, 1024)}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line := c.next(t, "HELD", 20*time.Second)
	f := strings.Fields(line)
	c.token, _ = strconv.ParseInt(f[1], 10, 64)
	c.held = unixNano(f[2])
	return c
}

// next returns the child's next line starting with prefix, skipping others.
func (c *child) next(t *testing.T, prefix string, within time.Duration) string {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("child ended before saying %s", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-deadline:
			t.Fatalf("child did not say %s within %v", prefix, within)
		}
	}
}

func unixNano(s string) time.Time {
	n, _ := strconv.ParseInt(s, 10, 64)
	return time.Unix(0, n)
}

// childLife bounds a child holder's run.
const childLife = 60 * time.Second

// holderChild is the child process: it locks, says "HELD <token> <ns>",
// says "LOST <ns>" when its hold ends, and if a fence is named writes its
// token there every 10 ms ("WRITE <accepted 0|1> <ns>") - whether or not
// it still holds, as a careless holder would: the fence alone must refuse
// the writes that come too late.
func holderChild() int {
	lease, err := time.ParseDuration(os.Getenv(envLease))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), childLife)
	defer cancel()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{os.Getenv(envAddr)}, ForceSingleClient: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	b := rueidisbackend.New(rc)
	c, err := lock.NewClient(b, lock.WithLease(lease))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	m, err := c.NewMutex(os.Getenv(envName))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	h, err := m.Lock(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	fmt.Printf("HELD %d %d\n", h.Token(), time.Now().UnixNano())
	fence := os.Getenv(envFence)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	done := h.Done()
	for {
		select {
		case <-done:
			fmt.Printf("LOST %d\n", time.Now().UnixNano())
			done = nil
		case <-ctx.Done():
			return 0
		case <-tick.C:
			if fence == "" {
				continue
			}
			ok, err := fencedWrite(ctx, b, fence, h.Token())
			if err == nil {
				fmt.Printf("WRITE %d %d\n", map[bool]int{false: 0, true: 1}[ok], time.Now().UnixNano())
			}
		}
	}
}

// fencedWrite is the guarded storage: it accepts a write carrying token
// only when no write with a larger token was accepted before.
func fencedWrite(ctx context.Context, b backend.Backend, key string, token int64) (bool, error) {
	rep, err := b.Eval(ctx, fenceScript, []string{key}, []string{strconv.FormatInt(token, 10)})
	if err != nil {
		return false, err
	}
	return rep.Int == 1, nil
}

var fenceScript = backend.NewScript("fence", `
local cur = tonumber(redis.call('get', KEYS[1]) or '0')
if tonumber(ARGV[1]) < cur then return 0 end
redis.call('set', KEYS[1], ARGV[1])
return 1`)

// errorsIsAny reports whether err is any of targets.
func errorsIsAny(err error, targets ...error) bool {
	return slices.ContainsFunc(targets, func(t error) bool { return errors.Is(err, t) })
}
