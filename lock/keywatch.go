package lock

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/fairlock/fairlock/backend"
)

// Key watches (backend.KeyWatcher, client-side caching) tell of a change
// to a lock hash that publishes nothing - a DEL by hand, an expiry, an
// eviction. The client watches the hashes of the locks it holds
// (hashWatches, losswatch.go); a waiter at the head of a queue watches the
// hash of the lock it waits for (keyWatch).

// keyWatcher is the backend's KeyWatcher until the backend says it cannot
// watch keys.
type keyWatcher struct {
	kw          backend.KeyWatcher // nil when the backend has none
	unsupported atomic.Bool
}

// get returns the KeyWatcher, or nil when there is none or it cannot
// watch keys.
func (k *keyWatcher) get() backend.KeyWatcher {
	if k.unsupported.Load() {
		return nil
	}
	return k.kw
}

// noteErr turns key watches off for good when err says the backend cannot
// watch keys, and reports whether it did.
func (k *keyWatcher) noteErr(err error) bool {
	if !errors.Is(err, backend.ErrNotSupported) {
		return false
	}
	k.unsupported.Store(true)
	return true
}

// keyWatch is the head waiter's watch on the lock hash (backend.KeyWatcher):
// a change that publishes nothing - a DEL by hand, an expiry - wakes it at
// once rather than at its timer.
type keyWatch struct {
	sub    *backend.Subscription
	arming *background // a WatchKey in flight (arm)
}

// idle reports whether the head neither watches nor is arming a watch.
func (w *keyWatch) idle() bool { return w.sub == nil && w.arming == nil }

// arm starts arming a watch beside the wait loop (background.go), unless
// one is armed or arming already or the backend cannot; a failure, or a
// subscription connection that stalls, only costs the early wake-up,
// never the wait or the heartbeat (X2).
func (w *keyWatch) arm(ctx context.Context, m *Mutex) {
	kw := m.c.watcher.get()
	if !w.idle() || kw == nil {
		return
	}
	key := m.keys.Hash
	w.arming = goBackground(ctx, &m.c.life, watchTimeout, func(ctx context.Context) (*backend.Subscription, error) {
		return kw.WatchKey(ctx, key)
	})
}

// armed returns the channel the arming's result arrives on, or nil
// (blocks forever) when none is in flight.
func (w *keyWatch) armed() <-chan backgroundResult { return w.arming.result() }

// settle applies the arming's result.
func (w *keyWatch) settle(m *Mutex, r backgroundResult) {
	w.arming = nil
	m.c.watcher.noteErr(r.err)
	if r.err == nil {
		w.sub = r.sub
	}
}

// events returns the watch's events, or nil (blocks forever) when idle.
func (w *keyWatch) events() <-chan backend.Event {
	if w.sub == nil {
		return nil
	}
	return w.sub.Events()
}

func (w *keyWatch) stop() {
	if sub := w.arming.stop(); sub != nil {
		sub.Close()
	}
	w.arming = nil
	if w.sub != nil {
		w.sub.Close()
		w.sub = nil
	}
}
