package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/internal/redisson"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
)

type suite struct {
	newBackend func(testing.TB) capable // the Factory, as the wrappers embed its backends
	cfg        config
}

// proc is one simulated process: a backend (counted) and a lock client.
type proc struct {
	b *countingBackend
	c *lock.Client
}

// newProc builds a backend and a lock client on it, closed at cleanup.
func (s *suite) newProc(t *testing.T, opts ...lock.Option) *proc {
	t.Helper()
	b := &countingBackend{capable: s.newBackend(t), counts: map[string]int{}}
	c, err := lock.NewClient(b, opts...)
	if err != nil {
		t.Fatalf("lock.NewClient: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	// A client listens on its notice channel from its start: wait for that,
	// as for a client that has been running, so that calls counted later
	// are the test's alone. (A server that refuses the channel never
	// confirms it: the wait is bounded.)
	deadline := time.Now().Add(2 * time.Second)
	for b.count(clientSubscribe+doneSuffix) == 0 && time.Now().Before(deadline) {
		time.Sleep(redistest.EventuallyInterval) // bounded polling, not synchronisation
	}
	return &proc{b: b, c: c}
}

func (p *proc) mutex(t *testing.T, name string, opts ...lock.MutexOption) *lock.Mutex {
	t.Helper()
	m, err := p.c.NewMutex(name, opts...)
	if err != nil {
		t.Fatalf("NewMutex(%q): %v", name, err)
	}
	return m
}

// lockName returns a lock name no other subtest uses.
func lockName(t *testing.T) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", ".", " ", "_", "{", "(", "}", ")").Replace(t.Name())
	return "conformance:" + name + ":" + hex.EncodeToString(b[:])
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// keysOf returns the lock's hash, queue, Redisson timeouts and fairlock
// liveness keys for a name without braces.
func keysOf(name string) []string {
	return []string{name, "redisson_lock_queue:{" + name + "}", "redisson_lock_timeout:{" + name + "}", "fairlock_lock_alive:{" + name + "}"}
}

// rawState reads, through the backend, what the lock's keys hold.
type rawState struct {
	hashExists bool
	queue      []string
	timeouts   int64 // entries in both deadline zsets (Redisson's and fairlock's)
}

const rawStateLua = `
return {redis.call('exists', KEYS[1]), redis.call('lrange', KEYS[2], 0, -1), redis.call('zcard', KEYS[3]) + redis.call('zcard', KEYS[4])}`

func readRaw(t *testing.T, b backend.Backend, name string) rawState {
	t.Helper()
	rep, err := b.Eval(context.Background(), backend.NewScript("conformance_raw", rawStateLua), keysOf(name), nil)
	if err != nil {
		t.Fatalf("read raw state: %v", err)
	}
	if rep.Kind != backend.Array || len(rep.Elems) != 3 {
		t.Fatalf("raw state reply %+v", rep)
	}
	var st rawState
	st.hashExists = rep.Elems[0].Int == 1
	for _, e := range rep.Elems[1].Elems {
		st.queue = append(st.queue, e.Str)
	}
	st.timeouts = rep.Elems[2].Int
	return st
}

// evalRaw runs a test-only script through the backend.
func evalRaw(t *testing.T, b backend.Backend, src string, keys []string, args ...string) backend.Reply {
	t.Helper()
	rep, err := b.Eval(context.Background(), backend.NewScript("conformance_test", src), keys, args)
	if err != nil {
		t.Fatalf("eval test script: %v", err)
	}
	return rep
}

// injectWaiter puts a queue entry for a fake owner whose deadline is
// ttl from the server's now, as a waiter that then stopped heartbeating
// (crashed) would leave; ttl <= 0 makes it already dead.
func injectWaiter(t *testing.T, b backend.Backend, name, owner string, ttl time.Duration) {
	t.Helper()
	evalRaw(t, b, `
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('rpush', KEYS[2], ARGV[1])
redis.call('zadd', KEYS[3], now + tonumber(ARGV[2]), ARGV[1])
return 1`, keysOf(name), owner, fmt.Sprint(ttl.Milliseconds()))
}

// expireWaiter makes an injected waiter's deadline now: it is dead from
// here on, whenever a script looks.
func expireWaiter(t *testing.T, b backend.Backend, name, owner string) {
	t.Helper()
	evalRaw(t, b, `
local t = redis.call('time')
redis.call('zadd', KEYS[3], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), ARGV[1])
return 1`, keysOf(name), owner)
}

// queueLen reads the queue length through Inspect.
func queueLen(t *testing.T, m *lock.Mutex) int {
	t.Helper()
	st, err := m.Inspect(context.Background(), 0)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	return st.QueueLength
}

// waitQueued waits until the lock's queue has n entries.
func waitQueued(t *testing.T, m *lock.Mutex, n int) {
	t.Helper()
	redistest.Eventually(t, eventually, fmt.Sprintf("queue length %d", n), func() bool { return queueLen(t, m) == n })
}

// result is what an acquire in a goroutine ended with.
type result struct {
	h   *lock.Hold
	err error
	at  time.Time
}

// goAcquire runs acquire in a goroutine and returns where its result goes.
func goAcquire(acquire func() (*lock.Hold, error)) <-chan result {
	ch := make(chan result, 1)
	go func() {
		h, err := acquire()
		ch <- result{h, err, time.Now()}
	}()
	return ch
}

// await receives a result within d or fails.
func await(t *testing.T, ch <-chan result, d time.Duration, what string) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(d):
		t.Fatalf("%s: no result within %v", what, d)
		return result{}
	}
}

// mustNotArrive checks that ch stays empty for d (used only where the rule
// is that something must NOT happen yet, e.g. a waiter while the lock is
// held).
func mustNotArrive(t *testing.T, ch <-chan result, d time.Duration, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s: got %+v, want nothing yet", what, r)
	case <-time.After(d):
	}
}

func mustLock(t *testing.T, m *lock.Mutex) *lock.Hold {
	t.Helper()
	h, err := m.Lock(ctxFor(t, eventually))
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	return h
}

func mustUnlock(t *testing.T, m *lock.Mutex) {
	t.Helper()
	if err := m.Unlock(ctxFor(t, eventually)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// countingBackend counts script calls by name and can drop replies.
type countingBackend struct {
	capable
	mu     sync.Mutex
	counts map[string]int
	// loseReply, if set, runs a script but reports a network error
	// instead of its reply when it returns true.
	loseReply func(script string) bool
	// noWatch hides the backend's key watching (backend.KeyWatcher).
	noWatch bool
	// acquiresAtSubscribe is the count of completed acquire calls when
	// the latest wake-up subscription was confirmed (settled).
	acquiresAtSubscribe int
}

// withoutKeyWatch makes p's backend report that it cannot watch keys, for
// cases about what happens without that early wake-up.
func withoutKeyWatch(p *proc) *proc {
	p.b.mu.Lock()
	p.b.noWatch = true
	p.b.mu.Unlock()
	return p
}

var errLostReply = errors.New("conformance: simulated lost reply")

// doneSuffix marks the counter of completed calls of a script.
const doneSuffix = redisson.DoneSuffix

func (b *countingBackend) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	b.mu.Lock()
	b.counts[s.Name]++
	lose := b.loseReply != nil && b.loseReply(s.Name)
	b.mu.Unlock()
	rep, err := b.capable.Eval(ctx, s, keys, args)
	b.mu.Lock()
	b.counts[s.Name+doneSuffix]++
	b.mu.Unlock()
	if lose && err == nil {
		return backend.Reply{}, errLostReply
	}
	return rep, err
}

func (b *countingBackend) EvalBatch(ctx context.Context, calls []backend.Call) []backend.Result {
	b.mu.Lock()
	for _, c := range calls {
		b.counts[c.Script.Name]++
	}
	b.mu.Unlock()
	return b.capable.EvalBatch(ctx, calls)
}

// clientSubscribe counts the subscriptions to a lock client's own channel
// ("fairlock_client:<id>"), which it holds while it has holds, to hear of
// reconnects: one per client, not per call.
const clientSubscribe = "SUBSCRIBE fairlock_client"

func (b *countingBackend) Subscribe(ctx context.Context, channel string) (*backend.Subscription, error) {
	return b.subscribe(ctx, channel, b.capable.Subscribe)
}

func (b *countingBackend) SSubscribe(ctx context.Context, channel string) (*backend.Subscription, error) {
	return b.subscribe(ctx, channel, b.capable.SSubscribe)
}

func (b *countingBackend) subscribe(ctx context.Context, channel string, sub func(context.Context, string) (*backend.Subscription, error)) (*backend.Subscription, error) {
	client := strings.HasPrefix(channel, "fairlock_client:")
	b.mu.Lock()
	if client {
		b.counts[clientSubscribe]++
	} else {
		b.counts["SUBSCRIBE"]++
	}
	b.mu.Unlock()
	s, err := sub(ctx, channel)
	if client && err == nil {
		b.mu.Lock()
		b.counts[clientSubscribe+doneSuffix]++
		b.mu.Unlock()
	}
	if !client {
		b.mu.Lock()
		b.counts["SUBSCRIBE"+doneSuffix]++
		b.acquiresAtSubscribe = b.counts["acquire"+doneSuffix]
		b.mu.Unlock()
	}
	return s, err
}

// WatchKey forwards to the backend under test when it can watch keys.
func (b *countingBackend) WatchKey(ctx context.Context, key string) (*backend.Subscription, error) {
	kw, ok := b.capable.(backend.KeyWatcher)
	b.mu.Lock()
	ok = ok && !b.noWatch
	if ok {
		b.counts["WATCHKEY"]++
	}
	b.mu.Unlock()
	if !ok {
		return nil, backend.ErrNotSupported
	}
	return kw.WatchKey(ctx, key)
}

// EvalWait forwards to the backend under test when it can wait for
// replicas.
func (b *countingBackend) EvalWait(ctx context.Context, s *backend.Script, keys, args []string, replicas int, timeout time.Duration) (backend.Reply, int, error) {
	rw, ok := b.capable.(backend.ReplicaWaiter)
	if !ok {
		return backend.Reply{}, 0, backend.ErrNotSupported
	}
	b.mu.Lock()
	b.counts[s.Name]++
	b.mu.Unlock()
	rep, acked, err := rw.EvalWait(ctx, s, keys, args, replicas, timeout)
	b.mu.Lock()
	b.counts[s.Name+doneSuffix]++
	b.mu.Unlock()
	return rep, acked, err
}

func (b *countingBackend) count(name string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.counts[name]
}

// total counts the calls sent, all but NewClient's reading of the
// server's memory policy and version (server_info, X17, X18).
func (b *countingBackend) total() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for name, c := range b.counts {
		// The client's own start-up calls (its memory-policy check, its
		// subscription to its notice channel) are not the caller's.
		if !strings.HasSuffix(name, doneSuffix) && name != "server_info" && name != clientSubscribe {
			n += c
		}
	}
	return n
}

// settled waits until p's waiter has queued and is subscribed to its
// wake-ups: an acquire call completed after its latest subscription was
// confirmed (the re-check behind a new subscription, or the queueing call
// of an owner that kept its subscription from an earlier wait), and no
// subscription is in flight. From then on only a wake-up or its timers can
// move it. A test of a wake-up starts the release only after this;
// earlier, the re-check could find the lock free by itself and hide a
// missing wake-up. p must have one waiter.
func settled(t *testing.T, p *proc) { settledAfter(t, p, 0) }

// settledAfter is settled for a waiter started when p had completed base
// acquire calls.
func settledAfter(t *testing.T, p *proc, base int) {
	t.Helper()
	redistest.Eventually(t, eventually, "the waiter to queue, subscribed", func() bool {
		p.b.mu.Lock()
		defer p.b.mu.Unlock()
		done := p.b.counts["acquire"+doneSuffix]
		// The waiter subscribes beside its wait loop, after its first
		// attempt: until a subscription has been made (or an earlier
		// wait's is reused), the attempt after it is still to come.
		subscribed := p.b.counts["SUBSCRIBE"+doneSuffix] > 0
		subscribing := p.b.counts["SUBSCRIBE"] != p.b.counts["SUBSCRIBE"+doneSuffix]
		return done >= base+1 && subscribed && !subscribing && done > p.b.acquiresAtSubscribe
	})
}

// handOver is the shape of the wake-up cases: with the lock held, waiter
// (the only waiter of proc wp) queues - probe sees it - and settles; then
// release runs, and the waiter must take the lock within bound of it.
func handOver(t *testing.T, probe *lock.Mutex, wp *proc, waiter *lock.Mutex, bound time.Duration, what string, release func()) *lock.Hold {
	t.Helper()
	ch := goAcquire(func() (*lock.Hold, error) { return waiter.Lock(ctxFor(t, 60*time.Second)) })
	waitQueued(t, probe, 1)
	settled(t, wp)
	released := time.Now()
	release()
	r := await(t, ch, 60*time.Second, what)
	if r.err != nil {
		t.Fatalf("%s: %v", what, r.err)
	}
	if d := r.at.Sub(released); d > bound {
		t.Errorf("%s took %v, want at most %v: the wake-up did not arrive", what, d, bound)
	}
	return r.h
}
