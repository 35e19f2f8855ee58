package lock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock/internal/wire"
	"github.com/fairlock/fairlock/redistest"
)

// loseRepliesKey marks the context of a call whose acquire replies a
// lostReplies backend loses.
type loseRepliesKey struct{}

// lostReplies is a backend that runs every acquire request of a call
// whose context carries loseRepliesKey and loses its reply, as a
// connection that times out after the server ran the script does (the
// connection stays up). It embeds only backend.Backend: no key watches.
type lostReplies struct {
	backend.Backend
	lost    atomic.Int64 // replies lost
	granted atomic.Int64 // of them, grants
	kept    atomic.Int64 // acquire replies delivered
}

func (b *lostReplies) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	rep, err := b.Backend.Eval(ctx, s, keys, args)
	if s.Name == "acquire" && err == nil && ctx.Value(loseRepliesKey{}) != nil {
		if r, _ := wire.DecodeAcquire(rep); r.Acquired {
			b.granted.Add(1)
		}
		b.lost.Add(1)
		return backend.Reply{}, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	}
	if s.Name == "acquire" {
		b.kept.Add(1)
	}
	return rep, err
}

// awaitSettledWait waits until the Lock call of m, whose client's backend
// is b and the call's only one, waits settled: subscribed to its wake-up
// channel, and the attempt that follows the subscription answered. Until
// then the call may attempt at any moment.
func awaitSettledWait(t *testing.T, srv *redistest.Server, b *lostReplies, m *Mutex) {
	t.Helper()
	redistest.Eventually(t, 5*time.Second, "the waiting call subscribed and attempted again", func() bool {
		v, _ := srv.Do(t, "PUBSUB", "NUMSUB", m.channel).([]any)
		return len(v) == 2 && v[1] == int64(1) && b.kept.Load() >= 2
	})
}

// noWatches is a backend without key watches.
type noWatches struct{ backend.Backend }

// clientOn returns a Client on srv (rueidis, with opts) that watches no keys, closed
// at the test's end: its holds and waits hear of a lock hash deleted by
// hand only at their next script.
func clientOn(t *testing.T, srv *redistest.Server, opts ...Option) *Client {
	t.Helper()
	return clientOver(t, noWatches{rueidisOn(t, srv)}, opts...)
}

// clientOver returns a Client over b with opts, closed at the test's end.
func clientOver(t *testing.T, b backend.Backend, opts ...Option) *Client {
	t.Helper()
	c, err := NewClient(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// queueOf returns the owner fields in m's queue, head first.
func queueOf(t *testing.T, srv *redistest.Server, m *Mutex) []string {
	t.Helper()
	v, _ := srv.Do(t, "LRANGE", m.keys.Queue, "0", "-1").([]any)
	q := make([]string, 0, len(v))
	for _, e := range v {
		q = append(q, fmt.Sprint(e))
	}
	return q
}

// TestSharedOwnerFailedCall_KeepsItsPlace: two calls of one owner S wait
// (one Mutex, two goroutines), X queues behind S, and the lock becomes
// free without a message (its hash deleted by hand, as a lease running out
// does). S's second call, a TryLock with a 300 ms wait, is granted the
// lock by its attempts, but every reply is lost until it gives up; it
// leaves the grant to S's other waiting call. That call's next attempt
// named no hold and said it could not have run before, so acquire.lua took
// S's grant for the leftover of an ended hold: it deleted it, handed the
// lock to X and queued S at the tail - X acquired first, S only after X's
// Unlock (issue 46, defect 1). The owner's attempts say they may have run
// before while such a grant may wait, and S's call takes it up: S first.
func TestSharedOwnerFailedCall_KeepsItsPlace(t *testing.T) {
	lossy := &lostReplies{}
	srv, cs := wrappedClient(t, func(b backend.Backend) backend.Backend { lossy.Backend = b; return lossy })
	cx := clientOn(t, srv)
	const name = "shared-owner-failed-call"
	s, x, holder := newTestMutex(t, cs, name), newTestMutex(t, cx, name), newTestMutex(t, cx, name)
	bg, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()

	if _, err := holder.Lock(bg); err != nil {
		t.Fatal(err)
	}
	type result struct {
		who string
		h   *Hold
		err error
	}
	got := make(chan result, 2)
	lockAs := func(who string, m *Mutex) {
		h, err := m.Lock(bg)
		got <- result{who, h, err}
	}
	go lockAs("S", s)
	redistest.Eventually(t, 5*time.Second, "S queued", func() bool { return slices.Equal(queueOf(t, srv, s), []string{s.field}) })
	awaitSettledWait(t, srv, lossy, s)
	go lockAs("X", x)
	redistest.Eventually(t, 5*time.Second, "X queued behind S", func() bool {
		return slices.Equal(queueOf(t, srv, s), []string{s.field, x.field})
	})

	srv.Do(t, "DEL", s.keys.Hash) // free, and nobody told
	lose := context.WithValue(bg, loseRepliesKey{}, true)
	if h, err := s.TryLock(lose, 300*time.Millisecond); err == nil {
		t.Fatalf("TryLock whose replies were all lost returned a hold (token %d)", h.Token())
	}
	if lossy.lost.Load() == 0 {
		t.Fatal("no acquire reply of the TryLock was lost: the scenario did not happen")
	}
	if held := srv.Do(t, "HGET", s.keys.Hash, s.field); held == nil {
		t.Fatalf("after the TryLock gave up S holds nothing on the server (queue %q): the scenario did not happen", queueOf(t, srv, s))
	}

	var first result
	select {
	case first = <-got:
	case <-bg.Done():
		t.Fatal("neither S's Lock nor X's acquired")
	}
	if first.err != nil {
		t.Fatalf("%s's Lock: %v", first.who, first.err)
	}
	if first.who != "S" {
		t.Errorf("X acquired first, token %d: S's failed call gave S's grant away and S queued behind X (B3)", first.h.Token())
	}
	if err := first.h.Err(); err != nil {
		t.Fatalf("%s's hold (token %d) ended: %v", first.who, first.h.Token(), err)
	}
	// Whoever holds releases, and the other acquires in turn.
	if err := map[string]*Mutex{"S": s, "X": x}[first.who].Unlock(bg); err != nil {
		t.Fatalf("%s's Unlock: %v", first.who, err)
	}
	second := <-got
	if second.err != nil {
		t.Fatalf("%s's Lock: %v", second.who, second.err)
	}
	if err := map[string]*Mutex{"S": s, "X": x}[second.who].Unlock(bg); err != nil && !errors.Is(err, ErrNotHeld) {
		t.Fatalf("%s's Unlock: %v", second.who, err)
	}
	t.Logf("%d acquire replies lost; %s acquired first", lossy.lost.Load(), first.who)
}

// TestSharedOwnerFailedCall_HandOverMessageIsStale: as
// TestSharedOwnerFailedCall_KeepsItsPlace, but the lock is handed over to
// S by its holder's Unlock, with a message to S's calls, while S's
// TryLock is retrying an attempt whose replies are lost: a retry takes
// the hand-over grant up and the next is granted a new hold in its place.
// S's other call, woken by the message, adopted the grant it announced
// once the TryLock had given up - a hold the server no longer had under
// that token: Lock returned it, and its Unlock said the lock was not held.
// The message is stale once an attempt of unknown outcome may have taken
// its grant up; S's call attempts instead and takes up the hold that is
// there.
func TestSharedOwnerFailedCall_HandOverMessageIsStale(t *testing.T) {
	lossy := &lostReplies{}
	srv, cs := wrappedClient(t, func(b backend.Backend) backend.Backend { lossy.Backend = b; return lossy })
	cx := clientOn(t, srv)
	const name = "shared-owner-stale-hand-over"
	s, x, holder := newTestMutex(t, cs, name), newTestMutex(t, cx, name), newTestMutex(t, cx, name)
	bg, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()

	if _, err := holder.Lock(bg); err != nil {
		t.Fatal(err)
	}
	gotS := goLockIn(bg, s)
	redistest.Eventually(t, 5*time.Second, "S queued", func() bool { return slices.Equal(queueOf(t, srv, s), []string{s.field}) })
	awaitSettledWait(t, srv, lossy, s)
	gotX := goLockIn(bg, x)
	redistest.Eventually(t, 5*time.Second, "X queued behind S", func() bool {
		return slices.Equal(queueOf(t, srv, s), []string{s.field, x.field})
	})

	lose := context.WithValue(bg, loseRepliesKey{}, true)
	tried := make(chan error, 1)
	go func() {
		_, err := s.TryLock(lose, 2*time.Second)
		tried <- err
	}()
	redistest.Eventually(t, 5*time.Second, "an attempt of the TryLock run", func() bool { return lossy.lost.Load() > 0 })
	if err := holder.Unlock(bg); err != nil { // hands the lock over to S, with a message
		t.Fatal(err)
	}
	if err := <-tried; err == nil {
		t.Fatal("TryLock whose replies were all lost returned a hold")
	}
	if n := lossy.granted.Load(); n < 2 {
		t.Fatalf("%d lost replies granted the lock, want 2 or more (the hand-over taken up, then a new hold): the scenario did not happen", n)
	}

	select {
	case r := <-gotS:
		if r.err != nil {
			t.Fatalf("S's Lock: %v", r.err)
		}
		if err := s.Unlock(bg); err != nil {
			t.Errorf("S's Unlock of the hold its Lock returned (token %d): %v", r.h.Token(), err)
		}
	case r := <-gotX:
		t.Fatalf("X acquired first (%v): S queued behind X (B3)", r.err)
	case <-bg.Done():
		t.Fatal("neither S's Lock nor X's acquired")
	}
	if r := <-gotX; r.err != nil {
		t.Fatalf("X's Lock after S's Unlock: %v", r.err)
	}
	if err := x.Unlock(bg); err != nil {
		t.Fatal(err)
	}
}

// lockResult is the outcome of a Lock run in the background.
type lockResult struct {
	h   *Hold
	err error
}

// goLockIn runs m.Lock(ctx) in the background.
func goLockIn(ctx context.Context, m *Mutex) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		h, err := m.Lock(ctx)
		ch <- lockResult{h, err}
	}()
	return ch
}

// TestTryLockBehindItsOwnersGate_NotAcquired: a TryLock queued behind a
// holder (the server answered it: queued) sends its next heartbeat while
// another call of its owner holds the owner's gate for a round trip, and
// its wait runs out there (the soak, seed 83018658760334 at 172.2 s: a
// Lock and a TryLock of one owner, woken together, no fault near). The
// server told this call the lock was busy and it was queued: ErrNotAcquired,
// not ErrUnavailable, which says the call could not tell.
func TestTryLockBehindItsOwnersGate_NotAcquired(t *testing.T) {
	srv := redistest.Start(t)
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	const name = "trylock-behind-gate"
	holder := newTestMutex(t, clientOn(t, srv), name)
	if _, err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	// Heartbeats every 200 ms: the TryLock's next attempt comes well
	// before its wait runs out.
	c := clientOn(t, srv, WithWaiterTimeout(600*time.Millisecond))
	m := newTestMutex(t, c, name)
	done := make(chan error, 1)
	go func() {
		_, err := m.TryLock(ctx, 1500*time.Millisecond)
		done <- err
	}()
	redistest.Eventually(t, 5*time.Second, "the TryLock queued", func() bool {
		q := queueOf(t, srv, m)
		return len(q) == 1 && q[0] == m.field
	})
	o := c.owners.lookup(m)
	if o == nil {
		t.Fatal("the TryLock's owner is not in the registry")
	}
	o.gate <- struct{}{} // as another call of the owner waiting for the server
	err := <-done
	<-o.gate
	if !errors.Is(err, ErrNotAcquired) || errors.Is(err, ErrUnavailable) {
		t.Errorf("TryLock behind its owner's gate, queued before = %v, want ErrNotAcquired", err)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
