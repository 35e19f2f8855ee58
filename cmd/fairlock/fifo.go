package main

import "github.com/fairlock/fairlock/lockbench"

// The FIFO checks are lockbench's, shared with the benchmarks module; this
// file only converts to the command's types.

// fifoViolation is a place where owners did not acquire a lock in the order
// they arrived (lockbench.FIFOViolation).
type fifoViolation struct {
	// Position is the 1-based place in the acquisition order (demo), or
	// the fencing token of the acquisition (bench).
	Position int64  `json:"position"`
	Expected string `json:"expected"` // who should have acquired there
	Got      string `json:"got"`      // who did ("" when nobody did)
}

// queueSnapshot is a lock's queue read atomically (Mutex.Inspect) together
// with the latest fencing token issued when it was read.
type queueSnapshot = lockbench.QueueSnapshot

// checkFIFO compares the order in which owners arrived at a lock with the
// order in which they acquired it (lockbench.CheckArrivalOrder).
func checkFIFO(arrival, acquisition []string) []fifoViolation {
	return violations(lockbench.CheckArrivalOrder(arrival, acquisition))
}

// checkSnapshots checks FIFO order under load against queue snapshots
// (lockbench.CheckSnapshots).
func checkSnapshots(snaps []queueSnapshot, acquiredBy map[int64]string) (checked int, v []fifoViolation) {
	checked, found := lockbench.CheckSnapshots(snaps, acquiredBy)
	return checked, violations(found)
}

func violations(found []lockbench.FIFOViolation) []fifoViolation {
	var v []fifoViolation
	for _, f := range found {
		v = append(v, fifoViolation(f))
	}
	return v
}
