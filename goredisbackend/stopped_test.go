package goredisbackend_test

import (
	"testing"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/goredisbackend"
	"github.com/fairlock/fairlock/internal/backendtest"
	"github.com/redis/go-redis/v9"
)

func TestTryLockWhileNothingListens(t *testing.T) {
	t.Run("Dial", func(t *testing.T) {
		backendtest.QuietGoRedis(t)
		backendtest.TryLockWhileNothingListens(t, func(addr string) (backend.Backend, error) {
			return goredisbackend.Dial(&redis.UniversalOptions{Addrs: []string{addr}}), nil
		})
	})
	t.Run("New", func(t *testing.T) {
		backendtest.QuietGoRedis(t)
		backendtest.TryLockWhileNothingListens(t, func(addr string) (backend.Backend, error) {
			// As New's documentation advises: go-redis' default, 5 dials
			// 100 ms apart, is the client's choice to make.
			rc := redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1})
			t.Cleanup(func() { rc.Close() })
			return goredisbackend.New(rc), nil
		})
	})
}
