package wire

import (
	"math/rand/v2"
	"testing"

	"github.com/fairlock/fairlock/backend"
)

func TestDeriveRedissonNames(t *testing.T) {
	k, ok := Derive("orders")
	if !ok {
		t.Fatal("plain name rejected")
	}
	want := Keys{
		Hash:     "orders",
		Queue:    "redisson_lock_queue:{orders}",
		Timeouts: "redisson_lock_timeout:{orders}",
		Alive:    "fairlock_lock_alive:{orders}",
		Token:    "redisson_lock_token:{orders}",
		Channel:  "redisson_lock__channel:{orders}",
		Latch:    "redisson_unlock_latch:{orders}",
	}
	if k != want {
		t.Errorf("Derive(orders) = %+v, want %+v", k, want)
	}
	if got := k.OwnerChannel("c:1"); got != "redisson_lock__channel:{orders}:c:1" {
		t.Errorf("OwnerChannel = %q", got)
	}
	k, ok = Derive("{tenant}.orders")
	if !ok || k.Queue != "redisson_lock_queue:{tenant}.orders" {
		t.Errorf("tagged name: %+v, %v", k, ok)
	}
	for _, bad := range []string{"", "a{}b", "a{b"} {
		if _, ok := Derive(bad); ok {
			t.Errorf("Derive(%q) accepted a name whose keys do not share a slot", bad)
		}
	}
}

// TestDeriveRejectsEmptyTag: a name that starts with "}" makes the derived
// keys' tag "{}", empty, so each of them hashes whole and they land in
// different slots; Derive refuses it, even when two of them happen to
// share a slot (FuzzLockName found such a name).
func TestDeriveRejectsEmptyTag(t *testing.T) {
	for _, name := range []string{"}", "}orders", "}\xbd\xbd\x94\xf6\x1c\xf6\x1c\x01\aQ]\x01\aQ]"} {
		if _, ok := Derive(name); ok {
			t.Errorf("Derive(%q) accepted a name whose keys span slots", name)
		}
	}
}

// TestDeriveNamesWithoutBraces checks the claim Derive takes without
// hashing: a name with no brace puts every key in the lock hash's slot.
func TestDeriveNamesWithoutBraces(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		b := make([]byte, 1+rng.IntN(40))
		for j := range b {
			if b[j] = byte(rng.IntN(256)); b[j] == '{' || b[j] == '}' {
				b[j] = 'x'
			}
		}
		name := string(b)
		if i == 0 {
			name = "orders:42"
		}
		k, ok := Derive(name)
		if !ok {
			t.Fatalf("Derive(%q) rejected a name without braces", name)
		}
		slot := backend.Slot(k.Hash)
		for _, key := range []string{k.Queue, k.Timeouts, k.Alive, k.Token, k.Latch + ":x", k.Channel + ":x"} {
			if backend.Slot(key) != slot {
				t.Fatalf("Derive(%q): %q is in slot %d, the hash in %d", name, key, backend.Slot(key), slot)
			}
		}
	}
}
