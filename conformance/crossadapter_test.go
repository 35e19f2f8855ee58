package conformance_test

import (
	"fmt"
	"testing"

	"github.com/fairlock/fairlock/conformance"
	"github.com/fairlock/fairlock/internal/backendtest"
	"github.com/fairlock/fairlock/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"
)

// Sizes of the cross-adapter differential check.
var crossSeeds = []int64{1, 2, 3, 4, 5}

const crossSteps = 200

// TestCrossAdapterTracesMatch runs the seeded differential workload on the
// rueidis, valkey-go and go-redis adapters against one server and requires
// identical traces: who holds when, results and error kinds, queues and
// tokens.
func TestCrossAdapterTracesMatch(t *testing.T) {
	srv := redistest.Start(t)
	adapters := []struct {
		name    string
		factory conformance.Factory
	}{
		{name: "rueidis", factory: backendtest.Rueidis(rueidis.ClientOption{InitAddress: []string{srv.Addr()}})},
		{name: "valkey-go", factory: backendtest.Valkey(valkey.ClientOption{InitAddress: []string{srv.Addr()}})},
		{name: "go-redis", factory: backendtest.GoRedis(redis.UniversalOptions{Addrs: []string{srv.Addr()}})},
	}
	for _, seed := range crossSeeds {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			t.Parallel()
			traces := make([][]string, len(adapters))
			for i, a := range adapters {
				traces[i] = conformance.RecordTrace(t, a.factory, seed, crossSteps)
			}
			for i := 1; i < len(adapters); i++ {
				if d := conformance.TraceDiff(traces[0], traces[i]); d != "" {
					t.Errorf("%s (want) and %s (got) traces differ for seed %d:\n%s", adapters[0].name, adapters[i].name, seed, d)
				}
			}
		})
	}
}
