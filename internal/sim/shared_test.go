package sim

import (
	"testing"
	"time"

	"github.com/fairlock/fairlock/internal/soak"
)

// TestSharedOwnerOneLastUnlock: with two actors on one Mutex, each hold
// has at most one Unlock that ended it - the one the client says left no
// count. Seed 902's first 1.5 virtual seconds (one processor, as soak.sh
// runs histories) hold the interleaving that made two: an Unlock called
// while the other actor's re-entry of the hold was on its way, which the
// recorder took for the last because the count it knew at the call was 1
// (the client ran the re-entry first), and then the real last one - a
// linearizability violation that was the recorder's.
func TestSharedOwnerOneLastUnlock(t *testing.T) {
	cfg := DefaultConfig(902)
	cfg.Duration = 1500 * time.Millisecond
	cfg.SharedOwner = true
	res := runAlone(t, cfg)
	last := map[*soak.Hold]*soak.Op{}
	unlocks := 0
	for _, op := range res.History.Ops() {
		if op.Kind != soak.KindUnlock || !op.Final {
			continue
		}
		unlocks++
		if first, ok := last[op.Hold]; ok {
			t.Errorf("two last Unlocks of the hold with token %d: #%d [%s, %s] and #%d [%s, %s]",
				op.Hold.Token, first.ID, first.Call, first.Return, op.ID, op.Call, op.Return)
		}
		last[op.Hold] = op
	}
	if unlocks == 0 {
		t.Fatal("no Unlock ended a hold: the history has nothing to check")
	}
	for _, v := range res.Report.Violations {
		if v.Check == "linearizable" {
			t.Errorf("linearizable: %s", v.Text)
		}
	}
	t.Logf("%d operations, %d last Unlocks, %d violations", res.Ops, unlocks, len(res.Report.Violations))
}
