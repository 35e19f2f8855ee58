package pubsub

import "sync"

// Leaving counts a connection's own SUNSUBSCRIBEs whose confirmations are
// still to come, so that its reader tells them from the server's own
// SUNSUBSCRIBE of a channel whose slot moved - the two look the same on
// the wire. Passed on to Sink.Unsubscribed, the confirmation of an own
// SUNSUBSCRIBE would fail a new SSUBSCRIBE of the same channel on its
// way (the hub takes the channel for moved), and that failure sends
// SUNSUBSCRIBE again: a loop for as long as someone subscribes. The zero
// value is ready to use; it is safe for concurrent use.
type Leaving struct {
	mu sync.Mutex
	n  map[string]int
}

// Sent counts one SUNSUBSCRIBE of each channel, before it is sent (its
// confirmation may reach the reader before the send returns).
func (l *Leaving) Sent(channels ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == nil {
		l.n = make(map[string]int)
	}
	for _, ch := range channels {
		l.n[ch]++
	}
}

// Unsent takes back what Sent counted for a SUNSUBSCRIBE that failed: if
// it reached the server all the same, its confirmation is taken for the
// server's own, which costs the channel's Subscriptions a re-check.
func (l *Leaving) Unsent(channels ...string) {
	for _, ch := range channels {
		l.Confirmed(ch)
	}
}

// Confirmed takes the confirmation of one own SUNSUBSCRIBE of channel,
// and reports whether one was awaited; false means the server dropped
// the channel by itself.
func (l *Leaving) Confirmed(channel string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.n[channel]
	switch n {
	case 0:
		return false
	case 1:
		delete(l.n, channel)
	default:
		l.n[channel] = n - 1
	}
	return true
}
