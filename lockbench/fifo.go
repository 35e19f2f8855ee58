package lockbench

import (
	"context"
	"slices"
	"time"

	"github.com/fairlock/fairlock/lock"
)

// FIFOViolation is a place where owners did not acquire a lock in the order
// they arrived.
type FIFOViolation struct {
	// Position is the 1-based place in the acquisition order
	// (CheckArrivalOrder), or the fencing token of the acquisition
	// (CheckSnapshots).
	Position int64  `json:"position"`
	Expected string `json:"expected"` // who should have acquired there
	Got      string `json:"got"`      // who did ("" when nobody did)
}

// CheckArrivalOrder compares the order in which owners arrived at a lock
// with the order in which they acquired it and returns every position
// where the two differ. Owners that arrived but never acquired, and
// acquisitions by owners that never arrived, are violations too.
func CheckArrivalOrder(arrival, acquisition []string) []FIFOViolation {
	var v []FIFOViolation
	for i := range max(len(arrival), len(acquisition)) {
		var want, got string
		if i < len(arrival) {
			want = arrival[i]
		}
		if i < len(acquisition) {
			got = acquisition[i]
		}
		if want != got {
			v = append(v, FIFOViolation{Position: int64(i + 1), Expected: want, Got: got})
		}
	}
	return v
}

// QueueSnapshot is a fairlock lock's queue read atomically (Mutex.Inspect)
// together with the latest fencing token issued when it was read.
type QueueSnapshot struct {
	Token int64
	Queue []string // owner fields, head first
}

// CheckSnapshots checks FIFO order under load, without knowing when each
// owner arrived. Every acquisition gets the next fencing token, and while
// anyone is queued only the queue's head may acquire (first come, first served: RULES.md, B1 and B3).
// So a snapshot taken when token t was the latest, with queue q1..qk,
// predicts that token t+i goes to qi, provided nobody leaves the queue (no
// cancellation, no dead waiters). acquiredBy maps each token to the
// owner that got it. It returns how many distinct tokens were checked and
// the tokens that went to someone else, in token order.
func CheckSnapshots(snaps []QueueSnapshot, acquiredBy map[int64]string) (checked int, violations []FIFOViolation) {
	seen := make(map[int64]bool)
	var bad []int64
	wrong := make(map[int64]FIFOViolation)
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
					wrong[tok] = FIFOViolation{Position: tok, Expected: want, Got: got}
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

// SampleQueue reads m's lock state (up to limit waiters) about every
// interval, from a goroutine of its own, until ctx ends or stop is
// called; stop waits for the goroutine and returns the snapshots of a
// non-empty queue, for CheckSnapshots. Failed reads are
// skipped.
func SampleQueue(ctx context.Context, m *lock.Mutex, limit int, every time.Duration) (stop func() []QueueSnapshot) {
	var snaps []QueueSnapshot
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			st, err := m.Inspect(ctx, limit)
			if err == nil && len(st.Queue) > 0 {
				s := QueueSnapshot{Token: st.Token}
				for _, w := range st.Queue {
					s.Queue = append(s.Queue, w.Owner)
				}
				snaps = append(snaps, s)
			}
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() []QueueSnapshot {
		close(quit)
		<-finished
		return snaps
	}
}
