package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock"
	"github.com/redis/rueidis"
)

// memoryResult is scenario (c): what lock names, holds and waiters cost in
// memory on the cluster (INFO memory used_memory, summed over nodes; and
// MEMORY USAGE of one lock's keys).
type memoryResult struct {
	Names int    `json:"names"`
	Mode  string `json:"mode"`
	// Gone: names locked and unlocked with a 1 s lease, after the lease
	// and a second: the keys and bytes left.
	Gone memStep `json:"gone"`
	// Held: Names locks held (lease 10 min, so no renewal runs).
	Held memStep `json:"held"`
	// Spread: one waiter on each held name, written as acquire.lua queues
	// a waiter (queue entry, Redisson deadline, liveness deadline).
	Spread memStep `json:"spread_waiters"`
	// IdleFresh: every name unlocked, at once (token counter and unlock
	// latch left); IdleToken: once the latches (3 s) expired.
	IdleFresh memStep `json:"idle_fresh"`
	IdleToken memStep `json:"idle_token"`
	// KeyUsage is MEMORY USAGE of one lock's keys, by role.
	KeyUsage map[string]int64 `json:"key_usage"`
	// Queued: real waiters (goroutines in Lock) on one held lock.
	Queued []queuedMem `json:"queued"`
}

// memStep is the change from the step before it (from the baseline for
// Held and IdleFresh), summed over primaries and over replicas.
type memStep struct {
	Count int   `json:"count"` // names or waiters it concerns
	Keys  int64 `json:"keys"`  // DBSIZE change, primaries
	// Tracked: the change of INFO stats tracking_total_keys on the
	// primaries: keys in the server's client-side-caching table (rueidis
	// clients track what their reads and scripts read).
	Tracked      int64         `json:"tracked_keys"`
	PrimaryBytes int64         `json:"primary_bytes"`
	ReplicaBytes int64         `json:"replica_bytes"`
	Elapsed      time.Duration `json:"elapsed_ns"` // how long the step took
}

func (s memStep) perItem() float64 {
	if s.Count == 0 {
		return 0
	}
	return float64(s.PrimaryBytes) / float64(s.Count)
}

// latchBytes is what an unlock latch costs: the idle steps' difference in
// bytes over their difference in keys (the latches that expired between).
func (m *memoryResult) latchBytes() float64 {
	k := m.IdleFresh.Keys - m.IdleToken.Keys
	if k <= 0 {
		return 0
	}
	return float64(m.IdleFresh.PrimaryBytes-m.IdleToken.PrimaryBytes) / float64(k)
}

// queuedMem is n real waiters on one lock.
type queuedMem struct {
	Waiters int     `json:"waiters"`
	PerNode []int64 `json:"per_node_bytes"` // used_memory change, by node
	Owner   int     `json:"owner"`          // the primary owning the lock's slot
	// DataBytes: MEMORY USAGE of the queue, timeouts and alive keys.
	DataBytes int64  `json:"data_bytes"`
	Encoding  string `json:"timeouts_encoding"` // OBJECT ENCODING of the timeouts zset
	Channels  int64  `json:"channels"`          // PUBSUB NUMSUB + SHARDNUMSUB of the lock's waiter channels, all nodes
}

// ownerBytes is the used_memory change at the slot's primary per waiter.
func (q queuedMem) ownerBytes() float64 {
	if q.Waiters == 0 || q.Owner < 0 || q.Owner >= len(q.PerNode) {
		return 0
	}
	return float64(q.PerNode[q.Owner]) / float64(q.Waiters)
}

// memSample is used_memory and DBSIZE of every node of the cluster.
type memSample struct {
	used, keys, tracked []int64
}

func (c *redisCluster) memSample(ctx context.Context) (memSample, error) {
	var s memSample
	for _, n := range c.nodes() {
		info, err := n.info(ctx, "memory")
		if err != nil {
			return s, err
		}
		u, err := usedMemory(info)
		if err != nil {
			return s, err
		}
		k, err := n.do(ctx, "DBSIZE").AsInt64()
		if err != nil {
			return s, err
		}
		st, err := n.info(ctx, "stats")
		if err != nil {
			return s, err
		}
		tr, _ := infoInt(st, "tracking_total_keys")
		s.used, s.keys, s.tracked = append(s.used, u), append(s.keys, k), append(s.tracked, tr)
	}
	return s, nil
}

// usedMemory is used_memory less the replication buffers: a primary's
// backlog fills with every write up to repl-backlog-size (1 MiB), which
// is the replicas' cost, not the data's.
func usedMemory(info map[string]string) (int64, error) {
	num := func(k string) (int64, error) {
		v, err := infoInt(info, k)
		if err != nil {
			return 0, fmt.Errorf("INFO memory %s: %w", k, err)
		}
		return v, nil
	}
	u, err := num("used_memory")
	if err != nil {
		return 0, err
	}
	if _, ok := info["mem_total_replication_buffers"]; ok { // Redis 7.0+: backlog and replicas' output buffers, shared
		r, err := num("mem_total_replication_buffers")
		return u - r, err
	}
	b, err := num("mem_replication_backlog")
	if err != nil {
		return 0, err
	}
	c, err := num("mem_clients_slaves")
	return u - b - c, err
}

// reap makes every primary drop its expired keys now: SCAN expires the
// keys it meets, where active expiry leaves a few expired keys among many
// live ones for a long while (DBSIZE and used_memory count them).
func (c *redisCluster) reap(ctx context.Context) error {
	for _, p := range c.primaries {
		cursor := "0"
		for {
			e, err := p.do(ctx, "SCAN", cursor, "COUNT", "10000").ToArray()
			if err != nil || len(e) != 2 {
				return fmt.Errorf("SCAN: %v", err)
			}
			if cursor, err = e[0].ToString(); err != nil {
				return err
			}
			if cursor == "0" {
				break
			}
		}
	}
	return nil
}

// expireLatches waits until the unlock latches (3 s) have expired and has
// the primaries drop them.
func (c *redisCluster) expireLatches(ctx context.Context) error {
	time.Sleep(3500 * time.Millisecond)
	return c.reap(ctx)
}

// flushAll empties every primary (and so its replicas).
func (c *redisCluster) flushAll(ctx context.Context) error {
	for _, p := range c.primaries {
		if err := p.do(ctx, "FLUSHALL").Error(); err != nil {
			return err
		}
	}
	return nil
}

// memoryUsage is MEMORY USAGE of key, every element counted (SAMPLES 0).
func memoryUsage(ctx context.Context, rc rueidis.Client, key string) (int64, error) {
	return rc.Do(ctx, rc.B().MemoryUsage().Key(key).Samples(0).Build()).AsInt64()
}

// memSteady takes three samples 100 ms apart and keeps, node by node, the
// median used_memory (client buffers come and go).
func (c *redisCluster) memSteady(ctx context.Context) (memSample, error) {
	var all []memSample
	for i := range 3 {
		if i > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		s, err := c.memSample(ctx)
		if err != nil {
			return s, err
		}
		all = append(all, s)
	}
	out := all[2]
	out.used = slices.Clone(out.used)
	for i := range out.used {
		v := []int64{all[0].used[i], all[1].used[i], all[2].used[i]}
		slices.Sort(v)
		out.used[i] = v[1]
	}
	return out, nil
}

// stepSince ends a step begun at t0 on count names or waiters: it takes
// a steady sample and returns the change from the sample from, and the
// new sample (where the next step starts).
func (c *redisCluster) stepSince(ctx context.Context, from memSample, count int, t0 time.Time) (memStep, memSample, error) {
	to, err := c.memSteady(ctx)
	if err != nil {
		return memStep{}, to, err
	}
	s := memStep{Count: count}
	p := len(c.primaries)
	for i := range from.used {
		d := to.used[i] - from.used[i]
		if i < p {
			s.PrimaryBytes += d
			s.Keys += to.keys[i] - from.keys[i]
			s.Tracked += to.tracked[i] - from.tracked[i]
		} else {
			s.ReplicaBytes += d
		}
	}
	s.Elapsed = time.Since(t0)
	return s, to, nil
}

func sum(xs []int64) int64 {
	var t int64
	for _, x := range xs {
		t += x
	}
	return t
}

// parallel runs f(i) for i in [0, n) on workers goroutines; the first
// error stops it.
func parallel(ctx context.Context, n, workers int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}

// injectWaiter queues one waiter on a lock as acquire.lua does (the owner
// at the queue's tail, its Redisson deadline and its liveness deadline,
// each key's expiry past them); removeWaiters deletes the three keys.
var (
	injectWaiter = rueidis.NewLuaScript(`
local t = redis.call('time')
local d = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + 600000
redis.call('rpush', KEYS[1], ARGV[1])
redis.call('zadd', KEYS[2], d, ARGV[1])
redis.call('zadd', KEYS[3], d, ARGV[1])
for _, k in ipairs(KEYS) do redis.call('pexpire', k, 660000) end
return 1`)
	removeWaiters = rueidis.NewLuaScript(`return redis.call('del', KEYS[1], KEYS[2], KEYS[3])`)
)

// memory is scenario (c), on the cluster with the first publish mode.
func (b *clusterBench) memory(ctx context.Context) (*memoryResult, error) {
	c := b.cluster
	t := clusterTarget(publishModes[0])
	res := &memoryResult{Names: b.set.MemoryNames, Mode: string(t.Mode), KeyUsage: map[string]int64{}}
	w := b.set.MemoryWorkers
	// The earlier scenarios' token counters live 31 s more: start empty.
	if err := c.flushAll(ctx); err != nil {
		return res, err
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: c.addrs()})
	if err != nil {
		return res, err
	}
	defer rc.Close()
	short, closeShort, err := b.connect(t, lock.WithLease(time.Second))
	if err != nil {
		return res, err
	}
	defer closeShort()
	long, closeLong, err := b.connect(t, lock.WithLease(10*time.Minute))
	if err != nil {
		return res, err
	}
	defer closeLong()
	pair := func(lc *lock.Client, prefix string) func(ctx context.Context, i int) error {
		return func(ctx context.Context, i int) error {
			m, err := lc.NewMutex(fmt.Sprintf("%s:%d", prefix, i))
			if err != nil {
				return err
			}
			if _, err := m.Lock(ctx); err != nil {
				return err
			}
			return m.Unlock(ctx)
		}
	}
	// Warm-up: both clients' scripts loaded on every primary; then wait
	// until the cluster holds no key.
	for _, lc := range []*lock.Client{short, long} {
		if err := parallel(ctx, 200, 16, pair(lc, b.name("mem-warm"))); err != nil {
			return res, fmt.Errorf("warm-up: %w", err)
		}
	}
	// The long client's warm-up token counters live 10 minutes: they stay
	// in every sample alike.
	waitKeys := func(limit int64, timeout time.Duration) (memSample, error) {
		var s memSample
		err := waitFor(ctx, timeout, func() (bool, string) {
			var err error
			if s, err = c.memSample(ctx); err != nil {
				return false, err.Error()
			}
			k := sum(s.keys[:len(c.primaries)])
			return k <= limit, fmt.Sprintf("%d keys on the primaries, waiting for %d", k, limit)
		})
		return s, err
	}
	s, err := waitKeys(200, 20*time.Second)
	if err != nil {
		return res, err
	}
	floor := sum(s.keys[:len(c.primaries)])

	usage := func(role, key string) {
		if v, err := memoryUsage(ctx, rc, key); err == nil {
			res.KeyUsage[role] = v
		}
	}
	// Gone: lock and unlock names with a 1 s lease; wait for their keys to
	// expire.
	n := min(b.set.MemoryNames, 1000)
	before, err := c.memSteady(ctx)
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	if err := parallel(ctx, n, w, pair(short, b.name("mem-gone"))); err != nil {
		return res, err
	}
	// The token counters (lease + 1 s) are gone before the latches.
	if err := c.expireLatches(ctx); err != nil {
		return res, err
	}
	if _, err := waitKeys(floor, 10*time.Second); err != nil {
		return res, fmt.Errorf("idle names with a 1s lease: %w", err)
	}
	if res.Gone, _, err = c.stepSince(ctx, before, n, t0); err != nil {
		return res, err
	}
	b.log("memory: %d names locked and unlocked with a 1s lease: %d keys, %d bytes left on the primaries after %v",
		n, res.Gone.Keys, res.Gone.PrimaryBytes, res.Gone.Elapsed.Round(time.Millisecond))

	// Idle: every name locked once and unlocked, from an empty cluster
	// (but for the warm-up's token counters).
	n = b.set.MemoryNames
	idlePrefix := b.name("mem-idle")
	base, err := c.memSteady(ctx)
	if err != nil {
		return res, err
	}
	t0 = time.Now()
	if err := parallel(ctx, n, w, pair(long, idlePrefix)); err != nil {
		return res, fmt.Errorf("locking and unlocking %d names: %w", n, err)
	}
	if res.IdleFresh, _, err = c.stepSince(ctx, base, n, t0); err != nil {
		return res, err
	}
	idle, err := long.NewMutex(idlePrefix + ":0")
	if err != nil {
		return res, err
	}
	usage("token counter (idle)", idle.Keys()[4])
	b.log("memory: %d idle names, just unlocked: %s", n, describeStep(res.IdleFresh))
	t0 = time.Now()
	if err := c.expireLatches(ctx); err != nil {
		return res, err
	}
	if res.IdleToken, _, err = c.stepSince(ctx, base, n, t0); err != nil {
		return res, err
	}
	b.log("memory: %d idle names, latches expired: %s (token counters live the lease and 1s more)", n, describeStep(res.IdleToken))
	// Empty again: the next steps start from no key (a dict shrinks only
	// later on its own).
	if err := c.flushAll(ctx); err != nil {
		return res, err
	}

	// Held: every name locked, no renewal during the step.
	prefix := b.name("mem")
	mutexes := make([]*lock.Mutex, n)
	for i := range mutexes {
		if mutexes[i], err = long.NewMutex(fmt.Sprintf("%s:%d", prefix, i)); err != nil {
			return res, err
		}
	}
	base, err = c.memSteady(ctx)
	if err != nil {
		return res, err
	}
	t0 = time.Now()
	if err := parallel(ctx, n, w, func(ctx context.Context, i int) error {
		_, err := mutexes[i].Lock(ctx)
		return err
	}); err != nil {
		return res, fmt.Errorf("holding %d locks: %w", n, err)
	}
	var held memSample
	if res.Held, held, err = c.stepSince(ctx, base, n, t0); err != nil {
		return res, err
	}
	b.log("memory: %d held locks: %s (%v)", n, describeStep(res.Held), res.Held.Elapsed.Round(time.Millisecond))
	// (*lock.Mutex).Keys: hash, queue, timeouts, alive, token counter.
	keys := mutexes[0].Keys()
	usage("lock hash (held)", keys[0])
	usage("token counter (held)", keys[4])

	// Spread: one waiter on each held name.
	owner := mutexes[0].Owner()
	if len(owner) < 8 {
		return res, errors.New("owner field too short")
	}
	t0 = time.Now()
	if err := parallel(ctx, n, w, func(ctx context.Context, i int) error {
		fake := owner[:len(owner)-8] + fmt.Sprintf("%08d", i)
		return injectWaiter.Exec(ctx, rc, mutexes[i].Keys()[1:4], []string{fake}).Error()
	}); err != nil {
		return res, fmt.Errorf("queueing a waiter on each lock: %w", err)
	}
	if res.Spread, _, err = c.stepSince(ctx, held, n, t0); err != nil {
		return res, err
	}
	usage("queue, 1 waiter", keys[1])
	usage("timeouts zset, 1 waiter", keys[2])
	usage("alive zset, 1 waiter", keys[3])
	b.log("memory: one waiter on each of %d locks: %s", n, describeStep(res.Spread))
	if err := parallel(ctx, n, w, func(ctx context.Context, i int) error {
		return removeWaiters.Exec(ctx, rc, mutexes[i].Keys()[1:4], nil).Error()
	}); err != nil {
		return res, fmt.Errorf("removing the waiters: %w", err)
	}

	// Real waiters on one held lock.
	for _, k := range b.set.MemoryWaiters {
		qm, err := b.queued(ctx, t, rc, k)
		if err != nil {
			return res, fmt.Errorf("%d waiters on one lock: %w", k, err)
		}
		b.log("memory: %d waiters on one lock: %.0f bytes each at the slot's primary (%.0f of them in the lock's keys, timeouts zset %s), %d channels",
			k, qm.ownerBytes(), float64(qm.DataBytes)/float64(k), qm.Encoding, qm.Channels)
		res.Queued = append(res.Queued, qm)
	}

	// The holds are left to Close (which does not release them) and the
	// cluster's end: unlocking 100,000 holds of one client one by one
	// crawled at about 60 a second (each unlock's hash invalidation has
	// the client re-check its holds, hashWatches -> watchdog.checkHolds,
	// contending on the client's mutex; seen in a goroutine dump, not
	// investigated further).
	return res, nil
}

// queued measures k real waiters (goroutines in Lock, their Mutexes spread
// over 4 clients) on one lock held by another client.
func (b *clusterBench) queued(ctx context.Context, t target, rc rueidis.Client, k int) (queuedMem, error) {
	c := b.cluster
	qm := queuedMem{Waiters: k}
	name := b.name("mem-queue")
	qm.Owner = c.primaryOf(int(backend.Slot(name)))
	holder, closeHolder, err := b.connect(t)
	if err != nil {
		return qm, err
	}
	defer closeHolder()
	hm, err := holder.NewMutex(name)
	if err != nil {
		return qm, err
	}
	if _, err := hm.Lock(ctx); err != nil {
		return qm, err
	}
	defer func() { _ = hm.Unlock(context.WithoutCancel(ctx)) }()
	const clients = 4
	var lcs []*lock.Client
	for range clients {
		lc, closeFn, err := b.connect(t)
		if err != nil {
			return qm, err
		}
		defer closeFn()
		lcs = append(lcs, lc)
	}
	// Each client waits once first, so that its subscription connection
	// is open before the first sample; the subscriptions of those waits
	// linger a second (lock/park.go).
	for _, lc := range lcs {
		m, err := lc.NewMutex(name)
		if err != nil {
			return qm, err
		}
		if _, err := m.TryLock(ctx, 100*time.Millisecond); err == nil {
			return qm, errors.New("a waiter acquired a held lock")
		}
	}
	time.Sleep(1500 * time.Millisecond)
	before, err := c.memSteady(ctx)
	if err != nil {
		return qm, err
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i := range k {
		m, err := lcs[i%clients].NewMutex(name)
		if err != nil {
			return qm, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := m.Lock(wctx); err == nil {
				_ = m.Unlock(context.WithoutCancel(wctx))
			}
		}()
	}
	keys := hm.Keys() // hash, queue, timeouts, alive, token counter
	q, to, al := keys[1], keys[2], keys[3]
	if err := waitFor(ctx, 60*time.Second, func() (bool, string) {
		n, err := rc.Do(ctx, rc.B().Llen().Key(q).Build()).AsInt64()
		if err != nil {
			return false, err.Error()
		}
		return n == int64(k), fmt.Sprintf("%d of %d waiters queued", n, k)
	}); err != nil {
		return qm, err
	}
	time.Sleep(300 * time.Millisecond)
	after, err := c.memSteady(ctx)
	if err != nil {
		return qm, err
	}
	for i := range before.used {
		qm.PerNode = append(qm.PerNode, after.used[i]-before.used[i])
	}
	for _, key := range []string{q, to, al} {
		v, err := memoryUsage(ctx, rc, key)
		if err != nil {
			return qm, err
		}
		qm.DataBytes += v
	}
	if qm.Encoding, err = rc.Do(ctx, rc.B().ObjectEncoding().Key(to).Build()).ToString(); err != nil {
		return qm, err
	}
	// The waiters' channels, "redisson_lock__channel:{name}:<owner>", on
	// whichever node they subscribed.
	pattern := "redisson_lock__channel:{" + name + "}:*"
	for _, n := range c.nodes() {
		for _, cmd := range []string{"CHANNELS", "SHARDCHANNELS"} {
			chans, err := n.do(ctx, "PUBSUB", cmd, pattern).ToArray()
			if err != nil {
				return qm, err
			}
			qm.Channels += int64(len(chans))
		}
	}
	return qm, nil
}

// describeStep is a step in words, for the log and the report.
func describeStep(s memStep) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%.0f B", s.perItem())
	if s.Count > 0 {
		fmt.Fprintf(&b, ", %.2f keys, %.2f tracked keys each on the primaries", float64(s.Keys)/float64(s.Count), float64(s.Tracked)/float64(s.Count))
	}
	return b.String()
}
