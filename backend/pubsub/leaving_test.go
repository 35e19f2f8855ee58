package pubsub_test

import (
	"testing"

	"github.com/fairlock/fairlock/backend/pubsub"
)

// TestLeavingTellsOwnConfirmationsFromTheServers: each own SUNSUBSCRIBE
// sent is one confirmation taken as its own; any more, and any of a
// SUNSUBSCRIBE that failed, are the server's.
func TestLeavingTellsOwnConfirmationsFromTheServers(t *testing.T) {
	var l pubsub.Leaving
	if l.Confirmed("a") {
		t.Fatal("a confirmation with nothing sent was taken as own")
	}
	l.Sent("a", "b")
	l.Sent("a")
	for i, want := range []bool{true, true, false} {
		if got := l.Confirmed("a"); got != want {
			t.Errorf("confirmation %d of a: own %v, want %v", i+1, got, want)
		}
	}
	l.Unsent("b")
	if l.Confirmed("b") {
		t.Error("the confirmation of a SUNSUBSCRIBE that failed was taken as own")
	}
}
