package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fairlock/fairlock/lockbench"
)

// waitersRound is scenario 6: the cost of many idle waiters on one held
// lock, each with its own client.
type waitersRound struct {
	Waiters     int           `json:"waiters"`
	Window      time.Duration `json:"window_ns"`
	ServerCPU   float64       `json:"server_cpu_s"`
	ClientCPU   time.Duration `json:"client_cpu_ns"`
	Commands    int64         `json:"commands"`
	CommandsTop commandCalls  `json:"command_calls"`
	MachineBusy float64       `json:"machine_busy"`
}

// idleWaiters has one client hold a lock and n others wait for it, then
// measures the server's CPU (INFO cpu) and this process's (rusage) over
// the window, and the commands the server ran.
func (b *bench) idleWaiters(ctx context.Context, k lockKind, n int) (waitersRound, error) {
	r := waitersRound{Waiters: n, Window: b.set.IdleWaitersFor}
	clients, err := connectMany(k, b.srv.addr, n+1, connOpts{small: true})
	if err != nil {
		return r, err
	}
	defer closeAll(clients)
	name := b.lockName("waiters")
	holder, err := clients[0].locker(name)
	if err != nil {
		return r, err
	}
	if _, err := holder.Lock(ctx); err != nil {
		return r, err
	}
	defer func() { _ = holder.Unlock(context.WithoutCancel(ctx)) }()

	before, err := b.srv.commandCalls(ctx)
	if err != nil {
		return r, err
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, c := range clients[1:] {
		l, err := c.locker(name)
		if err != nil {
			cancel()
			wg.Wait()
			return r, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.Lock(wctx); err == nil {
				errs <- fmt.Errorf("a waiter acquired a held lock")
				_ = l.Unlock(context.WithoutCancel(wctx))
			}
		}()
	}
	stopWaiters := func() {
		cancel()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			b.log("  %s: waiters still waiting 30s after cancellation", k.name)
		}
	}
	defer stopWaiters()

	// Everyone is waiting once each has run the lock's acquire once: for
	// fairlock the queue holds n owners; for the others n more script
	// calls than before. Then a settling second.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var ready bool
		if k.fairlock {
			m, err := clients[0].mutex(name)
			if err != nil {
				return r, err
			}
			st, err := m.Inspect(ctx, 0)
			if err != nil {
				return r, err
			}
			ready = st.QueueLength >= n
		} else {
			now, err := b.srv.commandCalls(ctx)
			if err != nil {
				return r, err
			}
			d := now.since(before)
			ready = d["evalsha"].Calls+d["eval"].Calls >= int64(n)
		}
		if ready {
			break
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("%d waiters not all waiting after 30s", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second)
	m, err := b.srv.startMeter(ctx)
	if err != nil {
		return r, err
	}
	select {
	case <-time.After(b.set.IdleWaitersFor):
	case err := <-errs:
		return r, err
	case <-ctx.Done():
		return r, ctx.Err()
	}
	u, err := m.end(ctx)
	if err != nil {
		return r, err
	}
	r.Window = u.wall
	r.ServerCPU, r.ClientCPU, r.Commands, r.CommandsTop, r.MachineBusy = u.serverCPU, u.clientCPU, u.calls.total(), u.calls, u.machineBusy
	return r, nil
}

// pingRound is the round trip of one PING.
type pingRound struct {
	RTT lockbench.Summary `json:"rtt"`
}
