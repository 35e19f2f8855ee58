package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
)

// waiterTimeout is the test waiters' timeout: they heartbeat every third
// of it, so a waiter that gets the lock much sooner was woken.
const waiterTimeout = time.Minute

// heldWithWaiter takes lock name with one owner and queues a second one,
// of another client, behind it. acquired receives the waiter's Lock result
// once it returns.
func heldWithWaiter(t *testing.T, addr, name string) (holder *lock.Mutex, h *lock.Hold, waiter *lock.Mutex, acquired <-chan error) {
	t.Helper()
	holder = mustMutex(t, lockClient(t, addr), name)
	waiter = mustMutex(t, lockClient(t, addr, lock.WithWaiterTimeout(waiterTimeout)), name)
	ctx := context.Background()
	h, err := holder.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, waiterTimeout)
	got := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := waiter.Lock(wctx)
		got <- err
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	redistest.Eventually(t, 10*time.Second, "the waiter to queue", func() bool {
		st, err := holder.Inspect(ctx, 0)
		return err == nil && st.QueueLength == 1
	})
	return holder, h, waiter, got
}

// awaitAcquired waits for the waiter's Lock to return and checks that it
// holds the lock now.
func awaitAcquired(t *testing.T, acquired <-chan error, waiter *lock.Mutex) {
	t.Helper()
	select {
	case err := <-acquired:
		if err != nil {
			t.Fatalf("the waiter's Lock: %v", err)
		}
	case <-time.After(waiterTimeout / 2):
		t.Fatal("the waiter was not woken: Lock still waiting 30s after the command")
	}
	st, err := waiter.Inspect(context.Background(), 1)
	if err != nil || st.CountOf(waiter.Owner()) != 1 {
		t.Fatalf("after the command: %+v, %v; want the waiter %s holding", st, err, waiter.Owner())
	}
}

// force-unlock and delete with --yes take the lock from its holder and the
// waiter gets it, woken (not at its next heartbeat), with every client
// library.
func TestAdmin_WakesTheNextWaiter(t *testing.T) {
	checkNoLeaks(t)
	s := startRedis(t)
	for _, cmd := range []string{"force-unlock", "delete"} {
		for _, b := range backendNames {
			t.Run(cmd+"/"+b, func(t *testing.T) {
				name := "orders-" + cmd + "-" + b
				_, h, waiter, acquired := heldWithWaiter(t, s.addr, name)
				start := time.Now()
				r := runCLI(t, nil, cmd, name, "--addr", s.addr, "--backend", b, "--yes")
				if r.code != exitOK {
					t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
				}
				want := map[string]string{"force-unlock": "force-unlocked", "delete": "deleted"}[cmd]
				if !strings.Contains(r.stdout, want+` "`+name+`"`) || strings.Contains(r.stderr, "[y/N]") {
					t.Errorf("stdout %q, stderr %q; want %q and no question", r.stdout, r.stderr, want)
				}
				awaitAcquired(t, acquired, waiter)
				// Woken by the command, not by its next heartbeat (20s) or
				// the end of the holder's lease (30s).
				if took := time.Since(start); took > waiterTimeout/6 {
					t.Errorf("the waiter took %v to get the lock: not woken", took)
				}
				_ = h // the holder's Hold ends too, within about a network delay
				if err := waiter.Unlock(context.Background()); err != nil {
					t.Error(err)
				}
			})
		}
	}
}

// Without --yes the command asks on the terminal; only "y" or "yes" acts.
// Without a terminal it asks nothing and fails with a usage error.
func TestAdmin_Confirmation(t *testing.T) {
	checkNoLeaks(t)
	s := startRedis(t)
	holder, _, waiter, acquired := heldWithWaiter(t, s.addr, "invoices")
	held := func() bool {
		st, err := holder.Inspect(context.Background(), 0)
		return err == nil && st.CountOf(holder.Owner()) == 1
	}
	for _, tc := range []struct {
		name        string
		interactive bool
		input       string
		code        int
		stderr      []string
	}{
		{name: "not a terminal", interactive: false, input: "y\n", code: exitUsage,
			stderr: []string{"force-unlock needs a confirmation and standard input is not a terminal: add --yes to confirm"}},
		{name: "answer no", interactive: true, input: "n\n", code: exitFailure,
			stderr: []string{`Force-unlock "invoices"? Its holder loses it and the first of the 1 waiter gets it. [y/N]`, "not confirmed: nothing changed"}},
		{name: "empty answer", interactive: true, input: "\n", code: exitFailure, stderr: []string{"not confirmed"}},
		{name: "end of input", interactive: true, input: "", code: exitFailure, stderr: []string{"not confirmed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLIEnv(t, env{stdin: strings.NewReader(tc.input), interactive: tc.interactive},
				"force-unlock", "invoices", "--addr", s.addr)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, tc.code, r.stdout, r.stderr)
			}
			for _, want := range tc.stderr {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
				}
			}
			if !held() {
				t.Fatal("the lock changed hands without a confirmation")
			}
		})
	}
	// The question shows the lock first; "YES" confirms.
	r := runCLIEnv(t, env{stdin: strings.NewReader(" YES \n"), interactive: true}, "force-unlock", "invoices", "--addr", s.addr)
	if r.code != exitOK || !strings.Contains(r.stderr, "client "+strings.SplitN(holder.Owner(), ":", 2)[0]) || !strings.Contains(r.stdout, `force-unlocked "invoices"`) {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	awaitAcquired(t, acquired, waiter)
	if err := waiter.Unlock(context.Background()); err != nil {
		t.Error(err)
	}
}

// Nothing to do: no question (so no terminal or --yes needed), exit 0.
func TestAdmin_NothingToDo(t *testing.T) {
	checkNoLeaks(t)
	s := startRedis(t)
	m := mustMutex(t, lockClient(t, s.addr), "used")
	if _, err := m.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(context.Background()); err != nil { // leaves the fencing counter
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"force-unlock", "never"}, `lock "never" is not held: nothing to force-unlock`},
		{[]string{"force-unlock", "used"}, `lock "used" is not held`},
		{[]string{"delete", "never"}, `no keys for "never" on this server: nothing to delete`},
		{[]string{"delete", "used"}, `lock "used" is free and nobody waits: nothing to delete`},
		{[]string{"delete", "used", "--prefix", "app:"}, `no keys for "app:used"`},
	} {
		r := runCLI(t, nil, append(tc.args, "--addr", s.addr)...)
		if r.code != exitOK || !strings.Contains(r.stdout, tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 0 and %q", tc.args, r.code, r.stdout, r.stderr, tc.want)
		}
	}
}

// An interrupt while the question waits for an answer exits 130.
func TestAdmin_InterruptedQuestion(t *testing.T) {
	checkNoLeaks(t)
	s := startRedis(t)
	holder, _, _, _ := heldWithWaiter(t, s.addr, "paused")
	ctx, cancel := context.WithCancel(context.Background())
	stdin := &blockingReader{read: make(chan struct{}), unblock: make(chan struct{})}
	defer close(stdin.unblock)
	errb := &syncBuffer{}
	e := env{stdin: stdin, stdout: &syncBuffer{}, stderr: errb, getenv: func(string) string { return "" }, interactive: true}
	done := make(chan int, 1)
	go func() { done <- e.run(ctx, []string{"force-unlock", "paused", "--addr", s.addr}) }()
	<-stdin.read // the question is asked
	cancel()
	select {
	case code := <-done:
		if code != exitInterrupted || !strings.Contains(errb.String(), "interrupted") {
			t.Errorf("exit %d, stderr %q; want %d", code, errb.String(), exitInterrupted)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the interrupted question did not return")
	}
	if st, err := holder.Inspect(context.Background(), 0); err != nil || st.CountOf(holder.Owner()) != 1 {
		t.Errorf("after the interrupt: %+v, %v; want the holder still holding", st, err)
	}
}

// blockingReader blocks every Read until unblock closes; read closes at
// the first Read.
type blockingReader struct {
	once          sync.Once
	read, unblock chan struct{}
}

func (r *blockingReader) Read([]byte) (int, error) {
	r.once.Do(func() { close(r.read) })
	<-r.unblock
	return 0, errors.New("closed")
}

// syncBuffer is a strings.Builder safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// prune-waiters drops the waiters whose deadline has passed, wherever they
// are in the queue; the live ones keep their places.
func TestAdmin_PruneWaiters(t *testing.T) {
	checkNoLeaks(t)
	s := startRedis(t)
	holder, _, waiter, _ := heldWithWaiter(t, s.addr, "jobs")
	ctx := context.Background()
	// Two Redisson waiters behind the live one, their deadlines passed, and
	// a live one behind them (so no heartbeat drops them as dead tails).
	rc := rawClient(t, s.addr)
	st, err := holder.Inspect(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	past := fmt.Sprint(st.ServerTime.Add(-2 * time.Second).UnixMilli())
	future := fmt.Sprint(st.ServerTime.Add(10 * time.Minute).UnixMilli())
	// Deadlines first: an entry queued without one is dead, and a
	// heartbeat in between would drop it from the tail.
	for _, cmd := range [][]string{
		{"ZADD", "redisson_lock_timeout:{jobs}", past, "dead-1:1", past, "dead-2:1", future, "live-java:1"},
		{"RPUSH", "redisson_lock_queue:{jobs}", "dead-1:1", "dead-2:1", "live-java:1"},
	} {
		if err := rc.Do(ctx, rc.B().Arbitrary(cmd...).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}

	r := runCLIEnv(t, env{stdin: strings.NewReader("y\n"), interactive: true}, "prune-waiters", "jobs", "--addr", s.addr)
	if r.code != exitOK {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{`Drop the dead waiters of "jobs" (4 waiting, 2 dead waiters)? [y/N]`, "dead?"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if !strings.Contains(r.stdout, `dropped 2 dead waiters of "jobs"`) {
		t.Errorf("stdout %q", r.stdout)
	}
	st, err = holder.Inspect(ctx, 10)
	if err != nil || st.QueueLength != 2 || st.Queue[0].Owner != waiter.Owner() || st.Queue[1].Owner != "live-java:1" || st.CountOf(holder.Owner()) != 1 {
		t.Fatalf("after prune-waiters: %+v, %v; want the holder holding and the two live waiters in the queue", st, err)
	}
	// Now there is nothing to prune: no question.
	r = runCLI(t, nil, "prune-waiters", "jobs", "--addr", s.addr)
	if r.code != exitOK || !strings.Contains(r.stdout, `no dead waiter among the 2 waiters of "jobs": nothing to prune`) {
		t.Errorf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}
