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

// lineUp locks a new lock by a holder and queues n waiters behind it, each
// queued before the next starts; it returns the holder's proc, the holder,
// the waiters, their results and cancel funcs.
func lineUp(t *testing.T, s *suite, n int, opts ...lock.Option) (*proc, *lock.Mutex, []*lock.Mutex, []<-chan result, []context.CancelFunc) {
	t.Helper()
	name := lockName(t)
	p := s.newProc(t, opts...)
	holder := p.mutex(t, name)
	mustLock(t, holder)
	ms := make([]*lock.Mutex, n)
	cancels := make([]context.CancelFunc, n)
	ctxs := map[*lock.Mutex]context.Context{}
	for i := range ms {
		ms[i] = s.newProc(t, opts...).mutex(t, name)
		ctx, cancel := context.WithTimeout(context.Background(), eventually)
		t.Cleanup(cancel)
		ctxs[ms[i]], cancels[i] = ctx, cancel
	}
	chans := queueInOrder(t, holder, 0, ms, func(m *lock.Mutex) (*lock.Hold, error) { return m.Lock(ctxs[m]) })
	return p, holder, ms, chans, cancels
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
		p, holder, ms, chans, cancels := lineUp(t, s, 3, opts...)
		name, a, b, c := holder.Name(), ms[0], ms[1], ms[2]
		giveUp(t, cancels[1], chans[1], "b")
		raw := readRaw(t, p.b, name)
		if !slices.Contains(raw.queue, b.Owner()) || len(raw.queue) != 3 {
			t.Errorf("raw queue after b left from the middle: %v, want b's dead entry still in it (no scan of the list)", raw.queue)
		}
		owners, n := queueOwners(t, holder), queueLen(t, holder)
		if want := []string{a.Owner(), c.Owner()}; !slices.Equal(owners, want) || n != 2 {
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
		p, holder, ms, chans, cancels := lineUp(t, s, 4, opts...)
		name := holder.Name()
		giveUp(t, cancels[1], chans[1], "second")
		giveUp(t, cancels[2], chans[2], "third")
		if raw := readRaw(t, p.b, name); len(raw.queue) != 4 {
			t.Errorf("raw queue after two left from the middle: %v, want their 2 dead entries still in it", raw.queue)
		}
		giveUp(t, cancels[3], chans[3], "last")
		raw := readRaw(t, p.b, name)
		if want := []string{ms[0].Owner()}; !slices.Equal(raw.queue, want) || raw.timeouts != 2 {
			t.Errorf("raw queue after the last left: %v with %d deadlines, want %v with 2 (the dead run at the tail dropped with it)", raw.queue, raw.timeouts, want)
		}
		mustUnlock(t, holder)
		if r := await(t, chans[0], eventually, "first"); r.err != nil {
			t.Fatal(r.err)
		}
		mustUnlock(t, ms[0])
	})
	t.Run("queues_again", func(t *testing.T) {
		p, holder, ms, chans, cancels := lineUp(t, s, 3, opts...)
		name, a, b, c := holder.Name(), ms[0], ms[1], ms[2]
		giveUp(t, cancels[1], chans[1], "b")
		again := goAcquire(func() (*lock.Hold, error) { return b.Lock(ctxFor(t, eventually)) })
		waitQueued(t, holder, 3)
		owners := queueOwners(t, holder)
		if want := []string{a.Owner(), c.Owner(), b.Owner()}; !slices.Equal(owners, want) {
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
// fairlock waiter left behind as a dead waiter (deadGoHeadAfterJava).
func testX11RedissonDropsLeftEntry(t *testing.T, s *suite) { deadGoHeadAfterJava(t, s, true) }
