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

// The same on a client the adapter did not make (New), whose calls run
// on a goroutine of their own.
func TestEvalOnAClientOfYoursReturnsByItsDeadlineWhileAnotherCallRedials(t *testing.T) {
	backendtest.EvalByDeadlineWhileRedialing(t, func(addr string) (backend.Backend, error) {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			return nil, err
		}
		return clientClosing{rueidisbackend.New(c), c}, nil
	})
}

// clientClosing is a Backend on a client of the test's, which Close closes too.
type clientClosing struct {
	*rueidisbackend.Backend
	client rueidis.Client
}

func (c clientClosing) Close() error {
	err := c.Backend.Close()
	c.client.Close()
	return err
}
