package backendtest

import (
	"context"

	"github.com/fairlock/fairlock/backend"
)

// Subscriber is a backend that also watches keys: Split's subscription
// side.
type Subscriber interface {
	backend.Backend
	backend.KeyWatcher
}

// Split runs scripts on one backend and subscribes and watches keys on
// another, so that a test can fault the subscription connection alone (a
// proxy in front of Subs), as a NAT that drops an idle pub/sub connection
// without a word does.
type Split struct {
	backend.Backend            // scripts
	Subs            Subscriber // Subscribe and WatchKey
}

// Subscribe subscribes on Subs.
func (b Split) Subscribe(ctx context.Context, channel string) (*backend.Subscription, error) {
	return b.Subs.Subscribe(ctx, channel)
}

// WatchKey watches key on Subs.
func (b Split) WatchKey(ctx context.Context, key string) (*backend.Subscription, error) {
	return b.Subs.WatchKey(ctx, key)
}

// Close closes the scripts' backend, and the subscriptions' without
// waiting for it: a backend whose subscription connection a test stalls
// may take that long to let go, and lock.Client.Close must not wait for a
// stalled subscription (RULES.md X2, X3).
func (b Split) Close() error {
	go b.Subs.Close()
	return b.Backend.Close()
}
