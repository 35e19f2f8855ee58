package sim

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

// TestHoldOutlivesRenewals: a hold kept two virtual hours (the watchdog
// renews it 1,440 times at a 15-s lease) is still live and unlocks, in
// well under a second of wall time.
func TestHoldOutlivesRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true)
		nw := NewNetwork(1, m, Faults{}, Hooks{})
		nw.KeepTrace()
		b, err := rueidisbackend.Dial(rueidis.ClientOption{InitAddress: []string{"sim:6379"}, DisableCache: true, ForceSingleClient: true,
			DialCtxFn: func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) { return nw.Dial("rueidis#0") }})
		if err != nil {
			t.Fatal(err)
		}
		lc, err := lock.NewClient(b)
		if err != nil {
			t.Fatal(err)
		}
		mu, _ := lc.NewMutex("a")
		ctx := context.Background()
		t0 := time.Now()
		h, err := mu.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Hour)
		if h.Err() != nil {
			t.Fatal(h.Err())
		}
		if err := mu.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("virtual %v, decisions %d", time.Since(t0), len(nw.Trace()))
		lc.Close()
		b.Close()
		m.Close()
	})
}
