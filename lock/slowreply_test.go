package lock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/redistest"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

// slowAcquire is a backend whose acquire replies reach the client delay
// after the server ran the script: a reply slower than a short lease.
type slowAcquire struct {
	backend.Backend
	delay time.Duration
}

func (b slowAcquire) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	rep, err := b.Backend.Eval(ctx, s, keys, args)
	if s.Name == "acquire" {
		time.Sleep(b.delay) // the reply's late arrival, not synchronisation
	}
	return rep, err
}

// TestGrantSlowerThanLease_IsNoHold: a grant whose reply arrives after
// the lease it was asked for has run out is not a hold. Lock reports the
// loss (ErrLockLost) instead of returning a hold that ended before it was
// handed out, the client keeps nothing of it (no hold tracked for the
// watchdog, no owner state), and the grant is given back on the server
// instead of blocking others for its lease.
func TestGrantSlowerThanLease_IsNoHold(t *testing.T) {
	srv := redistest.Start(t)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	rb := rueidisbackend.New(rc)
	defer rb.Close()
	c, err := NewClient(slowAcquire{Backend: rb, delay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m, err := c.NewMutex("slow-reply")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	const rounds = 20
	for i := range rounds {
		h, err := m.LockWithLease(ctx, 20*time.Millisecond)
		if !errors.Is(err, ErrLockLost) || h != nil {
			t.Fatalf("round %d: LockWithLease = (%v, %v), want (nil, ErrLockLost): the reply came after the lease", i, h, err)
		}
	}
	c.mu.Lock()
	holds, owners := len(c.holds), len(c.owners)
	c.mu.Unlock()
	if holds != 0 || owners != 0 {
		t.Errorf("after %d grants slower than their lease: %d holds tracked, %d owner states kept, want 0 and 0", rounds, holds, owners)
	}
	// Given back, not left to expire: a later reader sees the lock free.
	st, err := m.Inspect(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Locked() {
		t.Errorf("the lock is still held on the server (TTL %v) after the late grant was given back", st.TTL)
	}
	t.Logf("%d grants whose reply took 50 ms on a 20 ms lease: all refused as lost, nothing tracked", rounds)
}
