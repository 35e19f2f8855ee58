package lock

import (
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock/internal/wire"
)

// An attempt of unknown outcome left to another waiting call (undo) makes
// every attempt of the owner say it may have run before, and a hand-over
// message stale, until a reply settles the owner's state: a queued reply,
// leave.lua's reply, or a grant applied.
func TestOwner_LeftGrantUntilSettled(t *testing.T) {
	settles := map[string]func(o *owner){
		"queued reply": func(o *owner) { o.queuedBy() },
		"leave reply":  func(o *owner) { o.left(wire.LeaveReply{Queued: true}, wire.View{}) },
		"grant":        func(o *owner) { hold(t, o, 7) },
	}
	for name, settle := range settles {
		o, _ := newTestOwner()
		if o.mayHaveRun() {
			t.Fatal("a new owner's attempt says it may have run before")
		}
		o.leftGrant()
		if !o.mayHaveRun() {
			t.Fatalf("%s: after a grant was left to another call the next attempt says it cannot have run before", name)
		}
		if o.phase() != phaseQueued {
			t.Fatalf("%s: after leftGrant: %s, want queued", name, o.phase())
		}
		if h := o.adopt(5, time.Now(), testLease, testLease, true); h != nil {
			t.Fatalf("%s: a hand-over message adopted while an attempt may have taken its grant up", name)
		}
		settle(o)
		if o.mayHaveRun() {
			t.Errorf("%s: still says it may have run before after the reply settled it", name)
		}
	}
}
