package wire

import (
	"testing"
	"time"
)

// TestParseMessage: only a well-formed grant or head message says more
// than "check again"; anything else (Redisson's "0", garbage) is a Recheck.
func TestParseMessage(t *testing.T) {
	tests := []struct {
		payload string
		want    Message
	}{
		{"grant:1795425884608046:1795425884608", Message{Kind: Grant, Token: 1795425884608046, At: 1795425884608}},
		{"0", Message{}},
		{"grant:", Message{}},
		{"grant:12", Message{}},
		{"grant:x:1", Message{}},
		{"grant:0:1", Message{}},
		{"grant:1.7e+15:1", Message{}},
		{"head:30000", Message{Kind: Head, TTL: 30 * time.Second}},
		{"head:1", Message{Kind: Head, TTL: time.Millisecond}},
		{"head:0", Message{}},
		{"head:-1", Message{}},
		{"head:", Message{}},
		{"head:2.5", Message{}},
		{"", Message{}},
		{"lost:42:orders", Message{Kind: Lost, Token: 42, Key: "orders"}},
		{"lost:42:app:{orders}:x", Message{Kind: Lost, Token: 42, Key: "app:{orders}:x"}},
		{"lost:42:", Message{}},
		{"lost:x:orders", Message{}},
	}
	for _, tc := range tests {
		if got := ParseMessage(tc.payload); got != tc.want {
			t.Errorf("ParseMessage(%q) = %+v, want %+v", tc.payload, got, tc.want)
		}
	}
}

// TestMessageRoundTrip: what String encodes, ParseMessage reads back.
func TestMessageRoundTrip(t *testing.T) {
	for _, m := range []Message{{}, {Kind: Head, TTL: 1500 * time.Millisecond}, {Kind: Grant, Token: 42, At: 7}, {Kind: Lost, Token: 9, Key: "a:b"}} {
		if got := ParseMessage(m.String()); got != m {
			t.Errorf("ParseMessage(%q) = %+v, want %+v", m.String(), got, m)
		}
	}
}
