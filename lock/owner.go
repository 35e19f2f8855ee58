package lock

// The client's registry of owners: an owner (lifecycle.go) lives in it
// while a call uses it, a hold of it lasts or its subscription is parked
// (park.go). The registry is the Client's, under Client.mu; the owner's
// own state is under the owner's lock.

// entry is an owner in the registry. The owner lives in its entry, so
// that a new owner costs one allocation less.
type entry struct {
	own    owner
	refs   int        // calls using it, plus one while its hold lasts or a subscription is parked
	parked *parkedSub // the subscription of an ended wait (park.go)
}

// ownerOf returns m's owner, taking a reference that release gives back.
func (c *Client) ownerOf(m *Mutex) *owner {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.owners[m.ownerKey]
	if e == nil {
		e = &entry{}
		e.own.init(m.ownerKey, m)
		c.owners[m.ownerKey] = e
	}
	e.refs++
	return &e.own
}

// lookup returns m's owner if the registry has it, or nil.
func (c *Client) lookup(m *Mutex) *owner {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.owners[m.ownerKey]; e != nil {
		return &e.own
	}
	return nil
}

// release gives back a reference taken by ownerOf (or held by a hold).
func (c *Client) release(o *owner) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.releaseLocked(o)
}

func (c *Client) releaseLocked(o *owner) {
	e := c.owners[o.key]
	e.refs--
	if e.refs == 0 {
		delete(c.owners, o.key)
	}
}
