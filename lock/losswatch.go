package lock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fairlock/fairlock/backend"
)

// hashWatches is the client's watch on the hashes of the locks it holds
// (backend.KeyWatcher, client-side caching): a change of a held lock's
// hash that publishes nothing - a DEL by hand, an eviction, an expiry, a
// Redisson forceUnlock - makes the client check its holds on that lock at
// once, so a hold the server no longer has ends within about two round
// trips rather than at the watchdog's next tick (X16). Someone else's
// force-unlock or delete through fairlock's own scripts is told on the
// client's channel instead (reconnects, tell_evicted).
//
// There is one watch per held hash, however many of the client's owners
// hold it (re-entries, shared owners), in one goroutine that lives while
// the hash is held. It starts armDelay (30 ms) after the first hold, so a
// short hold (most Lock+Unlock pairs, contended or not) sends nothing and
// starts no goroutine; each arming (the first included) is followed by a
// check of the holds, so a change before the watch was armed - the hash
// deleted and taken by someone else in the hold's first 30 ms - is seen
// too, and a check the server did not answer is made again after a
// back-off. The client's own writes (renewals,
// re-entries, hand-overs) fire it too, and cost one check each. Without a
// backend that can watch keys the watchdog's tick remains the floor.
type hashWatches struct {
	c      *Client
	ctx    context.Context // bounds the watches' calls; cancelled by close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the watch goroutines

	mu     sync.Mutex
	byHash map[string]hashWatch // held hashes (values: a new hold costs no allocation)
	// armer starts the watches that are due (startDue); one timer for all
	// hashes, set when a hold starts and none is pending, so back-to-back
	// short holds set one timer per armDelay rather than one each. A timer
	// earlier than the runtime's next one wakes its network poller, a
	// system call: in a CPU profile of 20,000 uncontended pairs the
	// per-hold timer's own call took about 5 µs a pair, and the pair's
	// client CPU fell from 94 to 70 µs without it.
	armer  *time.Timer
	arming bool // armer is set
	closed bool
}

// hashWatch is one held hash: when the client's first hold on it started,
// and the stop of its watch goroutine (nil while none runs). Which holds
// the client has on the hash is the hold index's (holds.go).
type hashWatch struct {
	since time.Time
	stop  chan struct{}
}

// armDelay is how long a hold lasts before its hash is watched: the
// latest a change nothing publishes (a DEL by hand, an eviction, a
// Redisson forceUnlock) is seen, plus an arming and a check - under 50 ms
// (X16). Watching every hold from 5 ms on cost the many-locks benchmark
// (64 goroutines over 1,024 names) about 60% on its Lock p99 (the watches
// share the subscription connection with the waiters' SUBSCRIBEs); from
// 50 ms on it cost within the run's noise, from 30 ms on too
// (BENCHMARKS.md).
const armDelay = 30 * time.Millisecond

func startHashWatches(c *Client) *hashWatches {
	w := &hashWatches{c: c, byHash: make(map[string]hashWatch)}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	return w
}

// close stops every watch and waits for them.
func (w *hashWatches) close() {
	w.cancel()
	w.mu.Lock()
	w.closed = true
	if w.armer != nil {
		w.armer.Stop()
	}
	for hash, hw := range w.byHash {
		hw.end()
		delete(w.byHash, hash)
	}
	w.mu.Unlock()
	w.wg.Wait()
}

// end stops the hash's watch, if it runs. The caller holds
// hashWatches.mu.
func (hw hashWatch) end() {
	if hw.stop != nil {
		close(hw.stop)
	}
}

// held notes that the client's first hold on hash started: its watch
// starts armDelay later if the hash is still held then. A timer rather
// than a goroutine that sleeps: a short hold then costs no goroutine
// (which, measured, cost an uncontended Lock+Unlock about 60 µs on 2
// cores).
func (w *hashWatches) held(hash string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.byHash[hash]; ok || w.closed || w.c.watcher.get() == nil {
		return
	}
	w.byHash[hash] = hashWatch{since: time.Now()}
	if !w.arming {
		w.setArmer(armDelay)
	}
}

// setArmer sets the armer to fire after d. The caller holds mu.
func (w *hashWatches) setArmer(d time.Duration) {
	w.arming = true
	if w.armer == nil {
		w.armer = time.AfterFunc(d, w.startDue)
		return
	}
	w.armer.Reset(d)
}

// startDue starts the watch of every hash held armDelay or longer, and
// sets the armer for the next one to come due, if any.
func (w *hashWatches) startDue() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.arming = false
	kw := w.c.watcher.get()
	if w.closed || kw == nil {
		return
	}
	now := time.Now()
	var next time.Duration
	for hash, hw := range w.byHash {
		if hw.stop != nil {
			continue
		}
		if wait := armDelay - now.Sub(hw.since); wait > 0 {
			if next == 0 || wait < next {
				next = wait
			}
			continue
		}
		hw.stop = make(chan struct{})
		w.byHash[hash] = hw
		w.wg.Add(1)
		go w.watch(kw, hash, hw.stop)
	}
	if next > 0 {
		w.setArmer(next)
	}
}

// released stops the hash's watch: the client's last hold on it ended.
func (w *hashWatches) released(hash string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if hw, ok := w.byHash[hash]; ok {
		hw.end()
		delete(w.byHash, hash)
	}
}

// watch keeps one notification armed on hash until stop, and checks the
// client's holds on it after each. It re-arms before checking, so that a
// change after the check is seen. A backend that cannot watch keys ends it
// for good (keyWatcher); other errors are retried with back-off.
func (w *hashWatches) watch(kw backend.KeyWatcher, hash string, stop <-chan struct{}) {
	defer w.wg.Done()
	retry := newRetrier(stop)
	var sub *backend.Subscription
	defer func() {
		if sub != nil {
			sub.Close()
		}
	}()
	// The first arming checks too: the hash may have been deleted and
	// taken by someone else before the watch was armed, which a watch of
	// an existing key never reports.
	for changed := true; ; {
		next, err := w.arm(kw, hash)
		if sub != nil {
			sub.Close()
			sub = nil
		}
		if w.c.watcher.noteErr(err) {
			return
		}
		if err != nil {
			if retry.pause(w.ctx, err) != nil {
				return
			}
			changed = true // the hash went unwatched for a while
			continue
		}
		sub = next
		if changed && !w.c.dog.checkHolds(w.c.holds.on(hash)) {
			// Unanswered: check again after a back-off, re-armed.
			if retry.pause(w.ctx, errCheckUnanswered) != nil {
				return
			}
			continue
		}
		retry.b.Reset()
		select {
		case <-sub.Events():
			changed = true
		case <-stop:
			return
		}
		select {
		case <-stop: // the change was likely the client's own unlock
			return
		default:
		}
	}
}

// errCheckUnanswered is what a watch's back-off waits out: a check of
// the holds the server did not answer.
var errCheckUnanswered = errors.New("lock: hold check unanswered")

// arm watches hash once, bounded by watchTimeout.
func (w *hashWatches) arm(kw backend.KeyWatcher, hash string) (*backend.Subscription, error) {
	ctx, cancel := context.WithTimeout(w.ctx, watchTimeout)
	defer cancel()
	return kw.WatchKey(ctx, hash)
}
