package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/lockbench"
)

// injectQueue appends fake owners to a lock's queue as acquire.lua queues
// fairlock waiters, one a millisecond: the owner at the tail of the list,
// its Redisson deadline in the timeouts zset and its liveness deadline in
// the alive zset, 10 minutes ahead (so nobody purges them meanwhile) and a
// millisecond apart in queue order, like the deadlines of owners that
// queued one after the other; and each key's expiry past the latest of
// them, which acquire.lua raises as it writes them (keep_queue).
//
// It then reads each owner's two deadlines once, as one round of their
// heartbeats would (a live waiter's acquire reads its own entries every
// third of the waiter timeout). A queue that grew by real enqueues is past
// that; a bulk insert is not (Redis resizes a zset's hash table a bucket
// per access, and the insert leaves it half done).
//
// Without these three steps every first call after the insert paid for
// the insert rather than the queue length: all 10,000 deadlines equal to
// each other and to the newcomer's (which Redis orders by member name),
// three expiries to raise, and a half-resized table. The enqueue measured
// up to twice its cost at 0 that way, while a steady run of 1,500
// enqueues into a 10,000-owner queue costs what it costs into an empty one.
//
// KEYS[1] queue, KEYS[2] timeouts, KEYS[3] alive; ARGV[1] how many,
// ARGV[2] owner prefix, ARGV[3] deadline from now in ms, ARGV[4] how long
// the keys outlive it, in ms.
const injectQueue = `
local t = redis.call('time')
local first = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[3])
local n = tonumber(ARGV[1])
local i = 1
while i <= n do
  local owners, scores = {}, {}
  for j = i, math.min(i + 499, n) do
    local o = ARGV[2] .. j
    owners[#owners + 1] = o
    scores[#scores + 1] = first + j
    scores[#scores + 1] = o
  end
  redis.call('rpush', KEYS[1], unpack(owners))
  redis.call('zadd', KEYS[2], unpack(scores))
  redis.call('zadd', KEYS[3], unpack(scores))
  i = i + 500
end
for _, k in ipairs(KEYS) do
  redis.call('pexpire', k, tonumber(ARGV[3]) + n + tonumber(ARGV[4]))
end
for j = 1, n do
  redis.call('zscore', KEYS[2], ARGV[2] .. j)
  redis.call('zscore', KEYS[3], ARGV[2] .. j)
end
return redis.call('llen', KEYS[1])
`

// collectLuaGarbage runs a full cycle of the server's Lua garbage
// collector.
const collectLuaGarbage = "collectgarbage('collect') return 0"

// queueKeep is how long injected queue keys outlive the latest deadline:
// at least what keep_queue asks with the lock's defaults (the Redisson
// slack plus the waiter timeout), so that it has nothing to raise.
const queueKeep = (5 * time.Minute) + 2*(5*time.Second)

// queueOps are the operations timed at each queue length.
var queueOps = []string{"enqueue", "leave", leaveMiddle, "unlock", "grant"}

// leaveMiddle is an owner giving up with another owner queued behind it.
const leaveMiddle = "leave, not last"

// recheck is the acquire calls an owner already queued at the tail makes
// (after subscribing, and every heartbeat): timed too, not a target.
const recheck = "re-check"

// queueRound is scenario 5 in one round: the server time (SLOWLOG) of each
// operation at each queue length.
type queueRound struct {
	// Server time of each call, by queue length and operation.
	Times map[int]map[string]lockbench.Summary `json:"times"`
	// GrantCalls is how many script calls the new holder made between the
	// unlock and its Lock returning (0: the unlock granted the lock).
	GrantCalls map[int]float64 `json:"grant_calls"`
	// The commands the measured calls ran at each length (commandstats
	// from the slowlog reset to the slowlog read, added over the samples;
	// set-up and injection left out), with their server time.
	Commands map[int]commandCalls `json:"commands"`
	Skipped  int                  `json:"skipped"` // samples whose slowlog did not have the expected shape
}

// queueScaling measures, with N fake owners queued behind a real waiter
// (W, first in line), after an owner G has queued and given up untimed
// (see queueSample): a new owner E queueing at the tail (enqueue) and
// giving up with owner F queued behind it (leave, not last), F giving up
// last in line (leave), the holder H unlocking (unlock: hands the lock to W),
// and W's own calls until its Lock returns (grant). Server time per call
// comes from SLOWLOG with slowlog-log-slower-than 0, which isolates each
// call; the calls are told apart by the owner field among their arguments.
func (b *bench) queueScaling(ctx context.Context, k lockKind) (queueRound, error) {
	r := queueRound{Times: map[int]map[string]lockbench.Summary{}, GrantCalls: map[int]float64{}, Commands: map[int]commandCalls{}}
	clients, err := connectMany(k, b.srv.addr, 5, connOpts{})
	if err != nil {
		return r, err
	}
	defer closeAll(clients)
	if err := b.srv.do(ctx, "CONFIG", "SET", "slowlog-max-len", "4096").Error(); err != nil {
		return r, err
	}
	if err := b.srv.setSlowlog(ctx, 0); err != nil {
		return r, err
	}
	defer func() {
		cctx := context.WithoutCancel(ctx)
		_ = b.srv.setSlowlog(cctx, slowlogOff)
		_ = b.srv.do(cctx, "SLOWLOG", "RESET").Error()
	}()
	for _, n := range b.set.QueueLengths {
		times := map[string][]time.Duration{}
		var grantCalls int
		samples := 0
		r.Commands[n] = commandCalls{}
		for range b.set.QueueSamples + 1 { // the first is a warm-up
			got, calls, cmds, err := b.queueSample(ctx, clients, n)
			if errors.Is(err, errSampleShape) {
				r.Skipped++
				continue
			}
			if err != nil {
				return r, fmt.Errorf("queue of %d: %w", n, err)
			}
			if samples++; samples == 1 {
				continue
			}
			for op, d := range got {
				times[op] = append(times[op], d)
			}
			grantCalls += calls
			for k, v := range cmds {
				sum := r.Commands[n][k]
				sum.Calls += v.Calls
				sum.Usec += v.Usec
				r.Commands[n][k] = sum
			}
		}
		r.Times[n] = map[string]lockbench.Summary{}
		for _, op := range append(queueOps, recheck) {
			r.Times[n][op] = lockbench.Summarize(times[op])
		}
		if samples > 1 {
			r.GrantCalls[n] = float64(grantCalls) / float64(samples-1)
		}
	}
	return r, nil
}

var errSampleShape = errors.New("slowlog entries not as expected")

func (b *bench) queueSample(ctx context.Context, clients []*client, n int) (times map[string]time.Duration, grantCalls int, cmds commandCalls, err error) {
	name := b.lockName("queue")
	newMutex := func(i int) *lock.Mutex {
		m, err := clients[i].mutex(name)
		if err != nil {
			panic(err) // the name is valid
		}
		return m
	}
	h, w, e, f, g := newMutex(0), newMutex(1), newMutex(2), newMutex(3), newMutex(4)
	defer func() {
		_ = b.srv.do(context.WithoutCancel(ctx), append([]string{"DEL"}, h.Keys()...)...).Error()
	}()
	if _, err := h.Lock(ctx); err != nil {
		return nil, 0, nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	granted := make(chan error, 1)
	go func() {
		_, err := w.Lock(wctx)
		granted <- err
	}()
	// queued waits until the queue is length long.
	queued := func(length int) error {
		for deadline := time.Now().Add(5 * time.Second); ; {
			st, err := h.Inspect(ctx, 0)
			if err != nil {
				return err
			}
			if st.QueueLength == length {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the queue did not reach %d within 5s", length)
			}
			time.Sleep(200 * time.Microsecond)
		}
	}
	// W is first in line once the queue has one entry.
	if err := queued(1); err != nil {
		return nil, 0, nil, err
	}
	if n > 0 {
		keys := h.Keys()
		args := []string{"EVAL", injectQueue, "3", keys[1], keys[2], keys[3], strconv.Itoa(n), "00000000-0000-4000-8000-000000000000:", "600000", strconv.FormatInt(queueKeep.Milliseconds(), 10)}
		// The injection's 50,000 commands are not logged: they would only
		// churn the slowlog's memory before the calls it times.
		if err := b.srv.setSlowlog(ctx, -1); err != nil {
			return nil, 0, nil, err
		}
		if got, err := b.srv.do(ctx, args...).AsInt64(); err != nil || got != int64(n+1) {
			return nil, 0, nil, fmt.Errorf("injecting %d owners: queue %d, %v", n, got, err)
		}
		// The injection leaves its Lua garbage (tens of thousands of
		// strings) behind in the server's Lua state, and Lua's incremental
		// collector would make the next scripts - the calls timed below,
		// the first of them most - pay for collecting it: 15-20 µs more
		// for the enqueue at 10,000 queued in a scratch run. A queue that
		// grew one owner at a time leaves no such debt, so it is collected
		// here, untimed.
		if err := b.srv.do(ctx, "EVAL", collectLuaGarbage, "0").Error(); err != nil {
			return nil, 0, nil, fmt.Errorf("collecting the injection's Lua garbage: %w", err)
		}
		if err := b.srv.setSlowlog(ctx, 0); err != nil {
			return nil, 0, nil, err
		}
	}
	// G queues at the tail and gives up, untimed: the set-up above
	// (tens of thousands of commands in one script) has left the server's
	// caches cold, and the first calls timed after it paid for that -
	// every command, those on keys the queue never touches too. A queue of
	// that length lives only with steady traffic (a heartbeat from every
	// owner every third of the waiter timeout), which keeps the same
	// structures warm. In a scratch run of the scenario, 6 rounds each,
	// the enqueue at 10,000 queued took 0.95-1.37x its time at 0 after
	// this, 1.10-1.68x without it.
	if _, err := g.TryLock(ctx, 20*time.Millisecond); !errors.Is(err, lock.ErrNotAcquired) {
		return nil, 0, nil, fmt.Errorf("warm-up TryLock behind the queue: %v, want ErrNotAcquired", err)
	}
	if err := queued(n + 1); err != nil {
		return nil, 0, nil, err
	}
	if err := b.srv.do(ctx, "SLOWLOG", "RESET").Error(); err != nil {
		return nil, 0, nil, err
	}
	before, err := b.srv.commandCalls(ctx)
	if err != nil {
		return nil, 0, nil, err
	}
	// E queues at the tail (enqueue), F behind it; E gives up after 100 ms
	// (leave, not last), then F (leave).
	gaveUp := make(chan error, 1)
	go func() {
		_, err := e.TryLock(ctx, 100*time.Millisecond)
		gaveUp <- err
	}()
	fctx, fcancel := context.WithCancel(ctx)
	defer fcancel()
	fDone := make(chan error, 1)
	if err := queued(n + 2); err != nil {
		return nil, 0, nil, err
	}
	go func() {
		_, err := f.Lock(fctx)
		fDone <- err
	}()
	if err := queued(n + 3); err != nil {
		return nil, 0, nil, err
	}
	if err := <-gaveUp; !errors.Is(err, lock.ErrNotAcquired) {
		return nil, 0, nil, fmt.Errorf("TryLock behind the queue: %v, want ErrNotAcquired", err)
	}
	fcancel()
	if err := <-fDone; !errors.Is(err, context.Canceled) {
		return nil, 0, nil, fmt.Errorf("Lock behind the queue: %v, want context.Canceled", err)
	}
	if err := h.Unlock(ctx); err != nil {
		return nil, 0, nil, err
	}
	if err := <-granted; err != nil {
		return nil, 0, nil, fmt.Errorf("waiter: %w", err)
	}
	// The new holder may take the grant up right after its Lock returns.
	time.Sleep(10 * time.Millisecond)
	entries, err := b.srv.slowlog(ctx)
	if err != nil {
		return nil, 0, nil, err
	}
	after, err := b.srv.commandCalls(ctx)
	if err != nil {
		return nil, 0, nil, err
	}
	if err := w.Unlock(ctx); err != nil {
		return nil, 0, nil, err
	}
	// Script calls by owner, in order.
	byOwner := map[string][]slowEntry{}
	for _, x := range entries {
		if len(x.args) == 0 || !slices.Contains([]string{"EVALSHA", "EVAL", "evalsha", "eval"}, x.args[0]) {
			continue
		}
		for _, m := range []*lock.Mutex{h, w, e, f} {
			if o := m.Owner(); slices.Contains(x.args, o) {
				byOwner[o] = append(byOwner[o], x)
			}
		}
	}
	// The holder's unlock, the one call of its that names an unlock latch:
	// its client also checks its hold when the lock hash changes (the hash
	// watch), which is not what this measures.
	var hCalls []slowEntry
	for _, x := range byOwner[h.Owner()] {
		if slices.ContainsFunc(x.args, func(a string) bool { return strings.HasPrefix(a, "redisson_unlock_latch") }) {
			hCalls = append(hCalls, x)
		}
	}
	eCalls, fCalls := byOwner[e.Owner()], byOwner[f.Owner()]
	if len(eCalls) < 2 || len(fCalls) < 2 || len(hCalls) != 1 {
		b.log("  queue %d: %d and %d calls by the leaving owners (want 2 or more), %d by the holder (want 1): sample skipped", n, len(eCalls), len(fCalls), len(hCalls))
		return nil, 0, nil, errSampleShape
	}
	out := map[string]time.Duration{"enqueue": eCalls[0].duration, leaveMiddle: eCalls[len(eCalls)-1].duration, "leave": fCalls[len(fCalls)-1].duration, "unlock": hCalls[0].duration}
	if len(eCalls) > 2 {
		out[recheck] = eCalls[1].duration
	}
	var grant time.Duration
	calls := 0
	for _, x := range byOwner[w.Owner()] {
		if x.id > hCalls[0].id {
			grant += x.duration
			calls++
		}
	}
	if calls > 0 {
		out["grant"] = grant
	}
	return out, calls, after.since(before), nil
}
