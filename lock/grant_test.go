package lock

import (
	"testing"
	"time"
)

// TestParseGrant: only a well-formed "grant:<token>:<server µs>" is a
// hand-over grant; anything else (the plain wake-up "0", garbage) is not.
func TestParseGrant(t *testing.T) {
	tests := []struct {
		payload string
		want    grantMessage
	}{
		{"grant:1795425884608046:1795425884608", grantMessage{token: 1795425884608046, at: 1795425884608}},
		{"0", grantMessage{}},
		{"grant:", grantMessage{}},
		{"grant:12", grantMessage{}},
		{"grant:x:1", grantMessage{}},
		{"grant:0:1", grantMessage{}},
		{"grant:1.7e+15:1", grantMessage{}},
	}
	for _, tc := range tests {
		if got := parseGrant(tc.payload); got != tc.want {
			t.Errorf("parseGrant(%q) = %+v, want %+v", tc.payload, got, tc.want)
		}
	}
}

// TestParseHead: a head message carries the hold's time left in ms; a
// malformed or non-positive one says nothing.
func TestParseHead(t *testing.T) {
	tests := []struct {
		payload string
		want    time.Duration
		ok      bool
	}{
		{"head:30000", 30 * time.Second, true},
		{"head:1", time.Millisecond, true},
		{"head:0", 0, false},
		{"head:-1", 0, false},
		{"head:", 0, false},
		{"head:2.5", 0, false},
		{"", 0, false},
	}
	for _, tc := range tests {
		got, ok := parseHead(tc.payload)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseHead(%q) = %v, %t, want %v, %t", tc.payload, got, ok, tc.want, tc.ok)
		}
	}
}
