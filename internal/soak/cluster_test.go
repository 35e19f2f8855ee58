package soak

import (
	"testing"
	"time"
)

// TestClusterExceptions: a fencing token granted twice, two owners
// believing they hold and the history no single holder explains are a
// documented exception only when a failover of the lock's primary came
// just after the first grant, made by a client without replica acks, and
// before the second; otherwise they are violations. Without a server.
func TestClusterExceptions(t *testing.T) {
	onLock := func(lock string, start time.Duration) []Fault {
		return []Fault{{Kind: FaultFailover, Target: "server", Start: start, End: start + 400*msec, Locks: []string{lock}}}
	}
	for _, c := range []struct {
		name      string
		holder    string // the first holder's client
		failovers []Fault
		exception bool
	}{
		{"no failover", "c#0", nil, false},
		{"a failover, holder without acks", "c#0", onLock("L", 500*msec), true},
		{"a failover, holder with acks", "c" + ackMark + "#0", onLock("L", 500*msec), false},
		{"a failover of another lock's primary", "c#0", onLock("M", 500*msec), false},
		{"a failover after the second grant", "c#0", onLock("L", 2500*msec), false},
		{"a failover long after the first grant", "c#0", onLock("L", 10*msec+replicaLag+500*msec), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := NewHistory(1)
			// a is granted token 5 and hears it lost only at 5 s; b is
			// granted token 5 at 2 s.
			first := hold("L", "a", 5, 10*msec, 5*time.Second)
			first.Client = c.holder
			acquire(h, first, 0)
			acquire(h, hold("L", "b", 5, 2010*msec, 3*time.Second), 2000*msec)
			for _, f := range c.failovers {
				h.AddFault(f)
			}
			b := DefaultBounds(15 * time.Second)
			all := Check(h, b).Violations
			violations, exceptions := splitExceptions(h, all, b)
			if exceptions == nil {
				t.Fatal("exceptions nil: a cluster run counts them, even when none")
			}
			got, excused := count(violations), count(exceptions)
			for _, check := range []string{"tokens", "exclusion", "linearizable"} {
				if c.exception && (got[check] != 0 || excused[check] == 0) {
					t.Errorf("%s: %d violations, %d exceptions; want only exceptions", check, got[check], excused[check])
				}
				if !c.exception && (got[check] == 0 || excused[check] != 0) {
					t.Errorf("%s: %d violations, %d exceptions; want only violations", check, got[check], excused[check])
				}
			}
			if len(violations)+len(exceptions) != len(all) {
				t.Errorf("%d violations and %d exceptions of %d found", len(violations), len(exceptions), len(all))
			}
		})
	}
}

// count counts vs by check.
func count(vs []Violation) map[string]int {
	n := map[string]int{}
	for _, v := range vs {
		n[v.Check]++
	}
	return n
}

// TestClusterAcksLabel: the label RunCluster gives a client with replica
// acks says so; Java's and the others' do not.
func TestClusterAcksLabel(t *testing.T) {
	for client, want := range map[string]bool{"rueidis" + ackMark + "#1": true, "rueidis#0": false, "java": false} {
		if withAcks(client) != want {
			t.Errorf("withAcks(%q) = %t, want %t", client, !want, want)
		}
	}
}
