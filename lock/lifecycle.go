package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fairlock/fairlock/lock/internal/wire"
)

// owner is one owner's lifecycle on one lock: what the client knows of
// the state the server keeps for that owner, and the only type that
// changes it. Every Mutex of a Client with the same lock name and owner ID
// shares one owner, as they are one owner to the server. The transitions
// are the methods below; each takes a decoded reply or event and says
// what the caller does next. They do no I/O: the callers (attempt.go,
// unlock.go, extend.go, watchdog.go) send the scripts, each through the
// owner's gate (withGate), and feed the replies back.
//
//	          attempt queued                 grant (reply or message)
//	idle ─────────────────────▶ queued ──────────────────────────────▶ held
//	 ▲                            │                                    │ ▲ re-entry, renewal,
//	 └──── leave (gave up) ───────┘                                    │ └ release with counts left
//	 └──────────── last release, loss, deadline passed, Close ────────┘
//
// A hold taken from a hand-over message is held but unconfirmed until a
// renewal takes the grant up on the server; a hold with an Unlock in
// flight is releasing: renewals only check it, and a check that finds it
// gone does not end it (the Unlock decides). Each hold ends once, and its
// Hold's Done then closes; the owner is idle again (or still queued, when
// another of its calls waits).
type owner struct {
	key   string
	gate  chan struct{} // one script that changes the hold at a time
	onEnd holdEnder     // told after a hold ended, outside mu

	mu sync.Mutex
	// The live hold (nil: none) and what the client knows of it.
	hold        *Hold
	count       int
	lease       time.Duration // the longest lease any of its acquisitions asked for
	watchdog    bool          // renewed by the watchdog until it ends
	unconfirmed bool          // a hand-over grant the server has not seen taken up
	releases    int           // Unlock calls in flight: they decide its end
	deadline    time.Time     // when the hold ends unless acknowledged again
	timer       *time.Timer   // fires at deadline
	// lastSpent is the highest token of a grant the owner has taken up or
	// given back: tokens only grow, so a grant message at or below it is
	// stale.
	lastSpent int64
	// queued: an attempt of one of the owner's calls queued it (or may
	// have: its outcome is unknown), and no grant or leave has taken it
	// out since; the owner's last waiting call leaves the queue then.
	queued  bool
	waiting int // calls queued (or about to be) for this owner
	// abandoned: those of them whose caller returned without them; they
	// end in the background and hold the owner's entry for nobody.
	abandoned int
	// grantMayWait: an attempt of unknown outcome may have left the owner
	// a grant the client has not taken up, for another of its waiting
	// calls (undo); until a reply settles the owner's state on the
	// server, its attempts say they may have run before (mayHaveRun).
	grantMayWait bool
	// leaveUnsettled: a leave that did not settle may reach the server
	// until then; the owner queues again only after (awaitLeaves).
	leaveUnsettled time.Time
}

// holdEnder is told when a hold of an owner ended: the Mutex that made
// the owner (an interface rather than a func, which would cost an
// allocation per owner). grant says the hold was a hand-over grant the
// server had not seen taken up; lease is the longest lease it was held
// with.
type holdEnder interface {
	holdEnded(h *Hold, err error, grant bool, lease time.Duration)
}

// init sets up a zero owner in place (the registry keeps owners in its
// entries).
func (o *owner) init(key string, onEnd holdEnder) {
	o.key, o.gate, o.onEnd = key, make(chan struct{}, 1), onEnd
}

// withGate runs work in the owner's gate, one script that changes the hold
// at a time, its reply applied before the next is sent. It returns work's
// error, or ctx's when ctx ends before the gate is free.
func (o *owner) withGate(ctx context.Context, work func() error) error {
	select {
	case o.gate <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-o.gate }()
	return work()
}

// gateHeld reports whether a call is in the owner's gate now.
func (o *owner) gateHeld() bool { return len(o.gate) > 0 }

// current returns the live hold, or nil.
func (o *owner) current() *Hold {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.hold
}

// view is the live hold as the scripts compare it (zero: none).
func (o *owner) view() wire.View {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.viewLocked()
}

// attemptView is what an acquire attempt sends of the owner: the live
// hold's view and its own lease (0: none), and the highest token spent.
func (o *owner) attemptView() (view wire.View, lease time.Duration, spent int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.hold == nil {
		return wire.View{}, 0, o.lastSpent
	}
	return o.viewLocked(), o.lease, o.lastSpent
}

func (o *owner) viewLocked() wire.View {
	if o.hold == nil {
		return wire.View{}
	}
	return wire.View{Token: o.hold.token, Count: o.count}
}

// spendLocked records token as spent (see lastSpent).
func (o *owner) spendLocked(token int64) { o.lastSpent = max(o.lastSpent, token) }

// --- grants

// granted applies an acquire reply that granted the lock, for a request
// sent at sent with the view sentView: the live hold re-entered, or a new
// hold. A new hold whose deadline has passed already (a reply slower than
// its lease) is no hold. errEndedReentry says the reply re-entered the
// hold sentView names, which has ended since: the caller gives every
// count of it back.
func (o *owner) granted(r wire.AcquireReply, sent time.Time, sentView wire.View, lease time.Duration, watchdog bool) (*Hold, error) {
	o.mu.Lock()
	if o.hold != nil && o.hold.token == r.Token {
		o.count = r.Count
		o.grantMayWait = false
		o.unconfirmed = false // acquire.lua takes a grant up when it re-enters it
		o.watchdog = o.watchdog || watchdog
		o.lease = max(o.lease, lease)
		o.extendLocked(sent, lease)
		h := o.hold
		o.mu.Unlock()
		return h, nil
	}
	var replaced *Hold
	var why error
	grant, held := o.unconfirmed, o.lease
	if o.hold != nil {
		// The server replaced it (it had ended there: lease ran out or
		// forced), so the client's hold was already lost.
		why = errHoldGone
		replaced = o.endLocked(why)
	}
	o.mu.Unlock()
	if replaced != nil {
		o.onEnd.holdEnded(replaced, why, grant, held)
	}
	if sentView.Token != 0 && sentView.Token == r.Token {
		return nil, errEndedReentry
	}
	return o.start(r.Token, r.Count, sent, lease, lease, watchdog, false)
}

// gone applies an acquire reply saying the hold the request named
// (sentView) is gone from the server - its lease ran out, or it was
// forced or deleted - and nothing was granted: that hold, if still live,
// ends as lost, and the caller asks again naming none.
func (o *owner) gone(sentView wire.View) {
	o.mu.Lock()
	if o.hold == nil || o.hold.token != sentView.Token {
		o.mu.Unlock()
		return
	}
	o.finish(errHoldGone)
}

// spentGrant reports whether an acquire reply granting token, which is
// not the live hold's, grants a hold the owner has taken up or given back
// already (lastSpent): one the client has ended since.
func (o *owner) spentGrant(token int64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return (o.hold == nil || o.hold.token != token) && token <= o.lastSpent
}

// errHoldGone: an acquire call found the hold it named gone from the
// server.
var errHoldGone = fmt.Errorf("%w: the server no longer had it when this owner acquired again", ErrLockLost)

// errEndedReentry: a re-entry's reply for a hold that ended while it was
// on its way.
var errEndedReentry = fmt.Errorf("%w: the hold this call re-entered ended while the re-entry was on its way; given back", ErrLockLost)

// adopt takes up a hand-over grant of token announced on the owner's
// channel (one message, no round trip), which ran after the attempt sent
// at lastAck and lasts at least firm from it. It returns nil - and the
// caller attempts as usual - when the owner holds already, the grant is
// spent, or too little of firm is left to trust it (an attempt then takes
// it up with a fresh acknowledgement), or an attempt of unknown outcome may
// have taken it up and been granted a hold in its place (grantMayWait).
func (o *owner) adopt(token int64, lastAck time.Time, firm, lease time.Duration, watchdog bool) *Hold {
	o.mu.Lock()
	stale := o.hold != nil || token <= o.lastSpent || o.grantMayWait || time.Until(lastAck.Add(firm)) < firm/3
	o.mu.Unlock()
	if stale {
		return nil
	}
	h, err := o.start(token, 1, lastAck, firm, lease, watchdog, true)
	if err != nil {
		return nil
	}
	return h
}

// start begins a new hold of token, granted by a request sent at sent:
// the server keeps it at least until sent+firm. It is no hold when that
// has passed already.
func (o *owner) start(token int64, count int, sent time.Time, firm, lease time.Duration, watchdog, unconfirmed bool) (*Hold, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.spendLocked(token)
	deadline := sent.Add(firm - leaseGuard(firm))
	now := time.Now()
	if !now.Before(deadline) {
		return nil, fmt.Errorf("%w: granted after its lease (%v) had run out; given back", ErrLockLost, lease)
	}
	// The hold counts from now, when the grant reached the client, not from
	// sent: for a hand-over grant that is the attempt that queued the
	// owner, the whole wait before it.
	h := &Hold{token: token, acquired: now, asked: sent, done: make(chan struct{})}
	o.hold, o.count, o.lease, o.watchdog, o.unconfirmed, o.releases = h, count, lease, watchdog, unconfirmed, 0
	o.deadline = deadline
	o.timer = time.AfterFunc(time.Until(deadline), func() { o.expire(h) })
	o.queued = false // the grant took the owner out of the queue
	o.grantMayWait = false
	return h, nil
}

// extendLocked moves the deadline to sent+lease (less the guard) when that
// is later: the server's expiry never moves back while held, so the
// latest acknowledgement bounds it.
func (o *owner) extendLocked(sent time.Time, lease time.Duration) {
	if d := sent.Add(lease - leaseGuard(lease)); o.hold != nil && d.After(o.deadline) {
		o.deadline = d
		o.timer.Reset(time.Until(d))
	}
}

// --- renewals (the watchdog, a confirmation) and Extend

// renewal returns the renew.lua call for h, which must be the live hold:
// the lease to renew to (0: only check, for a hold with an explicit lease
// or one being released - a lock never outlives its Unlock call by more
// than a lease), its token and its own lease.
func (o *owner) renewal(h *Hold) (wire.Renew, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if h == nil || o.hold != h {
		return wire.Renew{}, false
	}
	call := wire.Renew{Token: h.token, HoldLease: o.lease}
	if (o.watchdog || o.unconfirmed) && o.releases == 0 {
		call.Lease = o.lease
	}
	return call, true
}

// renewed applies renew.lua's reply to call, sent at sent for h. A hold
// the server no longer has is lost - unless an Unlock is in flight, which
// may have released it and decides. It reports whether h still lasts.
func (o *owner) renewed(h *Hold, call wire.Renew, got wire.RenewReply, sent time.Time) bool {
	o.mu.Lock()
	if o.hold != h {
		o.mu.Unlock()
		return false
	}
	if got == wire.RenewLost {
		if o.releases > 0 {
			o.mu.Unlock()
			return true
		}
		o.finish(fmt.Errorf("%w: no longer held (lease ran out, force-unlocked or deleted)", ErrLockLost))
		return false
	}
	if credit := got.Credit(call); credit > 0 {
		o.unconfirmed = false
		o.extendLocked(sent, credit)
	}
	o.mu.Unlock()
	return true
}

// extension returns the view Extend sends for h, or why h cannot be
// extended: it has ended, it is not this owner's live hold, or the
// watchdog renews it.
func (o *owner) extension(h *Hold) (wire.Renew, wire.View, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch err := h.Err(); {
	case errors.Is(err, ErrReleased):
		return wire.Renew{}, wire.View{}, fmt.Errorf("%w: %w", ErrNotHeld, err)
	case err != nil:
		return wire.Renew{}, wire.View{}, err
	case o.hold != h:
		return wire.Renew{}, wire.View{}, fmt.Errorf("%w: the hold is another owner's", ErrNotHeld)
	case o.watchdog:
		return wire.Renew{}, wire.View{}, fmt.Errorf("%w: the hold is renewed by the watchdog; Extend applies to holds with a fixed lease", ErrInvalidArgument)
	}
	return wire.Renew{Token: h.token, HoldLease: o.lease}, o.viewLocked(), nil
}

// --- releases

// releasing marks an Unlock in flight and returns what it releases: the
// live hold (nil: none the client knows), its view, and its lease (def
// when there is none).
func (o *owner) releasing(def time.Duration) (*Hold, wire.View, time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.hold == nil {
		return nil, wire.View{}, def
	}
	o.releases++
	return o.hold, o.viewLocked(), o.lease
}

// released applies unlock.lua's answer for h (nil: none known), sent at
// sent: left counts remain (0: released; -1: the owner did not hold the
// lock), or err (the Unlock failed: the hold ends, so nothing renews a
// lock the client may have released or not, and it frees itself within
// the lease). It reports whether this release ended h.
func (o *owner) released(h *Hold, left int, sent time.Time, err error) bool {
	if h == nil {
		return false
	}
	o.mu.Lock()
	if o.hold != h { // ended meanwhile (its releases count went with it)
		o.mu.Unlock()
		return false
	}
	o.releases--
	var why error
	switch {
	case err != nil:
		why = fmt.Errorf("%w: unlock failed (%v); no longer renewed, it frees itself within the lease", ErrLockLost, err)
	case left < 0:
		why = fmt.Errorf("%w: not held when unlocking (lease ran out, force-unlocked or deleted)", ErrLockLost)
	case left == 0:
		why = ErrReleased
	default:
		o.count = left
		o.extendLocked(sent, o.lease)
		o.mu.Unlock()
		return false
	}
	o.finish(why)
	return true
}

// --- endings

// expire runs when h's deadline timer fires.
func (o *owner) expire(h *Hold) {
	o.mu.Lock()
	if o.hold != h {
		o.mu.Unlock()
		return
	}
	if left := time.Until(o.deadline); left > 0 { // extended while the timer fired
		o.timer.Reset(left)
		o.mu.Unlock()
		return
	}
	o.finish(fmt.Errorf("%w: no grant or renewal acknowledged within the lease (%v)", ErrLockLost, o.lease))
}

// end ends h, if it is the live hold, with err, and reports whether it did.
func (o *owner) end(h *Hold, err error) bool {
	o.mu.Lock()
	if h == nil || o.hold != h {
		o.mu.Unlock()
		return false
	}
	o.finish(err)
	return true
}

// endLive ends the live hold, if any, with err.
func (o *owner) endLive(err error) {
	o.end(o.current(), err)
}

// finish ends the live hold with err, unlocks mu (which the caller
// holds) and tells onEnd.
func (o *owner) finish(err error) {
	grant, lease := o.unconfirmed, o.lease
	h := o.endLocked(err)
	o.mu.Unlock()
	if h != nil {
		o.onEnd.holdEnded(h, err, grant, lease)
	}
}

// endLocked ends the live hold with err and returns it (nil: none). The
// caller tells onEnd after unlocking.
func (o *owner) endLocked(err error) *Hold {
	h := o.hold
	if h == nil {
		return nil
	}
	h.err = err
	close(h.done)
	o.timer.Stop()
	o.hold, o.count, o.unconfirmed, o.releases = nil, 0, false, 0
	return h
}
