package valkeybackend_test

import (
	"testing"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/conformance"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/valkeybackend"
	"github.com/valkey-io/valkey-go"
)

// factory returns backends on new rueidis clients built from opt.
func factory(opt valkey.ClientOption) conformance.Factory {
	return func(t testing.TB) backend.Backend {
		rc, err := valkey.NewClient(opt)
		if err != nil {
			t.Fatalf("valkey.NewClient: %v", err)
		}
		b := valkeybackend.New(rc)
		t.Cleanup(func() {
			b.Close()
			rc.Close()
		})
		return b
	}
}

// TestConformance runs the suite on a standalone server with a replica,
// with the fault and replica cases.
func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	replica := redistest.StartReplica(t, srv)
	conformance.Run(t, factory(valkey.ClientOption{InitAddress: []string{srv.Addr()}}),
		conformance.WithServer(srv), conformance.WithReplica(replica))
}

// TestConformanceCluster runs the suite on a three-primary Redis Cluster
// through valkey-go' cluster client: every key of a lock shares a slot, and
// wake-ups published on one node reach the subscription on another.
func TestConformanceCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	conformance.Run(t, factory(valkey.ClientOption{InitAddress: cluster.Addrs()}))
}

// TestConformanceSentinel runs the suite through valkey-go' sentinel client:
// a primary with one replica, found through Redis Sentinel.
func TestConformanceSentinel(t *testing.T) {
	primary := redistest.Start(t)
	redistest.StartReplica(t, primary)
	sentinel := redistest.StartSentinel(t, primary, "fairlock")
	conformance.Run(t, factory(valkey.ClientOption{
		InitAddress: []string{sentinel.Addr()},
		Sentinel:    valkey.SentinelOption{MasterSet: "fairlock"},
	}))
}

// BenchmarkLock runs conformance.Benchmark against a local redis-server.
func BenchmarkLock(b *testing.B) {
	srv := redistest.Start(b)
	conformance.Benchmark(b, factory(valkey.ClientOption{InitAddress: []string{srv.Addr()}}))
}
