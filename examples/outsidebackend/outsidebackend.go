// Package outsidebackend is a backend written outside the fairlock module,
// as a third party would write one: it uses only fairlock's exported
// packages, and its test runs the conformance suite against real Redis
// servers from package redistest.
//
// To stay tiny it hands the work to rueidisbackend; a real adapter would
// talk to its own client here (see backend.Hub for the pub/sub part).
package outsidebackend

import (
	"context"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

// Backend implements backend.Backend, and nothing optional: the suite
// skips, saying so, the cases that need backend.KeyWatcher or
// backend.ReplicaWaiter.
type Backend struct {
	client rueidis.Client
	inner  *rueidisbackend.Backend
}

var _ backend.Backend = (*Backend)(nil)

// Dial connects to the Redis server at addr ("host:port").
func Dial(addr string) (*Backend, error) {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, err
	}
	return &Backend{client: client, inner: rueidisbackend.New(client)}, nil
}

// Eval implements backend.Backend.
func (b *Backend) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	return b.inner.Eval(ctx, s, keys, args)
}

// EvalBatch implements backend.Backend.
func (b *Backend) EvalBatch(ctx context.Context, calls []backend.Call) []backend.Result {
	return b.inner.EvalBatch(ctx, calls)
}

// Subscribe implements backend.Backend.
func (b *Backend) Subscribe(ctx context.Context, channel string) (*backend.Subscription, error) {
	return b.inner.Subscribe(ctx, channel)
}

// Close implements backend.Backend; it also closes the client, which this
// backend opened.
func (b *Backend) Close() error {
	err := b.inner.Close()
	b.client.Close()
	return err
}
