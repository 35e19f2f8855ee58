package main

import "slices"

// fifoViolation is a place where owners did not acquire a lock in the order
// they arrived.
type fifoViolation struct {
	// Position is the 1-based place in the acquisition order (demo), or
	// the fencing token of the acquisition (bench).
	Position int64  `json:"position"`
	Expected string `json:"expected"` // who should have acquired there
	Got      string `json:"got"`      // who did ("" when nobody did)
}

// checkFIFO compares the order in which owners arrived at a lock with the
// order in which they acquired it and returns every position where the two
// differ. Owners that arrived but never acquired, and acquisitions by
// owners that never arrived, are violations too.
func checkFIFO(arrival, acquisition []string) []fifoViolation {
	var v []fifoViolation
	for i := range max(len(arrival), len(acquisition)) {
		var want, got string
		if i < len(arrival) {
			want = arrival[i]
		}
		if i < len(acquisition) {
			got = acquisition[i]
		}
		if want != got {
			v = append(v, fifoViolation{Position: int64(i + 1), Expected: want, Got: got})
		}
	}
	return v
}

// queueSnapshot is a lock's queue read atomically (Mutex.Inspect) together
// with the latest fencing token issued when it was read.
type queueSnapshot struct {
	Token int64
	Queue []string // owner fields, head first
}

// checkSnapshots checks FIFO order under load, without knowing when each
// owner arrived. Every acquisition gets the next fencing token, and while
// anyone is queued only the queue's head may acquire (B1, B3 in RULES.md). So a
// snapshot taken when token t was the latest, with queue q1..qk, predicts
// that token t+i goes to qi (an owner the lock is reserved for counts as
// q1: it takes the next token), provided nobody leaves the queue (no
// cancellation, no dead waiters - true for the bench's workers).
// acquiredBy maps each token to the owner that got it. It returns how many
// distinct tokens were checked and the tokens that went to someone else.
func checkSnapshots(snaps []queueSnapshot, acquiredBy map[int64]string) (checked int, violations []fifoViolation) {
	seen := make(map[int64]bool)
	var bad []int64
	wrong := make(map[int64]fifoViolation)
	for _, s := range snaps {
		for i, want := range s.Queue {
			tok := s.Token + int64(i) + 1
			got, ok := acquiredBy[tok]
			if !ok {
				continue // not acquired within the run: nothing to compare
			}
			if !seen[tok] {
				seen[tok] = true
				checked++
			}
			if got != want {
				if _, dup := wrong[tok]; !dup {
					bad = append(bad, tok)
					wrong[tok] = fifoViolation{Position: tok, Expected: want, Got: got}
				}
			}
		}
	}
	slices.Sort(bad)
	for _, tok := range bad {
		violations = append(violations, wrong[tok])
	}
	return checked, violations
}
