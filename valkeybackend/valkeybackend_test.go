package valkeybackend_test

import (
	"testing"

	"github.com/fairlock/fairlock/conformance"
	"github.com/fairlock/fairlock/internal/backendtest"
	"github.com/fairlock/fairlock/redistest"
	"github.com/valkey-io/valkey-go"
)

// TestConformance runs the suite on a standalone server with a replica,
// with the fault and replica cases.
func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	replica := redistest.StartReplica(t, srv)
	conformance.Run(t, backendtest.Valkey(valkey.ClientOption{InitAddress: []string{srv.Addr()}}),
		conformance.WithServer(srv), conformance.WithReplica(replica))
}

// TestConformanceCluster runs the suite on a three-primary Redis Cluster
// through valkey-go's cluster client: every key of a lock shares a slot, and
// wake-ups published on one node reach the subscription on another.
func TestConformanceCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	conformance.Run(t, backendtest.Valkey(valkey.ClientOption{InitAddress: cluster.Addrs()}))
}

// TestConformanceSentinel runs the suite through valkey-go's sentinel client:
// a primary with one replica, found through Redis Sentinel.
func TestConformanceSentinel(t *testing.T) {
	primary := redistest.Start(t)
	redistest.StartReplica(t, primary)
	sentinel := redistest.StartSentinel(t, primary, "fairlock")
	conformance.Run(t, backendtest.Valkey(valkey.ClientOption{
		InitAddress: []string{sentinel.Addr()},
		Sentinel:    valkey.SentinelOption{MasterSet: "fairlock"},
	}))
}

// BenchmarkLock runs conformance.Benchmark against a local redis-server.
func BenchmarkLock(b *testing.B) {
	srv := redistest.Start(b)
	conformance.Benchmark(b, backendtest.Valkey(valkey.ClientOption{InitAddress: []string{srv.Addr()}}))
}
