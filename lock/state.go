package lock

import (
	"context"
	"fmt"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock/inspect"
	"github.com/fairlock/fairlock/lock/internal/wire"
)

// Inspect reads the lock's state with up to limit queue entries (0: none).
// The read visits at most limit waiters.
//
// It also says who the holders and listed waiters are: their clients'
// descriptions (WithDescription) and kinds, read right after the
// snapshot in one more pipelined round trip (one read per client, each
// in its own cluster slot). If that read fails, the State still holds the
// snapshot and State.DescriptionErr says why; IsLocked, IsHeldBy,
// HoldCount and RemainTTL do not read them. With WithCachedReads both
// reads go through the client-side cache.
func (m *Mutex) Inspect(ctx context.Context, limit int) (inspect.State, error) {
	return m.readState(ctx, wire.CachedAll, limit)
}

// readState is every read method: what kind needs of the lock's state,
// from the cache (WithCachedReads, cached.go) or inspect.lua, which also
// sets the cached reads' estimate of the server's clock.
func (m *Mutex) readState(ctx context.Context, kind wire.CachedKind, limit int) (inspect.State, error) {
	if err := m.checkCall(ctx); err != nil {
		return inspect.State{}, err
	}
	if limit < 0 {
		return inspect.State{}, m.errorf(fmt.Errorf("%w: negative queue limit %d", ErrInvalidArgument, limit))
	}
	if err := m.c.life.begin(); err != nil { // Close waits for the read before it closes the backend
		return inspect.State{}, m.errorf(err)
	}
	defer m.c.life.end()
	if st, ok := m.cachedState(ctx, kind, limit); ok {
		return st, nil
	}
	sent := time.Now()
	snap, err := m.read(ctx, limit)
	if cr := m.c.cfg.cached; cr != nil {
		cr.clock.observe(snap.Now, sent, time.Now(), err)
	}
	if err != nil {
		return inspect.State{}, m.errorf(err)
	}
	st := stateOf(snap)
	if kind == wire.CachedAll {
		m.c.describeOwners(ctx, m, &st, snap)
	}
	return st, nil
}

// stateOf is the State a snapshot says.
func stateOf(snap wire.Snapshot) inspect.State {
	st := inspect.State{ServerTime: snap.Now, Token: snap.Token, QueueLength: snap.QueueLength}
	switch {
	case snap.HashTTL == -1:
		st.TTL = -1
	case snap.HashTTL > 0:
		st.TTL = time.Duration(snap.HashTTL) * time.Millisecond
	}
	for _, h := range snap.Holders {
		st.Holders = append(st.Holders, inspect.Holder{Owner: h.Owner, Count: h.Count})
	}
	for _, q := range snap.Queue {
		st.Queue = append(st.Queue, inspect.Waiter{Owner: q.Owner, Deadline: q.Deadline})
	}
	return st
}

// readAttempts bounds the tries of a read: reads change nothing, so a
// transient error (a connection the server closed, say) is retried, a few
// times, with back-off.
const readAttempts = 3

func (m *Mutex) read(ctx context.Context, limit int) (wire.Snapshot, error) {
	call := wire.Inspect{Limit: limit}.Call(m.c.scripts, m.keys)
	var rep backend.Reply
	err := m.c.retryRead(ctx, func() (err error) {
		rep, err = m.c.b.Eval(ctx, call.Script, call.Keys, call.Args)
		return err
	})
	if err != nil {
		return wire.Snapshot{}, err
	}
	return wire.DecodeInspect(rep)
}

// retryRead runs read, again after a transient error, at most
// readAttempts times with back-off.
func (c *Client) retryRead(ctx context.Context, read func() error) error {
	retry := newRetrier(c.life.closing)
	retry.limit = readAttempts
	return retry.do(ctx, read)
}

// IsLocked reports whether anyone holds the lock.
func (m *Mutex) IsLocked(ctx context.Context) (bool, error) {
	st, err := m.readState(ctx, wire.CachedHolders, 0)
	return st.Locked(), err
}

// IsHeldBy reports whether owner, "<clientID>:<ownerID>" (Mutex.Owner),
// holds the lock.
func (m *Mutex) IsHeldBy(ctx context.Context, owner string) (bool, error) {
	st, err := m.readState(ctx, wire.CachedHolders, 0)
	return st.CountOf(owner) > 0, err
}

// HoldCount returns this owner's hold count, 0 when it does not hold the
// lock.
func (m *Mutex) HoldCount(ctx context.Context) (int, error) {
	st, err := m.readState(ctx, wire.CachedHolders, 0)
	return st.CountOf(m.field), err
}

// RemainTTL returns the lease left on the lock: 0 when it is free, -1 when
// it has no expiry.
func (m *Mutex) RemainTTL(ctx context.Context) (time.Duration, error) {
	st, err := m.readState(ctx, wire.CachedTTL, 0)
	return st.TTL, err
}
