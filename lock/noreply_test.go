package lock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/redistest"
)

// resetRequests holds the first request of each script in held until
// release names it, and then fails it as a connection the client lost
// (ECONNRESET): the request never reached the server. Every other request
// goes to the backend.
type resetRequests struct {
	backend.Backend
	arrived chan string // the name of each request held

	mu    sync.Mutex
	held  map[string]chan struct{} // by script: closed by release; nil once taken
	taken map[string]bool
}

func newResetRequests(b backend.Backend, scripts ...string) *resetRequests {
	r := &resetRequests{Backend: b, arrived: make(chan string, len(scripts)), held: map[string]chan struct{}{}, taken: map[string]bool{}}
	for _, s := range scripts {
		r.held[s] = make(chan struct{})
	}
	return r
}

func (r *resetRequests) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	r.mu.Lock()
	gate, ok := r.held[s.Name]
	if !ok || r.taken[s.Name] {
		r.mu.Unlock()
		return r.Backend.Eval(ctx, s, keys, args)
	}
	r.taken[s.Name] = true
	r.mu.Unlock()
	r.arrived <- s.Name
	<-gate
	return backend.Reply{}, fmt.Errorf("read tcp: %w", syscall.ECONNRESET)
}

// release fails the held request of script.
func (r *resetRequests) release(script string) { close(r.held[script]) }

// awaitHeld waits until the request of script is held.
func (r *resetRequests) awaitHeld(t *testing.T, script string) {
	t.Helper()
	select {
	case got := <-r.arrived:
		if got != script {
			t.Fatalf("held %s, want %s", got, script)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s request within 10s", script)
	}
}

// waitsForGate reports whether an acquire attempt is blocked waiting for
// its owner's gate (owner.withGate, called from waiter.attempt).
func waitsForGate() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		first := strings.Index(g, "fairlock/lock.")
		if strings.Contains(g, "[select") && first >= 0 &&
			strings.HasPrefix(g[first:], "fairlock/lock.(*owner).withGate(") &&
			strings.Contains(g, "fairlock/lock.(*waiter).attempt(") {
			return true
		}
	}
	return false
}

// TestTryLock_NoReply_CleanupStuck_Unavailable: the soak (seed
// 152332695039817 at 587 s, a 6.8 s SIGSTOP of the server) had a TryLock
// with a 193 ms wait say ErrNotAcquired on a lock nobody held, though no
// request of it could have had an answer. An earlier call of its owner
// held the owner's gate: its attempt failed without an answer, and the
// leave that undid it failed at once too, unsettled - it may still reach
// the server within 2 s. The TryLock, which had found no such leave
// before the gate, entered the gate then and waited that leave out
// (awaitLeaves, inside the gate) until its wait ran out; the undo after
// it sent a leave to the stopped server, so the call was still there
// cleanupGrace later, and its caller returned with neither an attempt in
// flight nor a connection error noted: plain ErrNotAcquired. A call the
// server never answered cannot tell the lock is busy: ErrUnavailable.
// (On the stopped server, rueidis failed both requests early: a request
// that joins a connection being dialled again fails when that dial gives
// up, whatever its own deadline. resetRequests fails them here.)
func TestTryLock_NoReply_CleanupStuck_Unavailable(t *testing.T) {
	srv := redistest.Start(t)
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	resets := newResetRequests(noWatches{rueidisOn(t, srv)}, "acquire", "leave")
	c := clientOver(t, resets)
	m := newTestMutex(t, c, "noreply-cleanup-stuck")

	srv.Pause(t)
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			srv.Resume(t)
		}
	}
	defer resume()

	// The earlier call: its attempt fails unanswered, and its undo's
	// leave is on its way, in the owner's gate.
	first := make(chan error, 1)
	go func() {
		_, err := m.TryLock(ctx, 0)
		first <- err
	}()
	resets.awaitHeld(t, "acquire")
	resets.release("acquire")
	resets.awaitHeld(t, "leave")

	// The TryLock finds no unsettled leave, and waits for the gate.
	const wait = time.Second
	start := time.Now()
	got := make(chan error, 1)
	go func() {
		_, err := m.TryLock(ctx, wait)
		got <- err
	}()
	redistest.Eventually(t, 5*time.Second, "the TryLock waiting for its owner's gate", waitsForGate)
	// The leave fails at once, unsettled, and frees the gate.
	resets.release("leave")
	if err := <-first; !errors.Is(err, ErrUnavailable) {
		t.Errorf("the earlier TryLock(0), its attempt lost = %v, want ErrUnavailable", err)
	}

	err := <-got
	took := time.Since(start)
	resume()
	t.Logf("the TryLock returned after %v: %v", took.Round(time.Millisecond), err)
	if took < wait+cleanupGrace {
		t.Errorf("the TryLock returned after %v, before its wait and cleanupGrace (%v): its cleanup did not wait for the server, the scenario did not happen", took, wait+cleanupGrace)
	}
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotAcquired) {
		t.Errorf("TryLock whose requests had no answer = %v, want ErrUnavailable, not ErrNotAcquired", err)
	}
}
