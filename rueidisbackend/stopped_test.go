package rueidisbackend_test

import (
	"testing"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/internal/backendtest"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

func TestTryLockWhileNothingListens(t *testing.T) {
	backendtest.TryLockWhileNothingListens(t, func(addr string) (backend.Backend, error) {
		return rueidisbackend.Dial(rueidis.ClientOption{InitAddress: []string{addr}})
	})
}
