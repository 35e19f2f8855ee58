package lock_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/lock/inspect"
	"github.com/fairlock/fairlock/redistest"
)

// TestInspect_DescribesHolderAndWaiter: two clients describe themselves
// differently, one holding and one waiting; Inspect, from a third client
// without a description, shows each with its own description.
func TestInspect_DescribesHolderAndWaiter(t *testing.T) {
	srv := realServer(t)
	api := realClient(t, srv, lock.WithDescription("orders-api"))
	worker := realClient(t, srv, lock.WithDescription("billing-worker"))
	admin := realClient(t, srv)
	ctx := testCtx(t, 30*time.Second)
	const name = "describe-two"

	holder := realMutex(t, api, name)
	if _, err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	waiter := realMutex(t, worker, name)
	waited := goLock(ctx, waiter)

	probe := realMutex(t, admin, name)
	var st inspect.State
	redistest.Eventually(t, 10*time.Second, "the holder and the waiter described", func() bool {
		var err error
		st, err = probe.Inspect(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		return len(st.Holders) == 1 && len(st.Queue) == 1 &&
			st.Holders[0].Description != nil && st.Queue[0].Description != nil
	})
	if st.DescriptionErr != nil {
		t.Fatalf("DescriptionErr: %v", st.DescriptionErr)
	}
	host, _ := os.Hostname()
	wantHolder := inspect.Description{Host: host, PID: os.Getpid(), Name: "orders-api"}
	wantWaiter := inspect.Description{Host: host, PID: os.Getpid(), Name: "billing-worker"}
	if h := st.Holders[0]; h.Owner != holder.Owner() || *h.Description != wantHolder || h.Kind != inspect.KindFairlock {
		t.Errorf("holder = %+v (description %+v), want %s described as %+v, kind fairlock", h, *h.Description, holder.Owner(), wantHolder)
	}
	if w := st.Queue[0]; w.Owner != waiter.Owner() || *w.Description != wantWaiter || w.Kind != inspect.KindFairlock {
		t.Errorf("waiter = %+v (description %+v), want %s described as %+v, kind fairlock", w, *w.Description, waiter.Owner(), wantWaiter)
	}
	// The JSON "fairlock inspect --json" can print.
	out, err := json.Marshal(st.Holders[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"owner":"` + holder.Owner() + `"`, `"count":1`, `"name":"orders-api"`, `"pid":`, `"host":`, `"kind":"fairlock"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("holder JSON %s lacks %s", out, want)
		}
	}

	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	awaitLock(t, waited, 10*time.Second, "the waiter")
	if err := waiter.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestDescription_LivesWithItsClient: the description key is under the key
// prefix, expires on its own (a client that dies leaves it for a bounded
// time, X15), and Close deletes it.
func TestDescription_LivesWithItsClient(t *testing.T) {
	srv := realServer(t)
	c := realClient(t, srv, lock.WithDescription("job 42"), lock.WithKeyPrefix("app:"))
	key := "app:fairlock_client_info:" + c.ID()
	redistest.Eventually(t, 10*time.Second, "the description key", func() bool {
		return asInt(t, mustDo(t, srv, "EXISTS", key)) == 1
	})
	var d inspect.Description
	if err := json.Unmarshal([]byte(mustDo(t, srv, "GET", key).(string)), &d); err != nil || d.Name != "job 42" || d.PID != os.Getpid() {
		t.Fatalf("description %+v, %v; want name %q and pid %d", d, err, "job 42", os.Getpid())
	}
	// Default lease 30 s: rewritten every 10 s, lives 30 s.
	if pttl := asInt(t, mustDo(t, srv, "PTTL", key)); pttl <= 0 || pttl > 30_000 {
		t.Fatalf("PTTL = %d ms, want an expiry of at most 30 s", pttl)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := asInt(t, mustDo(t, srv, "EXISTS", key)); n != 0 {
		t.Fatal("the description key outlived Close")
	}
}

// TestInspect_TellsRedissonOwners: owners without a description are told
// apart: a waiter without a liveness deadline is a Redisson waiter; a
// holder is fairlock's when the fencing counter lives at least as long as
// the hold (fairlock keeps it so), Redisson's when the counter is gone or
// dies first - also with nobody queued.
func TestInspect_TellsRedissonOwners(t *testing.T) {
	srv := realServer(t)
	plain := realClient(t, srv)
	admin := realClient(t, srv)
	ctx := testCtx(t, 30*time.Second)

	m := realMutex(t, plain, "kinds-fairlock")
	if _, err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		from *lock.Client
		want inspect.Kind
	}{{admin, inspect.KindFairlock}, {plain, inspect.KindFairlock}} {
		st, err := realMutex(t, tc.from, "kinds-fairlock").Inspect(ctx, 10)
		if err != nil || st.DescriptionErr != nil {
			t.Fatal(err, st.DescriptionErr)
		}
		if h := st.Holders[0]; h.Kind != tc.want || h.Description != nil {
			t.Errorf("undescribed fairlock holder seen from %s: kind %q, description %v; want %q, none", tc.from.ID(), h.Kind, h.Description, tc.want)
		}
	}

	// A Redisson client (uuid "java") holding, with a thread of it queued.
	const name = "kinds-redisson"
	mustDo(t, srv, "HSET", name, "java:1", "1")
	mustDo(t, srv, "PEXPIRE", name, "60000")
	queueEntry(t, srv, name, "java:2", 60_000, false)
	st, err := realMutex(t, admin, name).Inspect(ctx, 10)
	if err != nil || st.DescriptionErr != nil {
		t.Fatal(err, st.DescriptionErr)
	}
	if len(st.Holders) != 1 || st.Holders[0].Kind != inspect.KindRedisson {
		t.Errorf("Redisson holder: %+v, want kind redisson", st.Holders)
	}
	if len(st.Queue) != 1 || st.Queue[0].Kind != inspect.KindRedisson || st.Queue[0].Description != nil {
		t.Errorf("Redisson waiter: %+v, want kind redisson", st.Queue)
	}

	// A Redisson holder alone, right after a fairlock hold: the counter
	// that hold left dies before Redisson's 30 s lease.
	const after = "kinds-after-fairlock"
	fm := realMutex(t, plain, after)
	if _, err := fm.LockWithLease(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := fm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	mustDo(t, srv, "HSET", after, "java:1", "1")
	mustDo(t, srv, "PEXPIRE", after, "30000")
	st, err = realMutex(t, admin, after).Inspect(ctx, 10)
	if err != nil || st.DescriptionErr != nil {
		t.Fatal(err, st.DescriptionErr)
	}
	if len(st.Holders) != 1 || st.Holders[0].Kind != inspect.KindRedisson {
		t.Errorf("Redisson holder with nobody queued, after a fairlock hold: %+v, want kind redisson", st.Holders)
	}
}

// TestWithDescription_RejectsBadNames: X10 for the option.
func TestWithDescription_RejectsBadNames(t *testing.T) {
	for _, name := range []string{strings.Repeat("x", 257), "bad \xff utf-8"} {
		if _, err := lock.NewClient(unusedBackend{}, lock.WithDescription(name)); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("WithDescription(%.20q) = %v, want ErrInvalidArgument", name, err)
		}
	}
	c, err := lock.NewClient(unusedBackend{}, lock.WithDescription(""))
	if err != nil {
		t.Fatalf("WithDescription(\"\"): %v", err)
	}
	// Close deletes the description through the backend, which fails here;
	// Close still returns.
	c.Close()
}

// unusedBackend is a backend.Backend for clients that never need Redis:
// its scripts fail, and its other methods must not be called.
type unusedBackend struct{ backend.Backend }

func (unusedBackend) Eval(context.Context, *backend.Script, []string, []string) (backend.Reply, error) {
	return backend.Reply{}, backend.ErrClosed
}

// Subscribe is called by the client's listener as the client starts.
func (unusedBackend) Subscribe(context.Context, string) (*backend.Subscription, error) {
	return nil, backend.ErrClosed
}

// Close is called by Client.Close, which closes its backend.
func (unusedBackend) Close() error { return nil }

func (unusedBackend) EvalBatch(_ context.Context, calls []backend.Call) []backend.Result {
	out := make([]backend.Result, len(calls))
	for i := range out {
		out[i].Err = backend.ErrClosed
	}
	return out
}
