package lock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/redistest"
)

// lateRequests is a backend whose requests of one script (unlock, leave),
// while held, reach the server only when the test delivers them: the
// caller hears nothing until its context ends, as from a paused server,
// and the request runs late, after requests sent on other connections
// since. limit > 0 holds that many at most. failFast: the caller hears
// an error at once instead, as from a connection that broke after the
// request was written. answer: the caller hears the reply when the
// request runs, if its context has not ended, as from a server that
// answers late.
type lateRequests struct {
	backend.Backend
	script   string
	limit    int
	failFast bool
	answer   bool
	mu       sync.Mutex
	holding  bool
	send     chan struct{} // closed by deliver
	ran      sync.WaitGroup
	held     int
	replies  []backend.Reply // of the held requests, as they ran
	asked    atomic.Int32    // acquire requests answered
	passed   atomic.Int32    // requests of the script not held
}

// hold holds the script's requests from now until deliver.
func (b *lateRequests) hold() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.holding, b.send = true, make(chan struct{})
}

// deliver sends the held requests and waits until the server ran them.
// It returns how many there were.
func (b *lateRequests) deliver() int {
	b.mu.Lock()
	if b.holding {
		b.holding = false
		close(b.send)
	}
	n := b.held
	b.mu.Unlock()
	b.ran.Wait()
	return n
}

// heldNow returns how many requests are held.
func (b *lateRequests) heldNow() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}

// ranReplies returns the replies of the held requests that ran.
func (b *lateRequests) ranReplies() []backend.Reply {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]backend.Reply(nil), b.replies...)
}

func (b *lateRequests) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	b.mu.Lock()
	if s.Name != b.script || !b.holding || b.limit > 0 && b.held >= b.limit {
		b.mu.Unlock()
		rep, err := b.Backend.Eval(ctx, s, keys, args)
		switch s.Name {
		case "acquire":
			b.asked.Add(1)
		case b.script:
			b.passed.Add(1)
		}
		return rep, err
	}
	send := b.send
	b.held++
	b.ran.Add(1)
	b.mu.Unlock()
	answered := make(chan backend.Reply, 1)
	go func() {
		defer b.ran.Done()
		<-send
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if rep, err := b.Backend.Eval(rctx, s, keys, args); err == nil {
			b.mu.Lock()
			b.replies = append(b.replies, rep)
			b.mu.Unlock()
			answered <- rep
		}
	}()
	if b.failFast {
		return backend.Reply{}, errors.New("the connection broke (test)")
	}
	heard := answered
	if !b.answer {
		heard = nil
	}
	select {
	case rep := <-heard:
		return rep, nil
	case <-ctx.Done():
		return backend.Reply{}, ctx.Err()
	}
}

// TestUnacknowledgedUnlock_NextLockGetsNoOldToken: W is handed the lock
// by a release (a grant its client holds by the message, not taken up on
// the server yet: the field reads 0), and its Unlock is not acknowledged
// within its 2 s (the server paused, in the simulation): the hold ends as
// lost, the request still on its way. W's next Lock, sent on another
// connection, ran first; acquire.lua took the field for a hand-over grant
// the client did not know of yet and took it up - a "new" hold with the
// token of the hold that had ended. Then the late Unlock ran, found that
// token, and released the lock under W's new hold to X, who was waiting:
// two holders, one token granted twice (the simulation, seed 103). A
// grant of a token the owner has spent already is the leftover of a hold
// the client has ended: the attempt gives it back (the lock goes to X,
// first in line) and asks again; W queues behind X (B3) and its next hold
// has a new token (X6).
func TestUnacknowledgedUnlock_NextLockGetsNoOldToken(t *testing.T) {
	late := &lateRequests{script: "unlock"}
	srv := redistest.Start(t)
	cx := clientOn(t, srv)
	late.Backend = rueidisOn(t, srv)
	// A long waiter timeout: no renewal takes W's grant up (a third of
	// it after W's last heartbeat) while the test runs.
	cw := clientOver(t, late, WithWaiterTimeout(60*time.Second))
	t.Cleanup(func() { late.deliver() })
	const name = "unlock-unacknowledged"
	w, x, holder := newTestMutex(t, cw, name), newTestMutex(t, cx, name), newTestMutex(t, cx, name)
	bg, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	if _, err := holder.Lock(bg); err != nil {
		t.Fatal(err)
	}
	gotW := goLockIn(bg, w)
	redistest.Eventually(t, 5*time.Second, "W queued", func() bool { return len(queueOf(t, srv, w)) == 1 })
	// W's wait settled: subscribed, and the attempt that follows the
	// subscription answered. Before that the release's message may reach
	// nobody, and W's next attempt take its grant up (CI of 2a6d3e3).
	redistest.Eventually(t, 5*time.Second, "W subscribed and attempted again", func() bool {
		v, _ := srv.Do(t, "PUBSUB", "NUMSUB", w.channel).([]any)
		return len(v) == 2 && v[1] == int64(1) && late.asked.Load() >= 2
	})
	gotX := goLockIn(bg, x)
	redistest.Eventually(t, 5*time.Second, "X queued behind W", func() bool { return len(queueOf(t, srv, w)) == 2 })
	if err := holder.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	r := <-gotW
	if r.err != nil {
		t.Fatalf("W's Lock: %v", r.err)
	}
	old := r.h
	if v := srv.Do(t, "HGET", w.keys.Hash, w.field); v != "0" {
		t.Fatalf("W's field reads %v, want 0 (a hand-over grant not taken up): the scenario did not happen", v)
	}

	late.hold()
	if err := w.Unlock(bg); !errors.Is(err, ErrLockLost) {
		t.Fatalf("W's Unlock with its request held back = %v, want ErrLockLost (not acknowledged)", err)
	}
	select {
	case <-old.Done():
	default:
		t.Fatal("W's hold did not end when its Unlock gave up")
	}
	gotW2 := goLockIn(bg, w)
	var hx *Hold
	select {
	case r := <-gotW2:
		late.deliver()
		t.Fatalf("W's next Lock = token %d (%v) while X waited first; W's ended hold had token %d", tokenOf(r.h), r.err, old.Token())
	case r := <-gotX:
		if r.err != nil {
			t.Fatalf("X's Lock: %v", r.err)
		}
		hx = r.h
	case <-bg.Done():
		t.Fatal("neither W's next Lock nor X's returned")
	}
	if n := late.deliver(); n == 0 {
		t.Fatal("no unlock request was held back: the scenario did not happen")
	}
	if hx.Token() <= old.Token() {
		t.Errorf("X's token %d, W's ended hold's %d: want X's later", hx.Token(), old.Token())
	}
	if v := srv.Do(t, "HGET", x.keys.Hash, x.field); v == nil {
		t.Error("X's hold is gone from the server after W's late Unlock ran")
	}
	select {
	case <-hx.Done():
		t.Fatalf("X's hold ended after W's late Unlock ran: %v", hx.Err())
	case r := <-gotW2:
		t.Fatalf("W's next Lock returned (token %d, %v) while X holds", tokenOf(r.h), r.err)
	default:
	}
	if err := x.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	r = <-gotW2
	if r.err != nil {
		t.Fatalf("W's next Lock after X's Unlock: %v", r.err)
	}
	if r.h.Token() <= hx.Token() {
		t.Errorf("W's new token %d, X's %d: want W's later", r.h.Token(), hx.Token())
	}
	if err := w.Unlock(bg); err != nil {
		t.Fatal(err)
	}
}
