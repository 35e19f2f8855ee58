package conformance

// X8 cases of ruleCases: a waiter that gives up further back than the
// tail leaves a dead entry in the list instead of a scan of it.

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
)

// queuedOwners lists the owners Inspect shows queued (up to 16).
func queuedOwners(t *testing.T, m *lock.Mutex) ([]string, int) {
	t.Helper()
	st, err := m.Inspect(ctxFor(t, eventually), 16)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	owners := make([]string, len(st.Queue))
	for i, w := range st.Queue {
		owners[i] = w.Owner
	}
	return owners, st.QueueLength
}

// queueOf starts a Lock of each mutex in turn, each queued before the
// next starts, behind holder; it returns their results and cancel funcs.
func queueOf(t *testing.T, holder *lock.Mutex, ms ...*lock.Mutex) ([]<-chan result, []context.CancelFunc) {
	t.Helper()
	chans := make([]<-chan result, len(ms))
	cancels := make([]context.CancelFunc, len(ms))
	for i, m := range ms {
		ctx, cancel := context.WithTimeout(context.Background(), eventually)
		t.Cleanup(cancel)
		chans[i], cancels[i] = goAcquire(func() (*lock.Hold, error) { return m.Lock(ctx) }), cancel
		waitQueued(t, holder, i+1)
	}
	return chans, cancels
}

// giveUp cancels a waiter and checks that its Lock ended as cancelled.
func giveUp(t *testing.T, cancel context.CancelFunc, ch <-chan result, what string) {
	t.Helper()
	cancel()
	if r := await(t, ch, eventually, what); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("%s: Lock = %v, want context.Canceled", what, r.err)
	}
}

// testX8LeaveFromTheMiddle: a waiter giving up with others behind it is not
// searched for in the list: its entry stays, dead, and Inspect no longer
// shows it; the next hand-over drops it and grants the waiter behind it by
// message (the waiter timeout is a minute: no heartbeat can stand in); a
// later leave from the tail drops the dead run there.
func testX8LeaveFromTheMiddle(t *testing.T, s *suite) {
	opts := []lock.Option{lock.WithWaiterTimeout(time.Minute)}
	t.Run("dropped_at_the_head", func(t *testing.T) {
		name := lockName(t)
		p := s.newProc(t, opts...)
		holder := p.mutex(t, name)
		mustLock(t, holder)
		a, b, c := s.newProc(t, opts...).mutex(t, name), s.newProc(t, opts...).mutex(t, name), s.newProc(t, opts...).mutex(t, name)
		chans, cancels := queueOf(t, holder, a, b, c)
		giveUp(t, cancels[1], chans[1], "b")
		raw := readRaw(t, p.b, name)
		if !slices.Contains(raw.queue, b.Owner().String()) || len(raw.queue) != 3 {
			t.Errorf("raw queue after b left from the middle: %v, want b's dead entry still in it (no scan of the list)", raw.queue)
		}
		owners, n := queuedOwners(t, holder)
		if want := []string{a.Owner().String(), c.Owner().String()}; !slices.Equal(owners, want) || n != 2 {
			t.Errorf("Inspect after b left: queue %v (length %d), want %v (length 2)", owners, n, want)
		}
		mustUnlock(t, holder)
		ra := await(t, chans[0], eventually, "a")
		if ra.err != nil {
			t.Fatal(ra.err)
		}
		released := time.Now()
		if err := a.Unlock(ctxFor(t, eventually)); err != nil {
			t.Fatal(err)
		}
		rc := await(t, chans[2], eventually, "c, behind b's dead entry")
		if rc.err != nil {
			t.Fatal(rc.err)
		}
		t.Logf("c acquired %v after a's unlock, past b's dead entry", rc.at.Sub(released).Round(time.Microsecond))
		if raw := readRaw(t, p.b, name); len(raw.queue) != 0 {
			t.Errorf("raw queue once c holds: %v, want empty (b's dead entry dropped at the head)", raw.queue)
		}
		mustUnlock(t, c)
	})
	t.Run("dropped_at_the_tail", func(t *testing.T) {
		name := lockName(t)
		p := s.newProc(t, opts...)
		holder := p.mutex(t, name)
		mustLock(t, holder)
		ms := []*lock.Mutex{s.newProc(t, opts...).mutex(t, name), s.newProc(t, opts...).mutex(t, name), s.newProc(t, opts...).mutex(t, name), s.newProc(t, opts...).mutex(t, name)}
		chans, cancels := queueOf(t, holder, ms...)
		giveUp(t, cancels[1], chans[1], "second")
		giveUp(t, cancels[2], chans[2], "third")
		if raw := readRaw(t, p.b, name); len(raw.queue) != 4 {
			t.Errorf("raw queue after two left from the middle: %v, want their 2 dead entries still in it", raw.queue)
		}
		giveUp(t, cancels[3], chans[3], "last")
		raw := readRaw(t, p.b, name)
		if want := []string{ms[0].Owner().String()}; !slices.Equal(raw.queue, want) || raw.timeouts != 2 {
			t.Errorf("raw queue after the last left: %v with %d deadlines, want %v with 2 (the dead run at the tail dropped with it)", raw.queue, raw.timeouts, want)
		}
		mustUnlock(t, holder)
		if r := await(t, chans[0], eventually, "first"); r.err != nil {
			t.Fatal(r.err)
		}
		mustUnlock(t, ms[0])
	})
	t.Run("queues_again", func(t *testing.T) {
		name := lockName(t)
		p := s.newProc(t, opts...)
		holder := p.mutex(t, name)
		mustLock(t, holder)
		a, b, c := s.newProc(t, opts...).mutex(t, name), s.newProc(t, opts...).mutex(t, name), s.newProc(t, opts...).mutex(t, name)
		chans, cancels := queueOf(t, holder, a, b, c)
		giveUp(t, cancels[1], chans[1], "b")
		again := goAcquire(func() (*lock.Hold, error) { return b.Lock(ctxFor(t, eventually)) })
		waitQueued(t, holder, 3)
		owners, _ := queuedOwners(t, holder)
		if want := []string{a.Owner().String(), c.Owner().String(), b.Owner().String()}; !slices.Equal(owners, want) {
			t.Errorf("Inspect after b queued again: %v, want %v (b at the tail, once)", owners, want)
		}
		if raw := readRaw(t, p.b, name); len(raw.queue) != 3 {
			t.Errorf("raw queue after b queued again: %v, want 3 entries (its dead one taken out)", raw.queue)
		}
		mustUnlock(t, holder)
		for i, ch := range []<-chan result{chans[0], chans[2], again} {
			r := await(t, ch, eventually, "waiter")
			if r.err != nil {
				t.Fatal(r.err)
			}
			mustUnlock(t, []*lock.Mutex{a, c, b}[i])
		}
	})
}

// testX11RedissonDropsLeftEntry: Redisson's own scripts treat the entry a
// fairlock waiter left behind as a dead waiter. A Redisson holder, then a
// fairlock head that crashes, the entry a fairlock waiter left, a Redisson
// waiter: after the Redisson release the Redisson waiter acquires through
// Redisson's purge alone (no fairlock script runs), within the bound
// testX11DeadGoHeadAfterJava states without the left entry.
func testX11RedissonDropsLeftEntry(t *testing.T, s *suite) {
	const (
		waiterTimeout = time.Second
		javaLease     = 2 * time.Second
	)
	name := lockName(t)
	rc := s.newRedisson(t)
	jh := rc.lock(name, 1)
	if err := jh.lockWithLease(ctxFor(t, eventually), javaLease); err != nil {
		t.Fatal(err)
	}
	spy := s.newProc(t).mutex(t, name)
	cb := &crashableBackend{Backend: s.newBackend(t)}
	// As in testX11DeadGoHeadAfterJava: a heartbeat in flight at the crash
	// may take the lock, for a lease like the Java holder's.
	dead := mutexOf(t, clientOn(t, cb, lock.WithWaiterTimeout(waiterTimeout), lock.WithLease(javaLease)), name)
	goAcquire(func() (*lock.Hold, error) { return dead.Lock(ctxFor(t, eventually)) })
	waitQueued(t, spy, 1)
	left := s.newProc(t, lock.WithWaiterTimeout(waiterTimeout)).mutex(t, name)
	lctx, lcancel := context.WithCancel(context.Background())
	defer lcancel()
	lch := goAcquire(func() (*lock.Hold, error) { return left.Lock(lctx) })
	waitQueued(t, spy, 2)
	j := rc.lock(name, 2)
	jch := goAcquire(func() (*lock.Hold, error) { return nil, j.lockWithLease(ctxFor(t, eventually), 10*time.Second) })
	waitQueued(t, spy, 3)
	giveUp(t, lcancel, lch, "the fairlock waiter in the middle")
	if raw := readRaw(t, s.newProc(t).b, name); len(raw.queue) != 3 {
		t.Fatalf("raw queue after the middle waiter left: %v, want its dead entry still in it", raw.queue)
	}
	cb.crashed.Store(true)
	released := time.Now()
	if err := jh.unlock(ctxFor(t, eventually)); err != nil {
		t.Fatal(err)
	}
	r := await(t, jch, javaLease+eventually, "Redisson waiter behind a dead fairlock head and a left entry")
	if r.err != nil {
		st, err := spy.Inspect(ctxFor(t, eventually), 10)
		t.Fatalf("Redisson waiter: %v (%v after the release); the lock now: %+v (%v)", r.err, time.Since(released), st, err)
	}
	if delay := r.at.Sub(released); delay > javaLease+waiterTimeout+slack {
		t.Errorf("the Redisson waiter acquired %v after the release, want within its timer (%v) and the waiter timeout (%v)", delay, javaLease, waiterTimeout)
	} else {
		t.Logf("Redisson waiter acquired %v after a Redisson release, past a dead fairlock head and a left entry", delay)
	}
	if err := j.unlock(ctxFor(t, eventually)); err != nil {
		t.Fatal(err)
	}
}
