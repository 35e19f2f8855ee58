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

// TestLossNoticeBeforeGrantReply_Kept: a loss notice that arrives while the
// grant's reply is still on its way is kept for that grant. The acquire's
// reply is delayed 300 ms; meanwhile another client force-unlocks the
// grant and retakes the lock. Lock used to drop the notice (it matched no
// hold yet) and return a hold that had ended already, which lasted until
// the watchdog's tick (9.39 s) while the other client held the lock.
func TestLossNoticeBeforeGrantReply_Kept(t *testing.T) {
	srv, c := wrappedClient(t, func(b backend.Backend) backend.Backend {
		return slowAcquire{Backend: b, delay: 300 * time.Millisecond}
	})
	other := plainClient(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := newTestMutex(t, c, "early-notice")
	om := newTestMutex(t, other, "early-notice")
	type result struct {
		h   *Hold
		err error
	}
	got := make(chan result, 1)
	go func() {
		h, err := m.Lock(ctx)
		got <- result{h, err}
	}()
	// The server has granted it; the reply is still on its way.
	redistest.Eventually(t, 5*time.Second, "the grant on the server", func() bool {
		held, err := om.IsHeldBy(ctx, m.field)
		return err == nil && held
	})
	if ok, err := om.ForceUnlock(ctx); err != nil || !ok {
		t.Fatalf("ForceUnlock: %v, %v", ok, err)
	}
	if _, err := om.TryLock(ctx, 0); err != nil {
		t.Fatalf("the other client retakes: %v", err)
	}
	r := <-got
	switch {
	case r.err != nil && errors.Is(r.err, ErrLockLost):
		// Told at once: no hold.
	case r.err != nil:
		t.Fatalf("Lock: %v, want a hold that ends or ErrLockLost", r.err)
	default:
		select {
		case <-r.h.Done():
		case <-time.After(time.Second):
			t.Fatalf("Lock returned a hold that was force-unlocked and retaken; its Done is still open after 1s")
		}
	}
}

// plainClient is a Client on srv through an unwrapped rueidis backend.
func plainClient(t *testing.T, srv *redistest.Server) *Client {
	t.Helper()
	b, err := rueidisbackend.Dial(rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
