package conformance

// Exported for this package's external tests only (crossadapter_test.go):
// they cannot be in package conformance, because they use
// internal/backendtest, which imports conformance. Outside authors get
// the same differential check from Run (Differential_TraceMatchesModel).
var (
	RecordTrace = recordTrace
	TraceDiff   = traceDiff
)
