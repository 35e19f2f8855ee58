package lock_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

// Helpers for the tests of Extend, descriptions, PruneWaiters and the
// Locker, which run against a real redis-server (package redistest).

// realServer starts a redis-server for the test, and fails the test if
// goroutines started during it outlive it (checked after every other
// cleanup, since this one is registered first).
func realServer(t *testing.T) *redistest.Server {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				t.Errorf("%d goroutines leaked:\n%s", runtime.NumGoroutine()-before, buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
		}
	})
	return redistest.Start(t)
}

// realClient returns a lock client (rueidis backend) on srv, closed at
// cleanup.
func realClient(t *testing.T, srv *redistest.Server, opts ...lock.Option) *lock.Client {
	t.Helper()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	t.Cleanup(rc.Close)
	b := rueidisbackend.New(rc)
	t.Cleanup(func() { b.Close() })
	c, err := lock.NewClient(b, opts...)
	if err != nil {
		t.Fatalf("lock.NewClient: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func realMutex(t *testing.T, c *lock.Client, name string) *lock.Mutex {
	t.Helper()
	m, err := c.NewMutex(name)
	if err != nil {
		t.Fatalf("NewMutex(%q): %v", name, err)
	}
	return m
}

// testCtx is a context that ends with the test, or after d.
func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// acquired is the outcome of an acquire run in the background.
type acquired struct {
	h   *lock.Hold
	err error
}

func goLock(ctx context.Context, m *lock.Mutex) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		h, err := m.Lock(ctx)
		ch <- acquired{h, err}
	}()
	return ch
}

func awaitLock(t *testing.T, ch <-chan acquired, d time.Duration, what string) *lock.Hold {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.h
	case <-time.After(d):
		t.Fatalf("%s: not acquired within %v", what, d)
	}
	return nil
}

// queueKeys returns the queue, Redisson timeouts and fairlock liveness
// keys of a lock name without braces (the keyspace table in RULES.md).
func queueKeys(name string) (queue, timeouts, alive string) {
	return "redisson_lock_queue:{" + name + "}", "redisson_lock_timeout:{" + name + "}", "fairlock_lock_alive:{" + name + "}"
}

// queueEntry appends owner to the queue of lock name with deadlines in ms
// from the server's now (may be negative): its Redisson deadline, and, for
// a fairlock waiter (alive true), its liveness deadline - what a waiter
// that then stopped heartbeating (its process died) leaves behind.
func queueEntry(t *testing.T, srv *redistest.Server, name, owner string, inMs int64, alive bool) {
	t.Helper()
	queueEntries(t, srv, name, entry{owner, inMs, alive})
}

// entry is one waiter queueEntries appends.
type entry struct {
	owner string
	inMs  int64 // its deadline, from now
	alive bool  // it has a fairlock liveness entry
}

// queueEntries appends the waiters to name's queue in one script: no
// heartbeat of a live waiter runs between them (one drops a dead tail).
func queueEntries(t *testing.T, srv *redistest.Server, name string, es ...entry) {
	t.Helper()
	queue, timeouts, aliveKey := queueKeys(name)
	const script = `
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, #ARGV, 3 do
  local deadline = now + tonumber(ARGV[i + 1])
  redis.call('rpush', KEYS[1], ARGV[i])
  redis.call('zadd', KEYS[2], deadline, ARGV[i])
  if ARGV[i + 2] == '1' then
    redis.call('zadd', KEYS[3], deadline, ARGV[i])
  end
end
return 1`
	args := []string{"EVAL", script, "3", queue, timeouts, aliveKey}
	for _, e := range es {
		a := "0"
		if e.alive {
			a = "1"
		}
		args = append(args, e.owner, strconv.FormatInt(e.inMs, 10), a)
	}
	mustDo(t, srv, args...)
}

// mustDo is srv.Do that fails the test on an error reply.
func mustDo(t *testing.T, srv *redistest.Server, args ...string) any {
	t.Helper()
	reply := srv.Do(t, args...)
	if err, ok := reply.(error); ok {
		t.Fatalf("%q: %v", args, err)
	}
	return reply
}

func asInt(t *testing.T, v any) int64 {
	t.Helper()
	n, ok := v.(int64)
	if !ok {
		t.Fatalf("reply %#v is not an integer", v)
	}
	return n
}
