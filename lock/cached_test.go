package lock_test

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/lock/inspect"
	"github.com/fairlock/fairlock/redistest"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

// Cached reads (WithCachedReads), against redis-server: what they cost the
// server, how stale they can be, and that they say what the script says.

// serverCalls is the number of commands the server has run, from INFO
// commandstats (commands run by scripts count too), leaving out INFO
// itself, PING (the clients' keep-alive) and (UN)SUBSCRIBE (a holding
// client's subscription to hear of reconnects).
func serverCalls(t testing.TB, srv *redistest.Server) int64 {
	t.Helper()
	info, _ := srv.Do(t, "INFO", "commandstats").(string)
	var n int64
	for line := range strings.Lines(info) {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || name == "cmdstat_info" || name == "cmdstat_ping" || strings.HasSuffix(name, "subscribe") {
			continue
		}
		calls, _, _ := strings.Cut(stats, ",")
		c, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("INFO commandstats: %q: %v", line, err)
		}
		n += c
	}
	return n
}

// awaitHoldingQuiet waits until client c, which holds a lock, has
// subscribed to its reconnect channel and watches the held hash (X16: the
// watch starts 30 ms into the hold, with CLIENT CACHING and EXISTS): the
// commands of either would otherwise count as reads. tracked is
// trackedItems before the hold.
func awaitHoldingQuiet(t *testing.T, srv *redistest.Server, c *lock.Client, tracked int64) {
	t.Helper()
	redistest.Eventually(t, 10*time.Second, "the holding client's subscription", func() bool {
		reply, _ := srv.Do(t, "PUBSUB", "NUMSUB", "fairlock_client:"+c.ID()).([]any)
		return len(reply) == 2 && reply[1] == int64(1)
	})
	redistest.Eventually(t, 10*time.Second, "the holding client's watch on the hash", func() bool {
		return trackedItems(t, srv) > tracked
	})
	// The watch's arming is followed by a check of the hold: wait until
	// the server has seen no command between two polls.
	last := int64(-1)
	redistest.Eventually(t, 10*time.Second, "the hold's check after the watch was armed", func() bool {
		n := serverCalls(t, srv)
		settled := n == last
		last = n
		return settled
	})
}

// trackedItems is the server's count of keys tracked for client-side
// caching, one per key and client (INFO stats tracking_total_items).
func trackedItems(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	info, _ := srv.Do(t, "INFO", "stats").(string)
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "tracking_total_items:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("INFO stats: %q: %v", line, err)
			}
			return n
		}
	}
	t.Fatal("INFO stats has no tracking_total_items")
	return 0
}

// cachedStaleness is the maxStale of the tests' cached reads.
const cachedStaleness = time.Minute

// TestCachedIsLocked_SeesUnlockWithinOneRoundTrip: after Unlock returns,
// a cached IsLocked says "free" within one round trip - at its next read
// when the unlock went through the reading client - although the reads
// before it came from the cache.
func TestCachedIsLocked_SeesUnlockWithinOneRoundTrip(t *testing.T) {
	srv := realServer(t)
	reader := realClient(t, srv, lock.WithCachedReads(cachedStaleness))
	other := realClient(t, srv)
	ctx := testCtx(t, 30*time.Second)
	// The bound: a loopback round trip is well under a millisecond; a
	// loaded machine running -race gets room.
	const bound = 25 * time.Millisecond
	for _, tc := range []struct {
		name   string
		holder *lock.Client
	}{
		{"unlock by the reading client", reader},
		{"unlock by another client", other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "cached-flip-" + strings.ReplaceAll(tc.name, " ", "-")
			holder, probe := realMutex(t, tc.holder, name), realMutex(t, reader, name)
			tracked := trackedItems(t, srv)
			if _, err := holder.TryLockWithLease(ctx, 0, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			awaitHoldingQuiet(t, srv, tc.holder, tracked)
			if locked, err := probe.IsLocked(ctx); err != nil || !locked {
				t.Fatalf("IsLocked = %v, %v; want true", locked, err)
			}
			before := serverCalls(t, srv)
			if locked, err := probe.IsLocked(ctx); err != nil || !locked {
				t.Fatalf("IsLocked = %v, %v; want true", locked, err)
			}
			if sent := serverCalls(t, srv) - before; sent != 0 {
				t.Fatalf("the second IsLocked of a held lock sent %d commands, want 0 (not cached)", sent)
			}

			start := time.Now()
			if err := holder.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			unlocked := time.Now()
			reads := 0
			for {
				locked, err := probe.IsLocked(ctx)
				if err != nil {
					t.Fatal(err)
				}
				reads++
				if !locked {
					break
				}
				if time.Since(unlocked) > time.Second {
					t.Fatalf("a cached IsLocked still said locked 1s after Unlock returned (%d reads)", reads)
				}
				runtime.Gosched()
			}
			flip := time.Since(unlocked)
			t.Logf("cached IsLocked said free %v after Unlock returned, at read %d (Unlock took %v)", flip, reads, unlocked.Sub(start))
			if flip > bound {
				t.Fatalf("a cached IsLocked took %v to see the unlock, want at most %v", flip, bound)
			}
		})
	}
}

// TestCachedReads_UnchangedLockSendsNothing: every read method, repeated
// on a lock nobody changes, is answered without a command reaching the
// server - Inspect with its holder's description and listed waiters too.
func TestCachedReads_UnchangedLockSendsNothing(t *testing.T) {
	srv := realServer(t)
	reader := realClient(t, srv, lock.WithCachedReads(cachedStaleness))
	holders := realClient(t, srv, lock.WithDescription("holder"))
	ctx := testCtx(t, 30*time.Second)
	const name = "cached-unchanged"
	holder := realMutex(t, holders, name)
	tracked := trackedItems(t, srv)
	if _, err := holder.TryLockWithLease(ctx, 0, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	awaitHoldingQuiet(t, srv, holders, tracked)
	queueEntry(t, srv, name, holders.ID()+":99", 60_000, true)                        // a fairlock waiter
	queueEntry(t, srv, name, "6a1f0c52-2a35-4d9b-9d4e-4c1e0b2f1a77:1", 60_000, false) // a Redisson waiter
	probe := realMutex(t, reader, name)

	readAll := func() inspect.State {
		t.Helper()
		if locked, err := probe.IsLocked(ctx); err != nil || !locked {
			t.Fatalf("IsLocked = %v, %v", locked, err)
		}
		if held, err := probe.IsHeldBy(ctx, holder.Owner()); err != nil || !held {
			t.Fatalf("IsHeldBy = %v, %v", held, err)
		}
		if n, err := probe.HoldCount(ctx); err != nil || n != 0 {
			t.Fatalf("HoldCount = %v, %v", n, err)
		}
		if ttl, err := probe.RemainTTL(ctx); err != nil || ttl <= 0 {
			t.Fatalf("RemainTTL = %v, %v", ttl, err)
		}
		st, err := probe.Inspect(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	// Until the holder's client has written its description (it does so
	// in the background as it starts).
	redistest.Eventually(t, 10*time.Second, "the holder's description", func() bool {
		st := readAll()
		return len(st.Holders) == 1 && st.Holders[0].Description != nil
	})
	readAll()
	before := serverCalls(t, srv)
	var st inspect.State
	for range 5 {
		st = readAll()
	}
	if sent := serverCalls(t, srv) - before; sent != 0 {
		t.Fatalf("5 rounds of reads of an unchanged lock sent %d commands, want 0", sent)
	}
	if len(st.Queue) != 2 || st.Queue[0].Kind != inspect.KindFairlock || st.Queue[1].Kind != inspect.KindRedisson || st.DescriptionErr != nil {
		t.Fatalf("cached Inspect = %+v", st)
	}
}

// TestCachedRemainTTL_WithinStalenessBound: a held lock's RemainTTL from
// the cache agrees with the script's, read just before it, to within
// the time between the two reads and the clock estimate's error; and an
// Extend (a write) reaches it through an invalidation.
func TestCachedRemainTTL_WithinStalenessBound(t *testing.T) {
	srv := realServer(t)
	reader := realClient(t, srv, lock.WithCachedReads(cachedStaleness))
	plain := realClient(t, srv)
	ctx := testCtx(t, 30*time.Second)
	const name = "cached-ttl"
	holder := realMutex(t, plain, name)
	h, err := holder.TryLockWithLease(ctx, 0, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	probe := realMutex(t, reader, name)
	// The clock estimate is off by at most half a round trip plus a
	// millisecond (a round trip is several on a loaded machine under -race);
	// each TTL is rounded to whole milliseconds.
	const tolerance = 25 * time.Millisecond
	var worst time.Duration
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for range 30 {
		t0 := time.Now()
		ref, err := holder.RemainTTL(ctx) // the script
		if err != nil {
			t.Fatal(err)
		}
		got, err := probe.RemainTTL(ctx)
		if err != nil {
			t.Fatal(err)
		}
		span := time.Since(t0)
		if got > ref+tolerance || got < ref-span-tolerance {
			t.Fatalf("cached RemainTTL %v, script's %v read %v earlier: off by more than %v", got, ref, span, tolerance)
		}
		worst = max(worst, ref-got-span, got-ref)
		<-tick.C
	}
	t.Logf("cached RemainTTL off the script's by at most %v beyond the time between the reads", worst)

	if err := holder.Extend(ctx, h, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	extended := time.Now()
	redistest.Eventually(t, time.Second, "the cached RemainTTL to see the Extend", func() bool {
		ttl, err := probe.RemainTTL(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ttl > 15*time.Second
	})
	t.Logf("cached RemainTTL saw the Extend %v after it returned", time.Since(extended))
}

// TestCachedInspect_SaysWhatTheScriptSays: holders, token, queue (an entry
// left behind skipped), waiter deadlines, kinds and descriptions from the
// cache equal the script's.
func TestCachedInspect_SaysWhatTheScriptSays(t *testing.T) {
	srv := realServer(t)
	reader := realClient(t, srv, lock.WithCachedReads(cachedStaleness))
	plain := realClient(t, srv)
	holders := realClient(t, srv, lock.WithDescription("holder"))
	ctx := testCtx(t, 30*time.Second)
	const name = "cached-inspect"
	holder := realMutex(t, holders, name)
	if _, err := holder.TryLockWithLease(ctx, 0, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.TryLockWithLease(ctx, 0, 30*time.Second); err != nil { // count 2
		t.Fatal(err)
	}
	queueEntry(t, srv, name, holders.ID()+":7", 60_000, true)
	// An entry its owner left behind (leave.lua): both skip it.
	queueEntry(t, srv, name, holders.ID()+":8", 0, true)
	_, _, aliveKey := queueKeys(name)
	mustDo(t, srv, "ZADD", aliveKey, "0", holders.ID()+":8")
	queueEntry(t, srv, name, "6a1f0c52-2a35-4d9b-9d4e-4c1e0b2f1a77:1", 60_000, false)
	queueEntry(t, srv, name, "not-an-owner", 60_000, false)
	cached, script := realMutex(t, reader, name), realMutex(t, plain, name)
	if _, err := cached.RemainTTL(ctx); err != nil { // reads the server's clock: the reads below use the cache
		t.Fatal(err)
	}

	for _, limit := range []int{0, 2, 10} {
		var want, got inspect.State
		redistest.Eventually(t, 10*time.Second, "the holder's description", func() bool {
			var err error
			if want, err = script.Inspect(ctx, limit); err != nil {
				t.Fatal(err)
			}
			if got, err = cached.Inspect(ctx, limit); err != nil {
				t.Fatal(err)
			}
			return want.Holders[0].Description != nil && got.Holders[0].Description != nil
		})
		if d := got.TTL - want.TTL; d > 10*time.Millisecond || d < -100*time.Millisecond {
			t.Errorf("limit %d: TTL %v, script's %v", limit, got.TTL, want.TTL)
		}
		if d := got.ServerTime.Sub(want.ServerTime); d < -10*time.Millisecond || d > 100*time.Millisecond {
			t.Errorf("limit %d: ServerTime %v, script's %v", limit, got.ServerTime, want.ServerTime)
		}
		got.TTL, got.ServerTime, want.TTL, want.ServerTime = 0, time.Time{}, 0, time.Time{}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("limit %d: cached Inspect\n %+v\nscript's\n %+v", limit, got, want)
		}
	}
}

// TestCachedReads_FallBackToTheScript: without a cache (a client with
// DisableCache) the option changes nothing but the path; bad staleness
// bounds are refused.
func TestCachedReads_FallBackToTheScript(t *testing.T) {
	srv := realServer(t)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	b := rueidisbackend.New(rc)
	t.Cleanup(func() { b.Close() })
	c, err := lock.NewClient(b, lock.WithCachedReads(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := testCtx(t, 30*time.Second)
	m := realMutex(t, c, "cached-fallback")
	if _, err := m.TryLockWithLease(ctx, 0, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		before := serverCalls(t, srv)
		if n, err := m.HoldCount(ctx); err != nil || n != 1 {
			t.Fatalf("HoldCount = %v, %v; want 1", n, err)
		}
		if ttl, err := m.RemainTTL(ctx); err != nil || ttl <= 0 {
			t.Fatalf("RemainTTL = %v, %v", ttl, err)
		}
		if sent := serverCalls(t, srv) - before; sent == 0 {
			t.Fatal("reads without a cache sent nothing")
		}
	}

	for _, d := range []time.Duration{0, -time.Second, time.Microsecond, (10 * 365 * 24 * time.Hour) + 1} {
		if _, err := lock.NewClient(b, lock.WithCachedReads(d)); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("WithCachedReads(%v): %v, want ErrInvalidDuration", d, err)
		}
	}
}

// TestCachedReads_ServerLoad measures what a status page costs the
// server: 1,000 locks, 100 of them held, each polled with IsLocked once a
// second for 5 s, without and with cached reads. It prints the server's
// commands per second (INFO commandstats, including the commands scripts
// run) and runs only with FAIRLOCK_MEASURE=1:
//
//	FAIRLOCK_MEASURE=1 go test -count=1 -run CachedReads_ServerLoad -v ./lock/
func TestCachedReads_ServerLoad(t *testing.T) {
	if os.Getenv("FAIRLOCK_MEASURE") != "1" {
		t.Skip("a measurement: set FAIRLOCK_MEASURE=1 to run it")
	}
	const (
		locks   = 1000
		held    = 100
		seconds = 5
	)
	for _, mode := range []struct {
		name string
		opts []lock.Option
	}{
		{"script reads", nil},
		{"cached reads", []lock.Option{lock.WithCachedReads(time.Minute)}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			srv := realServer(t)
			holders := realClient(t, srv)
			reader := realClient(t, srv, mode.opts...)
			ctx := testCtx(t, time.Minute)
			probes := make([]*lock.Mutex, locks)
			for i := range probes {
				name := fmt.Sprintf("status-%04d", i)
				if i%(locks/held) == 0 {
					if _, err := realMutex(t, holders, name).TryLockWithLease(ctx, 0, time.Minute); err != nil {
						t.Fatal(err)
					}
				}
				probes[i] = realMutex(t, reader, name)
			}
			// Each lock once a second: one read every millisecond, in turn.
			tick := time.NewTicker(time.Second / locks)
			defer tick.Stop()
			perSecond := make([]int64, seconds)
			reads, lockedSeen := 0, 0
			start := time.Now()
			last := serverCalls(t, srv)
			for s := range seconds {
				end := start.Add(time.Duration(s+1) * time.Second)
				for now := time.Now(); now.Before(end); now = <-tick.C {
					// Catch up on ticks the ticker dropped.
					for due := int(now.Sub(start) * locks / time.Second); reads < due; reads++ {
						locked, err := probes[reads%locks].IsLocked(ctx)
						if err != nil {
							t.Fatal(err)
						}
						if locked {
							lockedSeen++
						}
					}
				}
				now := serverCalls(t, srv)
				perSecond[s], last = now-last, now
			}
			elapsed := time.Since(start)
			var total int64
			for _, n := range perSecond {
				total += n
			}
			t.Logf("%s: %d IsLocked in %v (%d said locked); server commands per second: %v; mean %.0f/s, after the first second %.0f/s",
				mode.name, reads, elapsed.Round(time.Millisecond), lockedSeen, perSecond,
				float64(total)/elapsed.Seconds(), float64(total-perSecond[0])/float64(seconds-1))
		})
	}
}
