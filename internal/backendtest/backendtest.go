// Package backendtest builds conformance factories for the three adapters,
// for the module's own tests: each call of a factory opens a new client
// with the given options and closes it, and its backend, at the test's
// cleanup.
package backendtest

import (
	"testing"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/conformance"
	"github.com/fairlock/fairlock/goredisbackend"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/fairlock/fairlock/valkeybackend"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"
)

// Rueidis returns backends on new rueidis clients built from opt.
func Rueidis(opt rueidis.ClientOption) conformance.Factory {
	return func(tb testing.TB) backend.Backend {
		rc, err := rueidis.NewClient(opt)
		if err != nil {
			tb.Fatalf("rueidis.NewClient: %v", err)
		}
		b := rueidisbackend.New(rc)
		tb.Cleanup(func() {
			b.Close()
			rc.Close()
		})
		return b
	}
}

// Valkey returns backends on new valkey-go clients built from opt.
func Valkey(opt valkey.ClientOption) conformance.Factory {
	return func(tb testing.TB) backend.Backend {
		vc, err := valkey.NewClient(opt)
		if err != nil {
			tb.Fatalf("valkey.NewClient: %v", err)
		}
		b := valkeybackend.New(vc)
		tb.Cleanup(func() {
			b.Close()
			vc.Close()
		})
		return b
	}
}

// GoRedis returns backends made by goredisbackend.Dial from opt (which
// picks standalone, Sentinel (MasterName) or cluster (IsClusterMode, or
// several Addrs) as redis.NewUniversalClient does, and can watch keys);
// closing the backend closes its clients.
func GoRedis(opt redis.UniversalOptions) conformance.Factory {
	return func(tb testing.TB) backend.Backend {
		o := opt // NewUniversalClient may fill in defaults
		b := goredisbackend.Dial(&o)
		tb.Cleanup(func() { b.Close() })
		return b
	}
}
