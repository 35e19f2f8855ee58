package soak

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fairlock/fairlock/lock"
)

// Bounds are the limits the checkers hold a history to. They are stated
// in RULES.md; the soak's are wider than the figures RELIABILITY.md
// measures, since a soak runs with the race detector on a loaded machine.
type Bounds struct {
	// Notice bounds how long after another owner's hold-ending call
	// (ForceUnlock, Delete, a DEL by hand, Redisson's forceUnlock)
	// returned a holder's Done may stay open, when the holder's client
	// watches keys or the end was sent through fairlock's scripts: RULES
	// X16 promises under 50 ms; the soak allows 250 ms (the race detector,
	// two cores), more by twice the lateness the process measured then.
	// Tight enough that a loss noticed only when the next holder's writes
	// fire the watch (issue 37 defect 1) shows.
	Notice time.Duration
	// Tick bounds the same for a DEL by hand or a Redisson forceUnlock
	// seen by a client that watches no keys: the watchdog's tick, a
	// third of the lease, plus Notice.
	Tick time.Duration
	// Return is the slack a call may take past its deadline.
	Return time.Duration
	// Close bounds Client.Close: lock's own bound (RULES.md B6), 14.5 s
	// whatever the server does - the calls in flight awaited 7.5 s (an
	// acquire's attempt, then its cleanup: X5), the description 2 s, the
	// backend's close 5 s. (It was 5 s, shorter than what Close waits for
	// by design: Closes begun in a server pause took 6.2-6.4 s, issue 46.)
	Close time.Duration
	// Free bounds how long a lock stays free - nobody has been told it
	// holds it - while a live Go waiter waits for it, with no fault
	// near: a head whose wake-up went astray attempts again within a
	// third of the waiter timeout (its heartbeat), plus Notice.
	Free time.Duration
	// FreeFault is the same bound with a fault near: a head that cannot
	// be reached is handed the lock and holds that grant for at most
	// twice the waiter timeout before the next waiter's heartbeat finds
	// it dead, plus Free.
	FreeFault time.Duration
	// Lease is the Go clients' lease the bounds are made for (Tick's
	// third); on a cluster, how long after a failover's end a grant it
	// forgot may still show (the documented exceptions).
	Lease time.Duration
}

// DefaultBounds are the soak's bounds for a client lease.
func DefaultBounds(lease time.Duration) Bounds {
	const waiterTimeout = 5 * time.Second // lock's default, which the soak keeps
	free := waiterTimeout/3 + time.Second
	return Bounds{Notice: 250 * time.Millisecond, Tick: lease/3 + time.Second, Return: 300 * time.Millisecond, Close: 14500 * time.Millisecond,
		Free: free, FreeFault: 2*waiterTimeout + free, Lease: lease}
}

// Violation is one broken promise.
type Violation struct {
	Check string        // the checker's name
	Lock  string        // the lock it concerns ("" for none)
	At    time.Duration // when it shows in the history
	Text  string
	Ops   []int // the operations involved
}

func (v Violation) String() string {
	return fmt.Sprintf("%s at %s on %q: %s", v.Check, ms(v.At), v.Lock, v.Text)
}

// Latency is one measured notice: how long after a hold-ending call
// returned its holder's Done closed.
type Latency struct {
	Kind    Kind
	Client  string
	Watches bool
	D       time.Duration
}

// Report is what the checkers found.
type Report struct {
	Violations []Violation
	Notices    []Latency
	// Visual holds porcupine's visualisation (HTML) of each lock whose
	// history is not linearizable.
	Visual map[string][]byte
}

// Check runs every checker over h.
func Check(h *History, b Bounds) Report {
	ops, holds, faults := h.Ops(), h.Holds(), h.Faults()
	// A burst of notices cuts nobody off: the client's subscription
	// summarises what it queued as a "re-check everything", so its
	// holders are still told in time. A reply lost or a request held back
	// neither makes a waiter look dead nor reorders a queue.
	told := keepFaults(faults, func(k FaultKind) bool { return k != FaultNoticeBurst })
	ordered := keepFaults(faults, func(k FaultKind) bool { return !k.messageLevel() })
	var r Report
	r.Violations = append(r.Violations, checkTokens(ops)...)
	stalls := h.Stalls()
	r.Violations = append(r.Violations, checkExclusion(ops, holds, told, stalls, b)...)
	v, lat := checkNotices(ops, holds, told, stalls, b)
	r.Violations = append(r.Violations, v...)
	r.Notices = lat
	r.Violations = append(r.Violations, checkErrors(ops, faults, h.Stalls())...)
	r.Violations = append(r.Violations, checkBusy(ops, holds, faults, b)...)
	r.Violations = append(r.Violations, checkReturns(ops, h.Stalls(), b)...)
	r.Violations = append(r.Violations, checkFIFO(ops, ordered, faults, lostGrants(faults))...)
	r.Violations = append(r.Violations, checkFree(ops, holds, faults, h.Stalls(), b)...)
	lin, visual := checkLinearizable(ops, holds, b)
	r.Violations = append(r.Violations, lin...)
	r.Visual = visual
	sort.SliceStable(r.Violations, func(i, j int) bool { return r.Violations[i].At < r.Violations[j].At })
	return r
}

// checkTokens: on one lock, a new hold whose acquire was called after
// another's returned has a larger fencing token, and no two holds share
// one (mutual exclusion with fencing, in real-time order).
func checkTokens(ops []*Op) []Violation {
	var out []Violation
	byLock := map[string][]*Op{}
	for _, op := range ops {
		if op.Kind.acquire() && !op.Java && op.Hold != nil && op.New {
			byLock[op.Lock] = append(byLock[op.Lock], op)
		}
	}
	for name, acq := range byLock {
		seen := map[int64]*Op{}
		for _, a := range acq {
			if prev, dup := seen[a.Hold.Token]; dup {
				out = append(out, Violation{"tokens", name, a.Return, fmt.Sprintf("token %d granted twice: %v and %v", a.Hold.Token, prev, a), []int{prev.ID, a.ID}})
			}
			seen[a.Hold.Token] = a
		}
		for _, a := range acq {
			for _, b := range acq {
				if a.Return < b.Call && a.Hold.Token >= b.Hold.Token {
					out = append(out, Violation{"tokens", name, b.Return, fmt.Sprintf("token went backwards: %v then %v", a, b), []int{a.ID, b.ID}})
				}
			}
		}
	}
	return out
}

// checkExclusion: when an owner's acquire of a new hold returns, every
// earlier hold of another Go owner on that lock has ended (Done closed or
// its Unlock called) or ends within the notice bound: two owners never
// believe they hold at once beyond the time the holder needs to be told.
// A Java hold is held until its unlock is called or its lease has passed
// or something ended it.
func checkExclusion(ops []*Op, holds []*Hold, faults []Fault, stalls []Stall, b Bounds) []Violation {
	var out []Violation
	byLock := map[string][]*Hold{} // by grant time, as Holds returns them
	for _, h := range holds {
		byLock[h.Lock] = append(byLock[h.Lock], h)
	}
	granted := map[*Hold]*Op{}
	for _, a := range ops {
		if a.Kind.acquire() && a.Hold != nil && a.New {
			granted[a.Hold] = a
		}
	}
	for _, a := range ops {
		if !a.Kind.acquire() || a.Hold == nil || !a.New {
			continue
		}
		for _, h := range byLock[a.Lock] {
			if h.Acquired >= a.Return {
				break
			}
			if h == a.Hold || h.Owner == a.Owner {
				continue
			}
			// Two Go holds whose replies came in the other order than
			// their tokens: a was granted first, and h's grant is the
			// later one - a's holder must be told of h in time.
			newer, older := a, h
			if g := granted[h]; g != nil && !a.Java && !h.Java && a.Hold.Token < h.Token {
				newer, older = g, a.Hold
			}
			if v, bad := overlap(ops, faults, stalls, b, newer, older); bad {
				out = append(out, v)
			}
		}
	}
	return out
}

// overlap judges a, a new hold, against h, an earlier hold of another
// owner on the lock: the cheap tests first, the excuses (which read the
// whole history) only for what would be a violation.
func overlap(ops []*Op, faults []Fault, stalls []Stall, b Bounds, a *Op, h *Hold) (Violation, bool) {
	if u := h.Unlocking(); u > 0 && u < a.Return {
		return Violation{}, false
	}
	if h.Java {
		v, bad := javaStillHeld(ops, h, a)
		return v, bad && !(a.Java && javaEndedBefore(ops, a, h.Acquired)) && !deadGrant(ops, stalls, b, a, h.Acquired)
	}
	done, why := h.Done()
	bound := b.Tick // a DEL by hand reaches a client without key watches at the tick
	if h.Watches {
		bound = b.Notice
	}
	if done > 0 && done <= a.Return+bound+lateness(stalls, a.Return-stallNear, done+stallNear) {
		return Violation{}, false // told in time, or as late as the process ran
	}
	if a.Java && javaEndedBefore(ops, a, h.Acquired) || unreachableEnd(ops, faults, h, a.Return, a.Return+bound) {
		return Violation{}, false
	}
	end := "still open at the end of the history"
	if done > 0 {
		end = fmt.Sprintf("closed only %s later (%s)", ms(done-a.Return), why)
	}
	return Violation{"exclusion", a.Lock, a.Return,
		fmt.Sprintf("%v was granted while %v; its Done %s", a, h, end), []int{a.ID}}, true
}

// unreachableEnd reports whether h was ended, by a call before until, that
// publishes nothing to it in time (a DEL by hand, Redisson's forceUnlock
// or delete, or any ending call) while its client or the server had a
// fault before told, when the holder was to be told at the latest: the
// holder cannot be told then (a client watching no keys learns at its
// watchdog's tick, whose renewal a server pause holds up: simulation seed
// 103), and the next owner may be granted the lock before it is (the
// notice check holds such ends to their bounds when no fault is near).
func unreachableEnd(ops []*Op, faults []Fault, h *Hold, until, told time.Duration) bool {
	for _, e := range ops {
		if e.Kind.ends() && e.Lock == h.Lock && e.Call > h.Called && e.Call < until &&
			faultDuring(faults, h.Client, e.Call, told, 100*time.Millisecond) {
			return true
		}
	}
	return false
}

// javaEndedBefore reports whether a, a Java acquire, may have been ended
// before from: its script may run anywhere in [a.Call, a.Return] (a slow
// reply, then lock()'s UNSUBSCRIBE round trip), and a hold-ending call
// that overlapped the acquire and began before from may have removed the
// Java hold first (Redisson learns of that only at its unlock, X16).
func javaEndedBefore(ops []*Op, a *Op, from time.Duration) bool {
	for _, e := range ops {
		if e.Kind.ends() && e.Lock == a.Lock && (e.Released || e.Err != "") && e.Return > a.Call && e.Call < from {
			return true
		}
	}
	return false
}

// deadGrant reports whether a, a Go acquire, was granted a hold that a
// hold-ending call removed before from - the grant of the Java hold a
// overlapped - while a's reply was still on its way (a slow or partitioned
// connection), and whose holder learnt of it within that call's bound
// (noticeBound: a client watching no keys hears of Redisson's forceUnlock
// or a DEL by hand at its watchdog's tick). The notice check does not see
// such a hold: the call ended it before its grant reached its owner. Any
// of the calls that removed a holder in that time may be the one (seed
// 92732624046604 of the simulation: a ForceUnlock removed the hold before
// the grant, and a Redisson forceUnlock 200 ms later the grant, whose
// reply came 834 ms after that).
func deadGrant(ops []*Op, stalls []Stall, b Bounds, a *Op, from time.Duration) bool {
	if a.Java {
		return false
	}
	done, _ := a.Hold.Done()
	if done == 0 {
		return false
	}
	for _, e := range ops {
		if e.Kind.ends() && e.Lock == a.Lock && e.Released && e.Err == "" && e.Call > a.Call && e.Call < from {
			bound := e.Return + noticeBound(e, a.Hold, b)
			if done <= bound+lateness(stalls, e.Return-stallNear, done+stallNear) {
				return true
			}
		}
	}
	return false
}

// javaStillHeld reports a Java hold that a new acquire overlapped: the
// Java owner had not called unlock, its lease had not passed, and no
// hold-ending call on the lock had returned since its grant.
func javaStillHeld(ops []*Op, h *Hold, a *Op) (Violation, bool) {
	if u := h.Unlocking(); u > 0 && u < a.Return {
		return Violation{}, false
	}
	if h.Acquired+h.Lease <= a.Return+50*time.Millisecond {
		return Violation{}, false
	}
	for _, e := range ops {
		if e.Kind.ends() && e.Lock == h.Lock && e.Call < a.Return && e.Return > h.Called {
			return Violation{}, false
		}
	}
	return Violation{"exclusion", a.Lock, a.Return, fmt.Sprintf("%v was granted while Java's %v was held (lease %v)", a, h, h.Lease), []int{a.ID}}, true
}

// checkNotices: every Go hold that a hold-ending call (ForceUnlock,
// Delete, DEL by hand, Redisson forceUnlock) ended has its Done closed
// within the bound for that kind after the call returned; each notice's
// latency is measured.
//
// The first such call on the hold's lock to run after its grant ended
// it, unless it had ended already: later ones did not (they ended the
// holds after it). Any called before the first of them returned may have
// run first, and so may one that failed. A call that overlapped the grant may have ended it
// first, with its own bound: the later of the two deadlines holds, and no
// latency is measured for a hold ended by one of two calls. A hold whose
// Unlock was called before the ending call returned, or whose client or
// server had a fault then, is left out.
func checkNotices(ops []*Op, holds []*Hold, faults []Fault, stalls []Stall, b Bounds) ([]Violation, []Latency) {
	enders := map[string][]*Op{} // by lock, by call (ops are)
	unsure := map[string][]*Op{} // ending calls that failed: they may have run
	for _, e := range ops {
		switch {
		case !e.Kind.ends():
		case e.Err == "" && e.Released:
			enders[e.Lock] = append(enders[e.Lock], e)
		case e.Err != "":
			unsure[e.Lock] = append(unsure[e.Lock], e)
		}
	}
	byLock := map[string][]*Hold{}
	for _, h := range holds {
		byLock[h.Lock] = append(byLock[h.Lock], h)
	}
	var out []Violation
	var lat []Latency
	sole := newSoleHolds(ops, holds, b.Lease)
	for _, h := range holds {
		if h.Java {
			continue
		}
		v, l, ok := noticeOf(h, enders[h.Lock], unsure[h.Lock], byLock[h.Lock], faults, stalls, b, sole)
		switch {
		case !ok:
		case l != nil:
			lat = append(lat, *l)
		default:
			out = append(out, v)
		}
	}
	return out, lat
}

// noticeOf checks how hold h heard that a call of enders (its lock's,
// by call) or of unsure (its lock's ending calls that failed, which may
// have run) ended it: a violation, or the latency when one call alone can
// have ended it; ok false when none of enders is known to have ended it
// or a hold after it while its holder was to be told.
func noticeOf(h *Hold, enders, unsure []*Op, others []*Hold, faults []Fault, stalls []Stall, b Bounds, sole *soleHolds) (Violation, *Latency, bool) {
	i := sort.Search(len(enders), func(i int) bool { return enders[i].Call > h.Acquired })
	next := time.Duration(1 << 62) // the next ending call after the grant
	if i < len(enders) {
		next = enders[i].Call
	}
	// One that failed may have run too (the simulation's seeds
	// 30859714442993 and 30859714442732: an admin ForceUnlock whose reply
	// was lost ended the hold, whose holder was told at once).
	if j := sort.Search(len(unsure), func(j int) bool { return unsure[j].Call > h.Acquired }); j < len(unsure) {
		next = min(next, unsure[j].Call)
	}
	if v, bad := endedInFlight(h, enders[:i], others, next, faults, stalls, b, sole); bad {
		return v, nil, true
	}
	if i == len(enders) {
		return Violation{}, nil, false
	}
	done, why := h.Done()
	if done > 0 && done <= enders[i].Call {
		return Violation{}, nil, false // ended before
	}
	// The first of them to run ended it. Each ran between its call and its
	// return, so any called before the earliest return may have run first
	// (seed 138878139966729 of the simulation: a ForceUnlock delayed on its
	// way by 1.2 s ran after a Redisson forceUnlock called later, which
	// ended h; the ForceUnlock ended the hold after h).
	// A call whose reply was lost (an error) may have run first too
	// (seed 236241331018027: a Redisson forceUnlock whose reply was lost
	// ended h, and a ForceUnlock later the hold after it).
	first, earliest := candidateEnders(enders[i:])
	for _, u := range unsure {
		if u.Call > h.Acquired && u.Call <= earliest {
			first = append(first, u)
		}
	}
	e := enders[i]
	returned := e.Return
	deadline, from, alone := e.Return+noticeBound(e, h, b), e.Call, len(first) == 1
	for _, o := range first {
		returned = max(returned, o.Return)
		if d := o.Return + noticeBound(o, h, b); d > deadline {
			deadline, e = d, o
		}
	}
	if u := h.Unlocking(); u > 0 && u < returned {
		return Violation{}, nil, false
	}
	for _, o := range enders[:i] {
		if o.Return > h.Called { // overlapped the grant: may have ended it
			deadline, from, alone = max(deadline, o.Return+noticeBound(o, h, b)), min(from, o.Call), false
		}
	}
	if faultDuring(faults, h.Client, from, deadline, 0) || restartedBefore(faults, from) {
		return Violation{}, nil, false
	}
	if done > deadline && done <= deadline+lateness(stalls, e.Return-stallNear, done+stallNear) {
		return Violation{}, nil, false // as late as the process itself ran then
	}
	if done == 0 || done > deadline {
		end := "still open at the end of the history"
		if done > 0 {
			end = fmt.Sprintf("closed %s after it returned (%s)", ms(done-e.Return), why)
		}
		return Violation{"notice", e.Lock, deadline,
			fmt.Sprintf("%v ended %v; its Done %s, bound %v", e, h, end, deadline-e.Return), []int{e.ID}}, nil, true
	}
	if !alone {
		return Violation{}, nil, false
	}
	return Violation{}, &Latency{Kind: e.Kind, Client: h.Client, Watches: h.Watches, D: max(done-e.Return, 0)}, true
}

// resubscribe is how long after a server restart a client's
// subscription may still be away: the subscriber redials with back-off,
// doubling to 2 s (backend/pubsub's maxRedial) with up to half again of
// jitter, so its next try can come that long after the server is back. A
// loss notice published meanwhile reaches nobody; the client learns of
// the loss when it has subscribed again and checks its holds.
const resubscribe = 3 * time.Second

// restartedBefore reports whether the server came back from a restart
// within resubscribe before from (the soak, seed 152332695039817: a
// ForceUnlock 70 ms after a 1.2-s restart ended, its holder told 353 ms
// after it returned, when its client had subscribed again).
func restartedBefore(faults []Fault, from time.Duration) bool {
	for _, f := range faults {
		if f.Kind == FaultRestart && f.End <= from && from-f.End <= resubscribe {
			return true
		}
	}
	return false
}

// candidateEnders returns, of later (ending calls by call), those that
// may have run before all the others - each was called before any of
// them returned - and when the first of them returned.
func candidateEnders(later []*Op) ([]*Op, time.Duration) {
	earliest := later[0].Return
	n := 0
	for n < len(later) && later[n].Call <= earliest {
		earliest = min(earliest, later[n].Return)
		n++
	}
	return later[:n:n], earliest
}

// endedInFlight checks h, a hold whose grant overlapped ending calls
// (before, those of its lock called before its grant's reply came back)
// and that ended lost before the next one (called at next) could have
// ended it, with no fault on its client or the server from its call to its
// end: only one of those calls can have ended it, while its grant's reply
// was on its way, and its holder must learn of it within that call's
// bound after the reply came (issue 46 defect 2: a loss notice
// summarised into a burst was lost, and the hold lived on until the
// watchdog's tick). A hold with a lease of its own may have ended by it,
// and one still open at the end of the history tells nothing; nor does a
// call that ended an earlier hold of the lock (endedOther).
func endedInFlight(h *Hold, before []*Op, others []*Hold, next time.Duration, faults []Fault, stalls []Stall, b Bounds, sole *soleHolds) (Violation, bool) {
	done, why := h.Done()
	if done == 0 || done > next || !strings.Contains(why, lostErr) || strings.Contains(why, unlockGaveUp) {
		return Violation{}, false
	}
	var deadline time.Duration
	var by *Op
	for _, o := range before {
		if o.Return > h.Called && !endedOther(o, h, others, b) {
			if d := max(o.Return, h.Acquired) + noticeBound(o, h, b); d > deadline {
				deadline, by = d, o
			}
		}
	}
	if by == nil || done <= deadline+lateness(stalls, h.Acquired-stallNear, done+stallNear) ||
		h.Lease > 0 && !sole.onlyGrant(h, by) {
		return Violation{}, false
	}
	if u := h.Unlocking(); u > 0 && u < deadline || faultDuring(faults, h.Client, h.Called, done, 0) {
		return Violation{}, false
	}
	return Violation{"notice", h.Lock, deadline,
		fmt.Sprintf("%v overlapped the grant of %v, which nothing else ended; its Done closed %s after the grant (%s), bound %v",
			by, h, ms(done-h.Acquired), why, deadline-max(by.Return, h.Acquired)), []int{by.ID}}, true
}

// endedOther reports whether o, a call that removes the lock's holder,
// ended a Go hold of the lock older than h (a lower token): that holder
// was told it was force-unlocked or deleted within o's bound. o removed
// that one holder, and h was granted after it: o did not end h (seed 106
// of the simulation: a ForceUnlock handed the lock to a Redisson thread,
// whose unlock handed it to h while h's Lock was in flight).
func endedOther(o *Op, h *Hold, others []*Hold, b Bounds) bool {
	for _, x := range others {
		if x == h || x.Java || x.Token >= h.Token {
			continue
		}
		done, why := x.Done()
		if done >= o.Call && done <= o.Return+noticeBound(o, x, b) && strings.Contains(why, forcedErr) {
			return true
		}
	}
	return false
}

// forcedErr is in the text of lock's error for a hold another client
// force-unlocked or deleted.
const forcedErr = "force-unlocked or deleted by another client"

// soleHolds are the Go holds of the locks only one owner acquires (a
// soak's private locks), by lock, for endedInFlight: a hold with a lease
// of its own may have been granted after the call that overlapped its
// grant and simply run out, unless that call removed a grant and the
// hold's was the only one it can have been.
type soleHolds struct {
	holds  map[string][]*Hold
	failed map[string][]*Op // acquires that failed, their outcome unknown: a grant the history lacks
	closes map[string][]*Op // Client.Close by client: a hold it failed to release lives on for a lease
	lease  time.Duration    // the clients' lease: how long such a grant may live on the server
}

// newSoleHolds finds the locks whose acquires are all one Go owner's -
// one client's, one owner ID, across the client's reopenings (each
// reopened client names its owners anew) - for a client lease.
func newSoleHolds(ops []*Op, holds []*Hold, lease time.Duration) *soleHolds {
	owner := map[string]string{}
	for _, op := range ops {
		if !op.Kind.acquire() {
			continue
		}
		who := op.Client + "/" + op.Owner[strings.LastIndexByte(op.Owner, ':')+1:]
		if o, ok := owner[op.Lock]; !ok && !op.Java {
			owner[op.Lock] = who
		} else if op.Java || o != who {
			owner[op.Lock] = "" // shared
		}
	}
	sole := &soleHolds{holds: map[string][]*Hold{}, failed: map[string][]*Op{}, closes: map[string][]*Op{}, lease: lease}
	for _, op := range ops {
		if op.Kind == KindClose {
			sole.closes[op.Client] = append(sole.closes[op.Client], op)
		}
	}
	for _, h := range holds {
		if owner[h.Lock] != "" && !h.Java {
			sole.holds[h.Lock] = append(sole.holds[h.Lock], h)
		}
	}
	for _, op := range ops {
		if owner[op.Lock] != "" && op.Kind.acquire() && op.Err != "" && !op.NotAcq {
			sole.failed[op.Lock] = append(sole.failed[op.Lock], op)
		}
	}
	return sole
}

// soleMargin is how long before a hold-ending call every earlier hold of
// its lock must have ended, as its client saw it, to be out of its reach:
// a client times a lease from its request, a little before the server.
const soleMargin = 100 * time.Millisecond

// onlyGrant reports whether e, an ending call that removed something and
// overlapped h's grant, can only have removed h's: h's lock is one
// owner's, and every other hold of it acquired before e returned had
// ended well before e was called, and no acquire of it failed lately
// (its grant, if any, unknown), nor did its client close (a hold it
// failed to release).
func (s *soleHolds) onlyGrant(h *Hold, e *Op) bool {
	if s == nil || !e.Released {
		return false
	}
	hs, ok := s.holds[h.Lock]
	if !ok {
		return false
	}
	for _, op := range s.failed[h.Lock] {
		// A held-back request may run seconds after its call gave up.
		if op.Call < e.Return && op.Return > e.Call-s.lease-5*time.Second {
			return false
		}
	}
	for _, op := range s.closes[h.Client] {
		// Renewals stop at Close: a hold it failed to release lasts a lease.
		if op.Call < e.Return && op.Return > e.Call-s.lease-time.Second {
			return false
		}
	}
	for _, o := range hs {
		if o == h || o.Acquired >= e.Return {
			continue
		}
		if done, _ := o.Done(); done == 0 || done > e.Call-soleMargin {
			return false
		}
	}
	return true
}

// lostErr is the text of lock's ErrLockLost.
var lostErr = lock.ErrLockLost.Error()

// unlockGaveUp is in the error a hold ends with when its own Unlock gave
// up before its release was sent (lock/unlock.go): the client marks it
// lost since it cannot know, which says nothing of the server (seed
// 210439279907358: two holds whose Unlocks the run's end cancelled).
const unlockGaveUp = "unlock gave up before its release was sent"

// noticeBound is how long after e returned h's holder may learn of it:
// the notice bound, or the watchdog's tick for a DEL by hand or a
// Redisson forceUnlock seen by a client that watches no keys.
func noticeBound(e *Op, h *Hold, b Bounds) time.Duration {
	byScript := e.Kind == KindForceUnlock || e.Kind == KindDelete
	if !byScript && !h.Watches {
		return b.Tick
	}
	return b.Notice
}

// checkErrors: an error says what happened. One error never means both
// "busy" and "unreachable"; ErrUnavailable only while a fault could have
// kept the server out of reach - or, for a call that gave up with no reply
// to its attempt yet, while the process itself was overloaded.
func checkErrors(ops []*Op, faults []Fault, stalls []Stall) []Violation {
	var out []Violation
	for _, op := range ops {
		if op.NotAcq && op.Unavail {
			out = append(out, Violation{"errors", op.Lock, op.Return, fmt.Sprintf("%v: the error says both not acquired and server unavailable", op), []int{op.ID}})
			continue
		}
		margin := 2 * time.Second
		if strings.Contains(op.Err, ownerWaits) {
			// Behind its owner's attempt, which waits for its reply up to
			// the attempt bound (5 s, and 0.5 s of grain) after a fault.
			margin = 6 * time.Second
		}
		if op.Unavail && !faultDuring(faults, op.Client, op.Call, op.Return, margin) &&
			!(strings.Contains(op.Err, noReply) && overloaded(stalls, op.Return)) &&
			!(strings.Contains(op.Err, ownerWaits) && siblingWaited(ops, stalls, op)) {
			out = append(out, Violation{"errors", op.Lock, op.Return, fmt.Sprintf("%v: server unavailable, with no fault near the call", op), []int{op.ID}})
		}
	}
	return out
}

// siblingWaited reports whether op, a call that gave up while another
// call of its owner held the owner's gate (ownerWaits), gave up while a
// call of its owner on its lock made at the same time (one Mutex, two
// goroutines) was in flight, waiting for the server: that call's first
// reply came only after op returned, or op's own wait was shorter than a
// round trip may take on a loaded machine (Bounds.Return), or the process
// was overloaded. Without a sibling call, only a call that gave up
// earlier can hold the gate, and only a fault keeps it that long.
func siblingWaited(ops []*Op, stalls []Stall, op *Op) bool {
	const roundTrip = 300 * time.Millisecond
	for _, s := range ops {
		if s == op || !s.Kind.acquire() || s.Owner != op.Owner || s.Lock != op.Lock || s.Call > op.Return || s.Return < op.Return {
			continue
		}
		first := s.Return // its first reply: when it queued, else its end
		if s.Queued > 0 {
			first = s.Queued
		}
		if first >= op.Return || op.Return-op.Call <= roundTrip || overloaded(stalls, op.Return) {
			return true
		}
	}
	return false
}

// checkBusy: ErrNotAcquired says the lock was busy - another owner held
// it, or waited ahead in its queue, during the call. A call told so while
// no other owner held the lock, waited for it, or may have left a hold or
// a queue entry behind is a violation. What may linger: an acquire that
// failed with its outcome unknown may have been granted (a hold nobody
// returned with lasts up to a lease) or left its entry queued (up to a
// waiter timeout); a hold that ended with its client's Close stays on the
// server for its lease; a server restart may bring back, from its AOF, a
// hold its owner released in the last second before the kill. So such
// calls, holds and restarts count for a lease and a waiter timeout after
// they ended.
func checkBusy(ops []*Op, holds []*Hold, faults []Fault, b Bounds) []Violation {
	linger := 3*(b.Tick-time.Second) + 6*time.Second // the client's lease, a waiter timeout, 1 s
	others := busySpans(ops, holds, faults, linger)
	var out []Violation
	for _, op := range ops {
		if !op.NotAcq || op.Unavail || op.Java {
			continue
		}
		if others[op.Lock].busy(op) || restartNear(faults, op, linger) {
			continue
		}
		out = append(out, Violation{"errors", op.Lock, op.Return,
			fmt.Sprintf("%v: not acquired, while no other owner held the lock or waited for it", op), []int{op.ID}})
	}
	return out
}

// span is a stretch of time when owner held a lock, waited for it, or may
// have left a hold or an entry behind.
type span struct {
	owner       string
	from, until time.Duration
}

// spans are one lock's, by start, with the latest end among each prefix
// (reach), so that a search stops where no earlier span reaches.
type spans struct {
	s     []span
	reach []time.Duration
}

// busySpans returns, by lock, the spans of every hold and acquire: a hold
// from its acquire's call to its Done (a hold its client's Close ended,
// one lost with its Unlock's outcome unknown, or one never seen to end
// linger longer); an acquire over its call, and linger longer when its
// outcome is unknown; a Redisson thread's hold whose unlock failed, until
// threadKept.
func busySpans(ops []*Op, holds []*Hold, faults []Fault, linger time.Duration) map[string]*spans {
	by := map[string]*spans{}
	add := func(lock string, sp span) {
		if by[lock] == nil {
			by[lock] = &spans{}
		}
		by[lock].s = append(by[lock].s, sp)
	}
	for _, hd := range holds {
		done, err := hd.Done()
		switch {
		case done == 0:
			done = hd.Called + linger
		case strings.Contains(err, closedErr), strings.Contains(err, freesItself):
			// Close, or an Unlock whose outcome is unknown, leaves the
			// hold on the server for its lease.
			done += linger
		}
		add(hd.Lock, span{hd.Owner, hd.Called, done})
	}
	for _, a := range ops {
		if !a.Kind.acquire() {
			continue
		}
		until := a.Return
		// A call that queued and was told "busy" leaves the queue after
		// it returns; a fault on its client then may hold the leave back
		// (and the grant a release made to its entry meanwhile), so its
		// entry lingers as an unknown outcome's would (the simulation,
		// seed 130348831920842).
		queuedThenFault := a.NotAcq && leaveHeldBack(faults, a)
		if a.Err != "" && (!(a.NotAcq && !a.Unavail) || queuedThenFault) {
			until += linger // its outcome is unknown
			if a.Java && !javaRefused(a) {
				until = max(until, threadKept(ops, a, a.Return))
			}
		}
		add(a.Lock, span{a.Owner, a.Call, until})
	}
	for _, u := range ops {
		if u.Kind == KindJavaUnlock && u.Err != "" && !strings.Contains(u.Err, "not locked by current thread") {
			add(u.Lock, span{u.Owner, u.Call, threadKept(ops, u, u.Call)})
		}
	}
	for _, sp := range by {
		sort.Slice(sp.s, func(i, j int) bool { return sp.s[i].from < sp.s[j].from })
		sp.reach = make([]time.Duration, len(sp.s))
		for i, x := range sp.s {
			sp.reach[i] = x.until
			if i > 0 {
				sp.reach[i] = max(sp.reach[i], sp.reach[i-1])
			}
		}
	}
	return by
}

// threadKept returns until when x's Redisson thread may hold x's lock, a
// hold it may have (x failed, its outcome unknown) lasting a lease from
// x's return: each later call of the thread while the hold lives keeps it
// - an acquire re-enters it, an unlock takes the count down only to where
// it was, each renewing it for a lease - until a release by anyone that
// ran after from (a force unlock, a delete, a DEL by hand), or a lease
// after the thread's last call within it. A call after the hold's lease
// ran out finds none to keep. ops are in call order. For a failed
// unlock, from is its call (the simulation, seed 138878139966595: a Java
// unlock whose reply was lost - "EOF" - then 14 lock/unlock pairs of the
// thread, and a Go TryLock(0) 12 ms after the last was told the lock was
// busy, rightly: a Redisson forceUnlock 124 ms later removed the hold);
// for an acquire of unknown outcome, its return, as a grant can come no
// later (seed 198211716742332: a lock() whose reply was lost at 435.3 s,
// then the thread's lock/unlock pairs for 33 s, and a Go TryLock(0)
// between two of them, 26 s after the failure, was told the lock was
// busy, rightly: the thread's own forceUnlock removed the hold at 468.6
// s). As javaMayReenter, for the FIFO check.
func threadKept(ops []*Op, x *Op, from time.Duration) time.Duration {
	until := x.Return + javaLease
	for _, op := range ops[sort.Search(len(ops), func(i int) bool { return ops[i].Call > x.Call }):] {
		switch {
		case op.Call > until:
			return until
		case op.Lock != x.Lock:
		case op.Kind.ends() && op.Released && op.Err == "" && op.Call > from:
			return min(until, op.Return)
		case op.Owner == x.Owner:
			until = max(until, op.Return+javaLease)
		}
	}
	return until
}

// busy reports whether another owner than op's has a span during op.
func (sp *spans) busy(op *Op) bool {
	if sp == nil {
		return false
	}
	i := sort.Search(len(sp.s), func(i int) bool { return sp.s[i].from > op.Return }) - 1
	for ; i >= 0 && sp.reach[i] >= op.Call; i-- {
		if x := sp.s[i]; x.owner != op.Owner && x.until >= op.Call {
			return true
		}
	}
	return false
}

// closedErr is the text of lock's ErrClosed, which ends the holds of a
// client that closed: they stay on the server until their leases run out.
var closedErr = lock.ErrClosed.Error()

// freesItself ends the text of lock's ErrLockLost for a hold the client
// stopped renewing while the server may still have it - its Unlock was
// not acknowledged, or gave up before it was sent (soak seed
// 135604667200282 on Valkey: an Unlock during a 6-s server pause, then
// its client's Close; the hold stayed until a ForceUnlock 5 s after the
// pause, and another owner's TryLock(0) was told the lock was busy).
const freesItself = "it frees itself within the lease"

// restartNear reports whether the server restarted from linger before op
// to its end.
func restartNear(faults []Fault, op *Op, linger time.Duration) bool {
	for _, f := range faults {
		if f.Kind == FaultRestart && f.Start <= op.Return && f.End+linger >= op.Call {
			return true
		}
	}
	return false
}

// noReply is the text of lock's error for a call whose caller gave up with
// an attempt in flight (ErrUnavailable: it could not tell whether the lock
// was busy).
const noReply = "no reply yet to the attempt in flight"

// ownerWaits is the text of lock's error for a call whose deadline passed
// while another call of its owner held the owner's gate, waiting for the
// server.
const ownerWaits = "another call of this owner is still waiting for the server's reply"

// overloaded reports whether the process ran late for a quarter or more of
// the second before at: its timers, and the replies it waits for, came
// that much later - a reply not back within the call's grace is then the
// machine's doing, not a fault the lock could tell from a server's.
func overloaded(stalls []Stall, at time.Duration) bool {
	var late time.Duration
	i := sort.Search(len(stalls), func(i int) bool { return stalls[i].At >= at-time.Second })
	// A stall is measured when the late timer fires, at its end: one
	// measured just after at that began before it covers at too (seed
	// 114068898767990: 309 ms late, measured 0.6 ms after a TryLock's
	// deadline, whose grace timer it had held up).
	for ; i < len(stalls) && stalls[i].At <= at+time.Second; i++ {
		if stalls[i].At-stalls[i].Late <= at {
			late += stalls[i].Late
		}
	}
	return late >= time.Second/4
}

// checkReturns: every call returns by its deadline, plus slack - or
// later by no more than twice what the process itself was measured to run
// late around then (its timers fire late: the race detector on a loaded
// machine), which the lock cannot help.
func checkReturns(ops []*Op, stalls []Stall, b Bounds) []Violation {
	var out []Violation
	for _, op := range ops {
		took := op.Return - op.Call
		limit := op.Limit
		if op.Kind == KindClose {
			limit = b.Close
		}
		if limit == 0 || took <= limit+b.Return {
			continue
		}
		// The way back from the deadline waits on two timers (the
		// context's, then the grace's): each may fire as late as the
		// process ran then.
		over := took - limit - b.Return
		late := lateness(stalls, op.Call+limit-stallNear, op.Return+stallNear)
		if late >= over {
			continue // the process itself ran that late then
		}
		text := fmt.Sprintf("%v took %v, its limit %v", op, took.Round(time.Millisecond), limit)
		if late > 0 {
			text += fmt.Sprintf(" (the process ran %v late then)", late.Round(time.Millisecond))
		}
		out = append(out, Violation{"returns", op.Lock, op.Return, text, []int{op.ID}})
	}
	return out
}

// maxStall bounds the stalls lateness looks for past to.
const maxStall = 10 * time.Second

// stallNear widens the stretch of a call's return in which a stall
// counts: the process's lateness just before or after is its lateness
// then.
const stallNear = 100 * time.Millisecond

// lateness is how much later than its bound the process itself may have
// made something that ran over [from, to]: twice the longest stall then
// (a way back waits on two timers, each of which may fire that late), or
// all the stalls together when the process was overloaded and they
// compounded.
func lateness(stalls []Stall, from, to time.Duration) time.Duration {
	longest, total := time.Duration(0), time.Duration(0)
	i := sort.Search(len(stalls), func(i int) bool { return stalls[i].At >= from })
	for ; i < len(stalls) && stalls[i].At <= to+maxStall; i++ {
		if stalls[i].At-stalls[i].Late <= to {
			longest = max(longest, stalls[i].Late)
			total += stalls[i].Late
		}
	}
	return max(2*longest, total)
}

// checkFIFO: a live Go waiter is not overtaken by an owner whose acquire
// started after the waiter had queued. Left out: pairs with a fault on
// the waiter's client or the server, a delete of the lock (its waiters
// queue again) or a Close of the waiter's client in between.
func checkFIFO(ops []*Op, faults, all []Fault, lost map[string]map[int64]LostGrant) []Violation {
	var out []Violation
	grants := map[string][]*Op{} // new holds by lock, by return
	for _, a := range ops {
		if a.Hold != nil && a.New {
			grants[a.Lock] = append(grants[a.Lock], a)
		}
	}
	since := make(map[*Op]time.Duration)
	longest := longestAcquires(ops)
	byToken := map[string][]*Op{} // Go grants by lock, by token
	for l, g := range grants {
		sort.Slice(g, func(i, j int) bool { return g[i].Return < g[j].Return })
		for _, a := range g {
			since[a] = queuedSince(ops, a, longest[a.Owner], all)
			if !a.Java {
				byToken[l] = append(byToken[l], a)
			}
		}
		sort.Slice(byToken[l], func(i, j int) bool { return byToken[l][i].Hold.Token < byToken[l][j].Hold.Token })
	}
	for _, w := range ops {
		if w.Java || !w.Kind.acquire() || w.Queued == 0 {
			continue
		}
		g := grants[w.Lock]
		for i := sort.Search(len(g), func(i int) bool { return g[i].Return > w.Queued }); i < len(g) && g[i].Return <= w.Return; i++ {
			a := g[i]
			sinceA := since[a]
			if a != w && a.Owner != w.Owner && lostAhead(ops, lost[w.Lock], w, a) {
				sinceA = max(sinceA, w.Queued+6*time.Millisecond)
			}
			if a == w || a.Owner == w.Owner || sinceA <= w.Queued+5*time.Millisecond || !overtook(a, w) {
				continue
			}
			if a.Java && javaMayReenter(ops, a) || faultDuring(faults, w.Client, w.Queued, a.Return, 100*time.Millisecond) ||
				servedSibling(ops, all, w, a, since[a]) ||
				disturbed(ops, w, a.Return) || grantEnded(ops, byToken[w.Lock], lost[w.Lock], w, a) {
				continue
			}
			out = append(out, Violation{"fifo", w.Lock, a.Return,
				fmt.Sprintf("%v overtook %v, which had queued first and was still waiting", a, w), []int{w.ID, a.ID}})
		}
	}
	return out
}

// lostAhead reports whether a grant whose reply a fault lost shows w's
// owner ahead of a's in the queue: granted, while w waited and before a's
// grant, to the one owner of w's client that acquires w's lock then. A
// grant goes to the queue's head (or to a free lock nobody waits for), so
// a's owner was then behind w's or not queued: whatever queue position an
// earlier call of a's owner may have left (queuedSince), it was behind.
func lostAhead(ops []*Op, lost map[int64]LostGrant, w, a *Op) bool {
	for _, g := range lost {
		if g.Client != w.Client || g.Sent < w.Queued || g.Ran > w.Return || g.Ran >= a.Return || !soleOfClient(ops, w, g) {
			continue
		}
		return true
	}
	return false
}

// soleOfClient reports whether w's owner is the only owner of w's client
// with an acquire of w's lock in flight around g (the lost grant names no
// owner).
func soleOfClient(ops []*Op, w *Op, g LostGrant) bool {
	for _, op := range ops {
		if op.Lock == w.Lock && op.Client == w.Client && op.Owner != w.Owner && op.Kind.acquire() &&
			op.Call <= g.Ran && op.Return+5*time.Second >= g.Sent {
			return false
		}
	}
	return true
}

// servedSibling reports whether w's place in the queue went to a sibling
// call before a, which queued at since, was granted: one owner's calls at
// once wait in one queue entry, the owner's, and a new hold returned to
// another of them while w waited took that entry up; once that hold
// ended, w waits anew. Only an a that queued before the hold ended is
// excused (seed 210439279907358: a shared owner's TryLock granted, the
// hold force-unlocked 20 ms later, its Lock queued again behind two Java
// threads that had queued meanwhile) - or one that queued before w could
// queue again, a fault on w's client (any, its own messages' too) in
// between (seed 114068898767990: w's re-entry of the sibling's hold, sent
// before the force-unlock, had its reply delayed 600 ms by a notice
// burst's fault; a queued meanwhile).
func servedSibling(ops []*Op, faults []Fault, w, a *Op, since time.Duration) bool {
	for _, p := range ops {
		if p == w || p.Owner != w.Owner || p.Lock != w.Lock || !p.Kind.acquire() || p.Hold == nil || !p.New ||
			p.Hold == w.Hold || p.Return < w.Queued || p.Return > a.Return {
			continue
		}
		done, _ := p.Hold.Done()
		if done == 0 {
			done = a.Return
		}
		ended := max(p.Return, done)
		if since <= ended+5*time.Millisecond || faultDuring(faults, w.Client, ended, since, 0) {
			return true
		}
	}
	return false
}

// overtook reports whether a, a new hold, was granted while w still
// waited: before w's grant (by fencing token, when both are Go holds) or,
// when w got no hold, before w's deadline.
func overtook(a, w *Op) bool {
	switch {
	case w.Hold != nil && w.New && !a.Java:
		return a.Hold.Token < w.Hold.Token
	case w.Hold != nil:
		return a.Return < w.Hold.Acquired-5*time.Millisecond
	case w.Limit > 0:
		gaveUp := w.Limit
		if w.Wait > 0 {
			gaveUp = min(gaveUp, w.Wait)
		}
		return a.Return < w.Call+gaveUp && a.Return < w.Return
	}
	return a.Return < w.Return
}

// javaMayReenter reports whether a, a Java acquire, may have re-entered a
// hold its thread kept, so that it overtook nobody:
//   - an unlock of the thread failed (a server restarting, say), so
//     Redisson's count stayed up - every acquire since is a re-entry and
//     every unlock takes the count down to where it was - until something
//     ended the hold (a force unlock, a delete, a DEL by hand);
//   - an acquire of the thread failed with an unknown outcome (its
//     connection reset while the reply was on its way): the server may
//     have granted it, and its later acquires re-entered that hold, each
//     keeping it for another lease, until the lease ran out or something
//     ended it.
func javaMayReenter(ops []*Op, a *Op) bool {
	kept := time.Duration(-1)   // an unlock failed then
	until := time.Duration(-1)  // a grant of unknown outcome lives until then
	grantBy := time.Duration(0) // and may have been granted as late as then
	// ops are in call order (queuedSince searches them so too).
	for _, op := range ops[:sort.Search(len(ops), func(i int) bool { return ops[i].Call >= a.Call })] {
		if op.Lock != a.Lock {
			continue
		}
		mine := op.Owner == a.Owner
		switch {
		case mine && op.Kind == KindJavaUnlock && op.Err != "" && !strings.Contains(op.Err, "not locked by current thread"):
			kept = op.Call
		case mine && op.Kind.acquire() && op.Err != "" && !javaRefused(op):
			until, grantBy = max(until, op.Return+javaLease), max(grantBy, op.Return)
		case mine && op.Kind.acquire() && op.Hold != nil && op.Call <= until:
			until = max(until, op.Return+javaLease)
		case op.Kind.ends() && op.Released && op.Err == "":
			// It ended what was there when it ran: a failed unlock's hold
			// before it, a grant of unknown outcome only when that grant
			// cannot have come after it.
			if op.Call > kept {
				kept = -1
			}
			if op.Call > grantBy {
				until = -1
			}
		}
	}
	return kept >= 0 || a.Call <= until
}

// disturbed reports whether something between w's queueing and until
// may reorder w legitimately: a delete or an eviction of its lock, a
// Close of its client. w.Queued is when the reply that queued w came
// back; the server queued w at some moment of its call before that, so a
// delete or an eviction that ended after w's call started may have
// dropped the entry that reply told of (the reply to an attempt the
// server ran just before an eviction can reach its client after the
// eviction's own reply has).
func disturbed(ops []*Op, w *Op, until time.Duration) bool {
	for _, e := range ops {
		if e.Call > until {
			continue
		}
		if e.Kind.resetsQueue() && e.Lock == w.Lock && e.Return >= w.Call ||
			e.Kind == KindClose && e.Client == w.Client && e.Return >= w.Queued {
			return true
		}
	}
	return false
}

// grantEnded reports whether w may have been granted the lock and lost
// the grant before it heard, which sends its call to the back of the
// queue: a hand-over grant not taken up yet is a hold (B4), and a
// ForceUnlock, a delete or a DEL by hand ends it (B8). The history shows
// it as a hold-ending call that removed something while w waited before
// a was granted, and either a fencing token nobody returned with, drawn
// then, or - when no Go grant returned after the call, so no later token
// can show one missing (a run's end) - no hold the history knows of that
// the call could have removed. A missing token whose grant's reply a
// fault lost (lost, by token) was drawn after its request was sent: a
// call that returned before that cannot have ended it (issue 46 defect 1:
// a shared owner's grants, their replies lost, after a DEL by hand).
func grantEnded(ops []*Op, byToken []*Op, lost map[int64]LostGrant, w, a *Op) bool {
	var missing []int64 // tokens nobody returned with, drawn while w waited
	for i := 1; i < len(byToken); i++ {
		prev, next := byToken[i-1], byToken[i]
		if next.Hold.Token > prev.Hold.Token+1 && next.Return > w.Queued && prev.Call < a.Return {
			missing = appendMissing(missing, prev.Hold.Token, next.Hold.Token)
		}
	}
	var lastGo time.Duration // the last Go grant's return
	for _, g := range byToken {
		lastGo = max(lastGo, g.Return)
	}
	for _, e := range ops {
		if e.Kind.ends() && e.Lock == w.Lock && e.Released && e.Err == "" && e.Return > w.Queued && e.Call < a.Return &&
			(endable(missing, lost, e) || lastGo < e.Call && removedUnseen(ops, e)) {
			return true
		}
	}
	return false
}

// maxMissing bounds the tokens appendMissing lists of one gap; a longer
// gap counts as one token of unknown grant.
const maxMissing = 64

// appendMissing appends the tokens strictly between from and to.
func appendMissing(dst []int64, from, to int64) []int64 {
	if to-from-1 > maxMissing {
		return append(dst, -1)
	}
	for t := from + 1; t < to; t++ {
		dst = append(dst, t)
	}
	return dst
}

// endable reports whether e may have ended the grant of one of the
// missing tokens: one whose grant is not known, or was sent before e
// returned.
func endable(missing []int64, lost map[int64]LostGrant, e *Op) bool {
	for _, t := range missing {
		if g, ok := lost[t]; !ok || g.Sent < e.Return {
			return true
		}
	}
	return false
}

// lostGrants maps lock and token to the grants whose replies faults lost.
func lostGrants(faults []Fault) map[string]map[int64]LostGrant {
	out := map[string]map[int64]LostGrant{}
	for _, f := range faults {
		for _, g := range f.Lost {
			if g.Client == "" {
				g.Client = f.Target // a history saved before grants named their client
			}
			if out[g.Lock] == nil {
				out[g.Lock] = map[int64]LostGrant{}
			}
			if p, ok := out[g.Lock][g.Token]; !ok || g.Sent < p.Sent {
				out[g.Lock][g.Token] = g // a re-entry's reply names the token again: the first grant drew it
			}
		}
	}
	return out
}

// removedUnseen reports whether e, a hold-ending call that removed a
// holder, ran while no hold of its lock that its owner knew of before e
// was called lasted: it removed a grant nobody had returned with (or one
// on its way back).
func removedUnseen(ops []*Op, e *Op) bool {
	for _, op := range ops {
		if op.Lock != e.Lock || op.Hold == nil || !op.New || op.Return >= e.Call {
			continue
		}
		done, _ := op.Hold.Done()
		if done == 0 || done >= e.Call {
			return false
		}
	}
	return true
}

// queuedSince returns the earliest time a's owner may have been queued
// for a: its call, or the call of an earlier acquire of the owner that
// failed with an error that may have left its entry queued (Redisson
// leaves the queue only when tryLock gives up; fairlock's cleanup after
// an error is best effort), back to the owner's last clean outcome - or
// the call of an acquire of the owner that got no hold (or a's own, as a
// re-entry, or a hold of its own only after a returned) and was still in
// flight when a later one of the chain began: one owner's calls at once
// (a Mutex two goroutines share) wait in one queue entry, the owner's, and
// one that gives up leaves it to the others (RULES.md B3). A clean
// outcome before the chain began ends it only where no earlier call of
// the owner was still in flight (the simulation with -sim.shared, seed
// 902: a TryLock that gave up while an earlier Lock of its owner still
// waited in the entry, and a third call granted from that entry); and a
// hold of the owner's own before the chain took its entry then, so the
// chain's entry was made after that grant, whatever its calls' own start
// (seed 666: a Lock made before its sibling's grant, kept back by the
// owner's gate, queued anew after that hold's release).
// longest is the longest any acquire of the owner lasted: no call made
// longer before the chain began, or before the latest clean outcome, was
// in flight after it.
func queuedSince(ops []*Op, a *Op, longest time.Duration, faults []Fault) time.Duration {
	since := a.Call
	cleared := time.Duration(-1) // the latest clean outcome before the chain: leftovers before it went
	floor := time.Duration(-1)   // the latest grant of another hold of the owner's before the chain
	for i := sort.Search(len(ops), func(i int) bool { return ops[i].Call >= a.Call }) - 1; i >= 0; i-- {
		p := ops[i]
		if cleared >= 0 && p.Call+longest < min(since, cleared) {
			break // no call made this early was in flight when the chain began, or after the clean outcome
		}
		if p.Owner != a.Owner || p.Lock != a.Lock || !p.Kind.acquire() || p.Kind == KindTryOnce {
			continue // a TryLock(0) neither queues nor leaves: it ends nothing
		}
		sibling := p.Hold == nil || p.Hold == a.Hold || p.Return > a.Return
		switch {
		case sibling && p.Return >= since:
			// In flight when the chain began: the entry may be its - and
			// when both were granted the one hold, which of the two
			// returned first with it (the new hold, as recorded) says
			// nothing of who queued.
			since = p.Call
		case p.Err == "":
			// Held before the chain began: the grant took the owner's
			// entry, and any an earlier call left behind.
			cleared, floor = max(cleared, p.Return), max(floor, p.Return)
		case p.NotAcq && !leaveHeldBack(faults, p) || javaRefused(p):
			// Gave up cleanly (or Redisson's script refused) before the
			// chain began: its entry went, and with it any an earlier
			// call left behind, unless an earlier call still waited in it.
			cleared = max(cleared, p.Return)
		case p.Return > cleared:
			since = p.Call // its outcome unknown: it may have left its entry queued
		}
	}
	return max(since, floor)
}

// leaveHeldBack reports whether p, an acquire told "not acquired" after it
// queued, had a fault on its client as it returned (from the cleanup
// before its return to a second after), which may have held back its
// leave: its entry then stays queued (until its liveness deadline
// passes), and the owner's next call finds it in its place - as its
// outcome were unknown. The simulation with -sim.shared, seeds 1214, 2040
// and 2138: the leave's own request failed, and a call of the owner made
// within the waiter timeout was granted from the entry the give-up had
// left (the busy check lets it linger so too, busySpans).
func leaveHeldBack(faults []Fault, p *Op) bool {
	return p.Queued > 0 && faultDuring(faults, p.Client, p.Return-leaveBefore, p.Return+time.Second, 0)
}

// javaRefused reports whether op, a Java call, failed with Redisson's
// own refusal (its script answered, so the outcome is known: nothing
// granted, nothing queued) rather than an error that leaves it unknown.
func javaRefused(op *Op) bool {
	return op.Java && strings.HasPrefix(op.Err, "redisson:")
}

// leaveBefore is how long before a call returns its leave may be sent:
// the cleanup it waits for before it returns (lock's cleanupGrace).
const leaveBefore = 250 * time.Millisecond

// longestAcquires returns, by owner, how long its longest acquire lasted.
func longestAcquires(ops []*Op) map[string]time.Duration {
	longest := map[string]time.Duration{}
	for _, op := range ops {
		if op.Kind.acquire() {
			longest[op.Owner] = max(longest[op.Owner], op.Return-op.Call)
		}
	}
	return longest
}

// checkFree: a lock does not stay free while a live Go waiter waits for
// it (X3, X4). Free, as the clients saw it, runs from the end of the last
// hold to the return of the next grant; a Go acquire that had queued
// before the lock became free and still waited when it was taken again
// waited through it. Longer than Bounds.Free is a violation, or than
// Bounds.FreeFault with a fault on anyone within the waiter timeout
// before or during it. A stall of the process itself lengthens the bound
// by its length.
func checkFree(ops []*Op, holds []*Hold, faults []Fault, stalls []Stall, b Bounds) []Violation {
	var out []Violation
	enders := map[string][]*Op{}
	waiters := map[string][]*Op{}
	for _, op := range ops {
		switch {
		case op.Kind.ends() && op.Released && op.Err == "":
			enders[op.Lock] = append(enders[op.Lock], op)
		case !op.Java && op.Kind.acquire() && op.Queued > 0:
			waiters[op.Lock] = append(waiters[op.Lock], op)
		}
	}
	byLock := map[string][]*Hold{}
	for _, h := range holds {
		byLock[h.Lock] = append(byLock[h.Lock], h)
	}
	for l, hs := range byLock {
		var heldUntil time.Duration // holds is by grant
		for _, h := range hs {
			if from := heldUntil; from > 0 && h.Acquired > from {
				if v, bad := freeGap(waiters[l], faults, stalls, b, l, from, h); bad {
					out = append(out, v)
				}
			}
			heldUntil = max(heldUntil, heldTill(h, enders[l]))
		}
	}
	return out
}

// heldTill is when h ended as far as the history tells: its Done; for a
// hold still open (a Java hold ended by someone else, or any at the end of
// the history), its lease's end or the first hold-ending call after it,
// else never.
func heldTill(h *Hold, enders []*Op) time.Duration {
	if done, _ := h.Done(); done > 0 {
		return done
	}
	till := time.Duration(1 << 62)
	if h.Lease > 0 {
		till = h.Acquired + h.Lease
	}
	for _, e := range enders {
		if e.Call > h.Acquired {
			return min(till, e.Return)
		}
	}
	return till
}

// freeGap checks the free stretch [from, next.Acquired] of lock l against
// the Go waiters that waited through it.
func freeGap(waiters []*Op, faults []Fault, stalls []Stall, b Bounds, l string, from time.Duration, next *Hold) (Violation, bool) {
	gap := next.Acquired - from
	if gap <= b.Free+lateness(stalls, from, next.Acquired) {
		return Violation{}, false
	}
	var w *Op
	for _, op := range waiters {
		if op.Queued < from && op.Return >= next.Acquired {
			w = op
			break
		}
	}
	if w == nil {
		return Violation{}, false
	}
	if gap <= b.FreeFault && faultDuring(faults, "", from-5*time.Second, next.Acquired, 0) {
		return Violation{}, false
	}
	return Violation{"free", l, next.Acquired, fmt.Sprintf("%s stayed free for %v (from %s to %v) while %v waited", l, gap.Round(time.Millisecond), ms(from), next, w), []int{w.ID}}, true
}
