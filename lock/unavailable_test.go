package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
)

// TestAdminCallsOnDownServer_Unavailable: ForceUnlock, Delete and
// PruneWaiters against a server that is gone fail with ErrUnavailable, as
// acquires do (docs/api.md: "Redis could not be reached"); they returned
// the bare connection error (found by the cluster soak: CLUSTERDOWN and
// TRYAGAIN reached ForceUnlock's callers unmarked).
func TestAdminCallsOnDownServer_Unavailable(t *testing.T) {
	srv := realServer(t)
	c := realClient(t, srv)
	m := realMutex(t, c, "admin-down")
	if _, err := m.Lock(testCtx(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	srv.Kill(t)
	for name, call := range map[string]func(context.Context) error{
		"ForceUnlock": func(ctx context.Context) error { _, err := m.ForceUnlock(ctx); return err },
		"Delete":      func(ctx context.Context) error { _, err := m.Delete(ctx); return err },
		"PruneWaiters": func(ctx context.Context) error {
			_, err := c.PruneWaiters(ctx, "admin-down")
			return err
		},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := call(ctx)
		cancel()
		if !errors.Is(err, lock.ErrUnavailable) {
			t.Errorf("%s on a server that is gone: %v, want ErrUnavailable", name, err)
		}
		if errors.Is(err, lock.ErrNotAcquired) || errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("%s on a server that is gone: %v, says more than that", name, err)
		}
	}
}
