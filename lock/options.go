package lock

import (
	"fmt"
	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock/inspect"
	"github.com/fairlock/fairlock/lock/observe"
	"os"
	"time"
	"unicode/utf8"
)

// Defaults, as the options that change them say.
const (
	// defaultLease: a holder that stops renewing frees the lock this long
	// after its last renewal.
	defaultLease = 30 * time.Second
	// defaultWaiterTimeout: live waiters refresh their deadline every
	// third of it, so only a dead waiter is ever dropped, and it delays
	// the queue by at most this long.
	defaultWaiterTimeout = 5 * time.Second
	// defaultRedissonSlack is Redisson's default fairLockWaitTimeout.
	defaultRedissonSlack = 5 * time.Minute
	// maxDuration is the longest lease or wait accepted: ten years.
	maxDuration = 10 * 365 * 24 * time.Hour
)

// unlockLatchTTL is how long an unlock's result is kept for a retry of the
// same request (B10). Retries happen within one Unlock call and start no
// later than unlockRetryWindow after its first attempt, so while the
// latch lives; one that reaches the server later still cannot release
// twice (unlock.lua takes the count down only from the value the client
// knows). Latches alive at any moment: the unlock rate times this. An
// Unlock shares its window's end with those started within
// unlockRetryGrain of it (sharedBound), so its window is up to that much
// longer, still well within the latch's lifetime.
const (
	unlockLatchTTL    = 3 * time.Second
	unlockRetryWindow = 2 * time.Second
	unlockRetryGrain  = 200 * time.Millisecond
)

type config struct {
	lease         time.Duration
	waiterTimeout time.Duration
	keyPrefix     string
	wakeUps       Publish // WithPublish
	publish       string  // the scripts' publish commands, resolved by NewClient
	sharded       bool    // waiters listen with SSubscribe, resolved by NewClient
	observer      observe.Observer
	redissonSlack time.Duration
	replicas      int                  // X9: replicas that must acknowledge an acquire
	replicaWait   time.Duration        // X9: how long WAIT waits for them
	description   *inspect.Description // WithDescription; nil: none
	cached        *cachedReads         // WithCachedReads; nil: off
	evictionRisk  bool                 // WithEvictionRisk: the memory policy is not read
}

// Option configures a Client.
type Option func(*config) error

// newConfig applies opts to the defaults, and checks what they ask of b.
func newConfig(b backend.Backend, opts []Option) (config, error) {
	cfg := config{lease: defaultLease, waiterTimeout: defaultWaiterTimeout, redissonSlack: defaultRedissonSlack}
	for _, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("%w: nil option", ErrInvalidArgument)
		}
		if err := o(&cfg); err != nil {
			return config{}, err
		}
	}
	if _, ok := b.(backend.ReplicaWaiter); cfg.replicas > 0 && !ok {
		return config{}, fmt.Errorf("%w: WithReplicaAcks needs a backend.ReplicaWaiter backend", ErrInvalidArgument)
	}
	return cfg, nil
}

// WithLease sets the watchdog lease (default 30 s): holds
// taken by Lock are renewed to it every third of it while held, and a
// crashed holder's lock frees itself after it. At least 3 ms.
func WithLease(d time.Duration) Option {
	return func(c *config) error {
		if err := checkDuration("lease", d); err != nil {
			return err
		}
		if d < 3*time.Millisecond {
			return fmt.Errorf("%w: lease %v is shorter than 3ms", ErrInvalidArgument, d)
		}
		c.lease = d
		return nil
	}
}

// WithWaiterTimeout sets how long a queued owner may go without a
// heartbeat before others treat it as dead (default 5 s). Waiters heartbeat every third of it. At least 3 ms.
func WithWaiterTimeout(d time.Duration) Option {
	return func(c *config) error {
		if err := checkDuration("waiter timeout", d); err != nil {
			return err
		}
		if d < 3*time.Millisecond {
			return fmt.Errorf("%w: waiter timeout %v is shorter than 3ms", ErrInvalidArgument, d)
		}
		c.waiterTimeout = d
		return nil
	}
}

// WithRedissonSlack sets how long a lock's queue keys outlive the latest
// deadline of any waiter (default 5 min, Redisson's
// fairLockWaitTimeout): the room left for Redisson waiters, whose wait this
// is, when they queue after the last fairlock operation on the lock. It is
// also the wait a fairlock waiter makes room for, in its Redisson deadline,
// per Redisson waiter ahead of it, so that Redisson never drops it as dead
// while it lives: set it to the Redisson clients'
// fairLockWaitTimeout, and no less than their longest tryLock wait. With
// no Redisson clients a small value (a second) makes dead waiters' entries
// go sooner.
func WithRedissonSlack(d time.Duration) Option {
	return func(c *config) error {
		if err := checkDuration("Redisson slack", d); err != nil {
			return err
		}
		c.redissonSlack = d
		return nil
	}
}

// WithKeyPrefix puts prefix in front of every lock name (default none):
// lock "orders" with prefix "app:" lives at key "app:orders" and queues at
// "redisson_lock_queue:{app:orders}", as with a Redisson NameMapper that
// adds the same prefix.
func WithKeyPrefix(prefix string) Option {
	return func(c *config) error {
		c.keyPrefix = prefix
		return nil
	}
}

// Publish says how the scripts wake waiters (PUBLISH, SPUBLISH or both)
// and how waiters listen (SUBSCRIBE or SSUBSCRIBE); see WithPublish.
type Publish int

// The ways to wake waiters.
const (
	// PublishAuto, the default: sharded (SPUBLISH, SSUBSCRIBE) on a
	// cluster - a backend.ShardedSubscriber whose Sharded reports true -
	// whose server has sharded pub/sub (Redis 7.0+, Valkey 7.2+), as
	// Redisson 3.22+ does there; plain otherwise, and also when NewClient
	// cannot read the server's version (INFO refused).
	PublishAuto Publish = iota
	// PublishPlain wakes with PUBLISH and listens with SUBSCRIBE. On a
	// cluster every wake-up then crosses the cluster bus to every node.
	// For clusters shared with Redisson clients older than 3.22, or
	// servers older than Redis 7.
	PublishPlain
	// PublishSharded wakes with SPUBLISH and listens with SSUBSCRIBE at the
	// shard that owns the lock's slot. It needs a cluster backend
	// (backend.ShardedSubscriber); NewClient fails otherwise.
	PublishSharded
	// PublishBoth wakes with SPUBLISH and PUBLISH, and listens sharded on a
	// cluster backend, plain elsewhere: for a cluster shared with Redisson
	// clients of both kinds (before and after 3.22).
	PublishBoth
)

// WithPublish sets how the scripts wake waiters and how waiters listen
// (default PublishAuto: sharded on a Redis 7+ cluster, plain elsewhere).
// Every client of one lock, Redisson's included, must publish what the
// others listen to.
func WithPublish(p Publish) Option {
	return func(c *config) error {
		if p < PublishAuto || p > PublishBoth {
			return fmt.Errorf("%w: unknown Publish %d", ErrInvalidArgument, int(p))
		}
		c.wakeUps = p
		return nil
	}
}

// WithReplicaAcks makes every acquire wait (WAIT) until replicas replicas
// have acknowledged it, for at most timeout (default: off). An acquire that
// fewer acknowledged is rolled back and returns ErrNotReplicated, so a
// failover to a replica cannot silently forget a granted lock. The
// backend must implement backend.ReplicaWaiter (both adapters do, for
// standalone and sentinel clients; not for cluster clients). Each acquire
// then costs the WAIT as well: at least one replica round trip.
func WithReplicaAcks(replicas int, timeout time.Duration) Option {
	return func(c *config) error {
		if replicas < 1 {
			return fmt.Errorf("%w: replica count %d is not positive", ErrInvalidArgument, replicas)
		}
		if err := checkDuration("replica timeout", timeout); err != nil {
			return err
		}
		c.replicas, c.replicaWait = replicas, timeout
		return nil
	}
}

// WithObserver reports every acquire and release to o (default none; see
// package otel). With no observer the lock does no tracing work at all.
func WithObserver(o observe.Observer) Option {
	return func(c *config) error {
		if o == nil {
			return fmt.Errorf("%w: nil observer", ErrInvalidArgument)
		}
		c.observer = o
		return nil
	}
}

// WithDescription makes the client describe itself (default: no
// description) as name - what the application chooses to call this
// client, such as "orders-api" or a request ID - with the host name and
// process ID filled in (Description). Inspect then reports it for this
// client's holders and waiters, so an operator can tell who holds a lock.
//
// The description lives under its own key,
// "<key prefix>fairlock_client_info:<clientID>", written when the client
// starts and rewritten every third of the watchdog lease (at most once a
// second); the key lives three times that, so it expires with a client
// that died, and Close deletes it. That costs one small write per
// interval per client, and the key must be writable (and, for Inspect,
// readable) under any ACL in use. Clients that share locks must share the
// key prefix (WithKeyPrefix) to find each other's descriptions. name may
// be empty; it must be valid UTF-8 of at most 256 bytes, else the option
// fails with ErrInvalidArgument.
func WithDescription(name string) Option {
	return func(c *config) error {
		if len(name) > maxDescriptionName || !utf8.ValidString(name) {
			return fmt.Errorf("%w: description name must be valid UTF-8 of at most %d bytes", ErrInvalidArgument, maxDescriptionName)
		}
		host, _ := os.Hostname() // "" when unknown; the name and PID still say who
		c.description = &inspect.Description{Host: host, PID: os.Getpid(), Name: name}
		return nil
	}
}

// WithCachedReads makes IsLocked, IsHeldBy, HoldCount, RemainTTL and
// Inspect read through the client-side cache of the backend (default:
// off - every read runs a script on the server), for status pages that
// poll many locks: a read of a lock that has not changed since this
// client last read it sends nothing to Redis, and a read the cache cannot
// answer costs a few plain commands instead of a script. Locking,
// unlocking and every other call are unaffected.
//
// The backend must implement backend.CachedReader - rueidisbackend and
// valkeybackend do, on clients with client-side caching (their default;
// not with DisableCache, and not with the NOLOOP tracking option, which
// hides the client's own writes from its cache) - and the server must
// have PEXPIRETIME (Redis 7, Valkey 7.2). Otherwise the reads run the
// script as without the option; so does a read whose cached read fails.
//
// Staleness: the server tells the client when a key it read changes
// (CLIENT TRACKING), so a cached read sees a write about one network
// delay after the server completed it (in tests on one machine, the first
// read after Unlock returned saw it). maxStale bounds the rest: no cached
// reply is used longer than maxStale after it was read from the server,
// nor past its key's expiry time, and a connection that drops takes its
// cache with it; so when invalidations stop arriving on a connection the
// client still thinks alive, reads lag by at most maxStale. Each lock's
// keys are read again at least every maxStale, so a minute suits a status
// page. maxStale must be at least 1 ms and at most ten years
// (ErrInvalidArgument).
//
// The cached reads are several plain commands, not one script: a cached
// Inspect can show the holders and the queue from moments apart (by at
// most the staleness above), not one atomic snapshot. RemainTTL and
// State.TTL are the key's expiry time (PEXPIRETIME; PTTL cannot be cached,
// its reply changes with time) less the server's clock, which the client
// estimates from a script read repeated every 10 s, to within half that
// read's round trip plus a millisecond; State.ServerTime is that
// estimate.
func WithCachedReads(maxStale time.Duration) Option {
	return func(c *config) error {
		if err := checkDuration("cached read staleness", maxStale); err != nil {
			return err
		}
		c.cached = &cachedReads{maxStale: maxStale}
		return nil
	}
}

// WithEvictionRisk accepts a server whose memory policy may evict lock
// keys (default: refused). Every lock key carries a TTL, so with a memory
// limit (maxmemory) any maxmemory-policy but noeviction - the allkeys-*
// and the volatile-* ones alike - may evict a held lock's hash when memory
// runs short; the next waiter then gets the lock while the holder still
// works (the holder learns of it within about two round trips where the
// backend watches keys). Without this option NewClient reads the policy
// (INFO memory, from a script) and fails with ErrEvictionPolicy on such a
// server, and so do acquires after a reconnect found one; with it nothing
// is read. Fencing tokens (Hold.Token) still never go backwards, but a
// token counter evicted with the rest restarts from the server's clock.
func WithEvictionRisk() Option {
	return func(c *config) error {
		c.evictionRisk = true
		return nil
	}
}

// MutexOption configures a Mutex.
type MutexOption func(*mutexConfig) error

type mutexConfig struct {
	ownerID    int64
	ownerIDSet bool
}

// WithOwnerID makes the Mutex act for the given owner ID of this client
// instead of a fresh one. Two Mutexes of one Client with the same name and
// owner ID are one owner: they re-enter each other's holds. Use it to share
// ownership across goroutines deliberately, or to mirror a Java thread ID.
// The ID must be positive (ErrInvalidArgument), as Java thread IDs and the
// IDs NewMutex picks are.
func WithOwnerID(id int64) MutexOption {
	return func(c *mutexConfig) error {
		if id <= 0 {
			return fmt.Errorf("%w: owner ID %d is not positive", ErrInvalidArgument, id)
		}
		c.ownerID, c.ownerIDSet = id, true
		return nil
	}
}

// checkDuration is the X10 check for user durations.
func checkDuration(what string, d time.Duration) error {
	switch {
	case d <= 0:
		return fmt.Errorf("%w: %s %v is not positive", ErrInvalidArgument, what, d)
	case d < time.Millisecond:
		return fmt.Errorf("%w: %s %v is shorter than 1ms", ErrInvalidArgument, what, d)
	case d > maxDuration:
		return fmt.Errorf("%w: %s %v is longer than ten years", ErrInvalidArgument, what, d)
	}
	return nil
}
