package lock

import "testing"

// TestParseGrant: only a well-formed "grant:<token>:<server ms>" is a
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
