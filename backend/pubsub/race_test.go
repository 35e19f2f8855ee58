package pubsub_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/backend/pubsub"
)

// movingConn is a shardConn whose slot moves right after the server
// confirmed an SSUBSCRIBE: the reader reads the confirmation and then the
// server's own SUNSUBSCRIBE, and passes that to the Sink before the
// Subscribe call that waited for the confirmation has returned (the
// reader goroutine runs on while the caller is being woken).
type movingConn struct {
	*shardConn
	to    string
	armed *atomic.Bool
}

func (mc movingConn) Subscribe(ctx context.Context, channels ...string) error {
	if err := mc.shardConn.Subscribe(ctx, channels...); err != nil {
		return err
	}
	if mc.armed.CompareAndSwap(true, false) {
		mc.c.move(backend.Slot(channels[0]), mc.to)
	}
	return nil
}

// TestShardedSubscriptionMovedRightAfterItsConfirmation: a slot that moves
// between the server's confirmation of SSUBSCRIBE and the moment the node
// hub registers the Subscription (Hub.subscribeBatch, after Conn.Subscribe
// returns) must still be followed. Hub.Unsubscribed finds no Subscription
// of the channel then and drops the news; the Subscription is registered
// at a node that no longer serves its slot, and hears nothing, with no
// Reconnect event, until that node's connection ends.
func TestShardedSubscriptionMovedRightAfterItsConfirmation(t *testing.T) {
	c := newFakeCluster("n1:1", "n2:2", "n3:3")
	ch := "wake:{a}:1"
	var armed atomic.Bool
	armed.Store(true)
	dial := func(ctx context.Context, addr string, sink pubsub.Sink) (pubsub.Conn, <-chan error, error) {
		conn, done, err := c.dial(ctx, addr, sink)
		if err != nil {
			return nil, nil, err
		}
		return movingConn{shardConn: conn.(*shardConn), to: "n3:3", armed: &armed}, done, nil
	}
	h := pubsub.NewShardedHub(dial, c.slotMap)
	defer h.Close()
	s, err := h.Subscribe(context.Background(), ch)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if armed.Load() {
		t.Fatal("the slot did not move")
	}
	heard(t, c, s, "after the move")
}
