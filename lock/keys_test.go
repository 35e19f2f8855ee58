package lock

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSlotKnownValues(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	cases := map[string]uint16{
		"123456789":             12739, // CRC16/XMODEM check value 0x31C3
		"foo":                   12182,
		"{user1000}.following":  slot("user1000"),
		"foo{}{bar}":            slot("foo{}{bar}"),
		"foo{{bar}}zap":         slot("{bar"),
		"foo{bar}{zap}":         slot("bar"),
		"redisson_lock_queue:x": slot("redisson_lock_queue:x"),
	}
	for key, want := range cases {
		if got := slot(key); got != want {
			t.Errorf("slot(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestDeriveKeysRedissonNames(t *testing.T) {
	k, ok := deriveKeys("orders")
	if !ok {
		t.Fatal("plain name rejected")
	}
	want := keyset{
		hash:     "orders",
		queue:    "redisson_lock_queue:{orders}",
		timeouts: "redisson_lock_timeout:{orders}",
		alive:    "fairlock_lock_alive:{orders}",
		token:    "redisson_lock_token:{orders}",
		channel:  "redisson_lock__channel:{orders}",
		latch:    "redisson_unlock_latch:{orders}",
	}
	if k != want {
		t.Errorf("deriveKeys(orders) = %+v, want %+v", k, want)
	}
	k, ok = deriveKeys("{tenant}.orders")
	if !ok || k.queue != "redisson_lock_queue:{tenant}.orders" {
		t.Errorf("tagged name: %+v, %v", k, ok)
	}
}

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
				if _, ok := deriveKeys(prefix + name); ok {
					t.Fatalf("NewMutex(%q) rejected a name whose keys share a slot", name)
				}
			}
			return
		}
		k := m.keys
		s := slot(k.hash)
		for _, key := range []string{k.queue, k.timeouts, k.alive, k.token, k.channel + ":c:1", k.latch + ":ab", m.channel} {
			if slot(key) != s {
				t.Fatalf("name %q: key %q in slot %d, lock hash in %d", prefix+name, key, slot(key), s)
			}
		}
		if k.hash != prefix+name || !strings.HasPrefix(k.queue, queuePrefix+":") {
			t.Fatalf("unexpected keys %+v", k)
		}
	})
}

// FuzzDuration checks the X10 duration rule: accepted exactly when the
// duration is whole-millisecond representable, positive and at most
// MaxDuration, and never a panic.
func FuzzDuration(f *testing.F) {
	for _, d := range []int64{0, -1, 1, int64(time.Millisecond), int64(time.Millisecond) - 1, int64(MaxDuration), int64(MaxDuration) + 1, 1<<63 - 1, -1 << 63} {
		f.Add(d)
	}
	f.Fuzz(func(t *testing.T, n int64) {
		d := time.Duration(n)
		err := checkDuration("lease", d)
		valid := d >= time.Millisecond && d <= MaxDuration
		if valid != (err == nil) {
			t.Fatalf("checkDuration(%v) = %v, valid %v", d, err, valid)
		}
		if err != nil && !errors.Is(err, ErrInvalidDuration) {
			t.Fatalf("checkDuration(%v) = %v, want ErrInvalidDuration", d, err)
		}
	})
}
