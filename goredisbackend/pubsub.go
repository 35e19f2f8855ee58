package goredisbackend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/backend/pubsub"
	"github.com/redis/go-redis/v9"
)

// Health check of the subscription connection: after pingIdle without
// anything read, the connection is sent a PING; when nothing arrives
// within pongWait of it, the connection is taken for dead.
const (
	pingIdle   = time.Second
	pongWait   = 3 * time.Second
	checkEvery = 250 * time.Millisecond
)

// errReconnected reports that go-redis re-subscribed by itself, which it
// does after re-dialling: messages sent meanwhile are lost.
var errReconnected = errors.New("goredisbackend: the PubSub reconnected by itself")

// dial opens a subscription connection for the Hub: a new redis.PubSub
// from the client, up and answering (a PING was answered) when dial
// returns. On a cluster client go-redis picks a node at random.
func (b *Backend) dial(ctx context.Context, sink pubsub.Sink) (pubsub.Conn, <-chan error, error) {
	if _, ok := b.client.(*redis.Ring); ok {
		// A Ring would pick the subscription's shard by channel name.
		return nil, nil, fmt.Errorf("%w: subscriptions on a redis.Ring", backend.ErrNotSupported)
	}
	return openConn(ctx, b.client.Subscribe(ctx), sink, false) // no channels: nothing sent yet
}

// openConn starts the receive loop of ps, which has no subscription yet,
// and returns once a PING was answered on it. A sharded connection
// subscribes with SSUBSCRIBE.
func openConn(ctx context.Context, ps *redis.PubSub, sink pubsub.Sink, sharded bool) (pubsub.Conn, <-chan error, error) {
	c := &pubSubConn{
		ps:      ps,
		sharded: sharded,
		sink:    sink,
		done:    make(chan error, 1),
		ended:   make(chan struct{}),
		pong:    make(chan struct{}, 1),
		refused: make(chan error, 1),
		pending: make(map[string][]chan struct{}),
	}
	c.heard.Store(time.Now().UnixNano())
	if err := ctx.Err(); err != nil {
		c.Close()
		return nil, nil, err
	}
	// The PING dials; its answer, read by the receive loop, proves the
	// connection works.
	if err := c.ps.Ping(ctx); err != nil {
		c.Close()
		return nil, nil, mapError(err)
	}
	c.wg.Add(2)
	go c.receive()
	go c.check()
	select {
	case <-c.pong:
		return c, c.done, nil
	case <-c.ended:
		c.Close()
		return nil, nil, c.cause
	case <-ctx.Done():
		c.Close()
		return nil, nil, ctx.Err()
	}
}

// pubSubConn is one redis.PubSub with its receive loop: pubsub.Conn.
type pubSubConn struct {
	ps      *redis.PubSub
	sharded bool // SSUBSCRIBE and SUNSUBSCRIBE, at one cluster node
	sink    pubsub.Sink
	wg      sync.WaitGroup // receive and check

	heard atomic.Int64  // when something was last read, in Unix ns
	pong  chan struct{} // a PING was answered
	// refused carries the server's error reply to the SUBSCRIBE in flight
	// (the Hub sends one at a time): NOPERM for a channel the user may
	// not subscribe to. Redis refuses the whole command, so none of its
	// channels is confirmed.
	refused chan error
	done    chan error    // the connection's end, for the Hub
	ended   chan struct{} // closed at the end
	end     sync.Once     // closes ended and done
	cause   error         // why it ended; written before ended is closed
	close   sync.Once     // closes ps
	mu      sync.Mutex    // guards pending
	// pending holds, per channel, the SUBSCRIBEs awaiting the server's
	// confirmation, oldest first: the server confirms each channel of each
	// SUBSCRIBE once, in order.
	pending map[string][]chan struct{}
	// leaving counts this connection's own SUNSUBSCRIBEs whose
	// confirmation has not been read yet: any other "sunsubscribe" is the
	// server's own (the channel's slot moved).
	leaving pubsub.Leaving
}

// Subscribe writes SUBSCRIBE (SSUBSCRIBE on a sharded connection, for the
// channels of one slot) and waits until the receive loop has read the
// server's confirmation of every channel. The server's refusal - NOPERM, or
// MOVED when the node does not own the slot - is a *backend.ServerError
// with the server's message.
func (c *pubSubConn) Subscribe(ctx context.Context, channels ...string) error {
	if len(channels) == 0 {
		return nil
	}
	if err := c.usable(ctx); err != nil {
		return err
	}
	confirmed := make([]chan struct{}, len(channels))
	c.mu.Lock()
	for i, ch := range channels {
		confirmed[i] = make(chan struct{})
		c.pending[ch] = append(c.pending[ch], confirmed[i])
	}
	c.mu.Unlock()
	select {
	case <-c.refused: // an earlier command's refusal, not this one's
	default:
	}
	subscribe := c.ps.Subscribe
	if c.sharded {
		subscribe = c.ps.SSubscribe
	}
	if err := subscribe(ctx, channels...); err != nil {
		// go-redis re-dials after a failed write (even one cut short by
		// ctx), silently: this connection is over.
		c.finish(err)
		return mapError(err)
	}
	for _, ch := range confirmed {
		select {
		case <-ch:
		case err := <-c.refused:
			c.unpend(channels, confirmed)
			return &backend.ServerError{Message: err.Error()}
		case <-c.ended:
			return c.cause
		case <-ctx.Done():
			// The confirmation, when it comes, is still matched to this
			// SUBSCRIBE: the order on the connection is kept.
			return ctx.Err()
		}
	}
	return nil
}

// Unsubscribe writes UNSUBSCRIBE (SUNSUBSCRIBE); its confirmation is not
// awaited.
func (c *pubSubConn) Unsubscribe(ctx context.Context, channels ...string) error {
	if len(channels) == 0 { // go-redis would unsubscribe every channel
		return nil
	}
	if err := c.usable(ctx); err != nil {
		return err
	}
	unsubscribe := c.ps.Unsubscribe
	if c.sharded {
		c.leaving.Sent(channels...)
		unsubscribe = c.ps.SUnsubscribe
	}
	if err := unsubscribe(ctx, channels...); err != nil {
		c.finish(err)
		return mapError(err)
	}
	return nil
}

// usable returns ctx's error or the connection's end, if any, before a
// write: a write with a context that is already done fails, which would
// make go-redis re-dial.
func (c *pubSubConn) usable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-c.ended:
		return c.cause
	default:
		return nil
	}
}

// Close closes the PubSub and waits for its goroutines.
func (c *pubSubConn) Close() {
	c.finish(errors.Join(backend.ErrClosed, errors.New("goredisbackend: subscription connection closed")))
	c.close.Do(func() { _ = c.ps.Close() })
	c.wg.Wait()
}

// finish ends the connection for cause: once, reported on done, and every
// Subscribe waiting for a confirmation returns.
func (c *pubSubConn) finish(cause error) {
	c.end.Do(func() {
		c.cause = fmt.Errorf("goredisbackend: subscription connection lost: %w", cause)
		close(c.ended)
		c.done <- c.cause
		close(c.done)
	})
}

// receive reads the connection until it ends. It never blocks on anything
// but the read: the sink hands messages on without blocking.
func (c *pubSubConn) receive() {
	defer c.wg.Done()
	for {
		msg, err := c.ps.Receive(context.Background())
		var refusal redis.Error
		if errors.As(err, &refusal) {
			// The server refused a command (go-redis keeps the
			// connection): the SUBSCRIBE in flight, if any, fails.
			c.heard.Store(time.Now().UnixNano())
			select {
			case c.refused <- refusal:
			default:
			}
			continue
		}
		if err != nil {
			// Includes the read a Close interrupts. go-redis has already
			// re-dialled on a failed read; messages may have been lost.
			c.finish(err)
			return
		}
		c.heard.Store(time.Now().UnixNano())
		switch m := msg.(type) {
		case *redis.Message:
			c.sink.Deliver(m.Channel, m.Payload)
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe", "ssubscribe":
				if !c.confirm(m.Channel) {
					c.finish(errReconnected)
					return
				}
			case "sunsubscribe":
				// Not one of ours: the server dropped the channel, whose
				// slot moved (a resharding or a failover).
				if !c.leaving.Confirmed(m.Channel) {
					c.sink.Unsubscribed(m.Channel)
				}
			}
		case *redis.Pong:
			select {
			case c.pong <- struct{}{}:
			default:
			}
		}
	}
}

// unpend takes a refused SUBSCRIBE's confirmations out of pending: none
// will come for them.
func (c *pubSubConn) unpend(channels []string, confirmed []chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, ch := range channels {
		waiting := c.pending[ch]
		for j, w := range waiting {
			if w == confirmed[i] {
				waiting = append(waiting[:j], waiting[j+1:]...)
				break
			}
		}
		if len(waiting) == 0 {
			delete(c.pending, ch)
		} else {
			c.pending[ch] = waiting
		}
	}
}

// confirm hands the confirmation of channel to the oldest SUBSCRIBE
// waiting for it, and reports whether there was one.
func (c *pubSubConn) confirm(channel string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	waiting := c.pending[channel]
	if len(waiting) == 0 {
		return false
	}
	close(waiting[0])
	if len(waiting) == 1 {
		delete(c.pending, channel)
	} else {
		c.pending[channel] = waiting[1:]
	}
	return true
}

// check sends a PING after pingIdle of silence and ends the connection when
// nothing has been read pongWait after it: a hung server or a dead path
// would otherwise go unnoticed until TCP gives up, minutes later.
func (c *pubSubConn) check() {
	defer c.wg.Done()
	t := time.NewTicker(checkEvery)
	defer t.Stop()
	var pinged time.Time // zero: no PING unanswered
	for {
		select {
		case <-c.ended:
			return
		case <-t.C:
		}
		heard := time.Unix(0, c.heard.Load())
		now := time.Now()
		if !pinged.IsZero() {
			if heard.After(pinged) {
				pinged = time.Time{}
			} else if now.Sub(pinged) > pongWait {
				c.finish(fmt.Errorf("no reply to PING within %v", pongWait))
				return
			}
		}
		if pinged.IsZero() && now.Sub(heard) >= pingIdle {
			pinged = now
			ctx, cancel := context.WithTimeout(context.Background(), pongWait)
			err := c.ps.Ping(ctx)
			cancel()
			if err != nil {
				c.finish(err)
				return
			}
		}
	}
}
