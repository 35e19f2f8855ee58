package lock

import (
	"context"
	"fmt"
	"time"

	"github.com/fairlock/fairlock/backend"
)

// watchdog is the client's single renewal loop (B6). Every third of the
// lease it renews all watchdog holds and checks that explicit-lease holds
// still exist, in one pipelined batch, and ends the holds that are gone or
// whose renewal has failed for longer than their lease (X7).
func (c *Client) watchdog() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-c.closing:
			return
		case <-t.C:
			c.renewAll()
		}
	}
}

func (c *Client) renewAll() {
	c.mu.Lock()
	holds := make([]*Hold, 0, len(c.holds))
	for h := range c.holds {
		holds = append(holds, h)
	}
	c.mu.Unlock()
	if len(holds) == 0 {
		return
	}
	calls := make([]backend.Call, len(holds))
	for i, h := range holds {
		h.m.mu.Lock()
		lease := "0"
		if h.watchdog {
			lease = ms(h.lease)
		}
		h.m.mu.Unlock()
		calls[i] = backend.Call{Script: c.scripts.renew, Keys: []string{h.m.keys.hash}, Args: []string{h.m.field, lease}}
	}
	ctx, cancel := context.WithTimeout(c.life, c.cfg.lease/3)
	defer cancel()
	sent := time.Now()
	results := c.b.EvalBatch(ctx, calls)
	for i, h := range holds {
		var err error
		var held int64
		if i < len(results) {
			err = results[i].Err
			if err == nil {
				held, err = results[i].Reply.AsInt()
			}
		} else {
			err = fmt.Errorf("%w: batch returned %d results for %d calls", ErrUnexpectedReply, len(results), len(calls))
		}
		c.renewed(h, sent, held == 1, err)
	}
}

func (c *Client) renewed(h *Hold, sent time.Time, held bool, err error) {
	m := h.m
	if err == nil && !held {
		m.lose(h, fmt.Errorf("%w: no longer held (lease ran out, force-unlocked or deleted)", ErrLockLost))
		return
	}
	m.mu.Lock()
	watchdog, last, lease := h.watchdog, h.lastRenewed, h.lease
	if err == nil && watchdog {
		h.lastRenewed = sent
	}
	m.mu.Unlock()
	if watchdog && c.cfg.observer != nil {
		c.cfg.observer.Renewed(m.call(""), err)
	}
	if err != nil && watchdog && time.Since(last) > lease {
		m.lose(h, fmt.Errorf("%w: renewal failing for longer than the lease (%v): %v", ErrLockLost, lease, err))
	}
}
