package soak

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
	"github.com/redis/go-redis/v9"
)

// TestSoakRepro_JavaGrantLostReplyReentered replays, on a real server, what
// the simulation's seed 198211716742332 shows on sim:s0 from 435.3 s to
// 468.6 s: a Redisson thread's lock() is granted by its script 2 and the
// reply is lost (its connection reset: the call fails, "EOF"); the
// thread's later lock()/tryLock() calls re-enter that hold (Redisson's
// script re-enters on HEXISTS, whoever is queued) and its unlocks take
// the count down to 1, never 0, so the hold lives on. A fairlock
// TryLock(0) between two of them is refused - rightly: the hash holds the
// thread's field - and a fairlock waiter queued first in line waits while
// the thread "acquires" again and again, until a forceUnlock removes the
// hold. The scripts behave as they must; the soak's checker, which gave
// the failed acquire a linger and not the re-entries, called the refusal
// a violation (TestCheckBusy has that case).
func TestSoakRepro_JavaGrantLostReplyReentered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const name = "soakrepro:reenter"
	queueKey := "redisson_lock_queue:{" + name + "}"

	srv := redistest.Start(t)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer raw.Close()

	gb, err := Adapters[0].Dial(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	gc, err := lock.NewClient(gb, lock.WithLease(15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gc.Close() })
	m, err := gc.NewMutex(name)
	if err != nil {
		t.Fatal(err)
	}

	// The Java client behind a proxy, to lose a reply.
	jp, jl := javaBehindProxy(t, srv.Addr(), name)
	count := func() string {
		v, err := raw.HGet(ctx, name, jl.Field).Result()
		if errors.Is(err, redis.Nil) {
			return "none"
		}
		if err != nil {
			t.Fatalf("HGET: %v", err)
		}
		if n, _ := raw.HLen(ctx, name).Result(); n != 1 {
			t.Fatalf("the hash has %d fields, want only the Java thread's", n)
		}
		return v
	}

	// A lock/unlock pair first, so that the server has the scripts (an
	// EVALSHA answered NOSCRIPT is sent again as EVAL).
	if err := jl.LockWithLease(ctx, javaLease); err != nil {
		t.Fatalf("Java lock(): %v", err)
	}
	if err := jl.Unlock(ctx); err != nil {
		t.Fatalf("Java unlock(): %v", err)
	}
	if c := count(); c != "none" {
		t.Fatalf("after the first pair: count %s, want none", c)
	}

	// The lost reply: the request and its reply each wait a second in the
	// proxy; the server runs the request and grants, and the call gives
	// up while the reply is still in the proxy (its outcome unknown, as a
	// call whose connection reset). It gives up only once the server has
	// granted: a call given up sooner may never be sent at all (the
	// client sends no command whose context has ended), as CI showed on
	// 8cc94d7 - the grant never came.
	jp.SetLatency(time.Second)
	lctx, lcancel := context.WithCancel(ctx)
	locked := make(chan error, 1)
	go func() { locked <- jl.LockWithLease(lctx, javaLease) }()
	waitFor(t, "the Java thread's script 2 to take the free lock", func() bool {
		v, err := raw.HGet(ctx, name, jl.Field).Result()
		return err == nil && v == "1"
	})
	lcancel()
	select {
	case err = <-locked:
	case <-ctx.Done():
		t.Fatal("the Java lock() did not return once given up")
	}
	if err == nil {
		t.Fatal("the Java lock() given up before its reply came returned nil")
	}
	jp.SetLatency(0)
	t.Logf("the Java lock() failed: %v; the server granted it: count %s", err, count())

	// The thread's next lock() re-enters, and its unlock leaves the count
	// where the lost grant put it.
	if err := jl.LockWithLease(ctx, javaLease); err != nil {
		t.Fatalf("Java lock(): %v", err)
	}
	if c := count(); c != "2" {
		t.Fatalf("after the next lock(): count %s, want 2 (a re-entry)", c)
	}
	if err := jl.Unlock(ctx); err != nil {
		t.Fatalf("Java unlock(): %v", err)
	}
	if c := count(); c != "1" {
		t.Fatalf("after its unlock: count %s, want 1 (the lost grant's)", c)
	}

	// The seed's violation: TryLock(0) between the thread's unlock and its
	// next tryLock is refused, the hash holding the thread's field.
	if h, err := m.TryLock(ctx, 0); !errors.Is(err, lock.ErrNotAcquired) {
		if h != nil {
			_ = m.Unlock(ctx)
		}
		t.Fatalf("TryLock(0) with the Java thread's count at 1: %v, want ErrNotAcquired", err)
	}

	// A fairlock waiter first in line, and the thread acquires again, and
	// again: each a re-entry.
	type result struct {
		h   *lock.Hold
		err error
	}
	waited := make(chan result, 1)
	go func() {
		h, err := m.Lock(ctx)
		waited <- result{h, err}
	}()
	waitFor(t, "the fairlock waiter first in line", func() bool {
		q, _ := raw.LRange(ctx, queueKey, 0, -1).Result()
		return len(q) == 1 && q[0] == m.Owner()
	})
	for i := 0; i < 3; i++ {
		held, err := jl.TryLock(ctx, time.Second, javaLease)
		if err != nil || !held {
			t.Fatalf("Java tryLock %d with the fairlock waiter first in line: %v, %v; want a re-entry", i, held, err)
		}
		if err := jl.Unlock(ctx); err != nil {
			t.Fatalf("Java unlock(): %v", err)
		}
	}
	if c := count(); c != "1" {
		t.Fatalf("after the re-entries: count %s, want 1", c)
	}
	select {
	case r := <-waited:
		t.Fatalf("the fairlock waiter returned (%v, %v) while the Java thread's hold lived", r.h, r.err)
	default:
	}

	// The thread's forceUnlock (468.6 s in the seed) ends the hold: the
	// waiter, first in line, gets the lock.
	if released, err := jl.ForceUnlock(ctx); err != nil || !released {
		t.Fatalf("Java forceUnlock: %v, %v; want the hold removed", released, err)
	}
	select {
	case r := <-waited:
		if r.err != nil {
			t.Fatalf("the fairlock waiter after the forceUnlock: %v", r.err)
		}
		if err := m.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the fairlock waiter did not get the lock after the forceUnlock")
	}
}
