package lock

import (
	"sync"
	"sync/atomic"
	"time"
)

// localSubscribeDelay is how long a head whose lock another owner of its
// client holds waits for that hold to end before it subscribes to its
// wake-up channel. Meanwhile what would reach it only by a message
// reaches it through the holder: a release, a loss (the deadline, a
// force-unlock told to the holder's client, a hash watch) all end the
// local hold and wake the head; an event that ends no local hold in time
// is heard at most this much later than with a subscription from the
// start. On 64 goroutines over 1,024 names the SUBSCRIBEs it saved were
// worth about 7% of the acquisitions per second.
const localSubscribeDelay = 20 * time.Millisecond

// Local wake-ups: when a hold of this client ends, the client's own
// waiters at the head of that lock's queue attempt again at once, without
// waiting for the wake-up message. The release that ended the hold ran on
// the server before its reply came back, so the head's next attempt finds
// the grant (or the free lock) there.
//
// This matters when the holder and the head share a client - many
// goroutines of one process on the same lock names. A head queues, then
// subscribes to its channel, then attempts again: a release between its
// attempt and the subscription published to nobody. Measured on 64
// goroutines of one client over 1,024 names, nine in ten queued calls
// were granted by that attempt after the subscription, not by a message:
// the holder had released before the SUBSCRIBE was confirmed. A local
// wake-up skips the wait for the subscription. A head whose lock another
// owner of the client holds subscribes only if that hold has not ended
// localSubscribeDelay later: most such waits end sooner, and cost no
// SUBSCRIBE then (nor the UNSUBSCRIBE a second after). Every other head
// subscribes at once, for holders elsewhere.
//
// A wake-up only brings an attempt forward: it changes nothing on the
// server, and a head that finds the lock still held (the local hold ended
// by its own deadline, before the server's expiry) queues again as
// before. Only heads wait for it: when a waiter further back wakes, the
// lock goes to the head first.
//
// localWakes has its own lock, localWakes.mu, taken alone.
type localWakes struct {
	mu    sync.Mutex
	heads map[string][]chan struct{} // by lock hash: the heads' channels (buffered, one wake-up pending at most)
	// The hashes of the latest hold ends, by sequence number (ended), so
	// that a head can tell whether the hold ahead of it ended before it
	// registered: its wake-up went to nobody then.
	recent [256]string
	ended  atomic.Uint64 // hold ends so far; written under mu
}

// seq returns the number of hold ends so far: an attempt notes it before
// it is sent, for await.
func (w *localWakes) seq() uint64 { return w.ended.Load() }

// await registers wake, the channel of a waiter at the head of the lock
// whose hash is hash, to be told when a hold of this client on that lock
// ends (holdEnded). It reports whether one ended after since (seq, read
// before the attempt that made the waiter the head was sent): its wake-up
// came before the registration, and the waiter attempts again at once.
func (w *localWakes) await(hash string, wake chan struct{}, since uint64) (ended bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.heads[hash] = append(w.heads[hash], wake)
	now := w.ended.Load()
	if now-since > uint64(len(w.recent)) {
		return true // more ended than recent keeps: it may have been one
	}
	for seq := since; seq < now; seq++ {
		if w.recent[seq%uint64(len(w.recent))] == hash {
			return true
		}
	}
	return false
}

// stop unregisters wake (await).
func (w *localWakes) stop(hash string, wake chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	waiting := w.heads[hash]
	for i, ch := range waiting {
		if ch == wake {
			waiting = append(waiting[:i], waiting[i+1:]...)
			break
		}
	}
	if len(waiting) == 0 {
		delete(w.heads, hash)
		return
	}
	w.heads[hash] = waiting
}

// holdEnded records that a hold of this client on the lock whose hash is
// hash ended, after the hold index dropped it, and wakes the heads
// waiting on it.
func (w *localWakes) holdEnded(hash string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	seq := w.ended.Load()
	w.recent[seq%uint64(len(w.recent))] = hash
	w.ended.Store(seq + 1)
	for _, wake := range w.heads[hash] {
		select {
		case wake <- struct{}{}:
		default: // one is pending already
		}
	}
}
