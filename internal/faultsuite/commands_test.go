package faultsuite

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// lockUnlock takes and releases a lock of c within a few seconds.
func lockUnlock(c *lock.Client, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := c.NewMutex(name)
	if err != nil {
		return err
	}
	if _, err := m.Lock(ctx); err != nil {
		return err
	}
	return m.Unlock(ctx)
}

// TestMissingCommands: servers that lack a command fairlock or an adapter
// may use (managed services hide some; here they are renamed away with
// rename-command). What must hold: without INFO the eviction check steps
// aside and locking works; without WAIT, WithReplicaAcks fails at the
// first acquire with a clear error, at once, leaving the lock free; without
// CLIENT (so no CLIENT TRACKING) every adapter locks - rueidis and
// valkey-go with DisableCache, and their Dial says so without it - and
// holders fall back from key watches to the watchdog's check.
func TestMissingCommands(t *testing.T) {
	var figures []string
	t.Run("INFO", func(t *testing.T) {
		srv := redistest.Start(t, redistest.WithArgs("--rename-command", "INFO", ""))
		for _, a := range dialers(srv.Addr()) {
			b, err := a.dial()
			if err != nil {
				t.Fatal(err)
			}
			c, err := lock.NewClient(b)
			if err != nil {
				t.Fatalf("%s: NewClient without INFO: %v", a.name, err)
			}
			if err := lockUnlock(c, lockName(t)); err != nil {
				t.Errorf("%s: %v", a.name, err)
			}
			c.Close()
		}
		figures = append(figures, "without INFO: NewClient and Lock/Unlock work on every adapter")
	})
	t.Run("WAIT", func(t *testing.T) {
		srv := redistest.Start(t, redistest.WithArgs("--rename-command", "WAIT", ""))
		var took []string
		for _, a := range dialers(srv.Addr()) {
			b, err := a.dial()
			if err != nil {
				t.Fatal(err)
			}
			c, err := lock.NewClient(b, lock.WithReplicaAcks(1, 100*time.Millisecond))
			if err != nil {
				t.Fatalf("%s: %v", a.name, err)
			}
			m, _ := c.NewMutex(lockName(t) + ":" + a.name)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			start := time.Now()
			_, err = m.Lock(ctx)
			d := time.Since(start)
			if err == nil || !strings.Contains(strings.ToLower(err.Error()), "wait") {
				t.Errorf("%s: Lock with WithReplicaAcks on a server without WAIT: %v, want an error naming WAIT", a.name, err)
			}
			if d > 5*time.Second {
				t.Errorf("%s: the error took %v", a.name, d)
			}
			if locked, err := m.IsLocked(ctx); err != nil || locked {
				t.Errorf("%s: after the refused acquire IsLocked = %v, %v; want a free lock", a.name, locked, err)
			}
			cancel()
			c.Close()
			took = append(took, fmt.Sprintf("%s %v", a.name, d.Round(time.Millisecond)))
		}
		figures = append(figures, "without WAIT: WithReplicaAcks' first Lock fails naming WAIT, the lock left free, in "+strings.Join(took, ", "))
	})
	t.Run("CLIENT", func(t *testing.T) {
		srv := redistest.Start(t, redistest.WithArgs("--rename-command", "CLIENT", ""))
		addr := srv.Addr()
		for _, tc := range []struct {
			name string
			dial func() (backend.Backend, error)
		}{
			{"rueidis DisableCache", func() (backend.Backend, error) {
				return rueidisbackend.Dial(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
			}},
			{"valkey-go DisableCache", func() (backend.Backend, error) {
				return valkeybackend.Dial(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
			}},
			{"go-redis", func() (backend.Backend, error) {
				return goredisbackend.Dial(&redis.UniversalOptions{Addrs: []string{addr}, ContextTimeoutEnabled: true}), nil
			}},
		} {
			b, err := tc.dial()
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			c, err := lock.NewClient(b)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if err := lockUnlock(c, lockName(t)); err != nil {
				t.Errorf("%s without CLIENT: %v", tc.name, err)
			}
			if kw, ok := b.(backend.KeyWatcher); ok {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				if _, err := kw.WatchKey(ctx, "k"); !errors.Is(err, backend.ErrNotSupported) {
					t.Errorf("%s: WatchKey without CLIENT TRACKING: %v, want ErrNotSupported", tc.name, err)
				}
				cancel()
			}
			c.Close()
		}
		_, err := rueidisbackend.Dial(rueidis.ClientOption{InitAddress: []string{addr}})
		if err == nil || !strings.Contains(err.Error(), "DisableCache") {
			t.Errorf("rueidisbackend.Dial without DisableCache on a server without CLIENT TRACKING: %v, want an error naming DisableCache", err)
		}
		figures = append(figures, "without CLIENT (no CLIENT TRACKING): Lock/Unlock work on rueidis and valkey-go with DisableCache and on go-redis, key watches report ErrNotSupported (holders fall back to the watchdog's check), rueidisbackend.Dial without DisableCache fails naming it")
	})
	report(t, 17, "servers without INFO, without WAIT and without CLIENT (rename-command to nothing), every adapter",
		"locking works without INFO (the eviction check steps aside) and without CLIENT TRACKING (with the client option it needs, which the error names); WithReplicaAcks without WAIT fails at the first acquire with an error naming WAIT, at once, leaving the lock free",
		strings.Join(figures, "; "))
}
