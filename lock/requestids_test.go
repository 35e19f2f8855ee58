package lock

import "testing"

// TestRequestIDs checks that a client's unlock request IDs do not repeat
// and that two clients' differ (their random halves).
func TestRequestIDs(t *testing.T) {
	var a, b requestIDs
	a.prefix, b.prefix = [8]byte{1}, [8]byte{2}
	seen := map[[16]byte]bool{}
	for range 1000 {
		for _, id := range [][16]byte{a.next(), b.next()} {
			if seen[id] {
				t.Fatalf("request ID %x given twice", id)
			}
			seen[id] = true
		}
	}
}
