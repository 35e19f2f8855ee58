package securitytest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/goredisbackend"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/fairlock/fairlock/valkeybackend"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"
)

// conn is how an adapter reaches the server: address, credentials (user
// "" is the default user; password "" none) and TLS (nil: plain TCP).
type conn struct {
	addr, user, password string
	tls                  *tls.Config
}

// adapter opens a backend on a new client of one client library; the
// client and backend are closed at the test's cleanup. It returns the
// client library's error when the client cannot be made.
type adapter struct {
	name string
	open func(t testing.TB, c conn) (backend.Backend, error)
}

// adapters are the three adapters, on standalone clients, as a user would
// configure them for one server: rueidis and valkey-go with
// ForceSingleClient (else they probe for a cluster first, with CLUSTER
// commands a lock user may not run) and their default client-side caching,
// go-redis with ContextTimeoutEnabled.
var adapters = []adapter{
	{"rueidis", func(t testing.TB, c conn) (backend.Backend, error) {
		rc, err := rueidis.NewClient(rueidis.ClientOption{
			InitAddress: []string{c.addr}, Username: c.user, Password: c.password,
			TLSConfig: c.tls, ForceSingleClient: true,
		})
		if err != nil {
			return nil, err
		}
		b := rueidisbackend.New(rc)
		t.Cleanup(func() { b.Close(); rc.Close() })
		return b, nil
	}},
	{"valkey", func(t testing.TB, c conn) (backend.Backend, error) {
		vc, err := valkey.NewClient(valkey.ClientOption{
			InitAddress: []string{c.addr}, Username: c.user, Password: c.password,
			TLSConfig: c.tls, ForceSingleClient: true,
		})
		if err != nil {
			return nil, err
		}
		b := valkeybackend.New(vc)
		t.Cleanup(func() { b.Close(); vc.Close() })
		return b, nil
	}},
	{"goredis", func(t testing.TB, c conn) (backend.Backend, error) {
		rc := redis.NewUniversalClient(&redis.UniversalOptions{
			Addrs: []string{c.addr}, Username: c.user, Password: c.password,
			TLSConfig: c.tls, ContextTimeoutEnabled: true,
		})
		// go-redis connects lazily: make it connect (and authenticate) now,
		// so that a refused login fails here as it does for the others.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rc.Ping(ctx).Err(); err != nil {
			rc.Close()
			return nil, err
		}
		b := goredisbackend.New(rc)
		t.Cleanup(func() { b.Close(); rc.Close() })
		return b, nil
	}},
}

// newClient returns a lock client on a new backend of a, closed at
// cleanup.
func newClient(t testing.TB, a adapter, c conn, opts ...lock.Option) *lock.Client {
	t.Helper()
	b, err := a.open(t, c)
	if err != nil {
		t.Fatalf("%s: connect to %s as %q: %v", a.name, c.addr, c.user, err)
	}
	lc, err := lock.NewClient(b, opts...)
	if err != nil {
		t.Fatalf("lock.NewClient: %v", err)
	}
	t.Cleanup(func() { lc.Close() })
	return lc
}

func newMutex(t testing.TB, c *lock.Client, name string) *lock.Mutex {
	t.Helper()
	m, err := c.NewMutex(name)
	if err != nil {
		t.Fatalf("NewMutex(%q): %v", name, err)
	}
	return m
}

// within bounds every call of a scenario: generous for a loaded 2-core
// machine, far below anything that would hide a hang.
const within = 20 * time.Second

// wakeBound is how soon a queued waiter must get a released lock: the waiters in these tests
// heartbeat every 10 s (waiter timeout 30 s) and hold 30 s leases, so
// only a wake-up message (the subscription path) or the hash watch can
// make it in time.
const wakeBound = 5 * time.Second

// scenarioOpts are the options every scenario client runs with, beside
// the layout's: a waiter timeout long enough that heartbeats cannot pass
// for wake-ups (wakeBound).
var scenarioOpts = []lock.Option{lock.WithWaiterTimeout(30 * time.Second)}

// scenario runs every lock script and the subscription path once, as two
// clients of adapter a connecting with c, with the given extra options (a
// key prefix, sharded publish, a description, cached reads): lock,
// re-enter, inspect, extend, try-lock refused, try-lock with a wait that
// runs out (queue and leave), a contended hand-over woken by its message,
// force-unlock and delete heard by the holder through its client channel,
// and pruning a dead waiter. admin is a connection with every right, for
// planting the dead waiter. name is the lock name (before the prefix).
func scenario(t *testing.T, a adapter, c conn, admin *redistest.Server, name string, opts ...lock.Option) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts = append(append([]lock.Option(nil), scenarioOpts...), opts...)
	ca := newClient(t, a, c, append(opts, lock.WithDescription("securitytest-a"))...)
	cb := newClient(t, a, c, opts...)
	ma, mb := newMutex(t, ca, name), newMutex(t, cb, name)

	step := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %s: %v", a.name, what, err)
		}
	}
	call := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, within) }

	// Uncontended lock, and a re-entry (acquire.lua).
	cctx, done := call()
	h, err := ma.Lock(cctx)
	done()
	step("Lock", err)
	cctx, done = call()
	_, err = ma.Lock(cctx)
	done()
	step("Lock again (re-entry)", err)

	// Reads (inspect.lua, read_description.lua).
	cctx, done = call()
	locked, err := mb.IsLocked(cctx)
	done()
	step("IsLocked", err)
	if !locked {
		t.Fatalf("%s: IsLocked = false while held", a.name)
	}
	cctx, done = call()
	st, err := mb.Inspect(cctx, 10)
	done()
	step("Inspect", err)
	if len(st.Holders) != 1 || st.Holders[0].Owner != ma.Owner() || st.Holders[0].Count != 2 || st.Token != h.Token() {
		t.Fatalf("%s: Inspect = %+v, want %s holding twice with token %d", a.name, st, ma.Owner(), h.Token())
	}
	if d := st.Holders[0].Description; d == nil || d.Name != "securitytest-a" {
		t.Fatalf("%s: Inspect holder description = %+v, want name securitytest-a (describe.lua, read_description.lua)", a.name, d)
	}

	// TryLock without a wait (acquire.lua, once) and with a wait that runs
	// out: queued, then out of the queue again (leave.lua).
	cctx, done = call()
	_, err = mb.TryLock(cctx, 0)
	done()
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("%s: TryLock(0) on a held lock = %v, want ErrNotAcquired", a.name, err)
	}
	cctx, done = call()
	_, err = mb.TryLock(cctx, 100*time.Millisecond)
	done()
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("%s: TryLock(100ms) on a held lock = %v, want ErrNotAcquired", a.name, err)
	}

	// Contended hand-over (unlock.lua; the waiter's subscription): b
	// waits, a releases both holds, b is woken.
	got := make(chan error, 1)
	var hb atomic.Pointer[lock.Hold]
	go func() {
		wctx, wdone := context.WithTimeout(ctx, within)
		defer wdone()
		h, err := mb.Lock(wctx)
		hb.Store(h)
		got <- err
	}()
	redistest.Eventually(t, within, "b to queue", func() bool {
		sctx, sdone := call()
		defer sdone()
		st, err := ma.Inspect(sctx, 10)
		return err == nil && st.QueueLength == 1
	})
	cctx, done = call()
	step("Unlock (re-entered)", ma.Unlock(cctx))
	step("Unlock", ma.Unlock(cctx))
	released := time.Now()
	done()
	select {
	case err := <-got:
		step("contended Lock", err)
	case <-time.After(wakeBound):
		t.Fatalf("%s: the waiter did not get the released lock within %v (no wake-up)", a.name, wakeBound)
	}
	t.Logf("%s: hand-over woke the waiter %v after Unlock returned", a.name, time.Since(released).Round(time.Millisecond))

	// Force-unlock by another client (force_unlock.lua): b hears of it on
	// its client channel. The client subscribes to that channel when it
	// starts holding, beside the call; a loss announced before the
	// subscription is confirmed is heard only at the next renewal (go-redis
	// has no hash watch to cover it), so wait for it.
	waitSubscribed(t, admin, "fairlock_client:"+cb.ID())
	cctx, done = call()
	forced, err := ma.ForceUnlock(cctx)
	done()
	step("ForceUnlock", err)
	if !forced {
		t.Fatalf("%s: ForceUnlock of a held lock = false", a.name)
	}
	expectLost(t, a.name, "ForceUnlock", hb.Load())

	// Extend of a hold without watchdog (renew.lua), then Delete by
	// another client (delete.lua), heard by the holder.
	cctx, done = call()
	h, err = ma.LockWithLease(cctx, 10*time.Second)
	done()
	step("LockWithLease", err)
	waitSubscribed(t, admin, "fairlock_client:"+ca.ID())
	cctx, done = call()
	step("Extend", ma.Extend(cctx, h, 20*time.Second))
	done()
	cctx, done = call()
	deleted, err := mb.Delete(cctx)
	done()
	step("Delete", err)
	if !deleted {
		t.Fatalf("%s: Delete of a held lock = false", a.name)
	}
	expectLost(t, a.name, "Delete", h)

	// PruneWaiters (prune.lua): a waiter planted dead at the tail behind a
	// holder goes.
	cctx, done = call()
	_, err = ma.Lock(cctx)
	done()
	step("Lock before PruneWaiters", err)
	keys := ma.Keys() // hash, queue, timeouts, alive, token
	admin.Do(t, "RPUSH", keys[1], "dead-client:1")
	admin.Do(t, "ZADD", keys[2], "1", "dead-client:1")
	cctx, done = call()
	pruned, err := cb.PruneWaiters(cctx, name)
	done()
	step("PruneWaiters", err)
	if pruned != 1 {
		t.Fatalf("%s: PruneWaiters = %d, want 1", a.name, pruned)
	}
	cctx, done = call()
	step("Unlock after PruneWaiters", ma.Unlock(cctx))
	done()
}

// waitSubscribed waits until some connection subscribes to channel.
func waitSubscribed(t *testing.T, admin *redistest.Server, channel string) {
	t.Helper()
	redistest.Eventually(t, within, "a subscriber on "+channel, func() bool {
		reply, _ := admin.Do(t, "PUBSUB", "NUMSUB", channel).([]any)
		return len(reply) == 2 && reply[1] != int64(0)
	})
}

// expectLost waits for h to end with ErrLockLost. The client channel
// (tell_evicted's message) should tell the holder within about a network
// delay; the bound here is the next renewal's (a third of the 30 s lease)
// plus room, because under load go-redis clients have been seen to miss
// the message now and then and learn at the renewal. The permissions under
// test are proved either way: the script published (or it would have
// failed) and the holder subscribed (waitSubscribed, as the lock user).
// How long it took is logged.
func expectLost(t *testing.T, adapter, by string, h *lock.Hold) {
	t.Helper()
	start := time.Now()
	select {
	case <-h.Done():
		if !errors.Is(h.Err(), lock.ErrLockLost) {
			t.Fatalf("%s: after %s the hold ended with %v, want ErrLockLost", adapter, by, h.Err())
		}
		if took := time.Since(start); took > wakeBound {
			t.Logf("%s: the holder heard of %s only after %v (not by its client channel)", adapter, by, took.Round(time.Millisecond))
		}
	case <-time.After(within):
		t.Fatalf("%s: the holder did not hear of %s within %v", adapter, by, within)
	}
}

// aclLog returns the server's ACL LOG entries, each as "reason
// object (context) by username", newest first.
func aclLog(t testing.TB, admin *redistest.Server) []string {
	t.Helper()
	entries, _ := admin.Do(t, "ACL", "LOG", "128").([]any)
	var out []string
	for _, e := range entries {
		kv, _ := e.([]any)
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			k, _ := kv[i].(string)
			m[k] = fmt.Sprint(kv[i+1])
		}
		out = append(out, fmt.Sprintf("%s %s (%s) by %s", m["reason"], m["object"], m["context"], m["username"]))
	}
	return out
}

// setUser runs ACL SETUSER name with rules, which may be one string of
// space-separated rules, as docs/security.md writes them.
func setUser(t testing.TB, admin *redistest.Server, name string, rules ...string) {
	t.Helper()
	args := []string{"ACL", "SETUSER", name}
	for _, r := range rules {
		args = append(args, strings.Fields(r)...)
	}
	if reply := admin.Do(t, args...); reply != "OK" {
		t.Fatalf("ACL SETUSER %s: %v", name, reply)
	}
}
