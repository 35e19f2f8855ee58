package backendtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
)

// TryLockBound is how soon TryLock with no wait must return ErrUnavailable
// once nothing listens at the server's address (issue 45).
const TryLockBound = 50 * time.Millisecond

// TryLockWhileNothingListens checks that TryLock(ctx, 0) returns
// ErrUnavailable within TryLockBound, several times over, after the
// server stopped and nothing listens on its port: a refused connection
// needs no retry to be told apart from a busy lock. dial opens a backend
// on addr (the lock client closes it).
//
// go-redis dialled 5 times, 100 ms apart (DialerRetries), before returning
// its error: one TryLock took 0.81-1.61 s.
func TryLockWhileNothingListens(t *testing.T, dial func(addr string) (backend.Backend, error)) {
	srv := redistest.Start(t)
	b, err := dial(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c, err := lock.NewClient(b)
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	defer c.Close()
	m, err := c.NewMutex("stopped")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Connections open, then the server gone from under them.
	if _, err := m.TryLock(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Stop(t)

	const attempts = 5
	var slowest time.Duration
	took := make([]time.Duration, 0, attempts)
	for range attempts {
		start := time.Now()
		_, err := m.TryLock(ctx, 0)
		d := time.Since(start)
		took = append(took, d.Round(100*time.Microsecond))
		slowest = max(slowest, d)
		if !errors.Is(err, lock.ErrUnavailable) {
			t.Fatalf("TryLock(ctx, 0) with nothing listening: %v after %v, want ErrUnavailable", err, d)
		}
	}
	t.Logf("figures: TryLock(ctx, 0) with nothing listening returned ErrUnavailable after %v (slowest %v)", took, slowest.Round(100*time.Microsecond))
	if slowest > TryLockBound {
		t.Errorf("TryLock(ctx, 0) with nothing listening took %v, want at most %v", slowest, TryLockBound)
	}
}
