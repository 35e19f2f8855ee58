// Package sim runs the lock in a deterministic simulation: the real lock
// package and the real rueidis adapter, against an in-process server
// (miniredis, which runs the same Lua scripts) behind a switch that
// decides, per message and by a seed, to deliver, delay or fail, all in
// a testing/synctest bubble whose clock is virtual - hours of leases in
// seconds. The soak's checker (internal/soak) judges each history, and
// invariants are checked on the server's state after every script that
// wrote. miniredis runs the scripts through a script engine of this
// package (scripting.go) that keeps one Lua state.
package sim

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock/internal/redisson"
	"github.com/fairlock/fairlock/internal/soak"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

// Config is one simulated history.
type Config struct {
	Seed     uint64
	Duration time.Duration // virtual
	Clients  int           // Go clients (each a rueidis client of its own)
	Owners   int           // owners per client on each shared lock
	Locks    int           // shared locks
	Lease    time.Duration // the clients' lease (the watchdog's)
	Faults   Faults
	// Nemesis turns on server-wide faults: pauses and every connection
	// failing at once.
	Nemesis bool
	// Record keeps every script exchange (Result.Exchanges): the
	// differential test replays them on redis-server.
	Record bool
	// Trace keeps every decision of the switch (Result.Trace).
	Trace bool
	// SharedOwner makes each client's first owner on each lock two
	// goroutines on one Mutex: one owner's calls at once.
	SharedOwner bool
	// CheckEvery runs the invariant check after every n-th script that
	// wrote (0 or 1: after each).
	CheckEvery int
	// Java is how many Redisson-model clients queue on the shared locks
	// (one thread per lock each).
	Java int
	// Stop, closed (by a wall-clock timer outside the bubble), ends the
	// history early, at the next virtual second: a run bounded in wall
	// time does not wait out a long history.
	Stop <-chan struct{}
}

// DefaultConfig is the simulation's usual mix.
func DefaultConfig(seed uint64) Config {
	return Config{Seed: seed, Duration: 10 * time.Minute, Clients: 3, Owners: 2, Locks: 3, Lease: 15 * time.Second,
		Faults: Faults{Base: 25 * time.Microsecond, Delay: 0.3, MaxDelay: time.Millisecond, LongDelay: 0.002, MaxLong: 2 * time.Second,
			Fail: 0.002, LoseReply: 0.002},
		Nemesis: true, Java: 1}
}

// Result is one history, its report and the simulation's own counts.
type Result struct {
	History    *soak.History
	Report     soak.Report
	Ops        int
	Faults     int
	Counts     map[string]int // the switch's decisions by kind
	Trace      []Decision     // with Config.Trace
	Checks     int            // invariant checks run
	Broken     []string       // invariants found broken
	Exchanges  []Exchange
	VirtualEnd time.Duration
	RanFor     time.Duration // the virtual time the actors ran (Duration, or less with Stop)
}

// Run simulates one history and checks it. dir takes the history file.
func Run(t *testing.T, cfg Config, dir string) Result {
	var res Result
	var rec *recorder
	synctest.Test(t, func(t *testing.T) {
		rec = newRecorder(cfg.Seed)
		res = simulate(t, cfg, rec)
	})
	b := soak.DefaultBounds(cfg.Lease)
	h, err := rec.complete(dir, b)
	if err != nil {
		t.Fatalf("sim: history: %v", err)
	}
	res.History = h
	res.Report = soak.Check(h, b)
	res.Ops = len(h.Ops())
	res.Faults = len(h.Faults())
	return res
}

// world is one simulation's server, switch and invariant checker.
type world struct {
	srv    *miniredis.Miniredis
	engine *scriptEngine
	nw     *Network
	inv    *Invariants
	rec    *recorder
	cfg    Config
	writes int // scripts that wrote (under the server's lock)
}

func simulate(t *testing.T, cfg Config, rec *recorder) Result {
	w := &world{srv: miniredis.NewMiniRedis(), rec: rec, cfg: cfg}
	w.srv.ClockTTL(true) // TTLs run on time.Now(): the bubble's virtual clock
	names := make([]string, cfg.Locks)
	for i := range names {
		names[i] = fmt.Sprintf("sim:s%d", i)
	}
	var err error
	if w.engine, err = installScripting(w.srv); err != nil {
		t.Fatal(err)
	}
	w.inv = NewInvariants(names)
	w.engine.afterWrite = w.afterWrite
	w.nw = NewNetwork(cfg.Seed, w.srv, cfg.Faults, Hooks{Fault: w.fault})
	if cfg.Record {
		w.nw.Record()
	}
	if cfg.Trace {
		w.nw.KeepTrace()
	}
	ctx, stop := context.WithCancel(context.Background())
	var actors sync.WaitGroup
	closers := w.startActors(t, ctx, &actors, names)
	ranFor := runFor(cfg.Duration, cfg.Stop)
	stop()
	actors.Wait()
	for _, c := range closers {
		c()
	}
	w.engine.Inspect(w.inv.Check)
	end := rec.h.Now()
	w.srv.Close()
	w.nw.Close()
	checks, broken := w.inv.Result()
	return Result{Counts: w.nw.Counts(), Trace: w.nw.Trace(), Checks: checks, Broken: broken, VirtualEnd: end, RanFor: ranFor,
		Exchanges: w.nw.Exchanges()}
}

// runFor lets virtual time run d, or until stop closes, and returns how
// long it ran.
func runFor(d time.Duration, stop <-chan struct{}) time.Duration {
	ran := time.Duration(0)
	for ran < d {
		select {
		case <-stop:
			return ran
		default:
		}
		step := min(d-ran, time.Second)
		time.Sleep(step)
		ran += step
	}
	return ran
}

// startActors opens the clients and starts their owners, the admin and
// the nemesis on actors; it returns what closes the clients.
func (w *world) startActors(t *testing.T, ctx context.Context, actors *sync.WaitGroup, names []string) []func() {
	var closers []func()
	for c := 0; c <= w.cfg.Clients; c++ {
		label := fmt.Sprintf("rueidis#%d", c)
		b, lc := w.client(t, label)
		closers = append(closers, func() { lc.Close(); b.Close() })
		if c == w.cfg.Clients {
			actors.Go(func() { w.admin(ctx, lc, label, names) })
			break
		}
		for _, name := range names {
			for k := 0; k < w.cfg.Owners; k++ {
				m, err := lc.NewMutex(name, lock.WithOwnerID(int64(k+1)))
				if err != nil {
					t.Fatal(err)
				}
				o := &owner{m: m, client: label, rec: w.rec}
				n := 1
				if w.cfg.SharedOwner && k == 0 {
					n = 2 // two goroutines on one Mutex
				}
				for g := 0; g < n; g++ {
					a := actor{o, rand.New(rand.NewPCG(w.cfg.Seed, hashLabel(fmt.Sprintf("%s/%s/%d/%d", label, name, k, g))))}
					actors.Go(func() {
						for ctx.Err() == nil {
							a.step(ctx)
						}
					})
				}
			}
		}
	}
	for i := 0; i < w.cfg.Java; i++ {
		closers = append(closers, w.startJava(t, ctx, actors, i, names))
	}
	if w.cfg.Nemesis {
		actors.Go(func() { w.nemesis(ctx, names) })
	}
	return closers
}

// client opens one rueidis client whose every connection goes through
// the switch, and a lock client on it.
func (w *world) client(t *testing.T, label string) (*rueidisbackend.Backend, *lock.Client) {
	b := w.dial(t, label)
	lc, err := lock.NewClient(b, lock.WithLease(w.cfg.Lease), lock.WithObserver(observer{w.rec.h}))
	if err != nil {
		t.Fatalf("sim: client %s: %v", label, err)
	}
	return b, lc
}

// dial opens one rueidis client whose every connection goes through the
// switch, labelled label.
func (w *world) dial(t *testing.T, label string) *rueidisbackend.Backend {
	opt := rueidis.ClientOption{InitAddress: []string{"sim:6379"}, DisableCache: true, ForceSingleClient: true,
		DialCtxFn:  func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) { return w.nw.Dial(label) },
		RetryDelay: retryDelay}
	// The switch may fail the first connection's handshake, as a network
	// can: dial again, a bounded number of times, as an application would.
	var b *rueidisbackend.Backend
	var err error
	for try := 0; try < 20; try++ {
		if b, err = rueidisbackend.Dial(opt); err == nil {
			return b
		}
	}
	t.Fatalf("sim: dial %s: %v", label, err)
	return nil
}

// retryDelay is rueidis's back-off between retries without its jitter,
// which comes from a source no seed sets.
func retryDelay(attempts int, _ rueidis.Completed, _ error) time.Duration {
	return min(time.Second, time.Duration(1<<min(20, attempts))*time.Microsecond)
}

// startJava opens one Redisson-model client (over rueidis, through the
// switch) with one thread on each lock, and returns what closes it.
func (w *world) startJava(t *testing.T, ctx context.Context, actors *sync.WaitGroup, i int, names []string) func() {
	label := fmt.Sprintf("java#%d", i)
	b := w.dial(t, label)
	jc, err := redisson.New(b, false)
	if err != nil {
		t.Fatalf("sim: %s: %v", label, err)
	}
	for k, name := range names {
		j := &javaOwner{l: jc.Lock(name, int64(k+1)), name: name, rec: w.rec,
			rnd: rand.New(rand.NewPCG(w.cfg.Seed, hashLabel(fmt.Sprintf("%s/%s", label, name))))}
		actors.Go(func() {
			for ctx.Err() == nil {
				j.step(ctx)
			}
		})
	}
	return func() { b.Close() }
}

// afterWrite checks the invariants after every CheckEvery-th script that
// wrote, before its reply goes out: no state a script leaves goes
// unchecked (reads change nothing the invariants read; a key's expiry
// only ends entries they would excuse). It checks the locks the script
// named in its KEYS (a script in a cluster touches no other keys), and
// every lock after every fullCheckEvery-th.
func (w *world) afterWrite(do CommandFunc, keys []string) {
	w.writes++
	if n := w.cfg.CheckEvery; n > 1 && w.writes%n != 0 {
		return
	}
	if w.writes%fullCheckEvery == 0 {
		keys = nil
	}
	w.inv.CheckKeys(do, keys)
}

// fullCheckEvery is how often (in scripts that wrote) every lock is
// checked, whatever the script named.
const fullCheckEvery = 64

// fault records one message's fault in the history, so the checker
// excuses what it explains (as the soak's proxies' faults are). It lasts
// until the message's delay is over: a message that fails or is lost
// after a delay holds its connection up for that delay and fails it only
// then (seed 123653965350671: a request held 654 ms and then failed,
// recorded as a reset at its start, so a call 2.17 s after that start -
// 1.5 s after the connection failed - was judged with no fault near).
func (w *world) fault(who string, d Decision) {
	now := w.rec.h.Now()
	f := soak.Fault{Kind: soak.FaultReset, Target: who, Start: now, End: now + d.Delay}
	if d.What != "fail" && d.What != "lose" {
		f.Kind = soak.FaultLatency
	}
	w.rec.h.AddFault(f)
}

// admin force-unlocks a random shared lock now and then.
func (w *world) admin(ctx context.Context, lc *lock.Client, label string, names []string) {
	rnd := rand.New(rand.NewPCG(w.cfg.Seed, hashLabel("admin")))
	for ctx.Err() == nil {
		sleep(ctx, time.Duration(5+rnd.IntN(55))*time.Second)
		if ctx.Err() != nil {
			return
		}
		m, err := lc.NewMutex(names[rnd.IntN(len(names))])
		if err != nil {
			return
		}
		forceUnlock(ctx, w.rec, m, label)
	}
}

// nemesis, now and then, pauses the server, fails every connection,
// restarts the server (every connection fails, and it is down for a
// while) with its data or without it, or evicts every key with an expiry
// (every lock key), as maxmemory under volatile-ttl does.
func (w *world) nemesis(ctx context.Context, names []string) {
	rnd := rand.New(rand.NewPCG(w.cfg.Seed, hashLabel("nemesis")))
	for ctx.Err() == nil {
		sleep(ctx, time.Duration(10+rnd.IntN(50))*time.Second)
		if ctx.Err() != nil {
			return
		}
		now := w.rec.h.Now()
		d := time.Duration(100+rnd.IntN(5000)) * time.Millisecond
		switch r := rnd.IntN(6); {
		case r < 2:
			w.nw.Pause(d)
			w.rec.h.AddFault(soak.Fault{Kind: soak.FaultPause, Target: "server", Start: now, End: now + d})
		case r < 4:
			w.nw.FailAll()
			w.rec.h.AddFault(soak.Fault{Kind: soak.FaultReset, Target: "server", Start: now, End: now})
		case r < 5:
			w.restart(names, d/2, rnd.IntN(2) == 0)
		default:
			w.evict(names, func(pttl int64) bool { return pttl >= 0 })
			w.rec.h.AddFault(soak.Fault{Kind: soak.FaultEvict, Target: "keys", Start: now, End: w.rec.h.Now()})
		}
	}
}

// restart restarts the server: every connection fails, and it answers
// nothing for down; without its data (no persistence) it comes back empty.
func (w *world) restart(names []string, down time.Duration, keep bool) {
	now := w.rec.h.Now()
	w.nw.Pause(down)
	w.nw.FailAll()
	if !keep {
		w.evict(names, func(int64) bool { return true })
	}
	w.rec.h.AddFault(soak.Fault{Kind: soak.FaultRestart, Target: "server", Start: now, End: now + down})
}

// evict deletes, in one step of the server, every key whose PTTL gone
// accepts, and records a KindEviction for each lock, Released when its
// hash was there before and is gone after (as the soak's nemesis does).
func (w *world) evict(names []string, gone func(pttl int64) bool) {
	call := w.rec.h.Now()
	had := map[string]bool{}
	w.engine.Inspect(func(do CommandFunc) {
		keys, _ := do("KEYS", "*")
		all, _ := keys.([]any)
		for _, k := range all {
			key, _ := k.(string)
			if pttl, _ := do("PTTL", key); gone(toInt(pttl)) {
				do("DEL", key)
				had[key] = true
			}
		}
	})
	ret := w.rec.h.Now()
	for _, name := range names {
		w.rec.h.Add(&soak.Op{Kind: soak.KindEviction, Lock: name, Client: "server", Call: call, Return: ret, Released: had[name]})
	}
}

// toInt is a reply's integer (0 for anything else).
func toInt(v any) int64 {
	n, _ := v.(int)
	return int64(n)
}
