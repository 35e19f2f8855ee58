package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/goredisbackend"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/lock/observe"
	"github.com/fairlock/fairlock/lockbench"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/fairlock/fairlock/valkeybackend"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
	"github.com/valkey-io/valkey-go"
)

// fairlockAdapters are the client libraries fairlock is measured on. To
// measure another adapter, add one line here with a function that opens it.
var fairlockAdapters = []fairlockAdapter{
	{name: "rueidis", options: "client defaults", open: openRueidis},
	{name: "valkey", options: "client defaults", open: openValkey},
	{name: "go-redis", options: "client defaults but ContextTimeoutEnabled, as goredisbackend asks", open: openGoRedis},
}

// fairlockAdapter opens a backend (and whatever client it needs) on addr.
// small asks for small connection buffers (the idle-waiter scenario).
type fairlockAdapter struct {
	name    string
	options string // the client options, for the settings table
	open    func(addr string, small bool) (backend.Backend, func(), error)
}

// The rueidis and valkey-go clients' own buffers are 0.5 MiB each way per
// connection; 1,000 clients with two connections each would take 2 GiB
// for nothing in the idle-waiter scenario, so it asks for 64 KiB.
const smallBuffer = 64 << 10

func openRueidis(addr string, small bool) (backend.Backend, func(), error) {
	opt := rueidis.ClientOption{InitAddress: []string{addr}}
	if small {
		opt.ReadBufferEachConn, opt.WriteBufferEachConn = smallBuffer, smallBuffer
	}
	// Dial, not New: its Backend runs calls on the caller's goroutine.
	b, err := rueidisbackend.Dial(opt)
	if err != nil {
		return nil, nil, err
	}
	return b, func() { _ = b.Close() }, nil
}

func openValkey(addr string, small bool) (backend.Backend, func(), error) {
	opt := valkey.ClientOption{InitAddress: []string{addr}}
	if small {
		opt.ReadBufferEachConn, opt.WriteBufferEachConn = smallBuffer, smallBuffer
	}
	b, err := valkeybackend.Dial(opt)
	if err != nil {
		return nil, nil, err
	}
	return b, func() { _ = b.Close() }, nil
}

// openGoRedis needs nothing for small: go-redis' buffers are 32 KiB by
// default, under smallBuffer already. ContextTimeoutEnabled lets the lock's
// deadlines reach the socket (see goredisbackend).
func openGoRedis(addr string, _ bool) (backend.Backend, func(), error) {
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
	if err := c.Ping(context.Background()).Err(); err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	b := goredisbackend.New(c)
	return b, func() { _ = b.Close(); _ = c.Close() }, nil
}

// lockKind is one lock library with one configuration: a column of every
// table and a line of the chart.
type lockKind struct {
	name     string // "fairlock/rueidis", "redsync 2ms", ...
	module   string // the Go module whose version is reported
	settings string // for the settings table
	fairlock bool   // FIFO check by queue snapshots
	client   string // the client library it runs on, as floorClient.name
	// connect opens one client and returns lockers on it.
	connect func(addr string, o connOpts) (*client, error)
}

// connOpts are the few things a scenario changes in a client.
type connOpts struct {
	small    bool             // 64 KiB connection buffers (idle waiters)
	observer observe.Observer // fairlock only: see wakeRecorder
	lease    time.Duration    // fairlock only: the watchdog lease, when not the default
}

// client is one connection set of a lock library: each call of locker
// makes a new owner/contender on it for lock name.
type client struct {
	locker func(name string) (lockbench.Locker, error)
	mutex  func(name string) (*lock.Mutex, error) // fairlock only
	close  func()
}

const (
	shortRetry   = 2 * time.Millisecond
	peerLockTTL  = 8 * time.Second // redsync's default expiry, used for redislock too
	redislockEx  = 100 * time.Millisecond
	rueidisKeysN = 1
)

// lockKinds returns every lock measured, fairlock first.
func lockKinds() []lockKind {
	var kinds []lockKind
	for _, a := range fairlockAdapters {
		kinds = append(kinds, lockKind{
			name: "fairlock/" + a.name, module: "github.com/fairlock/fairlock", fairlock: true, client: a.name,
			settings: "adapter " + a.name + " (" + a.options + "); lock defaults: watchdog lease 30 s, waiter timeout 5 s, PUBLISH wake-ups",
			connect:  fairlockConnect(a),
		})
	}
	kinds = append(kinds,
		lockKind{
			name: "rueidislock", module: "github.com/redis/rueidis", client: "rueidis",
			settings: "KeyMajority 1 (one key, like the others; default 2 = 3 keys), other options default: KeyValidity 5 s, waits for client-side-caching invalidations",
			connect:  rueidislockConnect(rueidisKeysN),
		},
		lockKind{
			name: "rueidislock/3keys", module: "github.com/redis/rueidis", client: "rueidis",
			settings: "all defaults: KeyMajority 2 (2 of 3 keys, taken one after the other)",
			connect:  rueidislockConnect(0),
		},
		lockKind{
			name: "redsync 2ms", module: "github.com/go-redsync/redsync/v4", client: "go-redis",
			settings: "go-redis v9 pool (defaults), expiry 8 s, 32 tries per LockContext (called again until the run ends), retry delay 2 ms",
			connect:  redsyncConnect(redsync.WithRetryDelay(shortRetry)),
		},
		lockKind{
			name: "redsync default", module: "github.com/go-redsync/redsync/v4", client: "go-redis",
			settings: "as above, default retry delay: random 50-250 ms",
			connect:  redsyncConnect(),
		},
		lockKind{
			name: "redislock 2ms", module: "github.com/bsm/redislock", client: "go-redis",
			settings: "go-redis v9 client (defaults), TTL 8 s, LinearBackoff(2 ms), Obtain called again until the run ends",
			connect:  redislockConnect(shortRetry),
		},
		lockKind{
			name: "redislock 100ms", module: "github.com/bsm/redislock", client: "go-redis",
			settings: "as above, LinearBackoff(100 ms): redislock's default is no retry at all; 100 ms is the interval of its own example",
			connect:  redislockConnect(redislockEx),
		},
	)
	return kinds
}

func fairlockConnect(a fairlockAdapter) func(addr string, o connOpts) (*client, error) {
	return func(addr string, o connOpts) (*client, error) {
		b, closeBackend, err := a.open(addr, o.small)
		if err != nil {
			return nil, err
		}
		var opts []lock.Option
		if o.observer != nil {
			opts = append(opts, lock.WithObserver(o.observer))
		}
		if o.lease > 0 {
			opts = append(opts, lock.WithLease(o.lease))
		}
		lc, err := lock.NewClient(b, opts...)
		if err != nil {
			closeBackend()
			return nil, err
		}
		mutex := func(name string) (*lock.Mutex, error) { return lc.NewMutex(name) }
		return &client{
			mutex: mutex,
			locker: func(name string) (lockbench.Locker, error) {
				m, err := mutex(name)
				if err != nil {
					return nil, err
				}
				return lockbench.MutexLocker(m), nil
			},
			close: func() { _ = lc.Close(); closeBackend() },
		}, nil
	}
}

// rueidislockConnect makes one Locker (one rueidis client) per client;
// majority 0 keeps the library's default.
func rueidislockConnect(majority int32) func(addr string, o connOpts) (*client, error) {
	return func(addr string, o connOpts) (*client, error) {
		opt := rueidis.ClientOption{InitAddress: []string{addr}}
		if o.small {
			opt.ReadBufferEachConn, opt.WriteBufferEachConn = smallBuffer, smallBuffer
		}
		l, err := rueidislock.NewLocker(rueidislock.LockerOption{ClientOption: opt, KeyMajority: majority})
		if err != nil {
			return nil, err
		}
		return &client{
			locker: func(name string) (lockbench.Locker, error) {
				var release context.CancelFunc
				return lockbench.LockerFuncs{
					LockFunc: func(ctx context.Context) (int64, error) {
						_, cancel, err := l.WithContext(ctx, name)
						if err != nil {
							return 0, err
						}
						release = cancel
						return 0, nil
					},
					// The cancel function deletes the key and returns when done.
					UnlockFunc: func(context.Context) error {
						if release == nil {
							return errors.New("rueidislock: not held")
						}
						release()
						release = nil
						return nil
					},
				}, nil
			},
			close: l.Close,
		}, nil
	}
}

func redsyncConnect(opts ...redsync.Option) func(addr string, o connOpts) (*client, error) {
	return func(addr string, _ connOpts) (*client, error) {
		rc := goredis.NewClient(&goredis.Options{Addr: addr})
		if err := rc.Ping(context.Background()).Err(); err != nil {
			_ = rc.Close()
			return nil, err
		}
		rs := redsync.New(redsyncgoredis.NewPool(rc))
		return &client{
			locker: func(name string) (lockbench.Locker, error) {
				m := rs.NewMutex(name, opts...)
				return lockbench.LockerFuncs{
					LockFunc: func(ctx context.Context) (int64, error) {
						// LockContext gives up after its tries; a waiter calls it again.
						for {
							err := m.LockContext(ctx)
							if err == nil {
								return 0, nil
							}
							if ctx.Err() != nil {
								return 0, ctx.Err()
							}
							// Taken (or gave up): wait on. A Redis error ends the run.
							var redisErr *redsync.RedisError
							if errors.As(err, &redisErr) {
								return 0, err
							}
						}
					},
					UnlockFunc: func(ctx context.Context) error {
						ok, err := m.UnlockContext(ctx)
						if err == nil && !ok {
							err = errors.New("redsync: unlock failed")
						}
						return err
					},
				}, nil
			},
			close: func() { _ = rc.Close() },
		}, nil
	}
}

func redislockConnect(retry time.Duration) func(addr string, o connOpts) (*client, error) {
	return func(addr string, _ connOpts) (*client, error) {
		rc := goredis.NewClient(&goredis.Options{Addr: addr})
		if err := rc.Ping(context.Background()).Err(); err != nil {
			_ = rc.Close()
			return nil, err
		}
		locks := redislock.New(rc)
		return &client{
			locker: func(name string) (lockbench.Locker, error) {
				var held *redislock.Lock
				return lockbench.LockerFuncs{
					LockFunc: func(ctx context.Context) (int64, error) {
						// Without a deadline Obtain retries for one TTL; a waiter calls it again.
						for {
							l, err := locks.Obtain(ctx, name, peerLockTTL, &redislock.Options{RetryStrategy: redislock.LinearBackoff(retry)})
							if err == nil {
								held = l
								return 0, nil
							}
							if ctx.Err() != nil {
								return 0, ctx.Err()
							}
							if !errors.Is(err, redislock.ErrNotObtained) && !errors.Is(err, context.DeadlineExceeded) {
								return 0, err
							}
						}
					},
					UnlockFunc: func(ctx context.Context) error {
						if held == nil {
							return errors.New("redislock: not held")
						}
						err := held.Release(ctx)
						held = nil
						return err
					},
				}, nil
			},
			close: func() { _ = rc.Close() },
		}, nil
	}
}

// connectMany opens n clients of k, at most 32 at a time.
func connectMany(k lockKind, addr string, n int, o connOpts) ([]*client, error) {
	clients := make([]*client, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 32)
	done := make(chan struct{})
	for i := range n {
		go func() {
			sem <- struct{}{}
			defer func() { <-sem; done <- struct{}{} }()
			clients[i], errs[i] = k.connect(addr, o)
		}()
	}
	for range n {
		<-done
	}
	if err := errors.Join(errs...); err != nil {
		closeAll(clients)
		return nil, fmt.Errorf("%s: connecting %d clients: %w", k.name, n, err)
	}
	return clients, nil
}

func closeAll(clients []*client) {
	for _, c := range clients {
		if c != nil {
			c.close()
		}
	}
}

// wakeRecorder is a observe.Observer that records each acquire call: when it
// started, queued, was woken, and ended. It splits a hand-over into the
// wake-up message's delivery and the client's work after it, and tells a
// slow Lock that waited for a message from one that waited for a timer.
// Used in instrumented runs only.
type wakeRecorder struct {
	mu    sync.Mutex
	calls map[string][]wakeRecord // by owner, in call order
}

type wakeRecord struct {
	start, queued, firstWake, lastWake, end time.Time // zero: did not happen
	wakeups, position                       int
	err                                     error
}

func newWakeRecorder() *wakeRecorder { return &wakeRecorder{calls: map[string][]wakeRecord{}} }

// forOwner returns the owner's acquire calls, in order.
func (w *wakeRecorder) forOwner(owner string) []wakeRecord {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls[owner]
}

// all returns every call recorded.
func (w *wakeRecorder) all() []wakeRecord {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []wakeRecord
	for _, c := range w.calls {
		out = append(out, c...)
	}
	return out
}

func (w *wakeRecorder) StartAcquire(ctx context.Context, c observe.Call) (context.Context, observe.AcquireTracker) {
	return ctx, &wakeTracker{w: w, owner: c.Owner, rec: wakeRecord{start: time.Now()}}
}

func (w *wakeRecorder) StartRelease(ctx context.Context, _ observe.Call) (context.Context, observe.ReleaseTracker) {
	return ctx, noRelease{}
}

func (w *wakeRecorder) HoldLost(observe.Call, int64, time.Duration, error) {}
func (w *wakeRecorder) Renewed(observe.Call, error)                        {}

type wakeTracker struct {
	w     *wakeRecorder
	owner string
	rec   wakeRecord
}

func (t *wakeTracker) Queued(int) { t.rec.queued = time.Now() }
func (t *wakeTracker) Woken(bool) {
	now := time.Now()
	if t.rec.firstWake.IsZero() {
		t.rec.firstWake = now
	}
	t.rec.lastWake = now
	t.rec.wakeups++
}
func (t *wakeTracker) End(r observe.AcquireResult) {
	t.rec.end, t.rec.position, t.rec.err = time.Now(), r.Position, r.Err
	t.w.mu.Lock()
	t.w.calls[t.owner] = append(t.w.calls[t.owner], t.rec)
	t.w.mu.Unlock()
}

type noRelease struct{}

func (noRelease) End(observe.ReleaseResult) {}
