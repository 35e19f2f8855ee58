package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
)

// A stalled subscription connection (X2): an idle pub/sub connection that
// a NAT or a firewall dropped without a word stops answering, while the
// connections that run scripts still work. A waiter must keep its place -
// heartbeat, and take the lock when its turn comes - whatever its
// subscription connection does.

// stallingBackend wraps the backend under test as a client whose
// subscription connection has stalled: while on, Subscribe (subscribe)
// or WatchKey (watch) waits until the test resumes it or its context
// ends, and then fails. Scripts run as usual.
type stallingBackend struct {
	capable
	subscribe, watch atomic.Bool
	resume           chan struct{}
	once             sync.Once

	mu      sync.Mutex
	stalled map[string]int // channel or key -> calls waiting in the stall
}

// newStalling wraps a new backend under test; the stall ends when the
// test does (register it after the lock clients on it, so that it ends
// before they close).
func newStalling(t *testing.T, s *suite) *stallingBackend {
	return &stallingBackend{capable: s.newBackend(t), resume: make(chan struct{}), stalled: map[string]int{}}
}

// stalling reports whether a call for the channel or key waits in the
// stall.
func (b *stallingBackend) stalling(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stalled[name] > 0
}

// unstall ends the stall for good: waiting calls go on to the backend.
func (b *stallingBackend) unstall() { b.once.Do(func() { close(b.resume) }) }

var errStalled = errors.New("conformance: stalled subscription connection")

func (b *stallingBackend) stall(ctx context.Context, on *atomic.Bool, name string) error {
	if !on.Load() {
		return nil
	}
	b.mu.Lock()
	b.stalled[name]++
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.stalled[name]--
		b.mu.Unlock()
	}()
	select {
	case <-b.resume:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", errStalled, ctx.Err())
	}
}

func (b *stallingBackend) Subscribe(ctx context.Context, channel string) (*backend.Subscription, error) {
	if err := b.stall(ctx, &b.subscribe, channel); err != nil {
		return nil, err
	}
	return b.capable.Subscribe(ctx, channel)
}

// WatchKey stalls while watch is on, also on a backend that cannot watch
// keys (it would say so at once on a working connection).
func (b *stallingBackend) WatchKey(ctx context.Context, key string) (*backend.Subscription, error) {
	if err := b.stall(ctx, &b.watch, key); err != nil {
		return nil, err
	}
	kw, ok := b.capable.(backend.KeyWatcher)
	if !ok {
		return nil, backend.ErrNotSupported
	}
	return kw.WatchKey(ctx, key)
}

// wakeChannel is the wake-up channel of m's owner (RULES.md, keyspace),
// for a lock name without braces.
func wakeChannel(m *lock.Mutex) string {
	return "redisson_lock__channel:{" + m.Keys()[0] + "}:" + m.Owner()
}

// heartbeat is a waiter's heartbeat interval with the default waiter
// timeout: the longest a waiter sleeps without an attempt (X2, X4).
const heartbeat = (5 * time.Second) / 3

// firstOf waits up to within for one of the acquires to return and
// reports which (-1: none) and what it returned.
func firstOf(chans []<-chan result, within time.Duration) (int, result) {
	timeout := time.After(within)
	for {
		for i, ch := range chans {
			select {
			case r := <-ch:
				return i, r
			default:
			}
		}
		select {
		case <-timeout:
			return -1, result{}
		case <-time.After(10 * time.Millisecond): // polling pace
		}
	}
}

// stalledTurns runs the shape of the stalled-connection cases: w0 (on a
// working client) holds with an explicit lease and never unlocks; w1 and
// w2 queue in that order on the stalled client sb, with stall switched
// on before they start; once ready says they are where the stall catches
// them (ready is given the lock name and w1, w2), w0's lease runs out. w1 must take the lock within a heartbeat of
// that (X3: only the head's own attempt notices a lease running out),
// and w2 only after w1 unlocks, within a heartbeat of that (its wake-up
// may be lost with the connection; its heartbeat attempt takes the
// hand-over grant up). It returns the stalled client and its mutexes.
func stalledTurns(t *testing.T, s *suite, sb *stallingBackend, stall *atomic.Bool, ready func(name string, w1, w2 *lock.Mutex) bool) (*lock.Client, []*lock.Mutex) {
	t.Helper()
	const lease = time.Second
	name := lockName(t)
	w0 := s.newProc(t).mutex(t, name)
	c := clientOn(t, sb)
	t.Cleanup(sb.unstall) // before the client closes
	w1, w2 := mutexOf(t, c, name), mutexOf(t, c, name)
	h0, err := w0.LockWithLease(ctxFor(t, eventually), lease)
	if err != nil {
		t.Fatal(err)
	}
	stall.Store(true)
	chans := queueInOrder(t, w0, 0, []*lock.Mutex{w1, w2}, func(m *lock.Mutex) (*lock.Hold, error) {
		return m.Lock(ctxFor(t, 60*time.Second))
	})
	redistest.Eventually(t, eventually, "the waiters to meet the stalled subscription connection", func() bool { return ready(name, w1, w2) })
	expired := awaitDone(t, h0, lease+slack, "w0's lease")
	// w2 may take the lock only after w1 gave up its place, a waiter
	// timeout after w1's last attempt: wait a little longer than that, to
	// tell which came first.
	i, r := firstOf(chans, (5*time.Second)+slack)
	took := r.at.Sub(expired)
	switch {
	case i < 0:
		t.Fatalf("no waiter took the lock within %v of w0's lease running out", (5*time.Second)+slack)
	case r.err != nil:
		t.Fatalf("w%d: %v", i+1, r.err)
	case i != 0:
		t.Fatalf("w2 took the lock %v after w0's lease ran out, before w1, the head: order w0, w2, w1, want w0, w1, w2", took)
	case took > heartbeat+slack:
		t.Errorf("w1, the head, took the lock %v after w0's lease ran out, want within a heartbeat (%v) and %v", took, heartbeat, slack)
	}
	mustNotArrive(t, chans[1], 50*time.Millisecond, "w2 while w1 holds")
	released := time.Now()
	mustUnlock(t, w1)
	r = await(t, chans[1], heartbeat+slack, "w2 after w1 unlocked")
	if r.err != nil {
		t.Fatalf("w2: %v", r.err)
	}
	t.Logf("w1 took the lock %v after w0's lease ran out; w2 %v after w1 unlocked", took, r.at.Sub(released))
	mustUnlock(t, w2)
	return c, []*lock.Mutex{w1, w2}
}

// testX2StalledKeyWatch: the head's watch on the lock hash cannot be
// armed (WatchKey stalls). The head used to wait for it, with the
// caller's context: no heartbeat, no attempt when the lease ran out, no
// wake-up read. The lock sat free, then was granted (by the heartbeat of
// the waiter behind) to a head that never took it up, and that waiter,
// head in turn, stalled the same way; with the stall bounded, the waiter
// behind overtook the head once its liveness had lapsed (w0, w2, w1).
func testX2StalledKeyWatch(t *testing.T, s *suite) {
	sb := newStalling(t, s)
	stalledTurns(t, s, sb, &sb.watch, func(name string, _, _ *lock.Mutex) bool { return sb.stalling(name) })
}

// testX2StalledSubscribe: the waiters' wake-up subscriptions cannot be
// made (Subscribe stalls). They used to wait for them before heartbeating
// or trying again: nobody took the lock when the lease ran out, and
// Client.Close waited for them as long as their contexts allowed. Close
// must return promptly, the waiter in a stalled Subscribe ending with
// ErrClosed.
func testX2StalledSubscribe(t *testing.T, s *suite) {
	sb := newStalling(t, s)
	c, ms := stalledTurns(t, s, sb, &sb.subscribe, func(_ string, w1, w2 *lock.Mutex) bool {
		return sb.stalling(wakeChannel(w1)) && sb.stalling(wakeChannel(w2))
	})
	holder := s.newProc(t).mutex(t, ms[0].Name())
	mustLock(t, holder)
	ch := goAcquire(func() (*lock.Hold, error) { return ms[0].Lock(ctxFor(t, 60*time.Second)) })
	waitQueued(t, holder, 1)
	redistest.Eventually(t, eventually, "the waiter to meet the stalled subscription connection", func() bool {
		return sb.stalling(wakeChannel(ms[0]))
	})
	closed := make(chan time.Time, 1)
	start := time.Now()
	go func() {
		c.Close()
		closed <- time.Now()
	}()
	select {
	case at := <-closed:
		t.Logf("Close returned after %v", at.Sub(start))
	case <-time.After(slack):
		t.Fatalf("Close did not return within %v while a waiter's Subscribe stalled", slack)
	}
	r := await(t, ch, slack, "the waiter after Close")
	if !errors.Is(r.err, lock.ErrClosed) {
		t.Errorf("the waiter after Close: %v, want ErrClosed", r.err)
	}
	mustUnlock(t, holder)
}
