package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/fairlock/fairlock/lockbench"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"
)

// settings bound every scenario; quick settings make a smoke test.
type settings struct {
	Rounds          int           `json:"rounds"`
	UncontendedOps  int           `json:"uncontended_ops"`
	Contenders      []int         `json:"contenders"`
	ContendedFor    time.Duration `json:"contended_for_ns"`
	Drain           time.Duration `json:"drain_ns"`
	Headline        int           `json:"headline_contenders"`
	IdleHandovers   int           `json:"idle_handovers"`
	IdleFor         time.Duration `json:"idle_for_ns"`
	ManyWorkers     int           `json:"many_workers"`
	ManyLocks       int           `json:"many_locks"`
	ManyFor         time.Duration `json:"many_for_ns"`
	QueueLengths    []int         `json:"queue_lengths"`
	QueueSamples    int           `json:"queue_samples"`
	IdleWaiters     int           `json:"idle_waiters"`
	IdleWaitersFor  time.Duration `json:"idle_waiters_for_ns"`
	PingSamples     int           `json:"ping_samples"`
	MaxContendedOps int           `json:"max_contended_ops"`
}

var fullSettings = settings{
	Rounds:          2,
	UncontendedOps:  2000,
	Contenders:      []int{1, 2, 4, 8, 16, 32},
	ContendedFor:    1500 * time.Millisecond,
	Drain:           2 * time.Second,
	Headline:        16,
	IdleHandovers:   20,
	IdleFor:         30 * time.Millisecond,
	ManyWorkers:     64,
	ManyLocks:       1024,
	ManyFor:         2 * time.Second,
	QueueLengths:    []int{0, 100, 1000, 10000},
	QueueSamples:    30,
	IdleWaiters:     1000,
	IdleWaitersFor:  10 * time.Second,
	PingSamples:     2000,
	MaxContendedOps: 200_000,
}

var quickSettings = settings{
	Rounds:          2,
	UncontendedOps:  100,
	Contenders:      []int{1, 4, 16},
	ContendedFor:    200 * time.Millisecond,
	Drain:           time.Second,
	Headline:        16,
	IdleHandovers:   3,
	IdleFor:         10 * time.Millisecond,
	ManyWorkers:     64,
	ManyLocks:       1024,
	ManyFor:         200 * time.Millisecond,
	QueueLengths:    []int{0, 1000},
	QueueSamples:    3,
	IdleWaiters:     50,
	IdleWaitersFor:  time.Second,
	PingSamples:     100,
	MaxContendedOps: 200_000,
}

// bench is one run of every scenario.
type bench struct {
	srv      *redisServer
	kinds    []lockKind
	set      settings
	log      func(format string, a ...any)
	seq      int               // makes every lock name unique
	profiled map[string]bool   // FIFO runs already profiled, by lock
	scripts  map[string]string // fairlock's scripts by SHA-1 prefix (calibrateScripts)
	// scriptsDir holds the Lua of lock/internal/wire (bareScripts).
	scriptsDir string
}

func (b *bench) lockName(scenario string) string {
	b.seq++
	return fmt.Sprintf("bench:%s:%d", scenario, b.seq)
}

// uncontendedRound is scenario 1 for one lock in one round.
type uncontendedRound struct {
	lockbench.UncontendedResult
	// Interleaved is the latency measured with every lock taking turns
	// (see uncontendedInterleaved); nil in runs older than it.
	Interleaved     *lockbench.Latency `json:"interleaved,omitempty"`
	CommandsPerPair float64            `json:"commands_per_pair"`
	Commands        commandCalls       `json:"command_calls"`
	ServerCPU       float64            `json:"server_cpu_s"`  // over the measured pairs (INFO cpu)
	ClientCPU       time.Duration      `json:"client_cpu_ns"` // this process over them (getrusage)
	Wall            time.Duration      `json:"wall_ns"`       // 0: an older run that measured no CPU
	PerPair         pairCost           `json:"per_pair"`
}

// latency is the round's latency: the interleaved run's, else (an older
// run) the window's own.
func (u uncontendedRound) latency() lockbench.Latency {
	if u.Interleaved != nil {
		return *u.Interleaved
	}
	return u.Latency
}

// cost is the round's cost per pair.
func (u uncontendedRound) cost(pairs int) pairCost {
	return costOf(pairs, u.Commands, u.ServerCPU, float64(u.ClientCPU), u.Wall > 0, u.AllocsPerPair*float64(pairs), u.BytesPerPair*float64(pairs))
}

// uncontendedBlock is how many pairs each lock makes in its turn of the
// interleaved run.
const uncontendedBlock = 100

// uncontendedInterleaved measures scenario 1's latency with every lock's
// client open and the locks taking turns, uncontendedBlock pairs each, so
// that a drift of the machine's speed during the round slows them alike.
// It returns the latencies by lock name, the floor's (emptyScripts) and
// those of fairlock's scripts sent bare (bareScripts), which take their
// turns too.
func (b *bench) uncontendedInterleaved(ctx context.Context) (map[string]lockbench.Latency, map[string]lockbench.Latency, lockbench.Latency, error) {
	none := lockbench.Latency{}
	var lockers []lockbench.Locker
	for _, k := range b.kinds {
		c, err := k.connect(b.srv.addr, connOpts{})
		if err != nil {
			return nil, nil, none, fmt.Errorf("%s: %w", k.name, err)
		}
		defer c.close()
		l, err := c.locker(b.lockName("uncontended"))
		if err != nil {
			return nil, nil, none, fmt.Errorf("%s: %w", k.name, err)
		}
		lockers = append(lockers, l)
	}
	for _, f := range floorClients {
		l, closeFloor, err := f.open(ctx, b.srv.addr)
		if err != nil {
			return nil, nil, none, fmt.Errorf("floor on %s: %w", f.name, err)
		}
		defer closeFloor()
		lockers = append(lockers, l)
	}
	bare, err := openBareScripts(b.srv.addr, b.scriptsDir)
	if err != nil {
		return nil, nil, none, err
	}
	defer bare.close()
	lat, err := lockbench.UncontendedInterleaved(ctx, append(lockers, bare.locker(b.lockName("uncontended-bare"))), b.set.UncontendedOps, uncontendedBlock, 50)
	if err != nil {
		return nil, nil, none, err
	}
	out := make(map[string]lockbench.Latency, len(b.kinds))
	for i, k := range b.kinds {
		out[k.name] = lat[i]
	}
	floors := make(map[string]lockbench.Latency, len(floorClients))
	for i, f := range floorClients {
		floors[f.name] = lat[len(b.kinds)+i]
	}
	return out, floors, lat[len(lat)-1], nil
}

// floorClient opens scenario 1's floor on one client library: a Locker
// that locks nothing, its Lock and its Unlock each one EVALSHA of
// "return 1" on a client with the options fairlock's adapter for that
// library is measured with - the two round trips of any lock that runs a
// script to lock and another to unlock, with no work in them.
type floorClient struct {
	name string // the client library, as fairlockAdapter.name
	open func(ctx context.Context, addr string) (lockbench.Locker, func(), error)
}

// floorClients are the floors measured, one per client library fairlock
// runs on; the first, rueidis, is the report's floor.
var floorClients = []floorClient{
	{name: "rueidis", open: rueidisFloor},
	{name: "valkey", open: valkeyFloor},
	{name: "go-redis", open: goRedisFloor},
}

// floorLocker makes the floor's Locker from one script run, after running
// it once (which loads the script).
func floorLocker(ctx context.Context, run func(context.Context) error, closeClient func()) (lockbench.Locker, func(), error) {
	if err := run(ctx); err != nil {
		closeClient()
		return nil, nil, err
	}
	return lockbench.LockerFuncs{
		LockFunc:   func(ctx context.Context) (int64, error) { return 0, run(ctx) },
		UnlockFunc: run,
	}, closeClient, nil
}

const floorKey = "fairlock-bench:floor"

func rueidisFloor(ctx context.Context, addr string) (lockbench.Locker, func(), error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, nil, err
	}
	script := rueidis.NewLuaScript("return 1")
	return floorLocker(ctx, func(ctx context.Context) error {
		return script.Exec(ctx, c, []string{floorKey}, nil).Error()
	}, c.Close)
}

func valkeyFloor(ctx context.Context, addr string) (lockbench.Locker, func(), error) {
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, nil, err
	}
	script := valkey.NewLuaScript("return 1")
	return floorLocker(ctx, func(ctx context.Context) error {
		return script.Exec(ctx, c, []string{floorKey}, nil).Error()
	}, c.Close)
}

func goRedisFloor(ctx context.Context, addr string) (lockbench.Locker, func(), error) {
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
	script := goredis.NewScript("return 1")
	return floorLocker(ctx, func(ctx context.Context) error {
		return script.Run(ctx, c, []string{floorKey}).Err()
	}, func() { _ = c.Close() })
}

func (b *bench) uncontended(ctx context.Context, k lockKind) (uncontendedRound, error) {
	var r uncontendedRound
	c, err := k.connect(b.srv.addr, connOpts{})
	if err != nil {
		return r, err
	}
	defer c.close()
	l, err := c.locker(b.lockName("uncontended"))
	if err != nil {
		return r, err
	}
	// Warm up first (scripts loaded, connections open) so that the
	// commands counted are the steady state's.
	if _, err := lockbench.Uncontended(ctx, l, 50, 0); err != nil {
		return r, err
	}
	m, err := b.srv.startMeter(ctx)
	if err != nil {
		return r, err
	}
	if r.UncontendedResult, err = lockbench.Uncontended(ctx, l, b.set.UncontendedOps, 0); err != nil {
		return r, err
	}
	u, err := m.end(ctx)
	if err != nil {
		return r, err
	}
	r.CommandsPerPair = float64(u.calls.total()) / float64(b.set.UncontendedOps)
	r.Commands, r.ServerCPU, r.ClientCPU, r.Wall = u.calls, u.serverCPU, u.clientCPU, u.wall
	r.PerPair = r.cost(b.set.UncontendedOps)
	return r, nil
}

// contendedRound is scenario 2 for one lock, one number of contenders, in
// one round.
type contendedRound struct {
	Contenders     int               `json:"contenders"`
	Acquisitions   int               `json:"acquisitions"` // all, drain included
	InWindow       int               `json:"in_window"`
	Throughput     float64           `json:"throughput_per_s"`
	Handover       lockbench.Summary `json:"handover"`
	Wait           lockbench.Summary `json:"wait"`
	MaxWait        time.Duration     `json:"max_wait_ns"` // cancelled waits included
	Unfinished     int               `json:"unfinished"`  // waits cancelled at the end of the drain
	Overtakes      int               `json:"overtakes"`
	Fairness       float64           `json:"jain"`
	Commands       int64             `json:"commands"`
	CommandsPerAcq float64           `json:"commands_per_acquisition"`
	TopCommands    commandCalls      `json:"command_calls"`
	ServerCPU      float64           `json:"server_cpu_s"`
	ClientCPU      time.Duration     `json:"client_cpu_ns"`
	Wall           time.Duration     `json:"wall_ns"`
	MachineBusy    float64           `json:"machine_busy"` // all processes, all cores
	// FIFO: fairlock only, in a separate run with the queue sampler.
	FIFOChecked    int `json:"fifo_checked,omitempty"`
	FIFOViolations int `json:"fifo_violations,omitempty"`
	FIFOSnapshots  int `json:"fifo_snapshots,omitempty"`
	// The hand-overs of the FIFO runs split at the moment the new holder's
	// wake-up message arrived (observe.Observer's Woken): from the previous
	// Unlock returning to the message, and from the message to Lock
	// returning. WokenShare is the share of hand-overs that had one.
	ToWake     lockbench.Summary `json:"release_to_wake"`
	WakeToLock lockbench.Summary `json:"wake_to_lock"`
	WokenShare float64           `json:"woken_share"`
	// Scripts are the script calls of the FIFO run (SLOWLOG), and Profile
	// where this process's CPU went (first round only).
	Scripts []scriptStat    `json:"scripts,omitempty"`
	Profile *profileSummary `json:"profile,omitempty"`
}

// contended runs n contenders, each with its own client, on one lock.
// With fifo the queue sampler runs alongside and FIFO order is checked;
// those runs are kept apart because the sampler's reads would be counted
// as the lock's commands and take CPU from it.
func (b *bench) contended(ctx context.Context, k lockKind, n int, fifo bool) (contendedRound, error) {
	r := contendedRound{Contenders: n}
	var rec *wakeRecorder
	opts := connOpts{}
	if fifo {
		rec = newWakeRecorder()
		opts.observer = rec
	}
	clients, err := connectMany(k, b.srv.addr, n+1, opts) // one more for the sampler
	if err != nil {
		return r, err
	}
	defer closeAll(clients)
	name := b.lockName("contended")
	lockers := make([]lockbench.Locker, n)
	for i := range lockers {
		if lockers[i], err = clients[i].locker(name); err != nil {
			return r, err
		}
		// One uncontended pair each: scripts loaded, connections open.
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := lockbench.Uncontended(wctx, lockers[i], 1, 0)
		cancel()
		if err != nil {
			return r, fmt.Errorf("warm-up: %w", err)
		}
	}
	var owners []string
	var stop func() []lockbench.QueueSnapshot
	if fifo {
		spy, err := clients[n].mutex(name)
		if err != nil {
			return r, err
		}
		// The lockers are fairlock Mutexes made in order; their owner
		// fields are needed to map tokens to owners.
		owners = make([]string, n)
		for i := range lockers {
			m, err := clients[i].mutex(name)
			if err != nil {
				return r, err
			}
			lockers[i], owners[i] = lockbench.MutexLocker(m), m.Owner()
		}
		stop = lockbench.SampleQueue(ctx, spy, n, time.Millisecond)
	}
	var (
		stopSlowlog func() ([]slowEntry, error)
		stopProfile func() (*profileSummary, error)
	)
	if fifo {
		if stopSlowlog, err = b.srv.startSlowlog(ctx); err != nil {
			return r, err
		}
		if !b.profiled[k.name] {
			b.profiled[k.name] = true
			if stopProfile, err = startProfile(); err != nil {
				return r, err
			}
		}
	}
	m, err := b.srv.startMeter(ctx)
	if err != nil {
		return r, err
	}
	run, err := lockbench.Contended(ctx, lockers, lockbench.Contention{
		Duration: b.set.ContendedFor, Drain: b.set.Drain, Acquisitions: b.set.MaxContendedOps,
	})
	var snaps []lockbench.QueueSnapshot
	if stop != nil {
		snaps = stop()
	}
	if stopProfile != nil {
		var perr error
		if r.Profile, perr = stopProfile(); perr != nil && err == nil {
			err = perr
		}
	}
	if stopSlowlog != nil {
		entries, serr := stopSlowlog()
		if serr != nil && err == nil {
			err = serr
		}
		r.Scripts = scriptStats(entries, b.scripts)
	}
	if err != nil {
		return r, err
	}
	u, err := m.end(ctx)
	if err != nil {
		return r, err
	}
	r.Acquisitions, r.InWindow = len(run.Acquisitions), run.InWindow()
	r.Throughput = run.Throughput()
	r.Handover = lockbench.Summarize(run.Handovers())
	r.Wait = lockbench.Summarize(run.Waits())
	r.MaxWait, r.Unfinished = run.MaxWait(), len(run.Unfinished)
	r.Overtakes, r.Fairness = run.Overtakes(), run.Fairness()
	r.Commands, r.TopCommands = u.calls.total(), u.calls
	if r.Acquisitions > 0 {
		r.CommandsPerAcq = float64(r.Commands) / float64(r.Acquisitions)
	}
	r.ServerCPU, r.ClientCPU, r.Wall, r.MachineBusy = u.serverCPU, u.clientCPU, u.wall, u.machineBusy
	if fifo {
		acquiredBy := make(map[int64]string, len(run.Acquisitions))
		for _, a := range run.Acquisitions {
			acquiredBy[a.Token] = owners[a.Contender]
		}
		var v []lockbench.FIFOViolation
		r.FIFOChecked, v = lockbench.CheckSnapshots(snaps, acquiredBy)
		r.FIFOViolations, r.FIFOSnapshots = len(v), len(snaps)
		r.ToWake, r.WakeToLock, r.WokenShare = splitHandovers(run, owners, rec)
		for i, x := range v {
			if i == 5 {
				break
			}
			b.log("  FIFO violation: token %d went to %s, expected %s", x.Position, x.Got, x.Expected)
		}
	}
	return r, nil
}

// idleRound is scenario 3: hand-over to a waiter that was waiting idle.
type idleRound struct {
	Handover lockbench.Summary `json:"handover"`
}

func (b *bench) idleHandover(ctx context.Context, k lockKind) (idleRound, error) {
	var r idleRound
	clients, err := connectMany(k, b.srv.addr, 2, connOpts{})
	if err != nil {
		return r, err
	}
	defer closeAll(clients)
	name := b.lockName("idle")
	holder, err := clients[0].locker(name)
	if err != nil {
		return r, err
	}
	waiter, err := clients[1].locker(name)
	if err != nil {
		return r, err
	}
	for _, l := range []lockbench.Locker{holder, waiter} {
		if _, err := lockbench.Uncontended(ctx, l, 1, 0); err != nil {
			return r, err
		}
	}
	h, err := lockbench.IdleHandover(ctx, holder, waiter, b.set.IdleHandovers, b.set.IdleFor, 5*time.Second)
	if err != nil {
		return r, err
	}
	r.Handover = lockbench.Summarize(h)
	return r, nil
}

// manyRound is scenario 4: many goroutines over many lock names, one client.
type manyRound struct {
	Acquisitions int               `json:"acquisitions"`
	Throughput   float64           `json:"throughput_per_s"`
	Lock         lockbench.Summary `json:"lock"`
	Commands     commandCalls      `json:"command_calls"`
	ServerCPU    float64           `json:"server_cpu_s"`
	ClientCPU    time.Duration     `json:"client_cpu_ns"`
	Wall         time.Duration     `json:"wall_ns"`
	MachineBusy  float64           `json:"machine_busy"`
	Allocs       uint64            `json:"allocs"` // this process over the window (runtime.MemStats); 0: not measured
	Bytes        uint64            `json:"bytes"`
	PerPair      pairCost          `json:"per_pair"`
	// Profile is where this process's CPU went in the run (first round;
	// fairlock's locks, the reference and the bare scripts), nil otherwise.
	Profile *profileSummary `json:"profile,omitempty"`
}

// cost is the round's cost per Lock+Unlock pair (per acquisition).
// cost is the round's cost per acquisition (allocations not measured).
func (x contendedRound) cost() pairCost {
	return costOf(x.Acquisitions, x.TopCommands, x.ServerCPU, float64(x.ClientCPU), true, -1, -1)
}

func (m manyRound) cost() pairCost {
	allocs, bytes := -1.0, -1.0
	if m.Allocs > 0 {
		allocs, bytes = float64(m.Allocs), float64(m.Bytes)
	}
	return costOf(m.Acquisitions, m.Commands, m.ServerCPU, float64(m.ClientCPU), m.Wall > 0, allocs, bytes)
}

// manySlow is an instrumented many-locks run (fairlock only, observer on):
// why the slow Lock calls were slow.
func (b *bench) manySlow(ctx context.Context, k lockKind) (slowCalls, error) {
	rec := newWakeRecorder()
	c, err := k.connect(b.srv.addr, connOpts{observer: rec})
	if err != nil {
		return slowCalls{}, err
	}
	defer c.close()
	prefix := b.lockName("many-observed")
	_, err = lockbench.ManyLocks(ctx, func(_, k int) (lockbench.Locker, error) { return c.locker(fmt.Sprintf("%s:%d", prefix, k)) },
		lockbench.Spread{Workers: b.set.ManyWorkers, Locks: b.set.ManyLocks, Duration: b.set.ManyFor, Drain: b.set.Drain})
	if err != nil {
		return slowCalls{}, err
	}
	return describeSlow(rec.all(), 10*time.Millisecond), nil
}

func (b *bench) manyLocks(ctx context.Context, k lockKind, profile bool) (manyRound, error) {
	c, err := k.connect(b.srv.addr, connOpts{})
	if err != nil {
		return manyRound{}, err
	}
	defer c.close()
	prefix := b.lockName("many")
	return b.manyRun(ctx, func(_, k int) (lockbench.Locker, error) { return c.locker(fmt.Sprintf("%s:%d", prefix, k)) }, profile)
}

// manyBare is scenario 4 with fairlock's own scripts sent bare
// (bareScripts).
func (b *bench) manyBare(ctx context.Context, profile bool) (manyRound, error) {
	s, err := openBareScripts(b.srv.addr, b.scriptsDir)
	if err != nil {
		return manyRound{}, err
	}
	defer s.close()
	prefix := b.lockName("many-bare")
	return b.manyRun(ctx, func(_, k int) (lockbench.Locker, error) { return s.locker(fmt.Sprintf("%s:%d", prefix, k)), nil }, profile)
}

// manyRun runs scenario 4 on the lockers newLocker makes, after a short
// warm-up on them, with this process's CPU profiled when profile is set.
func (b *bench) manyRun(ctx context.Context, newLocker func(w, k int) (lockbench.Locker, error), profile bool) (manyRound, error) {
	var r manyRound
	// Warm-up: a short run on the same client.
	if _, err := lockbench.ManyLocks(ctx, newLocker, lockbench.Spread{Workers: b.set.ManyWorkers, Locks: b.set.ManyLocks, Acquisitions: 200, Duration: time.Second}); err != nil {
		return r, fmt.Errorf("warm-up: %w", err)
	}
	m, err := b.srv.startMeter(ctx)
	if err != nil {
		return r, err
	}
	var stopProfile func() (*profileSummary, error)
	if profile {
		if stopProfile, err = startProfile(); err != nil {
			return r, err
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	run, err := lockbench.ManyLocks(ctx, newLocker, lockbench.Spread{
		Workers: b.set.ManyWorkers, Locks: b.set.ManyLocks, Duration: b.set.ManyFor, Drain: b.set.Drain,
	})
	runtime.ReadMemStats(&after)
	if stopProfile != nil {
		p, perr := stopProfile()
		if err == nil {
			r.Profile, err = p, perr
		}
	}
	if err != nil {
		return r, err
	}
	u, err := m.end(ctx)
	if err != nil {
		return r, err
	}
	r.Allocs, r.Bytes = after.Mallocs-before.Mallocs, after.TotalAlloc-before.TotalAlloc
	r.Commands, r.ServerCPU, r.ClientCPU, r.Wall, r.MachineBusy = u.calls, u.serverCPU, u.clientCPU, u.wall, u.machineBusy
	r.Acquisitions, r.Throughput, r.Lock = run.Pairs, run.Throughput(), run.Lock.Summary()
	r.PerPair = r.cost()
	return r, nil
}

// splitHandovers splits each hand-over at the new holder's last wake-up
// before its Lock returned (see contendedRound).
func splitHandovers(run *lockbench.ContendedRun, owners []string, rec *wakeRecorder) (toWake, wakeToLock lockbench.Summary, share float64) {
	calls := make([][]wakeRecord, len(owners))
	for i, o := range owners {
		calls[i] = rec.forOwner(o)
	}
	// The k-th acquisition of a contender is its k-th acquire call: the
	// contenders' Lock calls only end by acquiring, but for the last,
	// cancelled one.
	nth := make([]int, len(owners))
	var a, b []time.Duration
	total := 0
	for i, x := range run.Acquisitions {
		k := nth[x.Contender]
		nth[x.Contender]++
		if i == 0 || run.Acquisitions[i-1].Contender == x.Contender {
			continue
		}
		total++
		prev := run.Acquisitions[i-1]
		if k >= len(calls[x.Contender]) {
			continue
		}
		w := calls[x.Contender][k].lastWake
		if w.IsZero() || w.Before(x.Called) || w.After(x.Acquired) {
			continue
		}
		a, b = append(a, w.Sub(prev.Released)), append(b, x.Acquired.Sub(w))
	}
	if total > 0 {
		share = float64(len(a)) / float64(total)
	}
	return lockbench.Summarize(a), lockbench.Summarize(b), share
}
