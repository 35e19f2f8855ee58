package faultsuite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
)

// holdAge is how long a hold lasts before someone else ends it by hand
// (DEL, eviction): past the 50 ms after which its client watches its hash.
const holdAge = 80 * time.Millisecond

// evictionTrials is how many holds each adapter has force-unlocked, then
// deleted, by another client, and then had their hash deleted by hand.
const evictionTrials = 100

// TestEvictionNotice: a hold that another client force-unlocks or deletes
// ends at once on every adapter - the script tells the holder's client on
// its own channel - not at the holder's next renewal (a third of the
// default 30 s lease). So does a hold whose hash is deleted by a plain DEL
// that publishes nothing: the holder's client watches the hash of each
// lock it holds (client-side caching) and checks its hold when the hash
// changes. Figures: from the ForceUnlock, Delete or DEL returning to the
// old holder's Done closing (0 when Done closed first), p50 and p99 over
// the trials.
func TestEvictionNotice(t *testing.T) {
	srv := redistest.Start(t)
	adapters := dialers(srv.Addr())
	var figures []string
	for _, a := range adapters {
		holder, admin := clientOf(t, a), clientOf(t, a)
		listening(t, srv, holder)
		for _, how := range []string{"ForceUnlock", "Delete", "DEL"} {
			d, err := evictionDelays(t, srv, holder, admin, lockName(t)+":"+a.name+":"+how, how)
			if err != nil {
				t.Fatalf("%s, %s: %v", a.name, how, err)
			}
			figures = append(figures, fmt.Sprintf("%s %s p50 %v p99 %v", a.name, how, percentile(d, 50), percentile(d, 99)))
		}
	}
	report(t, 14, fmt.Sprintf("another client force-unlocks (ForceUnlock), then deletes (Delete) a held lock, then a plain DEL of the lock hash from redis-cli's connection (DEL; the hold 80 ms old), %d times each per adapter; holder with the default 30 s lease (next renewal 10 s away)", evictionTrials),
		"the old holder's Done closes within about one network delay of the call returning (DEL: two, a check of the hold follows the invalidation), every time; target p99 at most 10 ms (before: at its next renewal, up to 10 s)",
		"to Done closing: "+strings.Join(figures, "; "))
}

// evictionDelays holds name with holder and evicts it with admin, trials
// times, and returns how long after each eviction returned the hold ended,
// sorted. A hold not told within 5 s fails the run.
func evictionDelays(t *testing.T, srv *redistest.Server, holder, admin *lock.Client, name, how string) ([]time.Duration, error) {
	hm, err := holder.NewMutex(name)
	if err != nil {
		return nil, err
	}
	am, err := admin.NewMutex(name)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var delays []time.Duration
	for range evictionTrials {
		h, err := hm.Lock(ctx)
		if err != nil {
			return nil, err
		}
		switch how {
		case "ForceUnlock":
			_, err = am.ForceUnlock(ctx)
		case "Delete":
			_, err = am.Delete(ctx)
		default:
			// A hold of some age, as in use: the client watches a held
			// hash from 50 ms on (a younger one is checked when the watch
			// is armed, 50 ms into the hold).
			time.Sleep(holdAge)
			if n, _ := srv.Do(t, "DEL", name).(int64); n != 1 {
				err = fmt.Errorf("DEL deleted %d keys, want the lock hash", n)
			}
		}
		if err != nil {
			return nil, err
		}
		returned := time.Now()
		timer := time.NewTimer(5 * time.Second)
		select {
		case <-h.Done():
			timer.Stop()
		case <-timer.C:
			return nil, fmt.Errorf("the holder was not told within 5s")
		}
		delays = append(delays, max(time.Since(returned), 0))
	}
	slices.Sort(delays)
	return delays, nil
}

// listening takes and releases a hold of c, whose first hold starts the
// listener on its own channel, and waits until the server has it
// subscribed.
func listening(t *testing.T, srv *redistest.Server, c *lock.Client) {
	t.Helper()
	m, err := c.NewMutex(lockName(t) + ":warm-up")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 10*time.Second, "the client to listen on its channel", func() bool {
		r, _ := srv.Do(t, "PUBSUB", "NUMSUB", "fairlock_client:"+c.ID()).([]any)
		return len(r) == 2 && r[1] == int64(1)
	})
}

// evictedTrials is how many holds each adapter has evicted by the server.
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
// the key gone; the waiter, whose queue entry went too, queues again at
// its next heartbeat and gets the lock. Figures: from the evicting write
// to the holder's Done and to the waiter's grant, p50 and p99, and how
// often the waiter was granted before the holder's Done closed (the two
// then worked at once: the risk WithEvictionRisk accepts).
func TestEvictedHashNotice(t *testing.T) {
	srv := redistest.Start(t)
	srv.Do(t, "CONFIG", "SET", "maxmemory-policy", "volatile-ttl")
	srv.Do(t, "CONFIG", "SET", "maxmemory", "1gb")
	var figures []string
	for _, a := range dialers(srv.Addr()) {
		client := func(opts ...lock.Option) (*lock.Client, error) {
			b, err := a.dial()
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
			t.Fatalf("%s: NewClient on a volatile-ttl server: %v, want ErrEvictionPolicy", a.name, err)
		}
		hc, err := client(lock.WithEvictionRisk())
		if err != nil {
			t.Fatal(err)
		}
		wc, err := client(lock.WithEvictionRisk(), lock.WithWaiterTimeout(600*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		name := lockName(t) + ":" + a.name
		holder, _ := hc.NewMutex(name)
		waiter, _ := wc.NewMutex(name)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var told, granted []time.Duration
		var oom atomic.Int64 // the waiter's attempts refused for memory
		early := 0
		for range evictedTrials {
			h, err := holder.Lock(ctx)
			if err != nil {
				t.Fatalf("%s: %v", a.name, err)
			}
			got := make(chan time.Time, 1)
			go func() {
				// The waiter's attempt may meet the 1-byte limit itself
				// (ErrOutOfMemory, not retried by the lock): as an
				// application would, it tries again.
				for try := 0; ; try++ {
					_, err := waiter.Lock(ctx)
					if errors.Is(err, lock.ErrOutOfMemory) && try < 10 {
						oom.Add(1)
						continue
					}
					if err != nil {
						t.Errorf("%s: waiter: %v", a.name, err)
					}
					break
				}
				got <- time.Now()
			}()
			redistest.Eventually(t, 10*time.Second, "the waiter to queue", func() bool {
				st, err := holder.Inspect(ctx, 1)
				return err == nil && st.QueueLength == 1
			})
			time.Sleep(holdAge) // a hold of some age, as in TestEvictionNotice
			srv.Do(t, "CONFIG", "SET", "maxmemory", "1")
			srv.Do(t, "SET", "fault:evict", "x") // evicts every volatile key, then fails with OOM
			evicted := time.Now()
			srv.Do(t, "CONFIG", "SET", "maxmemory", "1gb")
			var doneAt, grantAt time.Time
			done, timeout := h.Done(), time.After(10*time.Second)
			for doneAt.IsZero() || grantAt.IsZero() {
				select {
				case <-done:
					doneAt, done = time.Now(), nil
				case grantAt = <-got:
				case <-timeout:
					t.Fatalf("%s: 10s after the eviction: holder told %v, waiter granted %v", a.name, !doneAt.IsZero(), !grantAt.IsZero())
				}
			}
			if !errors.Is(h.Err(), lock.ErrLockLost) {
				t.Fatalf("%s: hold ended with %v, want ErrLockLost", a.name, h.Err())
			}
			if grantAt.Before(doneAt) {
				early++
			}
			told = append(told, max(doneAt.Sub(evicted), 0))
			granted = append(granted, max(grantAt.Sub(evicted), 0))
			if err := waiter.Unlock(ctx); err != nil {
				t.Fatalf("%s: waiter's Unlock: %v", a.name, err)
			}
		}
		p := func(d []time.Duration) string {
			return fmt.Sprintf("p50 %v p99 %v", percentile(d, 50).Round(time.Microsecond), percentile(d, 99).Round(time.Microsecond))
		}
		figures = append(figures, fmt.Sprintf("%s: holder told %s, waiter granted %s, granted before the holder was told %d of %d, waiter's Lock refused for memory (the 1-byte window) %d times", a.name, p(told), p(granted), early, evictedTrials, oom.Load()))
	}
	report(t, 15, fmt.Sprintf("a server with maxmemory-policy volatile-ttl: NewClient without WithEvictionRisk; then, with it, a holder (30 s lease) and a waiter (600 ms waiter timeout), and every key with a TTL evicted (maxmemory 1 byte for one write), %d times per adapter", evictedTrials),
		"NewClient refuses the server (ErrEvictionPolicy); with the risk accepted, the holder's Done closes within about two network delays of the eviction, with ErrLockLost, and the waiter queues again and gets the lock",
		strings.Join(figures, "; "))
}
