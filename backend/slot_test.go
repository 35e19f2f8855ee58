package backend

import "testing"

func TestSlotKnownValues(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	cases := map[string]uint16{
		"123456789":             12739, // CRC16/XMODEM check value 0x31C3
		"foo":                   12182,
		"{user1000}.following":  Slot("user1000"),
		"foo{}{bar}":            Slot("foo{}{bar}"),
		"foo{{bar}}zap":         Slot("{bar"),
		"foo{bar}{zap}":         Slot("bar"),
		"redisson_lock_queue:x": Slot("redisson_lock_queue:x"),
	}
	for key, want := range cases {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}
