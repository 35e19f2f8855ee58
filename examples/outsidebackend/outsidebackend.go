// Package outsidebackend is a backend written outside the fairlock module,
// as a third party would write one: it uses only fairlock's exported
// packages, and its test runs the conformance suite against real Redis
// servers from package redistest.
//
// To stay small it hands scripts to rueidisbackend. Its pub/sub is its own,
// as an adapter for another client would write it: a pubsub.Hub over a
// Dialer that opens one dedicated rueidis connection and passes what it
// reads to the Hub. (An adapter can also build its Subscriptions itself,
// with backend.NewSubscription.)
package outsidebackend

import (
	"context"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/backend/pubsub"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

// Backend implements backend.Backend, and nothing optional: the suite
// skips, saying so, the cases that need backend.KeyWatcher or
// backend.ReplicaWaiter.
type Backend struct {
	client  rueidis.Client
	scripts *rueidisbackend.Backend
	hub     *pubsub.Hub
}

var _ backend.Backend = (*Backend)(nil)

// Dial connects to the Redis server at addr ("host:port").
func Dial(addr string) (*Backend, error) {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, err
	}
	b := &Backend{client: client, scripts: rueidisbackend.New(client)}
	b.hub = pubsub.NewHub(b.dial)
	return b, nil
}

// Eval implements backend.Backend.
func (b *Backend) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	return b.scripts.Eval(ctx, s, keys, args)
}

// EvalBatch implements backend.Backend.
func (b *Backend) EvalBatch(ctx context.Context, calls []backend.Call) []backend.Result {
	return b.scripts.EvalBatch(ctx, calls)
}

// Subscribe implements backend.Backend with the Hub.
func (b *Backend) Subscribe(ctx context.Context, channel string) (*backend.Subscription, error) {
	return b.hub.Subscribe(ctx, channel)
}

// Close implements backend.Backend; it also closes the client, which this
// backend opened.
func (b *Backend) Close() error {
	err := b.hub.Close()
	b.scripts.Close()
	b.client.Close()
	return err
}

// dial is the Hub's Dialer: a dedicated connection whose reader passes
// messages to sink, in the order read, and reports the connection's end.
func (b *Backend) dial(ctx context.Context, sink pubsub.Sink) (pubsub.Conn, <-chan error, error) {
	dc, _ := b.client.Dedicate()
	done := dc.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage: func(m rueidis.PubSubMessage) { sink.Deliver(m.Channel, m.Message) },
	})
	if err := dc.Do(ctx, dc.B().Ping().Build()).Error(); err != nil {
		dc.Close()
		return nil, nil, err
	}
	return conn{dc}, done, nil
}

// conn implements pubsub.Conn. rueidis resolves a SUBSCRIBE when its
// reader reads the confirmation, after running OnMessage for every message
// read before it: the order the Hub relies on.
type conn struct{ dc rueidis.DedicatedClient }

func (c conn) Subscribe(ctx context.Context, channels ...string) error {
	return c.dc.Do(ctx, c.dc.B().Subscribe().Channel(channels...).Build()).Error()
}

func (c conn) Unsubscribe(ctx context.Context, channels ...string) error {
	return c.dc.Do(ctx, c.dc.B().Unsubscribe().Channel(channels...).Build()).Error()
}

func (c conn) Close() { c.dc.Close() }
