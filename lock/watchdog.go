package lock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock/internal/wire"
)

// job is one background goroutine of the Client, with its own start and
// close: it runs until stop is closed, and close waits for it to return.
type job struct {
	stop chan struct{}
	done chan struct{}
}

// startJob runs run in a goroutine.
func startJob(run func(stop <-chan struct{})) *job {
	j := &job{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(j.done)
		run(j.stop)
	}()
	return j
}

// close stops the job and waits for it.
func (j *job) close() {
	close(j.stop)
	<-j.done
}

// watchdog is the client's single renewal loop (B6). Every third of the
// lease it renews all watchdog holds and checks that explicit-lease holds
// still exist, in one pipelined batch, and ends the holds the server no
// longer has (X7). A hold whose renewals fail ends by its own deadline
// (lifecycle.go, X12); the watchdog never infers a loss from the time.
//
// When the subscription connection reconnects (reconnects), the server
// may have come back without its data, so every hold is checked at once,
// and again with back-off until the server answers, rather than at the
// next tick. A hold taken from a hand-over message is confirmed beside
// the loop (confirm).
type watchdog struct {
	c        *Client
	recheck  chan struct{}   // a reconnect: check every hold now
	ctx      context.Context // bounds its calls; cancelled by close
	cancel   context.CancelFunc
	confirms sync.WaitGroup
	loop     *job
}

func startWatchdog(c *Client) *watchdog {
	w := &watchdog{c: c, recheck: make(chan struct{}, 1)}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.loop = startJob(w.run)
	return w
}

// close stops the loop and the confirmations, and waits for them.
func (w *watchdog) close() {
	w.cancel()
	w.loop.close()
	w.confirms.Wait()
}

// reconnected asks for a check of every hold now.
func (w *watchdog) reconnected() {
	select {
	case w.recheck <- struct{}{}:
	default: // a recheck is pending already
	}
}

func (w *watchdog) run(stop <-chan struct{}) {
	t := time.NewTicker(w.c.cfg.lease / 3)
	defer t.Stop()
	recheck := newRetrier(stop)
	rechecking := time.NewTimer(time.Hour)
	rechecking.Stop()
	defer rechecking.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			w.renewAll(w.renewTimeout())
		case <-w.recheck:
			recheck.b.Reset()
			rechecking.Reset(0)
		case <-rechecking.C:
			if !w.renewAll(recheckTimeout) {
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
func (w *watchdog) renewTimeout() time.Duration {
	return min(w.c.cfg.lease/3, recheckTimeout)
}

// reconnectTimeout bounds one try to subscribe to the client's channel.
const reconnectTimeout = 5 * time.Second

// reconnects is the client's listener on its own channel (one per
// client): it subscribes as the client starts, so that the client hears
// of its holds from the first one on, and passes the subscription
// connection's reconnect events on to the watchdog, and the scripts'
// notices that someone else force-unlocked or deleted one of the client's
// holds (tell_evicted) to that hold, which ends at once (a notice for a
// hold whose grant is still on its way is kept for it: reconnects.evicted).
// Holds that started before the subscription was confirmed are checked
// once it is, since a notice sent before then reached nobody. It runs
// beside the watchdog so that a slow subscription never delays renewals.
type reconnects struct {
	c       *Client
	refused atomic.Pointer[error] // the server refused the channel (NOPERM)
	dog     *watchdog
	ctx     context.Context
	stop    context.CancelFunc
	loop    *job
	tried   chan struct{} // closed when the first Subscribe has returned
	once    sync.Once     // closes tried
}

func startReconnects(c *Client, dog *watchdog) *reconnects {
	r := &reconnects{c: c, dog: dog, tried: make(chan struct{})}
	r.ctx, r.stop = context.WithCancel(context.Background())
	r.loop = startJob(r.run)
	return r
}

// close stops the listener and waits for it.
func (r *reconnects) close() {
	r.stop()
	r.loop.close()
}

func (r *reconnects) run(stop <-chan struct{}) {
	sub := r.subscribe(stop)
	if sub == nil {
		return
	}
	defer sub.Close()
	// Notices sent before the subscription reached nobody (subscribe has
	// marked them missed); a server that restarted meanwhile shows no
	// reconnect either.
	if len(r.c.holds.live()) > 0 {
		r.dog.reconnected()
	}
	for {
		select {
		case e := <-sub.Events():
			if e.Reconnect {
				// Before the re-check: a grant on its way, tracked after
				// it, is checked as it is tracked (holdIndex.track).
				r.c.holds.noticesMissed()
				r.dog.reconnected()
				r.recheckMemory()
				continue
			}
			if msg := wire.ParseMessage(e.Payload); msg.Kind == wire.Lost {
				r.evicted(msg.Key, msg.Token)
			}
		case <-stop:
			return
		}
	}
}

// subscribe subscribes to the client's channel, retrying any transient
// error until the listener stops (nil then). The server's refusal
// (NOPERM: the user may not subscribe to fairlock_client:*) is not
// retried: the client records it, and its acquires fail with it from then
// on (refused).
func (r *reconnects) subscribe(stop <-chan struct{}) *backend.Subscription {
	retry := newRetrier(stop)
	for {
		ctx, cancel := context.WithTimeout(r.ctx, reconnectTimeout)
		sub, err := r.c.b.Subscribe(ctx, wire.ClientChannelPrefix+r.c.id)
		cancel()
		if err == nil {
			// Before NewClient goes on (triedOnce): only a grant asked
			// for before the subscription was confirmed may have had
			// its notice sent to nobody, and is checked as it is
			// tracked (holdIndex.track).
			r.c.holds.noticesMissed()
		}
		r.triedOnce()
		if err == nil {
			return sub
		}
		if !transient(err) && r.ctx.Err() == nil {
			err = fmt.Errorf("lock: the client cannot listen on its channel %s%s, where it hears that its holds were force-unlocked and of reconnects: %w", wire.ClientChannelPrefix, r.c.id, err)
			r.refused.Store(&err)
			return nil
		}
		if retry.pause(r.ctx, err) != nil {
			return nil
		}
	}
}

// triedOnce marks the first Subscribe as returned.
func (r *reconnects) triedOnce() { r.once.Do(func() { close(r.tried) }) }

// awaitFirst waits, at most d, for the first Subscribe to return: a new
// client's first calls then do not open their connections while its
// subscription connection is being opened (go-redis' cluster client races
// with itself there, under the race detector).
func (r *reconnects) awaitFirst(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.tried:
	case <-t.C:
	}
}

// evicted ends the hold of token on the lock whose hash is hash: someone
// else force-unlocked or deleted it. The hold index keeps a notice for a
// hold it does not have yet, for the grant on its way.
func (r *reconnects) evicted(hash string, token int64) {
	if h, o := r.c.holds.evicted(hash, token); h != nil {
		o.end(h, errEvicted(false))
	}
}

// recheckMemory reads the server's memory policy again beside the
// listener, in a goroutine the client's lifetime counts (nothing once the
// client is closed): a server that came back may evict now. Not with
// WithEvictionRisk.
func (r *reconnects) recheckMemory() {
	if r.c.cfg.evictionRisk {
		return
	}
	r.c.life.spawn(func() { r.c.memory.reread(r.ctx, r.c.b, r.c.scripts) })
}

// err returns the server's refusal of the client's channel, if any.
func (r *reconnects) err() error {
	if e := r.refused.Load(); e != nil {
		return *e
	}
	return nil
}

// renewal is one hold's renewal in a batch.
type renewal struct {
	h    *Hold
	m    *Mutex
	o    *owner
	call wire.Renew // lease 0: only checked
}

// confirm renews h at the instant at, or when the hold ends first not at
// all, beside the watchdog's loop (which may be busy with a batch): a
// hand-over grant lasts only about a waiter timeout until renewed
// (adopt). Most holds taken over in contention end before at, and so
// never cost a renewal. close waits for it. The caller has tracked h, so
// the client is not closed yet.
func (w *watchdog) confirm(h *Hold, at time.Time) {
	w.confirms.Add(1)
	go func() {
		defer w.confirms.Done()
		t := time.NewTimer(time.Until(at))
		defer t.Stop()
		select {
		case <-t.C:
		case <-h.Done():
			return
		case <-w.ctx.Done():
			return
		}
		// Until the server answers (or the hold ends by its deadline).
		hctx, cancel := h.Context(w.ctx)
		defer cancel()
		retry := newRetrier(w.ctx.Done())
		for !w.renewHolds([]*Hold{h}, w.renewTimeout()) {
			if retry.pause(hctx, ErrLockLost) != nil {
				return
			}
		}
	}()
}

// renewAll renews (or checks) every hold in one batch bounded by timeout,
// and reports whether the server answered (or there was nothing to send).
func (w *watchdog) renewAll(timeout time.Duration) bool {
	return w.renewHolds(w.c.holds.live(), timeout)
}

// checkHolds checks that the holds still exist, renewing none, in one
// batch (hashWatches, after their hash changed).
func (w *watchdog) checkHolds(hs []*Hold) bool {
	return w.batch(hs, recheckTimeout, false)
}

// renewHolds renews (or checks) the holds in one batch bounded by timeout,
// and reports whether the server answered (or there was nothing to send).
func (w *watchdog) renewHolds(hs []*Hold, timeout time.Duration) bool {
	return w.batch(hs, timeout, true)
}

// batch renews the holds that renew (with renew; else it only checks
// them), and checks the others, in one pipelined batch bounded by timeout.
// It reports whether the server answered (or there was nothing to send).
func (w *watchdog) batch(hs []*Hold, timeout time.Duration, renew bool) bool {
	batch, calls := w.renewals(hs, renew)
	if len(calls) == 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(w.ctx, timeout)
	defer cancel()
	sent := time.Now()
	results := w.c.b.EvalBatch(ctx, calls)
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
		w.renewed(r, sent, got, err)
		answered = answered || err == nil
	}
	return answered
}

// renewals returns the renewal (with renew; else the check) of each of hs
// that is still a live hold of the client, and its call.
func (w *watchdog) renewals(hs []*Hold, renew bool) ([]renewal, []backend.Call) {
	batch := make([]renewal, 0, len(hs))
	calls := make([]backend.Call, 0, len(hs))
	for _, h := range hs {
		ref, tracked := w.c.holds.ref(h)
		if !tracked {
			continue
		}
		call, ok := ref.o.renewal(h)
		if !ok {
			continue
		}
		if !renew {
			call.Lease = 0
		}
		call.Owner, call.Wake = ref.m.field, ref.m.wake()
		batch = append(batch, renewal{h: h, m: ref.m, o: ref.o, call: call})
		calls = append(calls, call.Call(w.c.scripts, ref.m.keys))
	}
	return batch, calls
}

func (w *watchdog) renewed(r renewal, sent time.Time, got wire.RenewReply, err error) {
	if err == nil {
		r.o.renewed(r.h, r.call, got, sent)
	}
	if obs := w.c.cfg.observer; r.call.Lease > 0 && obs != nil {
		obs.Renewed(r.m.call(""), err)
	}
}
