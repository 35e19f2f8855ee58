package backendtest

import (
	"context"
	"errors"

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

// Close closes both backends.
func (b Split) Close() error {
	return errors.Join(b.Subs.Close(), b.Backend.Close())
}
