package valkeybackend_test

import (
	"testing"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/conformance"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/valkeybackend"
	"github.com/valkey-io/valkey-go"
)

func newFactory(srv *redistest.Server, opt valkey.ClientOption) conformance.Factory {
	return func(t *testing.T) backend.Backend {
		opt := opt
		opt.InitAddress = []string{srv.Addr()}
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

func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	replica := redistest.StartReplica(t, srv)
	conformance.Run(t, newFactory(srv, valkey.ClientOption{}), conformance.WithServer(srv), conformance.WithReplica(replica))
}

// TestConformanceCluster runs the suite on a three-primary Redis Cluster
// through valkey-go' cluster client: every key of a lock shares a slot, and
// wake-ups published on one node reach the subscription on another.
func TestConformanceCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	conformance.Run(t, func(t *testing.T) backend.Backend {
		rc, err := valkey.NewClient(valkey.ClientOption{InitAddress: cluster.Addrs()})
		if err != nil {
			t.Fatalf("valkey.NewClient: %v", err)
		}
		b := valkeybackend.New(rc)
		t.Cleanup(func() {
			b.Close()
			rc.Close()
		})
		return b
	})
}

// TestConformanceSentinel runs the suite through valkey-go' sentinel client:
// a primary with one replica, found through Redis Sentinel.
func TestConformanceSentinel(t *testing.T) {
	primary := redistest.Start(t)
	redistest.StartReplica(t, primary)
	sentinel := redistest.StartSentinel(t, primary, "fairlock")
	conformance.Run(t, func(t *testing.T) backend.Backend {
		rc, err := valkey.NewClient(valkey.ClientOption{
			InitAddress: []string{sentinel.Addr()},
			Sentinel:    valkey.SentinelOption{MasterSet: "fairlock"},
		})
		if err != nil {
			t.Fatalf("valkey.NewClient (sentinel): %v", err)
		}
		b := valkeybackend.New(rc)
		t.Cleanup(func() {
			b.Close()
			rc.Close()
		})
		return b
	})
}
