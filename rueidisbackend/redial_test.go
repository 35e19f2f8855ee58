package rueidisbackend_test

import (
	"testing"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/internal/backendtest"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

// Without the adapter's bound (byDeadline) the Eval waited about 4.7 s
// for the other call's dial.
func TestEvalReturnsByItsDeadlineWhileAnotherCallRedials(t *testing.T) {
	backendtest.EvalByDeadlineWhileRedialing(t, func(addr string) (backend.Backend, error) {
		return rueidisbackend.Dial(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	})
}
