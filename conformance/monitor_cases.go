package conformance

// The sequential cases that count commands with MONITOR.

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

// testTwoCommandsAtServer watches, with MONITOR at the server, the
// commands an uncontended Lock+Unlock sends: two script calls and nothing
// else (commands run inside scripts are marked "lua" and not counted).
func testTwoCommandsAtServer(t *testing.T, s *suite) {
	m := s.newProc(t).mutex(t, lockName(t))
	// Warm up: load the scripts and open the connections (clients may
	// open several pipelines lazily).
	for range 8 {
		mustLock(t, m)
		mustUnlock(t, m)
	}
	// After its first hold the client subscribes, once, to its own channel
	// to hear of reconnects; wait for that before counting.
	redistest.Eventually(t, eventually, "the client's reconnect subscription", func() bool {
		chans, _ := s.cfg.server.Do(t, "PUBSUB", "CHANNELS", "fairlock_client:"+strings.SplitN(m.Owner(), ":", 2)[0]).([]any)
		return len(chans) == 1
	})
	mon := startMonitor(t, s.cfg.server)
	mustLock(t, m)
	mustUnlock(t, m)
	sent, _ := mon.collect(t, s.cfg.server)
	evalsha := 0
	for _, l := range sent {
		if strings.Contains(strings.ToLower(l), `"evalsha"`) {
			evalsha++
		}
	}
	if len(sent) != 2 || evalsha != 2 {
		t.Errorf("uncontended Lock+Unlock sent %d commands to the server, want 2 EVALSHA:\n%s", len(sent), strings.Join(sent, "\n"))
	}
}

// testX8ConstantWork counts, with MONITOR, the commands the scripts run
// for a waiter's heartbeat, a release and a waiter leaving, behind a short
// and a long queue: the work must not grow with the queue (X8).
func testX8ConstantWork(t *testing.T, s *suite) {
	work := func(queued int) (heartbeat, release, leave int) {
		name := lockName(t)
		p := s.newProc(t)
		holder := p.mutex(t, name)
		mustLock(t, holder)
		for i := range queued {
			injectWaiter(t, p.b, name, fmt.Sprintf("other-client:%d", i), time.Minute)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// Slow heartbeats (20 s), so none lands in a counting window.
		waiter := s.newProc(t, lock.WithWaiterTimeout(60*time.Second)).mutex(t, name)
		ch := goAcquire(func() (*lock.Hold, error) { return waiter.Lock(ctx) })
		waitQueued(t, holder, queued+1)
		count := func(do func()) int {
			mon := startMonitor(t, s.cfg.server)
			do()
			_, in := mon.collect(t, s.cfg.server)
			return len(in)
		}
		// A re-entry plus release of the holder exercises the purge and
		// the queue reads of acquire and unlock while others wait.
		release = count(func() { mustLock(t, holder); mustUnlock(t, holder) })
		leave = count(func() {
			cancel()
			if r := await(t, ch, eventually, "waiter"); !errors.Is(r.err, context.Canceled) {
				t.Fatalf("waiter: %v", r.err)
			}
		})
		// A heartbeat: the tail waiter's acquire while queued.
		tp := s.newProc(t, lock.WithWaiterTimeout(60*time.Second))
		tail := tp.mutex(t, name)
		tctx, tcancel := context.WithCancel(context.Background())
		defer tcancel()
		tch := goAcquire(func() (*lock.Hold, error) { return tail.Lock(tctx) })
		waitQueued(t, holder, queued+1)
		// Its first attempts (queue, then re-check after subscribing)
		// must be over before counting one more.
		redistest.Eventually(t, eventually, "the waiter to settle", func() bool { return tp.b.count("acquire"+doneSuffix) >= 2 })
		heartbeat = count(func() {
			// Nudge the waiter to run acquire again: a wake-up message.
			done := tp.b.count("acquire" + doneSuffix)
			evalRaw(t, p.b, `return redis.call('`+wakeCmd(p.b)+`', KEYS[1], '0')`, []string{"redisson_lock__channel:{" + name + "}:" + tail.Owner()})
			redistest.Eventually(t, eventually, "the waiter's heartbeat", func() bool { return tp.b.count("acquire"+doneSuffix) > done })
		})
		tcancel()
		await(t, tch, eventually, "tail waiter")
		return heartbeat, release, leave
	}
	h1, r1, l1 := work(2)
	h2, r2, l2 := work(2000)
	t.Logf("commands run by scripts with 2 / 2000 waiters: heartbeat %d / %d, re-entry+release %d / %d, leave %d / %d", h1, h2, r1, r2, l1, l2)
	// A head waiter woken by its key watch (the holder's re-entry writes
	// the hash) may run acquire in a window, a few times at most; a loop
	// over the queue would add thousands.
	const noise = 30
	if h2 > h1+noise || r2 > r1+noise || l2 > l1+noise {
		t.Errorf("script commands grew with the queue (2 vs 2000 waiters): heartbeat %d vs %d, release %d vs %d, leave %d vs %d", h1, h2, r1, r2, l1, l2)
	}
}
