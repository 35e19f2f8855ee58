package conformance

import (
	"slices"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

// linOp builds a recorded operation for the checker tests.
func linOp(client int, in linInput, call, ret int64, out linOutput) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
}

func joinOf(o int) linInput  { return linInput{kind: linJoin, owner: o} }
func grantOf(o int) linInput { return linInput{kind: linGrant, owner: o} }

func acquiredOut(count int, token int64) linOutput {
	return linOutput{result: linAcquired, count: count, token: token}
}

func TestLinearizabilityModel(t *testing.T) {
	unlock := func(o int) linInput { return linInput{kind: linUnlock, owner: o} }
	inspect := linInput{kind: linInspect, owner: 9}
	cases := []struct {
		name    string
		history []porcupine.Operation
		want    porcupine.CheckResult
	}{
		{name: "one holder at a time", history: []porcupine.Operation{
			linOp(0, joinOf(0), 0, 10, acquiredOut(1, 1)),
			linOp(1, joinOf(1), 5, 15, linOutput{result: linQueued, pos: 1}),
			linOp(0, unlock(0), 20, 30, linOutput{result: linReleased}),
			linOp(1, grantOf(1), 15, 40, acquiredOut(1, 2)),
		}, want: porcupine.Ok},
		{name: "two simultaneous holders", history: []porcupine.Operation{
			linOp(0, joinOf(0), 0, 10, acquiredOut(1, 1)),
			linOp(1, joinOf(1), 20, 30, acquiredOut(1, 2)),
		}, want: porcupine.Illegal},
		{name: "inspect sees two holders", history: []porcupine.Operation{
			linOp(0, joinOf(0), 0, 10, acquiredOut(1, 1)),
			linOp(2, inspect, 20, 30, linOutput{result: linObserved, holder: linStranger, count: 1, token: 1}),
		}, want: porcupine.Illegal},
		{name: "waiters granted out of queue order", history: []porcupine.Operation{
			linOp(0, joinOf(0), 0, 10, acquiredOut(1, 1)),
			linOp(1, joinOf(1), 20, 30, linOutput{result: linQueued, pos: 1}),
			linOp(2, joinOf(2), 40, 50, linOutput{result: linQueued, pos: 2}),
			linOp(0, unlock(0), 60, 70, linOutput{result: linReleased}),
			linOp(2, grantOf(2), 50, 80, acquiredOut(1, 2)),
		}, want: porcupine.Illegal},
		{name: "re-entry counts", history: []porcupine.Operation{
			linOp(0, joinOf(0), 0, 10, acquiredOut(1, 1)),
			linOp(0, joinOf(0), 20, 30, acquiredOut(2, 1)),
			linOp(0, unlock(0), 40, 50, linOutput{result: linReleased, count: 1}),
			linOp(1, linInput{kind: linJoin, owner: 1, once: true}, 60, 70, linOutput{result: linRefused}),
		}, want: porcupine.Ok},
		{name: "unlock by a non-holder succeeds", history: []porcupine.Operation{
			linOp(0, joinOf(0), 0, 10, acquiredOut(1, 1)),
			linOp(1, unlock(1), 20, 30, linOutput{result: linReleased}),
		}, want: porcupine.Illegal},
		{name: "token goes back", history: []porcupine.Operation{
			linOp(0, joinOf(0), 0, 10, acquiredOut(1, 5)),
			linOp(0, unlock(0), 20, 30, linOutput{result: linReleased}),
			linOp(1, joinOf(1), 40, 50, acquiredOut(1, 4)),
		}, want: porcupine.Illegal},
		{name: "lost acquire reply: a moment's hold seen, then dropped", history: []porcupine.Operation{
			linOp(0, joinOf(0), 0, 10, acquiredOut(1, 1)),
			linOp(1, joinOf(1), 20, 30, linOutput{result: linQueued, pos: 1}),
			linOp(0, unlock(0), 40, 50, linOutput{result: linReleased}),
			linOp(1, grantOf(1), 30, 1000, linOutput{result: linMaybe}),
			linOp(2, inspect, 60, 70, linOutput{result: linObserved, holder: 1, count: 1, token: 2}),
			linOp(1, linInput{kind: linLeave, owner: 1}, 80, 85, linOutput{result: linLeft}),
			linOp(1, unlock(1), 86, 90, linOutput{result: linReleased}),
			linOp(2, inspect, 100, 110, linOutput{result: linObserved, holder: -1, token: 2}),
		}, want: porcupine.Ok},
		{name: "a waiter holds before the holder released", history: []porcupine.Operation{
			linOp(0, joinOf(0), 0, 10, acquiredOut(1, 1)),
			linOp(1, joinOf(1), 20, 30, linOutput{result: linQueued, pos: 1}),
			linOp(2, inspect, 40, 50, linOutput{result: linObserved, holder: 1, count: 1, token: 2}),
			linOp(0, unlock(0), 60, 70, linOutput{result: linReleased}),
		}, want: porcupine.Illegal},
		{name: "the release hands the lock to the head (one-message hand-over)", history: []porcupine.Operation{
			linOp(0, joinOf(0), 0, 10, acquiredOut(1, 1)),
			linOp(1, joinOf(1), 20, 30, linOutput{result: linQueued, pos: 1}),
			linOp(0, unlock(0), 40, 50, linOutput{result: linReleased}),
			linOp(2, inspect, 60, 70, linOutput{result: linObserved, holder: 1, count: 1, token: 2}),
			linOp(1, grantOf(1), 30, 80, acquiredOut(1, 2)),
		}, want: porcupine.Ok},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(linModel(), tc.history); got != (tc.want == porcupine.Ok) {
				t.Errorf("CheckOperations = %t, want %s", got, tc.want)
			}
		})
	}
}

func TestModelTraceIsDeterministic(t *testing.T) {
	a, b := modelTrace(7, 300), modelTrace(7, 300)
	if d := traceDiff(a, b); d != "" {
		t.Fatalf("same seed, different traces:\n%s", d)
	}
	if d := traceDiff(a, modelTrace(8, 300)); d == "" {
		t.Error("seeds 7 and 8 gave the same trace")
	}
	// The workload must reach the interesting states.
	for _, want := range []string{"queued at 3", "reentered", "; grant o", "not acquired", "not held", "cancelled", "released=true", "released, hold ended"} {
		if !slices.ContainsFunc(a, func(l string) bool { return strings.Contains(l, want) }) {
			t.Errorf("no step of seed 7 shows %q", want)
		}
	}
}

// TestLinearizabilityLateAttempt: an acquire attempt whose reply was lost
// and that reached the server after its call's cleanup (the owner is back
// in the queue after leaving it) is linearizable under porcupine's
// convention for unknown outputs, and not when the attempt's effect must
// land before its call returned (X5).
func TestLinearizabilityLateAttempt(t *testing.T) {
	inspect := linInput{kind: linInspect, owner: 9}
	history := []porcupine.Operation{
		linOp(0, joinOf(0), 0, 10, acquiredOut(1, 1)),
		linOp(1, joinOf(1), 20, 30, linOutput{result: linQueued, pos: 1}),
		linOp(1, linInput{kind: linGrant, owner: 1, failed: true}, 30, 60, linOutput{result: linMaybe}),
		linOp(1, linInput{kind: linLeave, owner: 1, after: true}, 40, 50, linOutput{result: linLeft, wasQueued: true}),
		linOp(2, inspect, 70, 80, linOutput{result: linObserved, holder: 0, count: 1, token: 1, queue: "\x01", queueLen: 1}),
	}
	h := &linHistory{ops: history}
	if got := porcupine.CheckOperationsTimeout(linModel(), h.finish(true), 0); got != porcupine.Ok {
		t.Errorf("late effect allowed: %s, want Ok", got)
	}
	if got := porcupine.CheckOperationsTimeout(linModel(), h.finish(false), 0); got != porcupine.Illegal {
		t.Errorf("effects confined to calls: %s, want Illegal", got)
	}
}
