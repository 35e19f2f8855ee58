package conformance

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

// historyCases are the randomized differential and linearizability cases.
func historyCases() []testCase {
	return append([]testCase{
		{name: "Differential_TraceMatchesModel", run: testDifferentialTraceMatchesModel},
		{name: "Linearizability_FairReentrantLock", run: testLinearizabilityFairReentrantLock},
	}, historyRegressionCases()...)
}

// historySeeds and historySteps size the differential case; the
// cross-adapter test runs more.
var historySeeds = []int64{1, 2, 3}

const historySteps = 120

// testDifferentialTraceMatchesModel runs the seeded differential workload
// (see recordTrace) and checks every step against the reference model of a
// fair reentrant lock: results, grants to waiters in FIFO order, hold
// counts, queue contents and fencing tokens (B1-B4, B7, B8, X5, X6, X10).
func testDifferentialTraceMatchesModel(t *testing.T, s *suite) {
	for _, seed := range historySeeds {
		start := time.Now()
		got := recordTrace(t, s.newBackend, seed, historySteps)
		t.Logf("seed %d: %d steps in %v", seed, len(got), time.Since(start).Round(time.Millisecond))
		if d := traceDiff(modelTrace(seed, historySteps), got); d != "" {
			t.Errorf("seed %d: trace differs from the model's\n%s", seed, d)
		}
	}
}

// historyLockName returns a lock name no other subtest uses, without
// braces, so its keys follow Redisson's naming.
func historyLockName(t *testing.T) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", ".", " ", "_", "{", "(", "}", ")").Replace(t.Name())
	return "conformance:" + name + ":" + hex.EncodeToString(b[:])
}
