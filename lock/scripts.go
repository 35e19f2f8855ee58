package lock

import (
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/fairlock/fairlock/backend"
)

// The algorithm lives in these scripts (scripts/*.lua) and in the Go that
// calls them: wait.go (acquire), mutex.go (release), watchdog.go (renew).
// Every script is the shared prelude (server time, stale head
// purge, head wake-up) followed by its own body. This file is the one
// place that knows each script's KEYS and ARGV order and the shape of its
// reply.
var (
	//go:embed scripts/prelude.lua
	preludeLua string
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/unlock.lua
	unlockLua string
	//go:embed scripts/leave.lua
	leaveLua string
	//go:embed scripts/renew.lua
	renewLua string
	//go:embed scripts/force_unlock.lua
	forceUnlockLua string
	//go:embed scripts/delete.lua
	deleteLua string
	//go:embed scripts/inspect.lua
	inspectLua string
)

// scriptSet is built per Client (no package-level mutable state).
type scriptSet struct {
	acquire, unlock, leave, renew, forceUnlock, delete, inspect *backend.Script
}

func newScriptSet() scriptSet {
	s := func(name, body string) *backend.Script { return backend.NewScript(name, preludeLua+"\n"+body) }
	return scriptSet{
		acquire:     s("acquire", acquireLua),
		unlock:      s("unlock", unlockLua),
		leave:       s("leave", leaveLua),
		renew:       s("renew", renewLua),
		forceUnlock: s("force_unlock", forceUnlockLua),
		delete:      s("delete", deleteLua),
		inspect:     s("inspect", inspectLua),
	}
}

// scriptKeys are the five keys every script takes, in this order: lock
// hash, queue, Redisson timeouts, fairlock liveness, token counter.
func (k keyset) scriptKeys() []string {
	return []string{k.hash, k.queue, k.timeouts, k.alive, k.token}
}

// holdView is what the client knows of its owner's hold: the token and
// count of the live hold, zero when it knows none. The scripts compare it
// with the server's state so that a retried request never applies twice
// and a leftover the client has ended is never re-entered.
type holdView struct {
	token int64
	count int
}

func (v holdView) args() []string {
	return []string{itoa(v.token), strconv.Itoa(v.count)}
}

// wakeArgs say how to wake a waiter: its channel prefix and the publish
// commands.
type wakeArgs struct {
	channelPrefix string
	publish       string
}

// acquireCall is one run of acquire.lua.
type acquireCall struct {
	owner         string
	lease         time.Duration
	waiterTimeout time.Duration
	once          bool
	wake          wakeArgs
	maxHint       time.Duration
	slack         time.Duration
	view          holdView
	// holdLease is the lease the hold view describes was taken with (0:
	// none): a re-entry of a hand-over grant not taken up yet takes it up
	// with the longer of it and lease.
	holdLease time.Duration
}

func (a acquireCall) args() []string {
	mode := "wait"
	if a.once {
		mode = "once"
	}
	return append(append([]string{
		a.owner, ms(a.lease), ms(a.waiterTimeout), mode,
		a.wake.channelPrefix, a.wake.publish, ms(a.maxHint), ms(a.slack),
	}, a.view.args()...), ms(a.holdLease))
}

type acquireReply struct {
	acquired bool
	token    int64         // acquired
	count    int           // acquired
	hint     time.Duration // waiting: how long to wait at most
	position int           // waiting: set when this call queued the owner
	head     bool          // waiting: the owner is first in line
	now      int64         // waiting: the server's time, ms
}

func decodeAcquire(rep backend.Reply) (acquireReply, error) {
	v, err := rep.AsInts()
	switch {
	case err == nil && len(v) == 3 && v[0] == 1:
		return acquireReply{acquired: true, token: v[1], count: int(v[2])}, nil
	case err == nil && len(v) == 3 && v[0] == 0: // "once" mode
		return acquireReply{hint: time.Duration(v[1]) * time.Millisecond}, nil
	case err == nil && len(v) == 5 && v[0] == 0:
		return acquireReply{hint: time.Duration(v[1]) * time.Millisecond, position: int(v[2]), head: v[3] == 1, now: v[4]}, nil
	}
	return acquireReply{}, fmt.Errorf("%w: acquire: %v", ErrUnexpectedReply, rep)
}

// unlockCall is one run of unlock.lua.
type unlockCall struct {
	owner string
	lease time.Duration
	wake  wakeArgs
	latch time.Duration
	view  holdView
	// retry says the request may have run before: only then can its
	// latch exist, and only then does the script read it.
	retry bool
}

func (u unlockCall) keys(k keyset, requestID string) []string {
	return append(k.scriptKeys(), k.latch+":"+requestID)
}

func (u unlockCall) args() []string {
	retry := "0"
	if u.retry {
		retry = "1"
	}
	return append(append([]string{u.owner, ms(u.lease), u.wake.channelPrefix, u.wake.publish, ms(u.latch)}, u.view.args()...), retry)
}

// decodeUnlock returns the hold count left, or -1 when the owner did not
// hold the lock.
func decodeUnlock(rep backend.Reply) (int, error) {
	n, err := rep.AsInt()
	if err != nil || n < -1 {
		return 0, fmt.Errorf("%w: unlock: %v", ErrUnexpectedReply, rep)
	}
	return int(n), nil
}

// leaveCall is one run of leave.lua. known is the token of the hold the
// client knows (0: none): a hand-over grant of that token is kept.
type leaveCall struct {
	owner string
	wake  wakeArgs
	known int64
}

func (l leaveCall) args() []string {
	return []string{l.owner, l.wake.channelPrefix, l.wake.publish, itoa(l.known)}
}

// leaveReply is what leave.lua reports: whether the owner was queued, and
// the hold it has on the server (count 0: none).
type leaveReply struct {
	queued bool
	held   holdView
}

func decodeLeave(rep backend.Reply) (leaveReply, error) {
	v, err := rep.AsInts()
	if err != nil || len(v) != 3 {
		return leaveReply{}, fmt.Errorf("%w: leave: %v", ErrUnexpectedReply, rep)
	}
	return leaveReply{queued: v[0] == 1, held: holdView{token: v[2], count: int(v[1])}}, nil
}

// renewCall is one run of renew.lua: lease 0 only checks that the hold
// still exists.
type renewCall struct {
	owner string
	lease time.Duration
	token int64
	// holdLease is the lease the hold was taken with: a hand-over grant not
	// taken up yet gets the longer of it and lease.
	holdLease time.Duration
	wake      wakeArgs // to tell the head when a grant's expiry comes down
}

func (r renewCall) args() []string {
	lease := "0"
	if r.lease > 0 {
		lease = ms(r.lease)
	}
	return []string{r.owner, lease, itoa(r.token), ms(r.holdLease), r.wake.channelPrefix, r.wake.publish}
}

// renewReply is renew.lua's answer.
type renewReply int

const (
	renewLost   renewReply = 0 // the hold no longer exists
	renewHeld   renewReply = 1 // it does (renewed to the lease, if one was sent)
	renewTookUp renewReply = 2 // it does, and this call took its hand-over grant up with the longer of the lease and the hold's own
)

// credit is the lease call moved the server's expiry to, counted from its
// send time (0: none the client may count).
func (r renewReply) credit(call renewCall) time.Duration {
	if r == renewTookUp {
		return max(call.lease, call.holdLease)
	}
	return call.lease
}

// decodeRenew decodes renew.lua's answer.
func decodeRenew(rep backend.Reply) (renewReply, error) {
	n, err := rep.AsInt()
	if err != nil || n < int64(renewLost) || n > int64(renewTookUp) {
		return renewLost, fmt.Errorf("%w: renew: %v", ErrUnexpectedReply, rep)
	}
	return renewReply(n), nil
}

// evictArgs are the arguments of force_unlock.lua and delete.lua.
func evictArgs(w wakeArgs) []string { return []string{w.channelPrefix, w.publish} }

// decodeCount decodes the count force_unlock.lua and delete.lua return.
func decodeCount(script string, rep backend.Reply) (int64, error) {
	n, err := rep.AsInt()
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %v", ErrUnexpectedReply, script, rep)
	}
	return n, nil
}

// leftMark is prelude.lua's left_mark: the liveness deadline of an entry
// an owner left behind in the middle of the queue (leave.lua).
const leftMark = "0"

// isLeftMark reports whether a liveness deadline read from the alive zset
// is leftMark.
func isLeftMark(score backend.Reply) bool {
	if score.Kind != backend.String {
		return false
	}
	f, err := strconv.ParseFloat(score.Str, 64)
	return err == nil && f == 0
}

// inspectArgs are the arguments of inspect.lua.
func inspectArgs(limit int) []string { return []string{strconv.Itoa(limit)} }

// evidence is what inspect.lua's reply tells of the owners' clients
// beyond State, read at the same instant (describeOwners uses it).
type evidence struct {
	// heartbeats says, for each entry of State.Queue, whether the waiter
	// has a fairlock liveness deadline (X2): a fairlock waiter.
	heartbeats []bool
	// hashTTL and tokenTTL are the lock hash's and the token counter's
	// PTTLs (holderEvidence).
	hashTTL, tokenTTL int64
}

// decodeInspect decodes inspect.lua's reply.
func decodeInspect(rep backend.Reply) (State, evidence, error) {
	bad := func(what string) (State, evidence, error) {
		return State{}, evidence{}, fmt.Errorf("%w: inspect: %s", ErrUnexpectedReply, what)
	}
	if rep.Kind != backend.Array || len(rep.Elems) != 7 {
		return bad("not a 7-element array")
	}
	e := rep.Elems
	var nums [5]int64
	for i, j := range []int{0, 1, 2, 3, 6} {
		n, err := e[j].AsInt()
		if err != nil {
			return bad(err.Error())
		}
		nums[i] = n
	}
	st := State{ServerTime: time.UnixMilli(nums[0]), Token: nums[2], QueueLength: int(nums[3])}
	ev := evidence{hashTTL: nums[1], tokenTTL: nums[4]}
	switch pttl := nums[1]; {
	case pttl == -1:
		st.TTL = -1
	case pttl > 0:
		st.TTL = time.Duration(pttl) * time.Millisecond
	}
	fields, queue := e[4].Elems, e[5].Elems
	if len(fields)%2 != 0 || len(queue)%3 != 0 {
		return bad("odd field or queue list")
	}
	for i := 0; i < len(fields); i += 2 {
		n, err := fields[i+1].AsInt()
		if err != nil {
			return bad(err.Error())
		}
		// 0: handed over to this owner and not yet taken up by its
		// client (hand_over in prelude.lua): one hold.
		st.Holders = append(st.Holders, Holder{Owner: fields[i].Str, Count: max(int(n), 1)})
	}
	for i := 0; i < len(queue); i += 3 {
		w := Waiter{Owner: queue[i].Str}
		if s := queue[i+1].Str; s != "" {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return bad(err.Error())
			}
			w.Deadline = time.UnixMilli(int64(f))
		}
		beats, err := queue[i+2].AsInt()
		if err != nil {
			return bad(err.Error())
		}
		st.Queue = append(st.Queue, w)
		ev.heartbeats = append(ev.heartbeats, beats == 1)
	}
	return st, ev, nil
}
