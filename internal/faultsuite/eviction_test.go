package faultsuite

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
)

// holdAge is how old an aged hold is when someone else ends it: past
// watchArm, after which its client watches its hash.
const holdAge = 80 * time.Millisecond

// noticeTrials is how many holds of each kind of loss and age each
// adapter mode has ended (so p99 is the worst of them).
const noticeTrials = 25

// TestEvictionNotice: a hold that someone else ends is noticed at once,
// on every adapter mode - rueidis with and without client-side caching,
// valkey-go, go-redis made by Dial and by New - from a client's first
// hold on. A fairlock ForceUnlock or Delete by another client: the script
// tells the holder's client on its own channel. A plain DEL of the lock
// hash, or a Redisson forceUnlock (the Redisson model on its own
// connection), publishes nothing: the holder's client watches the hash of
// each lock it holds (client-side caching; armed 30 ms into the hold and
// then checked, so a fresh hold's loss is noticed then) and checks its
// hold when the hash changes; a mode without key watches notices them at
// the watchdog's next tick, a third of the lease. Each loss is sent as
// soon as Lock returned (the holder client's first hold is such a one)
// and to a hold holdAge old. Figures: per mode and kind, from the ending
// call returning to the old holder's Done closing (0 when Done closed
// first), p50/p99 of the fresh holds, then of the aged ones.
func TestEvictionNotice(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var figures []string
	for _, m := range lossModes(t, srv.Addr()) {
		r := newLossRig(t, srv, m)
		for range noticeTrials {
			if err := r.round(ctx); err != nil {
				t.Fatal(err)
			}
		}
		figures = append(figures, r.figures())
	}
	report(t, 14, fmt.Sprintf("per adapter mode (rueidis, rueidis without client-side caching, valkey-go, go-redis made by Dial and by New), a fresh holder client; another client's ForceUnlock, its Delete, a plain DEL of the lock hash from a fresh connection (as redis-cli's), and a Redisson forceUnlock (the Redisson model on its own connection), each sent as soon as Lock returned (the client's first hold is one) and to a hold %v old, %d times each; holder lease 30 s (next renewal 10 s away), %v without key watches", holdAge, noticeTrials, noWatchLease),
		fmt.Sprintf("the old holder's Done closes within about one network delay of a ForceUnlock or Delete returning, on every mode; of a DEL or a Redisson forceUnlock, within about two network delays, or for a fresh hold once its watch is armed 30 ms into it; asserted: p99 (here the worst of %d) at most %v for each, except DEL and forceUnlock of a fresh hold: at most %v (the watch armed %v into the hold, plus %v), and without key watches: at most the watchdog's tick (a third of the lease, %v) plus %v (before: at its next renewal, up to 10 s)", noticeTrials, noticeBound, watchArm+noticeBound, watchArm, noticeBound, noWatchLease/3, noticeBound),
		"p50/p99 in ms to Done closing, of a fresh hold then of one "+holdAge.String()+" old: "+strings.Join(figures, "; "))
}

// evictedTrials is how many holds each adapter mode has evicted by the
// server.
const evictedTrials = 20

// TestEvictedHashNotice: what eviction does to a lock, on a server whose
// policy may evict lock keys (volatile-ttl: every fairlock key has a TTL).
// NewClient refuses the server; a client that accepts the risk
// (WithEvictionRisk) holds a lock while another waits. Each trial sets
// maxmemory to 1 byte, so that the next write evicts every key with a
// TTL - the lock hash, the queue, the deadlines, the token counter - and
// then lifts the limit. What must hold: the holder is told (Done closes,
// ErrLockLost) within about two network delays - its client watches the
// hash of each lock it holds and checks its hold when the server reports
// the key gone - or, on a mode without key watches, at the watchdog's
// next tick; the waiter, whose queue entry went too, queues again at its
// next heartbeat and gets the lock. Figures: from the evicting write to
// the holder's Done and to the waiter's grant, p50 and p99, and how often
// the waiter was granted before the holder's Done closed (the two then
// worked at once: the risk WithEvictionRisk accepts).
func TestEvictedHashNotice(t *testing.T) {
	srv := redistest.Start(t)
	srv.Do(t, "CONFIG", "SET", "maxmemory-policy", "volatile-ttl")
	srv.Do(t, "CONFIG", "SET", "maxmemory", "1gb")
	var figures []string
	for _, m := range lossModes(t, srv.Addr()) {
		figures = append(figures, evictedOn(t, srv, m))
	}
	report(t, 15, fmt.Sprintf("a server with maxmemory-policy volatile-ttl: NewClient without WithEvictionRisk; then, with it, a holder (30 s lease; %v without key watches) and a waiter (600 ms waiter timeout), and every key with a TTL evicted (maxmemory 1 byte for one write) with the hold %v old, %d times per adapter mode (rueidis, rueidis without client-side caching, valkey-go, go-redis made by Dial and by New)", noWatchLease, holdAge, evictedTrials),
		fmt.Sprintf("NewClient refuses the server (ErrEvictionPolicy); with the risk accepted, the holder's Done closes within about two network delays of the eviction, with ErrLockLost (asserted: p99 at most %v; without key watches at the watchdog's next tick, at most a third of the lease plus %v), and the waiter queues again and gets the lock", noticeBound, noticeBound),
		strings.Join(figures, "; "))
}

// evictedOn runs the eviction trials on mode m and returns its figures;
// it fails the test when the holder's p99 is past its bound.
func evictedOn(t *testing.T, srv *redistest.Server, m lossMode) string {
	client := func(opts ...lock.Option) (*lock.Client, error) {
		b, err := m.dial()
		if err != nil {
			t.Fatal(err)
		}
		c, err := lock.NewClient(b, opts...)
		if err != nil {
			b.Close()
			return nil, err
		}
		t.Cleanup(func() { c.Close() })
		return c, nil
	}
	if _, err := client(); !errors.Is(err, lock.ErrEvictionPolicy) {
		t.Fatalf("%s: NewClient on a volatile-ttl server: %v, want ErrEvictionPolicy", m.name, err)
	}
	hc, err := client(append(m.holderOpts(), lock.WithEvictionRisk())...)
	if err != nil {
		t.Fatal(err)
	}
	wc, err := client(lock.WithEvictionRisk(), lock.WithWaiterTimeout(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	name := lockName(t) + ":" + m.name
	e := evictedRun{srv: srv, mode: m.name, holder: newMutex(t, hc, name), waiter: newMutex(t, wc, name)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for range evictedTrials {
		e.trial(ctx, t)
	}
	if p99, bound := percentile(e.told, 99), m.bound(false, false); p99 > bound {
		t.Errorf("%s: the holder told of the eviction at p99 %v, past its bound %v", m.name, p99, bound)
	}
	p := func(d []time.Duration) string {
		return fmt.Sprintf("p50 %v p99 %v", percentile(d, 50).Round(time.Microsecond), percentile(d, 99).Round(time.Microsecond))
	}
	return fmt.Sprintf("%s%s: holder told %s, waiter granted %s, granted before the holder was told %d of %d, waiter's Lock refused for memory (the 1-byte window) %d times", m.name, m.leaseNote(), p(e.told), p(e.granted), e.early, evictedTrials, e.oom.Load())
}

// evictedRun is one adapter mode's eviction trials: a holder and a
// waiter on one lock, and what was measured.
type evictedRun struct {
	srv            *redistest.Server
	mode           string
	holder, waiter *lock.Mutex

	told, granted []time.Duration // from the eviction
	early         int             // the waiter granted before the holder was told
	oom           atomic.Int64    // the waiter's attempts refused for memory
}

// trial holds the lock with a waiter queued, evicts every key with a TTL
// holdAge into the hold, and waits for the holder's Done and the waiter's
// grant.
func (e *evictedRun) trial(ctx context.Context, t *testing.T) {
	h, err := e.holder.Lock(ctx)
	if err != nil {
		t.Fatalf("%s: %v", e.mode, err)
	}
	got := e.lockWaiter(ctx, t)
	redistest.Eventually(t, 10*time.Second, "the waiter to queue", func() bool {
		st, err := e.holder.Inspect(ctx, 1)
		return err == nil && st.QueueLength == 1
	})
	time.Sleep(holdAge) // a hold of some age, as in TestEvictionNotice
	e.srv.Do(t, "CONFIG", "SET", "maxmemory", "1")
	e.srv.Do(t, "SET", "fault:evict", "x") // evicts every volatile key, then fails with OOM
	evicted := time.Now()
	e.srv.Do(t, "CONFIG", "SET", "maxmemory", "1gb")
	var doneAt, grantAt time.Time
	done, timeout := h.Done(), time.After(10*time.Second)
	for doneAt.IsZero() || grantAt.IsZero() {
		select {
		case <-done:
			doneAt, done = time.Now(), nil
		case grantAt = <-got:
		case <-timeout:
			t.Fatalf("%s: 10s after the eviction: holder told %v, waiter granted %v", e.mode, !doneAt.IsZero(), !grantAt.IsZero())
		}
	}
	if !errors.Is(h.Err(), lock.ErrLockLost) {
		t.Fatalf("%s: hold ended with %v, want ErrLockLost", e.mode, h.Err())
	}
	if grantAt.Before(doneAt) {
		e.early++
	}
	e.told = append(e.told, max(doneAt.Sub(evicted), 0))
	e.granted = append(e.granted, max(grantAt.Sub(evicted), 0))
	if err := e.waiter.Unlock(ctx); err != nil {
		t.Fatalf("%s: waiter's Unlock: %v", e.mode, err)
	}
}

// lockWaiter starts the waiter's Lock and returns when it was granted.
// The waiter's attempt may meet the 1-byte limit itself (ErrOutOfMemory,
// not retried by the lock): as an application would, it tries again.
func (e *evictedRun) lockWaiter(ctx context.Context, t *testing.T) <-chan time.Time {
	got := make(chan time.Time, 1)
	go func() {
		for try := 0; ; try++ {
			_, err := e.waiter.Lock(ctx)
			if errors.Is(err, lock.ErrOutOfMemory) && try < 10 {
				e.oom.Add(1)
				continue
			}
			if err != nil {
				t.Errorf("%s: waiter: %v", e.mode, err)
			}
			break
		}
		got <- time.Now()
	}()
	return got
}
