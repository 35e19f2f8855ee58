package lock

import (
	"context"
	"fmt"

	"github.com/fairlock/fairlock/lock/internal/wire"
)

// PruneWaiters removes the dead waiters of lock name - queued owners whose
// deadline has passed: a fairlock waiter that stopped heartbeating (its
// process died, or lost Redis) for longer than its waiter timeout, or a
// Redisson waiter past its Redisson deadline - and returns how many it
// removed. The rule is the one every lock operation applies to the head of
// the queue; PruneWaiters applies it to the whole queue, visiting
// only the entries whose deadline has passed. When the head changes the
// new head is woken, and granted the lock if it is free, as after
// ForceUnlock. Live waiters keep their places.
//
// It checks name as NewMutex does (ErrInvalidName), needs no hold, and
// sends one script; a connection error is returned marked ErrUnavailable,
// not retried (running it again is safe). It is an administrator's tool:
// locks in use drop a dead head by themselves within the waiter timeout.
func (c *Client) PruneWaiters(ctx context.Context, name string) (int, error) {
	if ctx == nil {
		return 0, pruneErr(name, fmt.Errorf("%w: nil context", ErrInvalidArgument))
	}
	m, err := c.NewMutex(name)
	if err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, pruneErr(name, err)
	}
	if err := c.life.begin(); err != nil {
		return 0, pruneErr(name, err)
	}
	defer c.life.end()
	call := wire.Prune{Wake: m.wake()}.Call(c.scripts, m.keys)
	rep, err := c.b.Eval(ctx, call.Script, call.Keys, call.Args)
	if err != nil {
		return 0, pruneErr(name, unavailable(err))
	}
	n, err := wire.DecodeCount(call, rep)
	if err != nil {
		return 0, pruneErr(name, err)
	}
	return n, nil
}

func pruneErr(name string, err error) error {
	return fmt.Errorf("lock %q: prune waiters: %w", name, err)
}
