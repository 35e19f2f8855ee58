package soak

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
	"github.com/redis/go-redis/v9"
)

// TestLeftovers: at quiescence, a Go owner still a live waiter is
// reported - unless a fault hit its last acquire - and an entry it left
// behind marked dead (liveness 0) is not.
func TestLeftovers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := redistest.Start(t)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer raw.Close()

	b, err := Adapters[0].Dial(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c, err := lock.NewClient(b)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	name := sharedNames[0]
	holder, _ := c.NewMutex(name)
	if _, err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	// Two owners queue behind the holder and give up: they leave no live
	// entry.
	h := NewHistory(1)
	var owners []string
	for range 2 {
		m, _ := c.NewMutex(name)
		wctx, wcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		call := h.Now()
		_, err := m.Lock(wctx)
		wcancel()
		if err == nil {
			t.Fatal("a waiter got a held lock")
		}
		h.Add(&Op{Kind: KindLock, Lock: name, Owner: m.Owner(), Client: "c", Call: call, Return: h.Now(), Err: err.Error(), Canceled: true})
		owners = append(owners, m.Owner())
	}
	if got := leftovers(t, raw, h, nil); len(got) != 0 {
		t.Fatalf("waiters that left: %v", got)
	}
	// An entry left behind marked dead further back in the queue (X8).
	queue, alive := "redisson_lock_queue:{"+name+"}", "fairlock_lock_alive:{"+name+"}"
	if err := raw.RPush(ctx, queue, owners[0]).Err(); err != nil {
		t.Fatal(err)
	}
	if err := raw.ZAdd(ctx, alive, redis.Z{Score: 0, Member: owners[0]}).Err(); err != nil {
		t.Fatal(err)
	}
	raw.PExpire(ctx, queue, time.Minute)
	raw.PExpire(ctx, alive, time.Minute)
	if got := leftovers(t, raw, h, nil); len(got) != 0 {
		t.Fatalf("an entry marked dead: %v", got)
	}
	// A live one, as a cleanup that never ran leaves it.
	if err := raw.ZAdd(ctx, alive, redis.Z{Score: 1e15, Member: owners[1]}).Err(); err != nil {
		t.Fatal(err)
	}
	got := leftovers(t, raw, h, nil)
	if len(got) != 1 || !strings.Contains(got[0].Text, short(owners[1])) {
		t.Fatalf("a live waiter of a closed client: %v, want it reported", got)
	}
	h.AddFault(Fault{Kind: FaultPartition, Target: "c", Start: 0, End: h.Now()})
	if got := leftovers(t, raw, h, nil); len(got) != 0 {
		t.Fatalf("with a fault on its last acquire: %v, want it excused", got)
	}
}
