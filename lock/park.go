package lock

import (
	"time"

	"github.com/fairlock/fairlock/backend"
)

// A waiter's subscription to its owner's wake-up channel outlives the
// wait by subscriptionLinger, parked in the owner's state: the owner's next
// wait within that time takes it back and queues without a SUBSCRIBE and
// the re-check behind it (in contention, an owner that unlocks and locks
// again saves two round trips and a script). At most maxParked owners of a
// client keep one parked; Close drops them all.
const (
	subscriptionLinger = time.Second
	maxParked          = 1024
)

// parkedSub is a subscription kept after its wait ended.
type parkedSub struct {
	sub   *backend.Subscription
	taken chan struct{} // closed when a waiter takes it back
}

// takeParked returns o's parked subscription, if any, with any event it
// received while parked dropped: such an event is about an earlier wait.
// A message still in flight from before can arrive later; waiters treat
// every wake-up as "check again", and ignore grants older than their own
// latest attempt (adopt).
func (c *Client) takeParked(o *owner) *backend.Subscription {
	c.mu.Lock()
	e := c.owners[o.key]
	p := e.parked
	if p != nil {
		e.parked = nil
		c.parked--
		c.releaseLocked(o)
	}
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	close(p.taken)
	p.sub.Latest(backend.Event{}) // what came meanwhile was for the wait that parked it
	return p.sub
}

// park keeps sub, whose wait has ended, for o's next wait, or closes it
// when o has one parked already, too many owners do, or the client is
// closed.
func (c *Client) park(o *owner, sub *backend.Subscription) {
	c.mu.Lock()
	e := c.owners[o.key]
	if c.closed || e.parked != nil || c.parked >= maxParked {
		c.mu.Unlock()
		sub.Close()
		return
	}
	p := &parkedSub{sub: sub, taken: make(chan struct{})}
	e.parked = p
	e.refs++ // the registry keeps o while its subscription is parked
	c.parked++
	c.wg.Add(1)
	c.mu.Unlock()
	go c.linger(o, p)
}

// linger closes p after subscriptionLinger, or when the client closes,
// unless a waiter takes it back first.
func (c *Client) linger(o *owner, p *parkedSub) {
	defer c.wg.Done()
	t := time.NewTimer(subscriptionLinger)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.closing:
	case <-p.taken:
		return
	}
	c.mu.Lock()
	e := c.owners[o.key]
	mine := e != nil && e.parked == p
	if mine {
		e.parked = nil
		c.parked--
		c.releaseLocked(o)
	}
	c.mu.Unlock()
	if mine {
		p.sub.Close()
	}
}
