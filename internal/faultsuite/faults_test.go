package faultsuite

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fairlock/fairlock/internal/backendtest"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

// pttlExpiry reads the lock hash's PTTL through srv and returns the lower
// bound it proves for the server's expiry of the lease: a read sent at t
// that answers p means the key lives at least until t+p (zero time when
// the key is gone or has no TTL).
func pttlExpiry(t *testing.T, srv *redistest.Server, key string) time.Time {
	sent := time.Now()
	p, _ := srv.Do(t, "PTTL", key).(int64)
	if p <= 0 {
		return time.Time{}
	}
	return sent.Add(time.Duration(p) * time.Millisecond)
}

// watchDone records when h's Done closes, as soon as it does.
func watchDone(h *lock.Hold) <-chan time.Time {
	ch := make(chan time.Time, 1)
	go func() {
		<-h.Done()
		ch <- time.Now()
	}()
	return ch
}

// tellsBeforeExpiry polls the server's expiry of key (through a
// connection that is not faulted) until Done is seen, and returns the
// margin by which Done came first (negative: after the expiry).
func tellsBeforeExpiry(t *testing.T, srv *redistest.Server, key string, done <-chan time.Time, within time.Duration) time.Duration {
	t.Helper()
	var expiry time.Time
	limit := time.After(within)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if e := pttlExpiry(t, srv, key); e.After(expiry) {
			expiry = e
		}
		select {
		case at := <-done:
			return expiry.Sub(at)
		case <-limit:
			t.Fatalf("hold not ended within %v", within)
		case <-tick.C:
		}
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// TestHolderKilled: a holder process is killed (SIGKILL) while a waiter
// queues. The waiter takes over when the lease runs out, not before.
func TestHolderKilled(t *testing.T) {
	const lease = time.Second
	srv := redistest.Start(t)
	name := lockName(t)
	h := newHistory()
	ch := startHolder(t, srv.Addr(), name, lease, "")
	h.add(0, opAcquire, ch.held, ch.held, ch.token)
	waiter := newMutex(t, newLockClient(t, srv.Addr()), name)
	got := make(chan *lock.Hold, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		call := time.Now()
		hold, err := waiter.Lock(ctx)
		if err != nil {
			t.Error(err)
			got <- nil
			return
		}
		h.add(1, opAcquire, call, time.Now(), hold.Token())
		got <- hold
	}()
	expiry := pttlExpiry(t, srv, name)
	killed := time.Now()
	if err := ch.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	h.addOpen(0, opReleaseMaybe, killed)
	hold := <-got
	at := time.Now()
	if hold == nil {
		t.FailNow()
	}
	h.check(t)
	if !expiry.IsZero() && at.Before(expiry) {
		t.Errorf("waiter acquired %v before the killed holder's lease ran out", expiry.Sub(at))
	}
	report(t, 1, "holder process killed (SIGKILL) with a waiter queued; lease 1 s",
		"the waiter takes over only after the lease, and then at once",
		fmt.Sprintf("takeover %s after the kill, %s after the server's expiry", ms(at.Sub(killed)), ms(at.Sub(expiry))))
}

// TestHolderPausedPastLease: a holder process writing to fenced storage
// is paused (SIGSTOP) for twice its lease; a waiter takes over and writes;
// the holder is continued. Its Done closes at once, and none of its late
// writes is accepted - the fencing token is what protects the storage
// from a holder paused longer than its lease (the honest limit of any
// lease-based lock).
func TestHolderPausedPastLease(t *testing.T) {
	const lease = time.Second
	srv := redistest.Start(t)
	name := lockName(t)
	fence := name + ":storage"
	ch := startHolder(t, srv.Addr(), name, lease, fence)
	ch.next(t, "WRITE 1", 10*time.Second)
	if err := ch.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	c := newLockClient(t, srv.Addr())
	waiter := newMutex(t, c, name)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hold, err := waiter.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	acquired := time.Now()
	// The new holder writes with its newer token.
	if ok := srv.Do(t, "EVAL", fenceScript.Source, "1", fence, strconv.FormatInt(hold.Token(), 10)); ok != int64(1) {
		t.Fatalf("the new holder's write was refused: %v", ok)
	}
	// Keep the old holder stopped past the lease twice over.
	if d := 2*lease - time.Since(paused); d > 0 {
		time.Sleep(d) // the fault's length, not a synchronisation
	}
	if err := ch.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	lost := unixNano(strings.Fields(ch.next(t, "LOST", 10*time.Second))[1])
	// The writes it makes after the resume, told or not.
	accepted, refused := 0, 0
	drain := time.After(300 * time.Millisecond)
	for done := false; !done; {
		select {
		case l := <-ch.lines:
			if f := strings.Fields(l); len(f) == 3 && f[0] == "WRITE" && unixNano(f[2]).After(resumed) {
				if f[1] == "1" {
					accepted++
				} else {
					refused++
				}
			}
		case <-drain:
			done = true
		}
	}
	if accepted > 0 {
		t.Errorf("%d writes of the paused holder were accepted after the new holder wrote", accepted)
	}
	if refused == 0 {
		t.Error("the paused holder made no late write: the fence was not exercised")
	}
	report(t, 2, "holder process paused (SIGSTOP) for 2x its 1 s lease while writing to fenced storage every 10 ms (without looking at Done), then continued",
		"after the resume the old holder is told at once; the fencing token makes the storage refuse its late writes (the limit: a pause longer than the lease cannot be seen by the paused process until it resumes)",
		fmt.Sprintf("waiter acquired %s after the pause began; old holder told %s after its resume; late writes accepted %d, refused %d",
			ms(acquired.Sub(paused)), ms(lost.Sub(resumed)), accepted, refused))
}

// TestServerRestartAOF: the server is killed and restarted within a
// second, with AOF (appendfsync always). The holder keeps its hold (its
// lease outlasts the outage), the queued waiters ride through (X14) and
// acquire in their original order afterwards, and no two owners ever
// believe they hold at once.
func TestServerRestartAOF(t *testing.T) {
	const (
		lease   = 5 * time.Second
		waiters = 5
		outage  = 800 * time.Millisecond
	)
	srv := redistest.Start(t, redistest.WithAOF())
	name := lockName(t)
	h := newHistory()
	holder := newMutex(t, newLockClient(t, srv.Addr(), lock.WithLease(lease)), name)
	spy := newMutex(t, newLockClient(t, srv.Addr()), name)
	call := time.Now()
	hold, err := holder.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	h.add(0, opAcquire, call, time.Now(), hold.Token())
	type result struct {
		i   int
		err error
		at  time.Time
	}
	results := make(chan result, waiters)
	ms_ := make([]*lock.Mutex, waiters)
	for i := range waiters {
		ms_[i] = newMutex(t, newLockClient(t, srv.Addr()), name)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			call := time.Now()
			wh, err := ms_[i].Lock(ctx)
			if err != nil {
				h.add(i+1, opAcquireMaybe, call, time.Now(), 0)
				h.addOpen(i+1, opReleaseMaybe, call)
				results <- result{i, err, time.Now()}
				return
			}
			h.add(i+1, opAcquire, call, time.Now(), wh.Token())
			at := time.Now()
			time.Sleep(5 * time.Millisecond) // a little work
			uc := time.Now()
			if err := ms_[i].Unlock(context.Background()); err != nil {
				h.addOpen(i+1, opReleaseMaybe, uc)
			} else {
				h.add(i+1, opRelease, uc, time.Now(), 0)
			}
			results <- result{i, nil, at}
		}()
		waitQueue(t, spy, i+1)
	}
	srv.Kill(t)
	down := time.Now()
	time.Sleep(outage) // the fault's length
	srv.Restart(t)
	back := time.Now()
	// The holder's hold survived: renewals go through again.
	select {
	case <-hold.Done():
		t.Fatalf("holder lost its hold across a %v restart with AOF: %v", outage, hold.Err())
	default:
	}
	uc := time.Now()
	if err := holder.Unlock(context.Background()); err != nil {
		t.Fatalf("holder's Unlock after the restart: %v", err)
	}
	h.add(0, opRelease, uc, time.Now(), 0)
	var order []int
	failed := 0
	for range waiters {
		r := <-results
		if r.err != nil {
			failed++
			t.Errorf("waiter %d: %v", r.i, r.err)
			continue
		}
		order = append(order, r.i)
	}
	if !slices.IsSorted(order) {
		t.Errorf("waiters acquired in order %v after the restart, want their queue order", order)
	}
	h.check(t)
	report(t, 3, fmt.Sprintf("server killed and restarted after %v, AOF appendfsync always; holder with a %v lease, %d waiters queued with 10 s contexts", outage, lease, waiters),
		"no Lock fails or sticks; waiters acquire in queue order; the holder keeps its hold; history linearizable",
		fmt.Sprintf("outage %s; Lock calls failed %d of %d; order %v; holder's hold survived", ms(back.Sub(down)), failed, waiters, order))
}

// waitQueue polls until the lock's queue has n owners.
func waitQueue(t *testing.T, spy *lock.Mutex, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		st, err := spy.Inspect(context.Background(), 0)
		if err == nil && st.QueueLength >= n {
			return
		}
		time.Sleep(5 * time.Millisecond) // polling
	}
	t.Fatalf("queue never reached %d", n)
}

// TestServerRestartNoPersistence: the server restarts with an empty
// dataset. The holder's lock is gone with the data: this is a limit, not
// a guarantee - a waiter may take the lock before the holder hears. The
// figure is how close they come: the holder is told at its client's
// reconnect, not at its next renewal.
func TestServerRestartNoPersistence(t *testing.T) {
	srv := redistest.Start(t)
	name := lockName(t)
	hc := newLockClient(t, srv.Addr())
	holder := newMutex(t, hc, name) // default 30 s lease
	spy := newMutex(t, newLockClient(t, srv.Addr()), name)
	hold, err := holder.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	done := watchDone(hold)
	// The holder's client listens for reconnects once it holds (its own
	// channel); the restart comes after that is set up.
	redistest.Eventually(t, 5*time.Second, "the holder's client to listen for reconnects", func() bool {
		n, ok := srv.Do(t, "PUBSUB", "NUMSUB", "fairlock_client:"+hc.ID()).([]any)
		return ok && len(n) == 2 && n[1] == int64(1)
	})
	waiter := newMutex(t, newLockClient(t, srv.Addr(), lock.WithWaiterTimeout(time.Minute)), name)
	got := make(chan time.Time, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := waiter.Lock(ctx); err != nil {
			t.Error(err)
		}
		got <- time.Now()
	}()
	waitQueue(t, spy, 1)
	srv.Kill(t)
	srv.Restart(t)
	back := time.Now()
	var told, acquired time.Time
	// Its next renewal is up to 10 s away; the reconnect must tell it sooner.
	select {
	case told = <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("holder not told within 2 s of the restart")
	}
	acquired = <-got
	report(t, 4, "server killed and restarted without persistence (the lock's data is lost); holder with the default 30 s lease, one waiter",
		"the waiter rides through and acquires; the holder is told at its reconnect, not at its next renewal 10 s later (overlap is possible: this is the limit of a server that forgets)",
		fmt.Sprintf("waiter acquired %s, holder told %s after the server was back: overlap %s",
			ms(acquired.Sub(back)), ms(told.Sub(back)), ms(max(0, told.Sub(acquired)))))
}

// TestPartitionHolder: only the holder's connections are cut (a proxy
// that holds every byte back); a waiter takes over at the lease's end.
// The holder's Done closes before the server's expiry (X12).
func TestPartitionHolder(t *testing.T) {
	const lease = 2 * time.Second
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	name := lockName(t)
	h := newHistory()
	holder := newMutex(t, newLockClient(t, proxy.Addr(), lock.WithLease(lease)), name)
	call := time.Now()
	hold, err := holder.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	h.add(0, opAcquire, call, time.Now(), hold.Token())
	done := watchDone(hold)
	w := &worker{id: 1, m: newMutex(t, newLockClient(t, srv.Addr(), lock.WithWaiterTimeout(time.Minute)), name), h: h}
	turned := make(chan time.Time, 1)
	go func() {
		w.turn(20*time.Second, 10*time.Millisecond)
		turned <- time.Now()
	}()
	waitQueue(t, newMutex(t, newLockClient(t, srv.Addr()), name), 1)
	proxy.Blackhole(true)
	cut := time.Now()
	doneAt := make(chan time.Time, 1)
	margin := tellsBeforeExpiry(t, srv, name, teeTime(done, doneAt), lease+10*time.Second)
	told := <-doneAt
	h.addOpen(0, opReleaseMaybe, told)
	<-turned
	proxy.Blackhole(false)
	if margin < 0 {
		t.Errorf("holder told %v after the server's expiry", -margin)
	}
	if w.acquired != 1 {
		t.Errorf("waiter acquired %d times, want 1", w.acquired)
	}
	h.check(t)
	report(t, 5, "the holder's connections cut by a proxy that holds every byte back (2 s lease); a waiter on a healthy connection",
		"the holder's Done closes before the server expires its lease (X12); the waiter then takes over",
		fmt.Sprintf("holder told %s after the cut, %s before the server's expiry", ms(told.Sub(cut)), ms(margin)))
}

// teeTime passes on one time from in to out and returns a channel that
// gets it too.
func teeTime(in <-chan time.Time, out chan<- time.Time) <-chan time.Time {
	both := make(chan time.Time, 1)
	go func() {
		at := <-in
		out <- at
		both <- at
	}()
	return both
}

// contention runs workers taking turns on one lock for d, each its own
// client through addr, and returns them.
func contention(t *testing.T, h *history, addr, name string, n int, d, work time.Duration, opts ...lock.Option) []*worker {
	t.Helper()
	ws := make([]*worker, n)
	for i := range ws {
		ws[i] = &worker{id: i, m: newMutex(t, newLockClient(t, addr, opts...), name), h: h}
	}
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	for _, w := range ws {
		wg.Go(func() {
			for time.Now().Before(stop) {
				w.turn(10*time.Second, work)
			}
		})
	}
	t.Cleanup(wg.Wait)
	return ws
}

func totals(ws []*worker) (acquired, failed, lost int) {
	for _, w := range ws {
		acquired += w.acquired
		failed += w.failed
		lost += w.lost
	}
	return
}

// TestPartitionEveryone: every client's connections go through one proxy
// that holds all bytes back for a second during contention.
func TestPartitionEveryone(t *testing.T) {
	const outage = time.Second
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	name := lockName(t)
	h := newHistory()
	done := make(chan struct{})
	var ws []*worker
	t.Run("work", func(t *testing.T) {
		ws = contention(t, h, proxy.Addr(), name, 4, 4*time.Second, 5*time.Millisecond, lock.WithLease(2*time.Second))
		time.Sleep(time.Second) // contention before the fault
		proxy.Blackhole(true)
		time.Sleep(outage) // the fault's length
		proxy.Blackhole(false)
		close(done)
	})
	<-done
	acquired, failed, lost := totals(ws)
	if failed > 0 {
		t.Errorf("%d Lock calls failed (10 s contexts) across a %v partition", failed, outage)
	}
	h.check(t)
	report(t, 6, fmt.Sprintf("every connection held back by the proxy for %v during contention (4 clients, 2 s lease)", outage),
		"Lock calls with 10 s contexts ride through; history linearizable",
		fmt.Sprintf("acquisitions %d, Lock calls failed %d, holds lost %d, operations checked %d", acquired, failed, lost, h.len()))
}

// TestResetEveryConnection: the proxy resets every connection every
// 200 ms while 8 clients contend for 3 s.
func TestResetEveryConnection(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	name := lockName(t)
	h := newHistory()
	resets := 0
	var ws []*worker
	t.Run("work", func(t *testing.T) {
		ws = contention(t, h, proxy.Addr(), name, 8, 3*time.Second, 2*time.Millisecond)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
			<-tick.C
			proxy.ResetAll()
			resets++
		}
	})
	acquired, failed, lost := totals(ws)
	if failed > 0 {
		t.Errorf("%d Lock calls failed (10 s contexts) while connections were reset", failed)
	}
	h.check(t)
	report(t, 7, "every connection reset (RST) every 200 ms for 3 s while 8 clients contend",
		"Lock calls ride through; no two owners believe they hold at once (history linearizable)",
		fmt.Sprintf("%d resets; acquisitions %d, Lock calls failed %d, holds lost %d, operations checked %d", resets, acquired, failed, lost, h.len()))
}

// TestLatency: 50 ms added each way to every connection.
func TestLatency(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	proxy.SetLatency(50 * time.Millisecond)
	name := lockName(t)
	h := newHistory()
	var ws []*worker
	t.Run("work", func(t *testing.T) {
		ws = contention(t, h, proxy.Addr(), name, 4, 3*time.Second, time.Millisecond, lock.WithLease(2*time.Second))
	})
	acquired, failed, lost := totals(ws)
	if failed > 0 || lost > 0 {
		t.Errorf("with 50 ms each way: %d Lock calls failed, %d holds lost", failed, lost)
	}
	h.check(t)
	report(t, 8, "50 ms added each way to every connection; 4 clients contend for 3 s (2 s lease)",
		"nothing fails, no hold is lost, history linearizable",
		fmt.Sprintf("acquisitions %d (%.1f/s), Lock calls failed %d, holds lost %d", acquired, float64(acquired)/3, failed, lost))
}

// TestCancellationStorm: 200 waiters, half of them cancelled at random
// times; then 1,000 Locks cancelled at random points of their wait. The
// queue ends empty and no subscription is left on the server.
func TestCancellationStorm(t *testing.T) {
	srv := redistest.Start(t)
	name := lockName(t)
	holderC := newLockClient(t, srv.Addr())
	holder := newMutex(t, holderC, name)
	if _, err := holder.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	clients := make([]*lock.Client, 8)
	for i := range clients {
		clients[i] = newLockClient(t, srv.Addr())
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var wg sync.WaitGroup
	var acquiredN, cancelledN, otherErr sync.Map
	count := func(m *sync.Map) int {
		n := 0
		m.Range(func(any, any) bool { n++; return true })
		return n
	}
	for i := range 200 {
		m := newMutex(t, clients[i%len(clients)], name)
		cancelAfter := time.Duration(-1)
		if i%2 == 0 {
			cancelAfter = time.Duration(rng.IntN(400)) * time.Millisecond
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if cancelAfter >= 0 {
				time.AfterFunc(cancelAfter, cancel)
			}
			_, err := m.Lock(ctx)
			switch {
			case err == nil:
				acquiredN.Store(i, true)
				_ = m.Unlock(context.Background())
			case errors.Is(err, context.Canceled):
				cancelledN.Store(i, true)
			default:
				otherErr.Store(i, err)
			}
		})
	}
	time.Sleep(500 * time.Millisecond) // let the cancellations happen while held
	if err := holder.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	otherErr.Range(func(k, v any) bool { t.Errorf("waiter %v: %v", k, v); return true })
	// 1,000 Locks cancelled at random points, many while subscribing.
	if _, err := holder.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		m := newMutex(t, clients[i%len(clients)], name)
		d := time.Duration(rng.IntN(3000)) * time.Microsecond
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			if _, err := m.Lock(ctx); err == nil {
				t.Error("a Lock acquired a held lock")
			}
		})
		if i%100 == 99 {
			wg.Wait()
		}
	}
	wg.Wait()
	if err := holder.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, err := holder.Inspect(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	// A waiter's subscription lingers a second after its call, for the
	// owner's next wait; then it must be gone.
	chans := subscribedAfterLinger(t, srv, 3*time.Second)
	if st.QueueLength != 0 || st.Locked() || len(chans) != 0 {
		t.Errorf("after the storm: queue %d, locked %t, %d wake-up channels still subscribed on the server", st.QueueLength, st.Locked(), len(chans))
	}
	report(t, 9, "200 waiters, half cancelled at random; then 1,000 Locks cancelled at random points of their wait (many while subscribing)",
		"the queue ends empty, nothing held, 0 subscriptions left on the server once the 1 s linger is over",
		fmt.Sprintf("first round: acquired %d, cancelled %d; afterwards: queue %d, subscriptions left %d", count(&acquiredN), count(&cancelledN), st.QueueLength, len(chans)))
}

// subscribedAfterLinger polls the server's wake-up channels until none is
// left or within has passed, and returns those left.
func subscribedAfterLinger(t *testing.T, srv *redistest.Server, within time.Duration) []any {
	end := time.Now().Add(within)
	for {
		chans, _ := srv.Do(t, "PUBSUB", "CHANNELS", "redisson_lock__channel:*").([]any)
		if len(chans) == 0 || time.Now().After(end) {
			return chans
		}
		time.Sleep(20 * time.Millisecond) // polling
	}
}

// TestSharedMutex: 8 goroutines share one Mutex (one owner) for 10 s.
func TestSharedMutex(t *testing.T) {
	srv := redistest.Start(t)
	m := newMutex(t, newLockClient(t, srv.Addr()), lockName(t))
	holds, lost, ops := sharedStorm(t, m, 8, 10*time.Second)
	if lost > 0 {
		t.Errorf("%d false losses", lost)
	}
	report(t, 10, "8 goroutines lock and unlock one shared Mutex (one owner) for 10 s",
		"no hold ends as lost while the server holds it",
		fmt.Sprintf("%d operations, %d holds, %d false losses", ops, holds, lost))
}

func sharedStorm(t *testing.T, m *lock.Mutex, workers int, d time.Duration) (holds, lost, ops int) {
	var (
		mu   sync.Mutex
		seen = map[*lock.Hold]bool{}
		wg   sync.WaitGroup
		n    int
	)
	stop := time.Now().Add(d)
	for range workers {
		wg.Go(func() {
			for time.Now().Before(stop) {
				h, err := m.Lock(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				if err := m.Unlock(context.Background()); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				seen[h] = true
				n += 2
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for h := range seen {
		if errors.Is(h.Err(), lock.ErrLockLost) {
			lost++
		}
	}
	return len(seen), lost, n
}

// TestUnlockDuringPartition: the holder's Unlock cannot reach the server
// (its connections are held back); Unlock fails, and the lock frees itself
// within one lease of that (X13).
func TestUnlockDuringPartition(t *testing.T) {
	const lease = time.Second
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	name := lockName(t)
	holder := newMutex(t, newLockClient(t, proxy.Addr(), lock.WithLease(lease)), name)
	hold, err := holder.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole(true)
	call := time.Now()
	free := make(chan time.Time, 1)
	go func() {
		defer close(free)
		for deadline := call.Add(lease + 10*time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if n, _ := srv.Do(t, "EXISTS", name).(int64); n == 0 {
				free <- time.Now()
				return
			}
		}
	}()
	err = holder.Unlock(context.Background())
	returned := time.Now()
	if err == nil {
		t.Fatal("Unlock succeeded through a partition")
	}
	if !errors.Is(err, lock.ErrLockLost) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Unlock through a partition: %v, want ErrLockLost and not the caller's context.DeadlineExceeded (its context never ends)", err)
	}
	select {
	case <-hold.Done():
	case <-time.After(time.Second):
		t.Error("hold not ended after a failed Unlock")
	}
	freeAt, ok := <-free
	proxy.Blackhole(false)
	// The poll sees the key gone up to one poll (5 ms and a connection)
	// after it went.
	const pollSlack = 20 * time.Millisecond
	if !ok || freeAt.Sub(call) > lease+pollSlack {
		t.Errorf("lock not free within one lease (%v) of the Unlock call", lease)
	}
	report(t, 11, "Unlock while the holder's connections are held back (1 s lease)",
		"Unlock fails, the hold ends, and the lock does not outlive the Unlock call by more than one lease (X13)",
		fmt.Sprintf("Unlock returned after %s with %q; lock free %s after the Unlock call", ms(returned.Sub(call)), shortErr(err), ms(freeAt.Sub(call))))
}

// shortErr drops the lock name and owner from an error's text.
func shortErr(err error) string {
	s := err.Error()
	if _, rest, ok := strings.Cut(s, "): "); ok {
		s = rest
	}
	return s
}

// TestBadInput: bad names, durations and contexts get a clear error
// (errors.Is) and touch nothing in Redis.
func TestBadInput(t *testing.T) {
	srv := redistest.Start(t)
	c := newLockClient(t, srv.Addr())
	m := newMutex(t, c, lockName(t))
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		what string
		err  error
		want error
	}{
		{"empty name", func() error { _, err := c.NewMutex(""); return err }(), lock.ErrInvalidName},
		{"name whose keys split slots", func() error { _, err := c.NewMutex("a{}b"); return err }(), lock.ErrInvalidName},
		{"zero lease", func() error { _, err := m.LockWithLease(context.Background(), 0); return err }(), lock.ErrInvalidArgument},
		{"negative wait", func() error {
			_, err := m.TryLockWithLease(context.Background(), -time.Second, time.Second)
			return err
		}(), lock.ErrInvalidArgument},
		{"overflowing lease", func() error { _, err := m.LockWithLease(context.Background(), (10*365*24*time.Hour)+1); return err }(), lock.ErrInvalidArgument},
		{"nil context", func() error { _, err := m.Lock(nil); return err }(), lock.ErrInvalidArgument}, //nolint:staticcheck // nil is the input under test
		{"cancelled context", func() error { _, err := m.Lock(cancelled); return err }(), context.Canceled},
		{"nil context to Unlock", m.Unlock(nil), lock.ErrInvalidArgument}, //nolint:staticcheck // nil is the input under test
	}
	for _, tc := range cases {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.what, tc.err, tc.want)
		}
	}
	if n, _ := srv.Do(t, "DBSIZE").(int64); n != 0 {
		t.Errorf("bad input left %d keys in Redis", n)
	}
	report(t, 12, "bad input: empty and slot-splitting names, zero/negative/overflowing durations, nil and cancelled contexts",
		"each gets its sentinel error (errors.Is), nothing is written to Redis, nothing panics",
		fmt.Sprintf("%d cases, keys written 0", len(cases)))
}

// TestStalledSubscriptionConnection: only the waiters' subscription
// connection stalls (held back by a proxy; scripts go straight to the
// server), as an idle pub/sub connection a NAT dropped without a word
// does. The waiters keep their heartbeat and their order: the head takes
// the lock when the holder's lease runs out, the next one after it, and
// Close does not wait for the stalled subscriptions (X2, X3).
func TestStalledSubscriptionConnection(t *testing.T) {
	const (
		lease     = time.Second
		heartbeat = (5 * time.Second) / 3
		slack     = 2 * time.Second
	)
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	name := lockName(t)
	direct, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(direct.Close)
	proxied, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{proxy.Addr()}, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxied.Close)
	subs := rueidisbackend.New(proxied)
	scripts := rueidisbackend.New(direct)
	split := backendtest.Split{Backend: scripts, Subs: subs}
	t.Cleanup(func() { split.Close() })
	c, err := lock.NewClient(split)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Cleanup(func() { proxy.Blackhole(false) }) // before the clients close
	// The subscription connection is up and idle, as after earlier waits.
	warm, err := subs.Subscribe(context.Background(), "fault:warm-up")
	if err != nil {
		t.Fatal(err)
	}
	warm.Close()

	w0 := newMutex(t, newLockClient(t, srv.Addr()), name)
	spy := newMutex(t, newLockClient(t, srv.Addr()), name)
	w1, w2 := newMutex(t, c, name), newMutex(t, c, name)
	h0, err := w0.LockWithLease(context.Background(), lease)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole(true)
	type res struct {
		err error
		at  time.Time
	}
	lockAsync := func(m *lock.Mutex) <-chan res {
		ch := make(chan res, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := m.Lock(ctx)
			ch <- res{err, time.Now()}
		}()
		return ch
	}
	ch1 := lockAsync(w1)
	waitQueue(t, spy, 1)
	ch2 := lockAsync(w2)
	waitQueue(t, spy, 2)
	var expired time.Time
	select {
	case <-h0.Done():
		expired = time.Now()
	case <-time.After(lease + slack):
		t.Fatal("w0's lease did not run out")
	}
	var r1 res
	select {
	case r1 = <-ch1:
	case r2 := <-ch2:
		t.Fatalf("w2 took the lock %v after w0's lease ran out, before w1 (err %v)", r2.at.Sub(expired), r2.err)
	case <-time.After((5 * time.Second) + slack):
		t.Fatalf("no waiter took the lock within %v of w0's lease running out", (5*time.Second)+slack)
	}
	if r1.err != nil {
		t.Fatalf("w1: %v", r1.err)
	}
	took := r1.at.Sub(expired)
	if took > heartbeat+slack {
		t.Errorf("w1 took the lock %v after w0's lease ran out, want within a heartbeat (%v)", took, heartbeat)
	}
	released := time.Now()
	if err := w1.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	var r2 res
	select {
	case r2 = <-ch2:
	case <-time.After(heartbeat + slack):
		t.Fatalf("w2 did not take the lock within %v of w1's Unlock", heartbeat+slack)
	}
	if r2.err != nil {
		t.Fatalf("w2: %v", r2.err)
	}
	next := r2.at.Sub(released)
	if err := w2.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	// One more waiter, stalled in its Subscribe, while the client closes.
	if _, err := w0.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	ch3 := lockAsync(w1)
	waitQueue(t, spy, 1)
	start := time.Now()
	closed := make(chan time.Duration, 1)
	go func() {
		c.Close()
		closed <- time.Since(start)
	}()
	var closeTook time.Duration
	select {
	case closeTook = <-closed:
	case <-time.After(closeBound):
		// Close waited for the stalled SUBSCRIBE to be taken back (4.3 s),
		// and before that for the wire it held (9.3 s).
		t.Fatalf("Close did not return within %v while the subscription connection stalled", closeBound)
	}
	if r3 := <-ch3; !errors.Is(r3.err, lock.ErrClosed) {
		t.Errorf("the waiter after Close: %v, want ErrClosed", r3.err)
	}
	if err := w0.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	report(t, 13, "only the waiters' subscription connection held back by a proxy (scripts still answered); holder's 1 s lease runs out with 2 waiters queued, then Close with a third",
		fmt.Sprintf("the head takes the lock within a heartbeat of the lease's end, the next one after it (FIFO); Close does not wait for the stalled subscriptions (X2, X3; asserted: within %v)", closeBound),
		fmt.Sprintf("head took the lock %s after the lease ran out; next %s after its Unlock; Close returned in %s", ms(took), ms(next), ms(closeTook)))
}

// closeBound is how long Client.Close may take while its subscription
// connection stalls: it waits for nothing on that connection (it took 1.1
// ms here; 9.3 s before the hubs sent UNSUBSCRIBE beside Subscription.Close
// and Close closed the backend before waiting for its goroutines).
const closeBound = time.Second
