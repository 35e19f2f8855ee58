package valkeybackend_test

import (
	"testing"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/internal/backendtest"
	"github.com/fairlock/fairlock/valkeybackend"
	"github.com/valkey-io/valkey-go"
)

func TestTryLockWhileNothingListens(t *testing.T) {
	backendtest.TryLockWhileNothingListens(t, func(addr string) (backend.Backend, error) {
		return valkeybackend.Dial(valkey.ClientOption{InitAddress: []string{addr}})
	})
}
