package conformance

// The sequential cases: they run one at a time, after the parallel ones,
// because they watch or disturb the whole server or process (MONITOR,
// SCRIPT FLUSH, pausing or restarting the server or a replica, counting
// goroutines). The MONITOR cases are in monitor_cases.go.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
)

func sequentialCases() []sequentialCase {
	return []sequentialCase{
		{name: "NoGoroutinesLeftAfterClose", run: testNoLeaks},
		{name: "B1_UncontendedTwoCommandsAtServer", run: testTwoCommandsAtServer, needsServer: true},
		{name: "B10_ScriptFlushIsInvisible", run: testScriptFlush, needsServer: true},
		{name: "X8_ScriptWorkDoesNotGrowWithTheQueue", run: testX8ConstantWork, needsServer: true},
		{name: "X9_UnreplicatedAcquireIsRolledBack", run: testX9Replicas, needsReplica: true},
		{name: "X7_RenewalFailingPastTheLeaseIsLoss", run: testX7RenewalFailing, needsServer: true},
		{name: "X3_ServerRestartDoesNotStrandWaiters", run: testServerRestart, needsServer: true},
		{name: "X18_ServerThatMayEvictIsRefused", run: testX18EvictingServer, needsServer: true},
	}
}

// testNoLeaks runs contended locking, closes everything, and checks that
// the goroutine count returns to where it was: every goroutine the lock and
// the backend start has an owner that stops it.
func testNoLeaks(t *testing.T, s *suite) {
	before := runtime.NumGoroutine()
	t.Run("work", func(t *testing.T) {
		name := lockName(t)
		a, b := s.newProc(t, lock.WithLease(300*time.Millisecond)), s.newProc(t)
		ma, mb := a.mutex(t, name), b.mutex(t, name)
		h := mustLock(t, ma)
		hctx, cancel := h.Context(context.Background())
		ch := goAcquire(func() (*lock.Hold, error) { return mb.Lock(ctxFor(t, eventually)) })
		waitQueued(t, ma, 1)
		mustUnlock(t, ma)
		<-hctx.Done()
		cancel()
		if r := await(t, ch, eventually, "waiter"); r.err != nil {
			t.Fatal(r.err)
		}
		mustUnlock(t, mb)
	}) // cleanups close the clients and backends here
	redistest.Eventually(t, eventually, fmt.Sprintf("goroutines to return to %d", before), func() bool {
		return runtime.NumGoroutine() <= before
	})
}

func testScriptFlush(t *testing.T, s *suite) {
	m := s.newProc(t).mutex(t, lockName(t))
	mustLock(t, m)
	s.cfg.server.Do(t, "SCRIPT", "FLUSH")
	mustUnlock(t, m)
	mustLock(t, m)
	mustUnlock(t, m)
}

// testX9Replicas: with WithReplicaAcks, an acquire the replica
// acknowledged succeeds; with the replica stopped, the acquire - a
// re-entry, or a hand-over grant - is rolled back and reported (X9),
// leaving nothing behind.
func testX9Replicas(t *testing.T, s *suite) {
	name := lockName(t)
	const wait = 300 * time.Millisecond
	p := s.newProc(t, lock.WithReplicaAcks(1, wait))
	m := p.mutex(t, name)
	observer := s.newProc(t).mutex(t, name)
	h, err := m.Lock(ctxFor(t, eventually))
	if errors.Is(err, backend.ErrNotSupported) {
		t.Skipf("the backend cannot WAIT after a script here: %v", err)
	}
	if err != nil {
		t.Fatalf("Lock with a live replica: %v", err)
	}
	if h.Token() <= 0 {
		t.Errorf("token %d", h.Token())
	}
	mustUnlock(t, m)

	s.cfg.replica.Pause(t)
	paused := true
	defer func() {
		if paused {
			s.cfg.replica.Resume(t)
		}
	}()
	start := time.Now()
	_, err = m.Lock(ctxFor(t, eventually))
	if !errors.Is(err, lock.ErrNotReplicated) {
		t.Fatalf("Lock with the replica stopped: %v, want ErrNotReplicated", err)
	}
	if d := time.Since(start); d < wait || d > wait+slack {
		t.Errorf("gave up after %v, want the replica timeout %v", d, wait)
	}
	if raw := readRaw(t, p.b, name); raw.hashExists || len(raw.queue) != 0 || raw.timeouts != 0 {
		t.Errorf("not rolled back: %+v", raw)
	}
	// A re-entry that is not replicated gives back only itself.
	s.cfg.replica.Resume(t)
	paused = false
	if _, err := m.Lock(ctxFor(t, eventually)); err != nil {
		t.Fatalf("Lock after the replica came back: %v", err)
	}
	s.cfg.replica.Pause(t)
	paused = true
	if _, err := m.Lock(ctxFor(t, eventually)); !errors.Is(err, lock.ErrNotReplicated) {
		t.Fatalf("re-entry with the replica stopped: %v, want ErrNotReplicated", err)
	}
	s.cfg.replica.Resume(t)
	paused = false
	if n, err := observer.HoldCount(ctxFor(t, eventually)); err != nil || n != 0 {
		t.Errorf("observer hold count %d, %v", n, err)
	}
	if held, _ := observer.IsHeldBy(ctxFor(t, eventually), m.Owner()); !held {
		t.Error("the first hold was rolled back with the re-entry")
	}
	if n, _ := m.HoldCount(ctxFor(t, eventually)); n != 1 {
		t.Errorf("hold count %d after a rolled-back re-entry, want 1", n)
	}
	mustUnlock(t, m)

	// A hand-over grant is taken up only by an acquire sent with WAIT, not
	// from the wake-up message: with the replica stopped, it is rolled
	// back and reported too.
	mustLock(t, observer)
	ch := goAcquire(func() (*lock.Hold, error) { return m.Lock(ctxFor(t, eventually)) })
	waitQueued(t, observer, 1)
	settled(t, p)
	s.cfg.replica.Pause(t)
	paused = true
	mustUnlock(t, observer)
	if r := await(t, ch, eventually, "the waiter after the hand-over"); !errors.Is(r.err, lock.ErrNotReplicated) {
		t.Errorf("hand-over with the replica stopped: (token %d, %v), want ErrNotReplicated: the grant was taken up without WAIT", r.h.Token(), r.err)
	}
	s.cfg.replica.Resume(t)
	paused = false
	if locked, err := observer.IsLocked(ctxFor(t, eventually)); err != nil || locked {
		t.Errorf("after the hand-over was rolled back: locked %t, %v", locked, err)
	}
}

// testX7RenewalFailing: with the server unreachable (paused), the
// watchdog's renewals fail; once they have failed for longer than the
// lease, the holder is told its lock is lost (X7), without waiting for
// the server to come back.
func testX7RenewalFailing(t *testing.T, s *suite) {
	const lease = 600 * time.Millisecond
	m := s.newProc(t, lock.WithLease(lease)).mutex(t, lockName(t))
	h := mustLock(t, m)
	s.cfg.server.Pause(t)
	paused := time.Now()
	resumed := false
	defer func() {
		if !resumed {
			s.cfg.server.Resume(t)
		}
	}()
	select {
	case <-h.Done():
	case <-time.After(eventually):
		t.Fatal("renewals failing past the lease were not reported")
	}
	if d := time.Since(paused); d < lease/3 {
		t.Errorf("loss reported %v after the pause, before renewals could fail", d)
	}
	s.cfg.server.Resume(t)
	resumed = true
	if !errors.Is(h.Err(), lock.ErrLockLost) {
		t.Errorf("Err = %v, want ErrLockLost", h.Err())
	}
}

func testServerRestart(t *testing.T, s *suite) {
	name := lockName(t)
	hp := s.newProc(t)
	wp := s.newProc(t, lock.WithWaiterTimeout(60*time.Second))
	holder, waiter := hp.mutex(t, name), wp.mutex(t, name)
	h := mustLock(t, holder)
	ch := goAcquire(func() (*lock.Hold, error) { return waiter.Lock(ctxFor(t, 60*time.Second)) })
	waitQueued(t, holder, 1)
	// The server goes away and comes back with an empty dataset and script
	// cache. The waiting call rides through (X14): its client reloads the
	// scripts on NOSCRIPT and re-dials the subscription connection. The
	// holder's lock is gone with the data: it learns so when its client
	// reconnects, not at its next renewal (X12).
	s.cfg.server.Stop(t)
	s.cfg.server.Restart(t)
	restarted := time.Now()
	r := await(t, ch, 60*time.Second, "waiter across the restart")
	if r.err != nil {
		t.Fatalf("waiter across a restart: %v, want the lock (X14)", r.err)
	}
	// Its next renewal is up to 10 s away; the reconnect tells it sooner.
	select {
	case <-h.Done():
	case <-time.After(slack):
		t.Fatalf("holder not told of its lock lost in the restart within %v of the restart", slack)
	}
	t.Logf("restart: waiter acquired %v, holder told %v after the server was back", r.at.Sub(restarted), time.Since(restarted))
	if !errors.Is(h.Err(), lock.ErrLockLost) {
		t.Errorf("holder's Err = %v, want ErrLockLost", h.Err())
	}
	// Wake-ups reach a waiter again after the restart.
	mustUnlock(t, waiter)
	h2 := mustLock(t, holder)
	base := wp.b.count("acquire" + doneSuffix)
	ch = goAcquire(func() (*lock.Hold, error) { return waiter.Lock(ctxFor(t, 60*time.Second)) })
	waitQueued(t, holder, 1)
	settledAfter(t, wp, base)
	released := time.Now()
	mustUnlock(t, holder)
	if h2.Err() == nil {
		t.Error("hold still live after its Unlock")
	}
	r = await(t, ch, 60*time.Second, "waiter after the restart")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if d := r.at.Sub(released); d > slack {
		t.Errorf("hand-over after the restart took %v: the wake-up did not arrive", d)
	}
}

// testX18EvictingServer: a server with a memory limit and a policy that
// may evict lock keys (every lock key has a TTL, so volatile-* too) is
// refused by NewClient, with an error naming the policy, unless the user
// accepts the risk (WithEvictionRisk); noeviction is accepted. A client
// that started on a safe server reads the policy again after its
// subscription connection reconnects, and refuses acquires while the
// server may evict.
func testX18EvictingServer(t *testing.T, s *suite) {
	srv := s.cfg.server
	defer func() {
		srv.Do(t, "CONFIG", "SET", "maxmemory-policy", "noeviction")
		srv.Do(t, "CONFIG", "SET", "maxmemory", "0")
	}()
	srv.Do(t, "CONFIG", "SET", "maxmemory", "1gb") // a limit, no pressure
	for _, policy := range []string{"allkeys-lru", "volatile-ttl"} {
		srv.Do(t, "CONFIG", "SET", "maxmemory-policy", policy)
		_, err := lock.NewClient(s.newBackend(t))
		if !errors.Is(err, lock.ErrEvictionPolicy) || !strings.Contains(err.Error(), policy) || !strings.Contains(err.Error(), "WithEvictionRisk") {
			t.Errorf("NewClient on %s: %v, want ErrEvictionPolicy naming the policy and the option", policy, err)
		}
		// The server is read for its memory policy, and on a cluster for
		// its version (PublishAuto, X17): neither with these two options.
		p := s.newProc(t, lock.WithEvictionRisk(), lock.WithPublish(lock.PublishPlain))
		m := p.mutex(t, lockName(t))
		mustLock(t, m)
		mustUnlock(t, m)
		if n := p.b.count("server_info"); n != 0 {
			t.Errorf("WithEvictionRisk: the server was read %d times, want never", n)
		}
	}
	srv.Do(t, "CONFIG", "SET", "maxmemory-policy", "noeviction")
	p := s.newProc(t)
	m := p.mutex(t, lockName(t))
	mustLock(t, m) // the client now listens on its channel: it hears of reconnects
	mustUnlock(t, m)
	redistest.Eventually(t, eventually, "the client to listen on its channel", func() bool {
		return p.b.count(clientSubscribe+doneSuffix) > 0
	})
	srv.Do(t, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
	srv.Do(t, "CLIENT", "KILL", "TYPE", "pubsub")
	redistest.Eventually(t, eventually, "acquires to be refused after the reconnect", func() bool {
		_, err := m.TryLock(ctxFor(t, eventually), 0)
		if err == nil {
			_ = m.Unlock(ctxFor(t, eventually))
		}
		return errors.Is(err, lock.ErrEvictionPolicy)
	})
	srv.Do(t, "CONFIG", "SET", "maxmemory-policy", "noeviction")
	srv.Do(t, "CLIENT", "KILL", "TYPE", "pubsub")
	redistest.Eventually(t, eventually, "acquires to work again after the next reconnect", func() bool {
		_, err := m.TryLock(ctxFor(t, eventually), 0)
		if err == nil {
			mustUnlock(t, m)
		}
		return err == nil
	})
}
