// Package soak generates random workloads and faults against real
// servers, records what every client saw, and checks each history against
// the lock's promises (RULES.md; X20). scripts/soak.sh runs it.
//
// A history is a list of operations (one per call a workload actor made,
// with its start and return on one monotonic clock), the holds those calls
// returned with the moment each Hold's Done closed, and the faults the
// nemesis injected. The checkers in check.go read only the history, so
// they are tested without a server (check_test.go).
package soak

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Kind is what an operation did.
type Kind string

// Operation kinds. Acquires by Go owners carry the call's variant; Java
// (Redisson model) operations are prefixed "java.".
const (
	KindLock        Kind = "Lock"
	KindLockLease   Kind = "LockWithLease"
	KindTryOnce     Kind = "TryLock(0)"
	KindTryWait     Kind = "TryLock(wait)"
	KindUnlock      Kind = "Unlock"
	KindExtend      Kind = "Extend"
	KindForceUnlock Kind = "ForceUnlock"
	KindDelete      Kind = "Delete"
	KindPrune       Kind = "PruneWaiters"
	KindDelHash     Kind = "DEL hash"
	// KindEviction is the server evicting a lock's keys (the nemesis'
	// FaultEvict): one operation per lock name, Released when its hash
	// was there before and gone after.
	KindEviction Kind = "eviction"
	KindClose    Kind = "Client.Close"

	KindJavaLock        Kind = "java.lock"
	KindJavaTryLock     Kind = "java.tryLock"
	KindJavaUnlock      Kind = "java.unlock"
	KindJavaForceUnlock Kind = "java.forceUnlock"
	KindJavaDelete      Kind = "java.delete"
)

// acquire reports whether k is a Go or Java acquire.
func (k Kind) acquire() bool {
	switch k {
	case KindLock, KindLockLease, KindTryOnce, KindTryWait, KindJavaLock, KindJavaTryLock:
		return true
	}
	return false
}

// java reports whether k is a Redisson-model operation.
func (k Kind) java() bool { return strings.HasPrefix(string(k), "java.") }

// ends reports whether k ends whatever hold exists on its lock, for
// anyone: a force unlock, a delete, a DEL by hand.
func (k Kind) ends() bool {
	switch k {
	case KindForceUnlock, KindDelete, KindDelHash, KindEviction, KindJavaForceUnlock, KindJavaDelete:
		return true
	}
	return false
}

// resetsQueue reports whether k may reorder or drop live waiters: a
// delete or an eviction removes the queue (its waiters queue again, in a
// new order).
func (k Kind) resetsQueue() bool {
	return k == KindDelete || k == KindJavaDelete || k == KindEviction
}

// Op is one call as its caller saw it. Times are since the history's
// start.
type Op struct {
	ID     int
	Kind   Kind
	Lock   string // lock name ("" for Client.Close)
	Owner  string // owner field; for an eviction, the caller's
	Client string // the client's label (adapter and number)
	Java   bool   // a Redisson-model owner

	Call, Return time.Duration
	Limit        time.Duration // the call must return within this (0: no limit checked)
	Wait         time.Duration // TryLock's wait (0: none)
	Queued       time.Duration // when the observer said the owner queued (0: never)

	Err      string // "" on success
	NotAcq   bool   // the error matched ErrNotAcquired
	Unavail  bool   // the error matched ErrUnavailable
	Lost     bool   // the error matched ErrLockLost
	NotHeld  bool   // the error matched ErrNotHeld
	Canceled bool   // the caller's context ended
	Released bool   // ForceUnlock/Delete reported it removed something
	Final    bool   // an Unlock that ended its hold (count 1, no error)

	// Hold is the hold an acquire returned (nil: none), or the hold an
	// Unlock or Extend acted on.
	Hold *Hold
	New  bool // the acquire started a new hold (not a re-entry)
}

// Hold is one hold from grant to end, as its owner saw it.
type Hold struct {
	Lock, Owner, Client string
	Java                bool
	Token               int64 // 0 for Java holds
	Acquired            time.Duration
	Called              time.Duration // when the acquire that granted it was called
	Lease               time.Duration // a fixed lease (0: the watchdog's)
	Watches             bool          // the client watches keys (a DEL by hand is noticed at once)

	mu        sync.Mutex
	done      time.Duration // when Done closed (0: still open)
	doneErr   string
	unlocking time.Duration // when the owner's last Unlock was called (0: never)
}

// End records that Done closed at d (since the history began) with err;
// only the first end counts.
func (h *Hold) End(d time.Duration, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done == 0 {
		h.done = d
		if err != nil {
			h.doneErr = err.Error()
		}
	}
}

// Releasing records that the owner's last Unlock was called at d; only
// the first call counts.
func (h *Hold) Releasing(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.unlocking == 0 {
		h.unlocking = d
	}
}

// Done returns when Done closed (0: open at the end of the history) and
// why.
func (h *Hold) Done() (time.Duration, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.done, h.doneErr
}

// Unlocking returns when the owner's last Unlock was called (0: never).
func (h *Hold) Unlocking() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.unlocking
}

func (h *Hold) String() string {
	done, why := h.Done()
	end := "open"
	if done > 0 {
		end = fmt.Sprintf("done %s (%s)", ms(done), why)
	}
	return fmt.Sprintf("hold %s token %d by %s@%s from %s, %s", h.Lock, h.Token, short(h.Owner), h.Client, ms(h.Acquired), end)
}

// FaultKind names what the nemesis did.
type FaultKind string

// Faults.
const (
	FaultLatency   FaultKind = "latency"
	FaultPartition FaultKind = "partition"
	FaultReset     FaultKind = "reset"
	FaultPause     FaultKind = "pause"
	FaultRestart   FaultKind = "restart"
	// FaultLongPause stops the server (SIGSTOP) for longer than a Java
	// owner's lease and every Go LockWithLease lease, so leases run out
	// while nobody can renew them; FaultClientPause is CLIENT PAUSE (WRITE
	// or ALL), which holds back scripts and PUBLISH while the server runs.
	FaultLongPause   FaultKind = "long-pause"
	FaultClientPause FaultKind = "client-pause"
	// FaultSubStall holds back only the subscription connection of the
	// client made of two (Target its label): wake-ups, loss notices and
	// key watches stall while its scripts are answered.
	FaultSubStall FaultKind = "subscription-stall"
	// FaultEvict is the server evicting keys with a TTL (maxmemory set
	// to 1 byte for an instant under volatile-ttl; Target "keys"): the
	// server evicts until its time for it runs out, so some of the lock
	// keys go and some stay, a lock's hash, queue and liveness zset each
	// on its own (queueDropped). KindEviction records it per lock, with
	// whether it ended the hold.
	FaultEvict FaultKind = "eviction"
	// Faults at the level of one message, on one Go client (Target its
	// label; Detail the script and its first key), made by the
	// faultybackend decorator around the client's backend: the reply of
	// one script lost after the script ran, the connection staying up
	// (the caller sees a read timeout: its outcome is unknown); one script
	// held back before it reached the server while later requests went
	// past it (it runs late, perhaps after its caller gave up). Start is
	// when the request was sent, End when it had both run and returned.
	FaultReplyLost FaultKind = "reply-lost"
	FaultHoldBack  FaultKind = "held-back"
	// FaultNoticeBurst floods one Go client's channel (where loss notices
	// come) and its owners' wake-up channels with more messages than a
	// subscription queues (backend.SubscriptionBuffer), while every lock
	// is force-unlocked at once: the client's subscriptions fall behind
	// and summarise what they queued as one "re-check everything" event,
	// loss notices of grants in flight among it.
	FaultNoticeBurst FaultKind = "notice-burst"

	// Cluster faults (RunCluster), all with Target "server": a shared
	// lock's slot moved to another primary; a primary killed, its replica
	// promoted and the old node rejoined as a replica; a replica that
	// took over though no one asked (its primary seemed down to the
	// others), seen between two looks at the cluster.
	FaultMigrate  FaultKind = "migrate"
	FaultFailover FaultKind = "failover"
	FaultUnasked  FaultKind = "unasked-failover"
)

// Fault is one fault, on one client's connection or (Target "server")
// on the server.
type Fault struct {
	Kind       FaultKind
	Target     string
	Start, End time.Duration
	// Locks, for a failover (asked for or not), are the locks whose slot
	// the failed primary served: a saved history keeps them, so that
	// TestRecheck tells the documented exceptions (RULES.md X9) apart.
	Locks []string `json:",omitempty"`
	// Detail says which request a message-level fault took.
	Detail string `json:",omitempty"`
	// Lost are the grants a FaultReplyLost took the replies of: the
	// owner was granted, and never heard.
	Lost []LostGrant `json:",omitempty"`
}

// LostGrant is a grant whose reply was lost: the acquire was sent at Sent
// and drew Token on Lock before its reply came at Ran.
type LostGrant struct {
	Lock      string
	Client    string `json:",omitempty"` // the client whose request it was
	Token     int64
	Sent, Ran time.Duration
}

// messageLevel reports whether k is a fault on one message (a reply lost,
// a request held back, a burst of notices), which cuts no client off the
// server: a waiter stays live through it and a holder can still be told.
func (k FaultKind) messageLevel() bool {
	return k == FaultReplyLost || k == FaultHoldBack || k == FaultNoticeBurst
}

// keepFaults returns the faults of the kinds keep is true for.
func keepFaults(faults []Fault, keep func(FaultKind) bool) []Fault {
	var out []Fault
	for _, f := range faults {
		if keep(f.Kind) {
			out = append(out, f)
		}
	}
	return out
}

// History is everything a run recorded. It is safe for concurrent use
// while recording.
type History struct {
	Seed  uint64
	start time.Time

	mu     sync.Mutex
	ops    []*Op
	holds  []*Hold
	faults []Fault
	stalls []Stall
}

// Stall is a stretch in which this process ran late: a timer that was due
// fired Late after it (the race detector and a loaded machine). Measured,
// not injected: a call that returned late by no more than a stall around
// its deadline explains is excused (checkReturns).
type Stall struct {
	At   time.Duration // when the late timer fired
	Late time.Duration
}

// NewHistory starts a history now.
func NewHistory(seed uint64) *History { return &History{Seed: seed, start: time.Now()} }

// Now is the history's clock.
func (h *History) Now() time.Duration { return time.Since(h.start) }

// At is t on the history's clock.
func (h *History) At(t time.Time) time.Duration { return t.Sub(h.start) }

// Add records op and returns it with its ID.
func (h *History) Add(op *Op) *Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	op.ID = len(h.ops)
	h.ops = append(h.ops, op)
	return op
}

// AddHold records a new hold.
func (h *History) AddHold(hd *Hold) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holds = append(h.holds, hd)
}

// AddFault records a fault.
func (h *History) AddFault(f Fault) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults = append(h.faults, f)
}

// Ops returns the operations by call time.
func (h *History) Ops() []*Op {
	h.mu.Lock()
	ops := append([]*Op(nil), h.ops...)
	h.mu.Unlock()
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	return ops
}

// Holds returns the holds by grant time.
func (h *History) Holds() []*Hold {
	h.mu.Lock()
	hs := append([]*Hold(nil), h.holds...)
	h.mu.Unlock()
	sort.SliceStable(hs, func(i, j int) bool { return hs[i].Acquired < hs[j].Acquired })
	return hs
}

// AddStall records a stall.
func (h *History) AddStall(st Stall) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stalls = append(h.stalls, st)
}

// Stalls returns the stalls by time.
func (h *History) Stalls() []Stall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Stall(nil), h.stalls...)
}

// Faults returns the faults by start.
func (h *History) Faults() []Fault {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Fault(nil), h.faults...)
}

// faultDuring reports whether a fault on target (or on the server)
// overlapped [from, to], widened by margin.
func faultDuring(faults []Fault, target string, from, to, margin time.Duration) bool {
	for _, f := range faults {
		if f.Target != "server" && f.Target != target && target != "" {
			continue
		}
		if f.Start <= to+margin && f.End+margin >= from {
			return true
		}
	}
	return false
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }

// short shortens an owner field "<uuid>:<n>" to "<uuid[:8]>:<n>".
func short(field string) string {
	if i := strings.LastIndexByte(field, ':'); i > 8 {
		return field[:8] + field[i:]
	}
	return field
}

func (op *Op) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d [%s, %s] %s %s by %s@%s", op.ID, ms(op.Call), ms(op.Return), op.Kind, op.Lock, short(op.Owner), op.Client)
	if op.Hold != nil && op.Kind.acquire() {
		fmt.Fprintf(&b, " -> token %d", op.Hold.Token)
		if !op.New {
			b.WriteString(" (re-entry)")
		}
	}
	if op.Queued > 0 {
		fmt.Fprintf(&b, " queued at %s", ms(op.Queued))
	}
	if op.Err != "" {
		fmt.Fprintf(&b, " err=%q", op.Err)
	}
	if op.Kind.ends() {
		fmt.Fprintf(&b, " removed=%v", op.Released)
	}
	return b.String()
}
