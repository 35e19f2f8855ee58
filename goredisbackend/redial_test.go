package goredisbackend_test

import (
	"testing"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/goredisbackend"
	"github.com/fairlock/fairlock/internal/backendtest"
	"github.com/redis/go-redis/v9"
)

// go-redis dials each connection with its caller's context: it needs no
// bound of the adapter's.
func TestEvalReturnsByItsDeadlineWhileAnotherCallRedials(t *testing.T) {
	backendtest.EvalByDeadlineWhileRedialing(t, func(addr string) (backend.Backend, error) {
		return goredisbackend.Dial(&redis.UniversalOptions{Addrs: []string{addr}}), nil
	})
}
