package outsidebackend_test

import (
	"testing"

	"example.com/outsidebackend"
	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/conformance"
	"github.com/fairlock/fairlock/redistest"
)

// TestConformance runs fairlock's conformance suite, fault cases included,
// against a redis-server started for the test.
func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	conformance.Run(t, func(tb testing.TB) backend.Backend {
		b, err := outsidebackend.Dial(srv.Addr())
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { b.Close() })
		return b
	}, conformance.WithServer(srv))
}
