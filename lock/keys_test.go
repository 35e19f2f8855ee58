package lock

import (
	"github.com/fairlock/fairlock/backend"

	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock/internal/wire"
)

// FuzzLockName checks X10 for any name: NewMutex either rejects it with
// ErrInvalidName or every key it derives lands in one cluster slot. It
// never panics and never talks to Redis (the client has no backend calls
// to make here).
func FuzzLockName(f *testing.F) {
	for _, s := range []string{"", "orders", "{a}b", "a{}b", "a{b", "a}b", "{", "}", "{}", "x{y}z{w}", "\x00", "é{ü}"} {
		f.Add(s, "")
		f.Add(s, "app:")
	}
	c := &Client{cfg: config{keyPrefix: ""}}
	f.Fuzz(func(t *testing.T, name, prefix string) {
		c.cfg.keyPrefix = prefix
		m, err := c.NewMutex(name)
		if err != nil {
			if !errors.Is(err, ErrInvalidName) {
				t.Fatalf("NewMutex(%q) with prefix %q: %v, want ErrInvalidName", name, prefix, err)
			}
			if name != "" {
				if _, ok := wire.Derive(prefix + name); ok {
					t.Fatalf("NewMutex(%q) rejected a name whose keys share a slot", name)
				}
			}
			return
		}
		k := m.keys
		s := backend.Slot(k.Hash)
		for _, key := range []string{k.Queue, k.Timeouts, k.Alive, k.Token, k.OwnerChannel("c:1"), k.Latch + ":ab", m.channel} {
			if backend.Slot(key) != s {
				t.Fatalf("name %q: key %q in slot %d, lock hash in %d", prefix+name, key, backend.Slot(key), s)
			}
		}
		if k.Hash != prefix+name || !strings.HasPrefix(k.Queue, "redisson_lock_queue:") {
			t.Fatalf("unexpected keys %+v", k)
		}
	})
}

// FuzzDuration checks the X10 duration rule: accepted exactly when the
// duration is whole-millisecond representable, positive and at most
// (10 * 365 * 24 * time.Hour), and never a panic.
func FuzzDuration(f *testing.F) {
	for _, d := range []int64{0, -1, 1, int64(time.Millisecond), int64(time.Millisecond) - 1, int64((10 * 365 * 24 * time.Hour)), int64((10 * 365 * 24 * time.Hour)) + 1, 1<<63 - 1, -1 << 63} {
		f.Add(d)
	}
	f.Fuzz(func(t *testing.T, n int64) {
		d := time.Duration(n)
		err := checkDuration("lease", d)
		valid := d >= time.Millisecond && d <= (10*365*24*time.Hour)
		if valid != (err == nil) {
			t.Fatalf("checkDuration(%v) = %v, valid %v", d, err, valid)
		}
		if err != nil && !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("checkDuration(%v) = %v, want ErrInvalidArgument", d, err)
		}
	})
}
