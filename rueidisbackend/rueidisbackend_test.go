package rueidisbackend_test

import (
	"testing"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/conformance"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

func newFactory(srv *redistest.Server, opt rueidis.ClientOption) conformance.Factory {
	return func(t *testing.T) backend.Backend {
		opt := opt
		opt.InitAddress = []string{srv.Addr()}
		rc, err := rueidis.NewClient(opt)
		if err != nil {
			t.Fatalf("rueidis.NewClient: %v", err)
		}
		b := rueidisbackend.New(rc)
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
	conformance.Run(t, newFactory(srv, rueidis.ClientOption{}), conformance.WithServer(srv), conformance.WithReplica(replica))
}

// TestConformanceDisableCache covers servers without client-side caching
// (CLIENT TRACKING), as the adapter documents.
func TestConformanceDisableCache(t *testing.T) {
	srv := redistest.Start(t)
	conformance.Run(t, newFactory(srv, rueidis.ClientOption{DisableCache: true}), conformance.WithServer(srv))
}

// TestConformanceCluster runs the suite on a three-primary Redis Cluster
// through rueidis' cluster client: every key of a lock shares a slot, and
// wake-ups published on one node reach the subscription on another.
func TestConformanceCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	conformance.Run(t, func(t *testing.T) backend.Backend {
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cluster.Addrs()})
		if err != nil {
			t.Fatalf("rueidis.NewClient: %v", err)
		}
		b := rueidisbackend.New(rc)
		t.Cleanup(func() {
			b.Close()
			rc.Close()
		})
		return b
	})
}

// TestConformanceSentinel runs the suite through rueidis' sentinel client:
// a primary with one replica, found through Redis Sentinel.
func TestConformanceSentinel(t *testing.T) {
	primary := redistest.Start(t)
	redistest.StartReplica(t, primary)
	sentinel := redistest.StartSentinel(t, primary, "fairlock")
	conformance.Run(t, func(t *testing.T) backend.Backend {
		rc, err := rueidis.NewClient(rueidis.ClientOption{
			InitAddress: []string{sentinel.Addr()},
			Sentinel:    rueidis.SentinelOption{MasterSet: "fairlock"},
		})
		if err != nil {
			t.Fatalf("rueidis.NewClient (sentinel): %v", err)
		}
		b := rueidisbackend.New(rc)
		t.Cleanup(func() {
			b.Close()
			rc.Close()
		})
		return b
	})
}
