package conformance

// parityCases are the upstream parity scenarios and the mixed-client
// (Redisson) cases.
func parityCases() []testCase { return nil }
