package lock

import (
	"context"
	"fmt"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock/internal/wire"
)

// watchdog is the client's single renewal loop (B6). Every third of the
// lease it renews all watchdog holds and checks that explicit-lease holds
// still exist, in one pipelined batch, and ends the holds the server no
// longer has (X7). A hold whose renewals fail ends by its own deadline
// (Hold, X12); the watchdog never infers a loss from the time.
//
// When the subscription connection reconnects (listenReconnects), the
// server may have come back without its data, so every hold is checked at
// once, and again with back-off until the server answers, rather than at
// the next tick.
func (c *Client) watchdog() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.lease / 3)
	defer t.Stop()
	recheck := newRetrier(c.closing)
	rechecking := time.NewTimer(time.Hour)
	rechecking.Stop()
	defer rechecking.Stop()
	for {
		select {
		case <-c.closing:
			return
		case <-t.C:
			c.renewAll(c.renewTimeout())
		case <-c.reconnected:
			recheck.b.Reset()
			rechecking.Reset(0)
		case <-rechecking.C:
			if !c.renewAll(recheckTimeout) {
				rechecking.Reset(recheck.b.NextBackOff())
			}
		}
	}
}

// recheckTimeout bounds one check of every hold after a reconnect.
const recheckTimeout = time.Second

// renewTimeout bounds one renewal batch: a third of the lease, at most a
// second, so that a batch stuck on a dead connection never keeps the
// watchdog from a reconnect's recheck for long. A batch that times out
// only misses one tick; holds end by their own deadlines.
func (c *Client) renewTimeout() time.Duration {
	return min(c.cfg.lease/3, recheckTimeout)
}

// reconnectTimeout bounds one try to subscribe to the client's channel.
const reconnectTimeout = 5 * time.Second

// listenReconnects waits for the client's first hold, subscribes to the
// client's own channel (nobody publishes there; one per client), and
// passes the subscription connection's reconnect events on to the
// watchdog. It runs beside the watchdog so that a slow subscription never
// delays renewals.
func (c *Client) listenReconnects() {
	defer c.wg.Done()
	select {
	case <-c.kick:
	case <-c.closing:
		return
	}
	retry := newRetrier(c.closing)
	var sub *backend.Subscription
	failed := false
	for sub == nil {
		ctx, cancel := context.WithTimeout(c.life, reconnectTimeout)
		s, err := c.b.Subscribe(ctx, wire.ClientChannelPrefix+c.id)
		cancel()
		if err == nil {
			sub = s
			continue
		}
		failed = true
		if retry.pause(c.life, err) != nil {
			return
		}
	}
	defer sub.Close()
	if failed {
		// The connection failed while the subscription was being set up
		// (a server that restarted, say), which the new subscription
		// shows no reconnect for: check the holds once now.
		select {
		case c.reconnected <- struct{}{}:
		default:
		}
	}
	for {
		select {
		case e := <-sub.Events():
			if e.Reconnect {
				select {
				case c.reconnected <- struct{}{}:
				default: // a recheck is pending already
				}
			}
		case <-c.closing:
			return
		}
	}
}

// renewal is one hold's renewal in a batch.
type renewal struct {
	h    *Hold
	m    *Mutex
	o    *owner
	call wire.Renew // lease 0: only checked
}

// confirm renews h at the instant at, or when the hold ends first not at
// all, beside the watchdog (which may be busy with a batch): a hand-over
// grant lasts only about a waiter timeout until renewed (adopt). Most
// holds taken over in contention end before at, and so never cost a
// renewal. Close waits for it.
func (c *Client) confirm(h *Hold, at time.Time) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		t := time.NewTimer(time.Until(at))
		defer t.Stop()
		select {
		case <-t.C:
		case <-h.Done():
			return
		case <-c.closing:
			return
		}
		// Until the server answers (or the hold ends by its deadline).
		hctx, cancel := h.Context(c.life)
		defer cancel()
		retry := newRetrier(c.closing)
		for !c.renewHolds([]*Hold{h}, c.renewTimeout()) {
			if retry.pause(hctx, ErrLockLost) != nil {
				return
			}
		}
	}()
}

// renewAll renews (or checks) every hold in one batch bounded by timeout,
// and reports whether the server answered (or there was nothing to send).
func (c *Client) renewAll(timeout time.Duration) bool {
	c.mu.Lock()
	hs := make([]*Hold, 0, len(c.holds))
	for h := range c.holds {
		hs = append(hs, h)
	}
	c.mu.Unlock()
	return c.renewHolds(hs, timeout)
}

// renewHolds renews (or checks) the holds in one batch bounded by timeout,
// and reports whether the server answered (or there was nothing to send).
func (c *Client) renewHolds(hs []*Hold, timeout time.Duration) bool {
	c.mu.Lock()
	batch := make([]renewal, 0, len(hs))
	calls := make([]backend.Call, 0, len(hs))
	for _, h := range hs {
		ref, tracked := c.holds[h]
		if !tracked {
			continue
		}
		call, ok := ref.o.renewal(h)
		if !ok {
			continue
		}
		call.Owner, call.Wake = ref.m.field, ref.m.wake()
		batch = append(batch, renewal{h: h, m: ref.m, o: ref.o, call: call})
		calls = append(calls, call.Call(c.scripts, ref.m.keys))
	}
	c.mu.Unlock()
	if len(calls) == 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(c.life, timeout)
	defer cancel()
	sent := time.Now()
	results := c.b.EvalBatch(ctx, calls)
	answered := false
	for i, r := range batch {
		err := fmt.Errorf("%w: batch returned %d results for %d calls", ErrUnexpectedReply, len(results), len(calls))
		got := wire.RenewLost
		if i < len(results) {
			err = results[i].Err
			if err == nil {
				got, err = wire.DecodeRenew(results[i].Reply)
			}
		}
		c.renewed(r, sent, got, err)
		answered = answered || err == nil
	}
	return answered
}

func (c *Client) renewed(r renewal, sent time.Time, got wire.RenewReply, err error) {
	if err == nil {
		r.o.renewed(r.h, r.call, got, sent)
	}
	if r.call.Lease > 0 && c.cfg.observer != nil {
		c.cfg.observer.Renewed(r.m.call(""), err)
	}
}
