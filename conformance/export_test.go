package conformance

import "testing"

// Exported for this package's external tests only (crossadapter_test.go):
// they cannot be in package conformance, because they use
// internal/backendtest, which imports conformance. Outside authors get
// the same differential check from Run (Differential_TraceMatchesModel).
var TraceDiff = traceDiff

// RecordTrace is recordTrace on a Factory's backends.
func RecordTrace(t *testing.T, f Factory, seed int64, steps int) []string {
	return recordTrace(t, func(tb testing.TB) capable { return capableOf(f(tb)) }, seed, steps)
}
