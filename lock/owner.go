package lock

import (
	"context"
	"sync/atomic"
)

// ownerState is the client's state for one owner of one lock, shared by
// every Mutex of the Client with that name and owner ID (WithOwnerID), so
// they act as one owner. It lives in the Client's registry while a call
// uses it or a hold of it lasts.
//
// The gate lets one script of the owner that changes its hold - an acquire
// attempt with its retries, an Unlock, a ForceUnlock or Delete - run at a
// time, and its reply is applied before the next one is sent. So the hold
// count the client knows is the server's, and replies are never applied
// out of order. Waiting between attempts holds no gate.
type ownerState struct {
	key  string
	gate chan struct{}

	// hold is the latest hold; it may have ended. Written under the gate;
	// read outside it too, by an Unlock that gave up waiting for the gate
	// and ends it (X13).
	hold atomic.Pointer[Hold]

	// guarded by the gate
	// lastSpent is the highest token of a grant the owner has taken up or
	// given back (or the lock's token when it last left the queue): tokens
	// only grow, so a grant message at or below it is stale.
	lastSpent int64
	// queued: an attempt of one of the owner's calls queued it (or may
	// have queued or granted it: its outcome is unknown), and no grant or
	// leave has taken it out since; the owner's last waiting call to end
	// leaves the queue then and gives back what the server says it holds
	// (X5). Written under the gate; read outside it too, as a hint that
	// the gate need not be taken.
	queued atomic.Bool

	// guarded by Client.mu
	refs    int        // calls using it, plus one while its hold lasts or a subscription is parked
	waiting int        // calls queued (or about to be) for this owner
	parked  *parkedSub // the subscription of an ended wait (park.go)
}

// enter takes the gate, or returns ctx's error.
func (o *ownerState) enter(ctx context.Context) error {
	select {
	case o.gate <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (o *ownerState) exit() { <-o.gate }

// current returns the live hold, or nil. The caller holds the gate.
func (o *ownerState) current() *Hold {
	if h := o.hold.Load(); h.live() {
		return h
	}
	return nil
}

// spend records that grants up to token are taken up or given back. The
// caller holds the gate.
func (o *ownerState) spend(token int64) { o.lastSpent = max(o.lastSpent, token) }

// spent reports whether a grant of token is taken up or given back
// already. The caller holds the gate.
func (o *ownerState) spent(token int64) bool { return token <= o.lastSpent }

// ownerOf returns m's owner state, taking a reference that release gives
// back.
func (c *Client) ownerOf(m *Mutex) *ownerState {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.owners[m.ownerKey]
	if o == nil {
		o = &ownerState{key: m.ownerKey, gate: make(chan struct{}, 1)}
		c.owners[m.ownerKey] = o
	}
	o.refs++
	return o
}

// release gives back a reference taken by ownerOf (or held by a hold).
func (c *Client) release(o *ownerState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.releaseLocked(o)
}

func (c *Client) releaseLocked(o *ownerState) {
	o.refs--
	if o.refs == 0 {
		delete(c.owners, o.key)
	}
}

// startWaiting counts a call that may queue the owner.
func (c *Client) startWaiting(o *ownerState) {
	c.mu.Lock()
	o.waiting++
	c.mu.Unlock()
}

// waitingOthers reports whether a call of the owner other than the caller
// is waiting; self says whether the caller is counted as waiting.
func (c *Client) waitingOthers(o *ownerState, self bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := o.waiting
	if self {
		n--
	}
	return n > 0
}

// stopWaiting uncounts it and reports whether it was the owner's last
// waiting call: only then may the owner leave the queue, which it shares.
func (c *Client) stopWaiting(o *ownerState) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	o.waiting--
	return o.waiting == 0
}
