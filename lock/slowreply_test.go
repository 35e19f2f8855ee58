package lock

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock/internal/wire"
	"github.com/fairlock/fairlock/redistest"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

// wrappedClient returns a new redis-server and a Client on it, through a
// rueidis backend that wrap wraps; the test's end closes them.
func wrappedClient(t *testing.T, wrap func(backend.Backend) backend.Backend) (*redistest.Server, *Client) {
	t.Helper()
	srv := redistest.Start(t)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	c, err := NewClient(wrap(rueidisbackend.New(rc)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return srv, c
}

// slowAcquire is a backend whose acquire replies reach the client delay
// after the server ran the script: a reply slower than a short lease.
type slowAcquire struct {
	backend.Backend
	delay time.Duration
}

func (b slowAcquire) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	rep, err := b.Backend.Eval(ctx, s, keys, args)
	if s.Name == "acquire" {
		time.Sleep(b.delay) // the reply's late arrival, not synchronisation
	}
	return rep, err
}

// TestGrantSlowerThanLease_IsNoHold: a grant whose reply arrives after
// the lease it was asked for has run out is not a hold. Lock reports the
// loss (ErrLockLost) instead of returning a hold that ended before it was
// handed out, the client keeps nothing of it (no hold tracked for the
// watchdog, no owner state), and the grant is given back on the server
// instead of blocking others for its lease.
func TestGrantSlowerThanLease_IsNoHold(t *testing.T) {
	_, c := wrappedClient(t, func(b backend.Backend) backend.Backend { return slowAcquire{Backend: b, delay: 50 * time.Millisecond} })
	m := newTestMutex(t, c, "slow-reply")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	const rounds = 20
	for i := range rounds {
		h, err := m.LockWithLease(ctx, 20*time.Millisecond)
		if !errors.Is(err, ErrLockLost) || h != nil {
			t.Fatalf("round %d: LockWithLease = (%v, %v), want (nil, ErrLockLost): the reply came after the lease", i, h, err)
		}
	}
	holds := len(c.holds.live())
	c.owners.mu.Lock()
	owners := len(c.owners.byKey)
	c.owners.mu.Unlock()
	if holds != 0 || owners != 0 {
		t.Errorf("after %d grants slower than their lease: %d holds tracked, %d owner states kept, want 0 and 0", rounds, holds, owners)
	}
	// Given back, not left to expire: a later reader sees the lock free.
	st, err := m.Inspect(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Locked() {
		t.Errorf("the lock is still held on the server (TTL %v) after the late grant was given back", st.TTL)
	}
	t.Logf("%d grants whose reply took 50 ms on a 20 ms lease: all refused as lost, nothing tracked", rounds)
}

// gatedUnlock is a backend whose next unlock request, once armed, waits
// at a gate before it is sent: the caller can act while the request is on
// its way.
type gatedUnlock struct {
	backend.Backend
	mu            sync.Mutex
	entered, open chan struct{} // armed: closed when the request arrives; closed by the test to send it
}

// arm gates the next unlock request: entered closes when it arrives, and
// it is sent when the caller closes open.
func (b *gatedUnlock) arm() (entered, open chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.entered, b.open = make(chan struct{}), make(chan struct{})
	return b.entered, b.open
}

func (b *gatedUnlock) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	if s.Name == "unlock" {
		b.mu.Lock()
		entered, open := b.entered, b.open
		b.entered = nil
		b.mu.Unlock()
		if entered != nil {
			close(entered)
			<-open
		}
	}
	return b.Backend.Eval(ctx, s, keys, args)
}

// TestUnlockCancelledInFlight_StillReleases: an Unlock whose context is
// cancelled while its request is on the way lets the request finish, so
// the lock is released on the server instead of staying held (its outcome
// unknown) until its lease runs out; a context whose deadline comes sooner
// than the retry window still ends the request at that deadline.
func TestUnlockCancelledInFlight_StillReleases(t *testing.T) {
	var gate *gatedUnlock
	_, c := wrappedClient(t, func(b backend.Backend) backend.Backend { gate = &gatedUnlock{Backend: b}; return gate })
	m := newTestMutex(t, c, "cancelled-unlock")
	bg, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	h, err := m.Lock(bg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	entered, open := gate.arm()
	go func() { done <- m.Unlock(ctx) }()
	<-entered
	cancel()
	close(open)
	if err := <-done; err != nil {
		t.Errorf("Unlock cancelled while its request was on the way = %v, want nil: the request finished and released", err)
	}
	if st, err := m.Inspect(bg, 0); err != nil || st.Locked() {
		t.Errorf("after the cancelled Unlock the lock is held on the server (%+v, %v), want it released", st, err)
	}
	if h.Err() == nil {
		t.Error("the hold did not end")
	}

	// A deadline sooner than the window ends the request at it.
	if _, err := m.Lock(bg); err != nil {
		t.Fatal(err)
	}
	entered, open = gate.arm()
	soon, cancelSoon := context.WithTimeout(bg, time.Millisecond)
	defer cancelSoon()
	go func() { done <- m.Unlock(soon) }()
	<-entered
	<-soon.Done()
	close(open)
	if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Unlock whose 1 ms deadline passed while its request waited = %v, want context.DeadlineExceeded", err)
	}
}

// slowAfter is a backend whose requests, once slow is set, take delay (or
// until their context ends, as a client that honours deadlines does): a
// partition that starts while a hold is held.
type slowAfter struct {
	backend.Backend
	delay time.Duration
	slow  *atomic.Bool
}

func (b slowAfter) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	if !b.slow.Load() {
		return b.Backend.Eval(ctx, s, keys, args)
	}
	t := time.NewTimer(b.delay)
	defer t.Stop()
	select {
	case <-t.C: // the request's own timeout, not synchronisation
		return backend.Reply{}, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	case <-ctx.Done():
		return backend.Reply{}, ctx.Err()
	}
}

// TestExtend_ReturnsByItsDeadline: an Extend whose hold's lease runs out
// while its request is unanswered gives back what the server may have
// extended - and returns by its deadline (plus the 250 ms grace), not
// when that give-back gives up (2 s). (The soak, seed 205471856186634: an
// Extend with a 1 s context returned after 2.07 s, during a partition.)
func TestExtend_ReturnsByItsDeadline(t *testing.T) {
	var slow atomic.Bool
	_, c := wrappedClient(t, func(b backend.Backend) backend.Backend {
		return slowAfter{Backend: b, delay: 3 * time.Second, slow: &slow}
	})
	m, err := c.NewMutex("extend-deadline")
	if err != nil {
		t.Fatal(err)
	}
	h, err := m.LockWithLease(context.Background(), 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	slow.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = m.Extend(ctx, h, 10*time.Second)
	took := time.Since(start)
	if err == nil {
		t.Fatal("Extend with no reply succeeded")
	}
	if took > 500*time.Millisecond+cleanupGrace+200*time.Millisecond {
		t.Errorf("Extend returned after %v, its deadline 500ms (the give-back gives up after 2 s): %v", took, err)
	}
	t.Logf("figures: Extend returned after %v: %v", took, err)
}

// TestAttemptPastItsDeadline_GateFree_NotUnavailable: an attempt whose
// context has ended by the time it reaches a free owner's gate fails with
// the plain context error - not ErrUnavailable, which says another call
// of the owner held the gate waiting for the server (select picks either
// of two ready cases; found by the soak, seed 34337827674395: a Lock said
// "another call of this owner is still waiting" with no other call).
func TestAttemptPastItsDeadline_GateFree_NotUnavailable(t *testing.T) {
	_, c := wrappedClient(t, func(b backend.Backend) backend.Backend { return b })
	m, err := c.NewMutex("attempt-past-deadline")
	if err != nil {
		t.Fatal(err)
	}
	o := c.owners.acquire(m)
	defer c.owners.release(o)
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	spec := acquireSpec{lease: time.Second}
	for i := range 200 {
		w := &waiter{m: m, o: o, lease: spec.lease, retry: attemptRetrier(c.life.closing, spec),
			call: wire.Acquire{Owner: m.field, Lease: spec.lease, WaiterTimeout: c.cfg.waiterTimeout, Wake: m.wake()}}
		_, _, err := w.attempt(ctx)
		if errors.Is(err, ErrUnavailable) {
			t.Fatalf("attempt %d past its deadline, the gate free: %v, want the context's error alone", i, err)
		}
	}
}

// lateReentry is a backend that holds back one acquire request, as a
// paused server's socket does: the request fails to its sender with a
// timeout once released, and runs on the server only when the test says
// so - after the requests the lock sent next, which the client's other
// connections delivered first.
type lateReentry struct {
	backend.Backend
	armed   atomic.Bool
	release chan struct{} // closed: the held request fails to its sender
	run     chan func()   // the held request, for the test to run
	leaves  atomic.Int64  // leave.lua requests answered
}

func (b *lateReentry) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	if s.Name == "acquire" && b.armed.CompareAndSwap(true, false) {
		b.run <- func() { _, _ = b.Backend.Eval(context.Background(), s, keys, args) }
		<-b.release
		return backend.Reply{}, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	}
	rep, err := b.Backend.Eval(ctx, s, keys, args)
	if s.Name == "leave" {
		b.leaves.Add(1)
	}
	return rep, err
}

// reentryHeldBack takes a hold of name and re-enters it with a request a
// lateReentry backend holds back, so that the re-entry's caller gives up
// and the lock undoes it (leave.lua) while the request has not run; late
// runs that request on the server.
func reentryHeldBack(t *testing.T, ctx context.Context, name string) (m *Mutex, h *Hold, late func()) {
	t.Helper()
	b := &lateReentry{release: make(chan struct{}), run: make(chan func(), 1)}
	_, c := wrappedClient(t, func(inner backend.Backend) backend.Backend { b.Backend = inner; return b })
	m = newTestMutex(t, c, name)
	h, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.armed.Store(true)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = m.Lock(short)
	cancel()
	if err == nil {
		t.Fatal("the re-entry whose request was held back succeeded")
	}
	close(b.release) // its request times out; the lock undoes it (leave.lua)
	redistest.Eventually(t, 5*time.Second, "the undo's leave", func() bool { return b.leaves.Load() > 0 })
	return m, h, <-b.run
}

// TestUnlock_GivesBackALateReentry: a re-entry whose caller gave up with
// its request unanswered, and which the server ran only after the undo
// that looked for it (a client's connections do not keep one owner's
// requests in order: rueidis spreads them over two on two cores), left a
// count nobody knew of. The owner's last Unlock then found the count above
// its own, kept the hold alive under it and said nothing: the lock stayed
// held, renewed for ever, and the owner's next Lock returned the hold it
// had released. The last Unlock gives such counts back and ends the hold.
// (The soak, seeds 13790021069101 and 106229442894957: a server stopped
// for 6 s while an owner re-entered, then unlocked.)
func TestUnlock_GivesBackALateReentry(t *testing.T) {
	bg, stop := context.WithTimeout(context.Background(), 20*time.Second)
	defer stop()
	m, h, late := reentryHeldBack(t, bg, "late-reentry")
	late() // the server runs the re-entry only now
	if err := m.Unlock(bg); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if h.Err() == nil {
		t.Error("the hold is still live after its owner's only count was released")
	}
	if st, err := m.Inspect(bg, 0); err != nil || st.Locked() {
		t.Errorf("after the last Unlock the lock is held on the server: %+v, %v", st.Holders, err)
	}
	h2, err := m.Lock(bg)
	if err != nil {
		t.Fatal(err)
	}
	if h2 == h || h2.Token() == h.Token() {
		t.Errorf("the next Lock returned the released hold (same %v, token %d)", h2 == h, h2.Token())
	}
}

// TestLateReentryAfterTheLastUnlock_TakesNothing: a re-entry whose caller
// gave up with its request unanswered, run by the server only after the
// owner's last Unlock had released the hold, found no lock and was granted
// a new hold nobody tracked: the lock stayed held for that lease, a
// stranger to its owner (RELIABILITY.md's open finding, reasoned from
// TestUnlock_GivesBackALateReentry). A request naming a hold the server
// no longer has is refused now: the late request takes nothing.
func TestLateReentryAfterTheLastUnlock_TakesNothing(t *testing.T) {
	bg, stop := context.WithTimeout(context.Background(), 20*time.Second)
	defer stop()
	m, h, late := reentryHeldBack(t, bg, "late-reentry-after-unlock")
	if err := m.Unlock(bg); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if !errors.Is(h.Err(), ErrReleased) {
		t.Errorf("the hold after its last Unlock: %v, want ErrReleased", h.Err())
	}
	late() // the server runs the re-entry only now, after the Unlock
	if st, err := m.Inspect(bg, 0); err != nil || st.Locked() {
		t.Errorf("a late re-entry took the lock its owner had released: %+v, %v", st.Holders, err)
	}
}

// goneReplies counts acquire replies saying the hold the request named is
// gone from the server.
type goneReplies struct {
	backend.Backend
	gone atomic.Int64
}

func (b *goneReplies) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	rep, err := b.Backend.Eval(ctx, s, keys, args)
	if s.Name == "acquire" && err == nil {
		if v, _ := rep.AsInts(); len(v) == 1 && v[0] == 2 {
			b.gone.Add(1)
		}
	}
	return rep, err
}

// TestReentryOfAHoldGoneFromTheServer: a re-entry naming a hold the server
// no longer has - its lock hash deleted by hand, which a client watching
// no keys hears of only at the watchdog's next check - is refused; the
// client ends that hold as lost at once and acquires afresh, a new hold
// with a new token and count 1.
func TestReentryOfAHoldGoneFromTheServer(t *testing.T) {
	b := &goneReplies{}
	srv, c := wrappedClient(t, func(inner backend.Backend) backend.Backend { b.Backend = inner; return b })
	m := newTestMutex(t, c, "reentry-of-a-gone-hold")
	bg, stop := context.WithTimeout(context.Background(), 20*time.Second)
	defer stop()
	h, err := m.Lock(bg)
	if err != nil {
		t.Fatal(err)
	}
	srv.Do(t, "DEL", "reentry-of-a-gone-hold") // the lock hash
	h2, err := m.Lock(bg)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(h.Err(), ErrLockLost) {
		t.Errorf("the hold gone from the server: %v, want ErrLockLost", h.Err())
	}
	if h2 == h || h2.Token() <= h.Token() {
		t.Errorf("after the refusal: same hold %v, token %d (was %d)", h2 == h, h2.Token(), h.Token())
	}
	if err := m.Unlock(bg); err != nil || !errors.Is(h2.Err(), ErrReleased) {
		t.Errorf("one Unlock of the new hold (count 1): %v, hold %v", err, h2.Err())
	}
	if n := b.gone.Load(); n != 1 {
		t.Errorf("%d refusals of the re-entry, want 1", n)
	}
}
