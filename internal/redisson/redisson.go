// Package redisson is a model of a Java service using Redisson's
// RedissonFairLock on the same Redis, for the conformance suite and the
// soak: upstream's own fair-lock Lua scripts, driven the way
// RedissonFairLock drives them. Test-only; not part of the API.
package redisson

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fairlock/fairlock/backend"
)

// Backend is what the model needs of a connection: scripts, and pub/sub
// (sharded on a cluster).
type Backend interface {
	backend.Backend
	backend.ShardedSubscriber
}

// DoneSuffix marks completed calls in Count: Count(name + DoneSuffix).
const DoneSuffix = ".done"

// New returns a Redisson client instance on b: a random UUID, the 300 s
// slack, SPUBLISH wake-ups when sharded.
func New(b Backend, sharded bool, opts ...Option) (*Client, error) {
	var r [16]byte
	if _, err := rand.Read(r[:]); err != nil {
		return nil, err
	}
	r[6] = r[6]&0x0f | 0x40
	r[8] = r[8]&0x3f | 0x80
	h := hex.EncodeToString(r[:])
	c := &Client{
		b:       b,
		id:      h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32],
		slack:   DefaultSlack,
		publish: "publish",
		calls:   map[string]int{},
	}
	if sharded {
		c.publish = "spublish"
	}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// ID returns the client's UUID, the first half of its owner fields.
func (c *Client) ID() string { return c.id }

// The model runs what a Java service using Redisson's RedissonFairLock
// sends to the same Redis (X11 in RULES.md). It follows
// upstream's behaviour literally, defects included - its own
// Lua scripts, the client's clock as "now", the 300 s waiter slack, the
// O(N) score fix-ups, the 0-or-negative wait hints - so that the mixed
// cases test fairlock against what a real Redisson client does, not
// against fairlock's idea of it. It runs through backend.Backend, so it
// works on every adapter; on a cluster it publishes with SPUBLISH and
// listens with SSUBSCRIBE, as Redisson 3.22+ does on Redis 7. Not
// modelled: the watchdog (every acquire here takes an explicit lease) and
// replica sync.

// DefaultSlack is Redisson's fairLockWaitTimeout default (300 000 ms),
// the "wait" of a lock() call.
const DefaultSlack = 300 * time.Second

// messageWaitBound bounds the waits upstream leaves unbounded: in
// lock(), a negative ttl makes Redisson wait for a message with no timeout
// (#5503). A test must not hang, so the model waits at most this long and
// then re-runs the acquire script, as a spurious wake-up would. It is far
// beyond every bound the cases check (slack, eventually), so a lost
// wake-up still shows as a failed case, not as a slow pass.
const messageWaitBound = time.Minute

// latchTTL is how long an unlock request's result is kept.
const latchTTL = 30 * time.Second

// purgeLua is the stale-head purge every upstream script starts with:
// while the head's score is <= now (the caller's clock, ARGV), drop it from
// zset and list. A head without a score stays. Nothing is published.
const purgeLua = `
local function purge(queue, timeouts, now)
  while true do
    local first = redis.call('lindex', queue, 0)
    if first == false then
      break
    end
    local timeout = redis.call('zscore', timeouts, first)
    if timeout ~= false and tonumber(timeout) <= now then
      redis.call('zrem', timeouts, first)
      redis.call('lpop', queue)
    else
      break
    end
  end
end
`

// takeLua is the acquire/re-enter part shared by scripts 1 and 2:
// take a free lock when the queue is empty or I am its head - popping me
// and subtracting my wait from every other waiter's score (the O(N) loop)
// - or re-enter a lock I hold. KEYS[1..3] hash, queue, timeouts; ARGV[1]
// lease ms, ARGV[2] me, ARGV[3] wait ms.
const takeLua = `
if redis.call('exists', KEYS[1]) == 0
    and (redis.call('exists', KEYS[2]) == 0 or redis.call('lindex', KEYS[2], 0) == ARGV[2]) then
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], ARGV[2])
  local keys = redis.call('zrange', KEYS[3], 0, -1)
  for i = 1, #keys, 1 do
    redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), keys[i])
  end
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
`

var (
	// Script 1, try once (barging tryLock()): nil when held, else 1; never
	// enqueues. KEYS hash, queue, timeouts; ARGV lease, me, wait, now.
	tryOnceScript = backend.NewScript("redisson_try_once", purgeLua+`
purge(KEYS[2], KEYS[3], tonumber(ARGV[4]))
`+takeLua+`
return 1
`)

	// Script 2, acquire or enqueue (lock(), tryLock(wait, lease)): nil when
	// held; when already queued, max(0, PTTL) with the score untouched;
	// else enqueue at the tail with score ttl + wait + now, where ttl is
	// the last waiter's score - now, or the lock's PTTL when there is no
	// last waiter with a score, and return ttl (may be negative).
	// KEYS hash, queue, timeouts; ARGV lease, me, wait, now.
	acquireScript = backend.NewScript("redisson_acquire", purgeLua+`
purge(KEYS[2], KEYS[3], tonumber(ARGV[4]))
`+takeLua+`
if redis.call('zscore', KEYS[3], ARGV[2]) ~= false then
  local ttl = redis.call('pttl', KEYS[1])
  return math.max(0, ttl)
end
local last = redis.call('lindex', KEYS[2], -1)
local ttl
if last ~= false and last ~= ARGV[2] and redis.call('zscore', KEYS[3], last) ~= false then
  ttl = tonumber(redis.call('zscore', KEYS[3], last)) - tonumber(ARGV[4])
else
  ttl = redis.call('pttl', KEYS[1])
end
local timeout = ttl + tonumber(ARGV[3]) + tonumber(ARGV[4])
if redis.call('zadd', KEYS[3], timeout, ARGV[2]) == 1 then
  redis.call('rpush', KEYS[2], ARGV[2])
end
return ttl
`)

	// Script 3, unlock. KEYS hash, queue, timeouts, channel base, latch;
	// ARGV message "0", lease, me, now, latch ms, publish command.
	// Returns 1 released (also when the hash is absent, for anyone), 0
	// still held, nil not a holder.
	unlockScript = backend.NewScript("redisson_unlock", purgeLua+`
local done = redis.call('get', KEYS[5])
if done ~= false then
  return tonumber(done)
end
purge(KEYS[2], KEYS[3], tonumber(ARGV[4]))
if redis.call('exists', KEYS[1]) == 0 then
  local nextThreadId = redis.call('lindex', KEYS[2], 0)
  if nextThreadId ~= false then
    redis.call(ARGV[6], KEYS[4] .. ':' .. nextThreadId, ARGV[1])
  end
  redis.call('set', KEYS[5], 1, 'px', ARGV[5])
  return 1
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
  return nil
end
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if counter > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[5], 0, 'px', ARGV[5])
  return 0
end
redis.call('del', KEYS[1])
redis.call('set', KEYS[5], 1, 'px', ARGV[5])
local nextThreadId = redis.call('lindex', KEYS[2], 0)
if nextThreadId ~= false then
  redis.call(ARGV[6], KEYS[4] .. ':' .. nextThreadId, ARGV[1])
end
return 1
`)

	// Script 4, force unlock. KEYS hash, queue, timeouts, channel base;
	// ARGV message, now, publish command. 1 when a hash was deleted.
	forceUnlockScript = backend.NewScript("redisson_force_unlock", purgeLua+`
purge(KEYS[2], KEYS[3], tonumber(ARGV[2]))
if redis.call('del', KEYS[1]) == 1 then
  local nextThreadId = redis.call('lindex', KEYS[2], 0)
  if nextThreadId ~= false then
    redis.call(ARGV[3], KEYS[4] .. ':' .. nextThreadId, ARGV[1])
  end
  return 1
end
return 0
`)

	// Script 5, leave the queue after tryLock gave up: subtract my wait
	// from every waiter after me (the O(N) fix-up), then drop me. Publishes
	// nothing. KEYS queue, timeouts; ARGV me, wait.
	leaveScript = backend.NewScript("redisson_leave", `
local queue = redis.call('lrange', KEYS[1], 0, -1)
local i = 1
while i <= #queue and queue[i] ~= ARGV[1] do
  i = i + 1
end
i = i + 1
while i <= #queue do
  redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[i])
  i = i + 1
end
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('lrem', KEYS[1], 0, ARGV[1])
return nil
`)

	// Script 6, delete: the hash, queue and zset. Returns keys removed.
	deleteScript = backend.NewScript("redisson_delete",
		`return redis.call('del', KEYS[1], KEYS[2], KEYS[3])`)

	// Reads: EXISTS, HGET (hold count; HEXISTS is HGET ~= nil), PTTL.
	readScript = backend.NewScript("redisson_read", `
return {redis.call('exists', KEYS[1]), redis.call('hget', KEYS[1], ARGV[1]) or 0, redis.call('pttl', KEYS[1])}`)
)

// ErrNotHeld is Java's IllegalMonitorStateException from unlock.
var ErrNotHeld = errors.New("redisson: attempt to unlock lock, not locked by current thread")

// Client is one Redisson client instance: one UUID, one backend.
type Client struct {
	b       Backend
	id      string
	slack   time.Duration // fairLockWaitTimeout
	publish string        // "spublish" on a cluster, as Redisson 3.22+ on Redis 7

	mu    sync.Mutex
	calls map[string]int // script calls by name, and completed ones (name + DoneSuffix)
}

// Option configures a Client.
type Option func(*Client)

// WithSlack sets fairLockWaitTimeout (default 300 s).
func WithSlack(d time.Duration) Option {
	return func(c *Client) { c.slack = d }
}

// subscribe listens on channel as Redisson does: SSUBSCRIBE on a cluster.
func (c *Client) subscribe(ctx context.Context, channel string) (*backend.Subscription, error) {
	if c.publish == "spublish" {
		return c.b.SSubscribe(ctx, channel)
	}
	return c.b.Subscribe(ctx, channel)
}

func (c *Client) eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	c.mu.Lock()
	c.calls[s.Name]++
	c.mu.Unlock()
	rep, err := c.b.Eval(ctx, s, keys, args)
	c.mu.Lock()
	c.calls[s.Name+DoneSuffix]++
	c.mu.Unlock()
	return rep, err
}

func (c *Client) Count(script string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[script]
}

// prefixName is Redisson's prefixName.
func prefixName(p, name string) string {
	if strings.Contains(name, "{") {
		return p + ":" + name
	}
	return p + ":{" + name + "}"
}

// Lock is getFairLock(name) as seen from one Java thread: the
// owner field is "<uuid>:<threadId>". Like a Java thread, one handle is
// used by one goroutine at a time.
type Lock struct {
	c       *Client
	name    string
	Field   string
	keys    []string // hash, queue, timeouts
	channel string   // channel base; this thread's channel is channel + ":" + field
	latch   string   // latch base; a request's latch is latch + ":" + requestId

	lease time.Duration // internalLockLeaseTime: the lease of the latest acquire
}

func (c *Client) Lock(name string, threadID int64) *Lock {
	return &Lock{
		c:     c,
		name:  name,
		Field: c.id + ":" + strconv.FormatInt(threadID, 10),
		keys: []string{name,
			prefixName("redisson_lock_queue", name),
			prefixName("redisson_lock_timeout", name)},
		channel: prefixName("redisson_lock__channel", name),
		latch:   prefixName("redisson_unlock_latch", name),
		lease:   30 * time.Second,
	}
}

func now() string { return strconv.FormatInt(time.Now().UnixMilli(), 10) }

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// acquireScript runs script 1 or 2: held (nil reply) or the ttl it returned.
func (l *Lock) runAcquire(ctx context.Context, s *backend.Script, wait, lease time.Duration) (held bool, ttl int64, err error) {
	rep, err := l.c.eval(ctx, s, l.keys, []string{ms(lease), l.Field, ms(wait), now()})
	if err != nil {
		return false, 0, err
	}
	if rep.Kind == backend.Nil {
		l.lease = lease
		return true, 0, nil
	}
	n, err := rep.AsInt()
	if err != nil {
		return false, 0, fmt.Errorf("redisson %s: %w", s.Name, err)
	}
	return false, n, nil
}

// TryAcquire is RedissonFairLock's tryLockInnerAsync with script 2: wait
// is the caller's waitTime when > 0, else the slack.
func (l *Lock) TryAcquire(ctx context.Context, waitTime, lease time.Duration) (bool, int64, error) {
	wait := l.c.slack
	if waitTime > 0 {
		wait = waitTime
	}
	return l.runAcquire(ctx, acquireScript, wait, lease)
}

// TryLockOnce is tryLock() without arguments: one attempt, never queues.
func (l *Lock) TryLockOnce(ctx context.Context, lease time.Duration) (bool, error) {
	held, _, err := l.runAcquire(ctx, tryOnceScript, l.c.slack, lease)
	return held, err
}

// LockWithLease is lock(leaseTime): run script 2, subscribe, then loop:
// run script 2, wait for a message at most ttl (ttl < 0: no bound
// upstream; here messageWaitBound). Like a Java interrupt, ctx
// ending returns its error without leaving the queue (upstream does not
// run script 5 then).
func (l *Lock) LockWithLease(ctx context.Context, lease time.Duration) error {
	held, _, err := l.TryAcquire(ctx, -1, lease)
	if err != nil || held {
		return err
	}
	sub, err := l.c.subscribe(ctx, l.channel+":"+l.Field)
	if err != nil {
		return err
	}
	defer sub.Close()
	for {
		held, ttl, err := l.TryAcquire(ctx, -1, lease)
		if err != nil || held {
			return err
		}
		d := messageWaitBound
		if ttl >= 0 {
			d = time.Duration(ttl) * time.Millisecond
		}
		if err := l.waitMessage(ctx, sub, d); err != nil {
			return err
		}
	}
}

// waitMessage is the latch's TryAcquire(d): it returns at a message or
// after d (at once for d <= 0, which makes upstream's 0 hint a spin).
func (l *Lock) waitMessage(ctx context.Context, sub *backend.Subscription, d time.Duration) error {
	if d <= 0 {
		select {
		case <-sub.Events():
		default:
		}
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-sub.Events():
	case <-tm.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// TryLock is TryLock(waitTime, leaseTime): as lock, but every step checks
// the budget left and, when it is spent, runs script 5 and gives up.
func (l *Lock) TryLock(ctx context.Context, waitTime, lease time.Duration) (bool, error) {
	left := waitTime
	start := time.Now()
	spent := func() bool {
		left = waitTime - time.Since(start)
		return left <= 0
	}
	held, _, err := l.TryAcquire(ctx, waitTime, lease)
	if err != nil || held {
		return held, err
	}
	giveUp := func() (bool, error) {
		_, err := l.c.eval(ctx, leaveScript, l.keys[1:], []string{l.Field, ms(waitTime)})
		return false, err
	}
	if spent() {
		return giveUp()
	}
	sctx, cancel := context.WithTimeout(ctx, left)
	sub, err := l.c.subscribe(sctx, l.channel+":"+l.Field)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return giveUp() // subscribing took the whole budget
	}
	defer sub.Close()
	if spent() {
		return giveUp()
	}
	for {
		held, ttl, err := l.TryAcquire(ctx, waitTime, lease)
		if err != nil || held {
			return held, err
		}
		if spent() {
			return giveUp()
		}
		d := left
		if ttl >= 0 && time.Duration(ttl)*time.Millisecond < left {
			d = time.Duration(ttl) * time.Millisecond
		}
		if err := l.waitMessage(ctx, sub, d); err != nil {
			return false, err
		}
		if spent() {
			return giveUp()
		}
	}
}

// Unlock is Unlock(): ErrNotHeld when this thread holds nothing
// (and the hash exists - upstream reports success on a free lock).
func (l *Lock) Unlock(ctx context.Context) error {
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return err
	}
	keys := append(append([]string{}, l.keys...), l.channel, l.latch+":"+hex.EncodeToString(id[:]))
	rep, err := l.c.eval(ctx, unlockScript, keys,
		[]string{"0", ms(l.lease), l.Field, now(), ms(latchTTL), l.c.publish})
	if err != nil {
		return err
	}
	if rep.Kind == backend.Nil {
		return fmt.Errorf("%w (lock %s, thread %s)", ErrNotHeld, l.name, l.Field)
	}
	return nil
}

// ForceUnlock is ForceUnlock(): whether a hash was deleted.
func (l *Lock) ForceUnlock(ctx context.Context) (bool, error) {
	rep, err := l.c.eval(ctx, forceUnlockScript, append(append([]string{}, l.keys...), l.channel),
		[]string{"0", now(), l.c.publish})
	if err != nil {
		return false, err
	}
	return rep.Int == 1, nil
}

// Delete is Delete(): removes hash, queue and zset.
func (l *Lock) Delete(ctx context.Context) error {
	_, err := l.c.eval(ctx, deleteScript, l.keys, nil)
	return err
}

// State is what Redisson's reads return.
type State struct {
	Locked    bool  // isLocked: EXISTS
	HoldCount int64 // getHoldCount: HGET of this thread's field
	PTTL      int64 // remainTimeToLive: PTTL
}

func (l *Lock) Read(ctx context.Context) (State, error) {
	rep, err := l.c.eval(ctx, readScript, l.keys[:1], []string{l.Field})
	if err != nil {
		return State{}, err
	}
	v, err := rep.AsInts()
	if err != nil || len(v) != 3 {
		return State{}, fmt.Errorf("redisson read: %v %v", rep, err)
	}
	return State{Locked: v[0] == 1, HoldCount: v[1], PTTL: v[2]}, nil
}
