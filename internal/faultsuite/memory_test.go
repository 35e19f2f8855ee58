package faultsuite

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
)

// dialers returns a backend for each adapter on addr.
func dialers(addr string) []dialer { return dialersFor([]string{addr}, false) }

// TestMemoryFull: a server under noeviction whose memory is full (here:
// maxmemory 1 byte) refuses every write that would grow its data. What
// must hold: Lock on a free lock, a waiter's next attempt, and Unlock
// return ErrOutOfMemory at once, not retried as transient; renewals,
// which only move expiries, keep the holder's lock; the queue stays
// consistent (the queue list and Redisson's deadline zset name the same
// waiters); once memory is freed, locking works again. Per adapter; the
// figures are how long the refused calls took.
func TestMemoryFull(t *testing.T) {
	srv := redistest.Start(t)
	var figures []string
	for _, a := range dialers(srv.Addr()) {
		client := func(opts ...lock.Option) *lock.Client {
			b, err := a.dial()
			if err != nil {
				t.Fatal(err)
			}
			c, err := lock.NewClient(b, opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		name := lockName(t) + ":" + a.name
		const lease = 600 * time.Millisecond // renewed every 200 ms
		holderC, waiterC, otherC := client(lock.WithLease(lease)), client(), client()
		holder, _ := holderC.NewMutex(name)
		waiter, _ := waiterC.NewMutex(name)
		other, _ := otherC.NewMutex(name + ":free")
		h, err := holder.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		waited := make(chan error, 1)
		go func() {
			_, err := waiter.Lock(ctx)
			waited <- err
		}()
		redistest.Eventually(t, 10*time.Second, "the waiter to queue", func() bool {
			st, err := holder.Inspect(ctx, 10)
			return err == nil && len(st.Queue) == 1
		})

		srv.Do(t, "CONFIG", "SET", "maxmemory", "1")
		start := time.Now()
		_, err = other.Lock(ctx)
		lockTook := time.Since(start)
		if !errors.Is(err, lock.ErrOutOfMemory) {
			t.Errorf("%s: Lock of a free lock with memory full: %v, want ErrOutOfMemory", a.name, err)
		}
		// The waiter's next attempt (at its heartbeat, a third of the
		// waiter timeout) meets the full memory too.
		var waiterErr error
		select {
		case waiterErr = <-waited:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the waiter's Lock did not return within 10s of memory filling up", a.name)
		}
		waiterHeld := waiterErr == nil
		// Renewals move expiries only: the hold outlives two more renewals.
		renewals := time.NewTimer(2 * lease)
		select {
		case <-h.Done():
			t.Errorf("%s: the hold ended while memory was full: %v", a.name, h.Err())
		case <-renewals.C:
		}
		start = time.Now()
		unlockErr := holder.Unlock(ctx)
		unlockTook := time.Since(start)
		queue := srv.Do(t, "LRANGE", "redisson_lock_queue:{"+name+"}", "0", "-1")
		timeouts := srv.Do(t, "ZRANGE", "redisson_lock_timeout:{"+name+"}", "0", "-1")
		if fmt.Sprint(queue) != fmt.Sprint(timeouts) {
			t.Errorf("%s: queue %v and deadline zset %v disagree with memory full", a.name, queue, timeouts)
		}

		srv.Do(t, "CONFIG", "SET", "maxmemory", "0")
		h2, err := other.Lock(ctx)
		if err != nil {
			t.Errorf("%s: Lock after memory was freed: %v", a.name, err)
		} else if err := other.Unlock(ctx); err != nil {
			t.Errorf("%s: Unlock after memory was freed: %v", a.name, err)
		}
		_ = h2
		if unlockErr != nil {
			// The unlock was refused: the lock frees itself with its
			// lease, renewal having stopped (X13); the waiter, if it gave
			// up, locks again.
			if !errors.Is(unlockErr, lock.ErrOutOfMemory) {
				t.Errorf("%s: Unlock with memory full: %v, want nil or ErrOutOfMemory", a.name, unlockErr)
			}
		}
		if waiterHeld {
			_ = waiter.Unlock(ctx)
		} else if !errors.Is(waiterErr, lock.ErrOutOfMemory) {
			t.Errorf("%s: the waiter's Lock with memory full: %v, want ErrOutOfMemory", a.name, waiterErr)
		}
		if _, err := waiter.Lock(ctx); err != nil {
			t.Errorf("%s: the waiter's Lock after memory was freed: %v", a.name, err)
		} else {
			_ = waiter.Unlock(ctx)
		}
		figures = append(figures, fmt.Sprintf("%s: Lock refused in %v; waiter's Lock %s; hold kept through 2 renewals: %v; Unlock %s in %v",
			a.name, lockTook.Round(time.Microsecond), outcome(waiterErr), !t.Failed(), outcome(unlockErr), unlockTook.Round(time.Microsecond)))
	}
	report(t, 16, "a server under maxmemory-policy noeviction with its memory full (maxmemory 1 byte) while a holder (600 ms lease) holds a lock and a waiter waits; per adapter a Lock of a free lock, the waiter's next attempt, two renewals, the holder's Unlock; then memory is freed",
		"refused writes return ErrOutOfMemory at once, not retried; renewals keep the hold; the queue and the deadline zset agree; locking works again once memory is freed",
		strings.Join(figures, "; "))
}

// outcome says in a word how a call ended.
func outcome(err error) string {
	switch {
	case err == nil:
		return "succeeded"
	case errors.Is(err, lock.ErrOutOfMemory):
		return "refused (ErrOutOfMemory)"
	default:
		return "failed: " + err.Error()
	}
}
