package wire

import (
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/fairlock/fairlock/backend"
)

// Acquire is one run of acquire.lua: take the lock, re-enter it, or queue.
type Acquire struct {
	Owner         string
	Lease         time.Duration
	WaiterTimeout time.Duration
	Once          bool // never queue (TryLock with no wait)
	Wake          Wake
	MaxHint       time.Duration // the longest wait hint: the heartbeat interval
	Slack         time.Duration // how long the queue keys outlive the latest deadline
	View          View
	// HoldLease is the lease the hold View names was taken with (0: none):
	// a re-entry of a hand-over grant not taken up yet takes it up with
	// the longer of it and Lease.
	HoldLease time.Duration
	// Retry says the request may have run before (it is sent again after
	// an error): only then may a hold the client does not know of be its
	// own grant.
	Retry bool
	// Spent is the highest token of a hold the owner has taken up or given
	// back (0: none): a field with that token or a lower one is the
	// leftover of a hold the client has ended, never a grant of this
	// request's earlier try, whose token would be newer.
	Spent int64
}

// Call returns the script invocation.
func (a Acquire) Call(s *Scripts, k Keys) backend.Call {
	mode := "wait"
	if a.Once {
		mode = "once"
	}
	n := decimals(a.Lease.Milliseconds(), a.WaiterTimeout.Milliseconds(), a.MaxHint.Milliseconds(), a.Slack.Milliseconds(),
		a.View.Token, int64(a.View.Count), a.HoldLease.Milliseconds(), a.Spent, (a.Lease + tokenKeep).Milliseconds())
	// KEYS (k.Script()) then ARGV, in one slice.
	kv := append(k.appendScript(make([]string, 0, 19)),
		a.Owner, n[0], n[1], mode,
		a.Wake.ChannelPrefix, a.Wake.Publish, n[2], n[3],
		n[4], n[5], // View
		n[6], flag(a.Retry), n[7], n[8],
	)
	return backend.Call{Script: s.acquire, Keys: kv[:5:5], Args: kv[5:]}
}

// tokenKeep is how much longer than a hold the token counter lives: base.lua's
// token_keep, which TestTokenKeep checks.
const tokenKeep = time.Second

// AcquireReply is acquire.lua's answer.
type AcquireReply struct {
	Acquired bool
	Token    int64         // Acquired: the hold's fencing token
	Count    int           // Acquired: the hold count (1: new; more: re-entered)
	Hint     time.Duration // waiting: how long to wait at most
	Position int           // waiting: the 1-based position when this call queued the owner, else 0
	Head     bool          // waiting: the owner is first in line
	Now      int64         // waiting: the server's time, µs
	// Gone says the hold the request named (View) is gone from the
	// server: nothing was granted or queued.
	Gone bool
}

// DecodeAcquire decodes acquire.lua's reply.
func DecodeAcquire(rep backend.Reply) (AcquireReply, error) {
	if rep.Kind == backend.Int && rep.Int >= 0 {
		// A new hold: its token (0 only for a grant taken up after its
		// token counter was lost, as the table reply said before).
		return AcquireReply{Acquired: true, Token: rep.Int, Count: 1}, nil
	}
	v, err := rep.AsInts()
	switch {
	case err == nil && len(v) == 1 && v[0] == 2:
		return AcquireReply{Gone: true}, nil
	case err == nil && len(v) == 3 && v[0] == 1:
		return AcquireReply{Acquired: true, Token: v[1], Count: int(v[2])}, nil
	case err == nil && len(v) == 3 && v[0] == 0: // "once" mode
		return AcquireReply{Hint: time.Duration(v[1]) * time.Millisecond}, nil
	case err == nil && len(v) == 5 && v[0] == 0:
		return AcquireReply{Hint: time.Duration(v[1]) * time.Millisecond, Position: int(v[2]), Head: v[3] == 1, Now: v[4]}, nil
	}
	return AcquireReply{}, unexpected("acquire", rep)
}

// Unlock is one run of unlock.lua: release one hold.
type Unlock struct {
	Owner     string
	Lease     time.Duration // while holds remain the lock lives at least this long
	Wake      Wake
	Latch     time.Duration // how long the result is kept for a retry
	View      View          // the hold released, as the client knows it
	RequestID [16]byte      // names the latch, in hex (Redisson's request IDs)
	// Retry says the request may have run before: only then can its
	// latch exist, and only then does the script read it.
	Retry bool
}

// Call returns the script invocation.
func (u Unlock) Call(s *Scripts, k Keys) backend.Call {
	n := decimals(u.Lease.Milliseconds(), u.Latch.Milliseconds(), u.View.Token, int64(u.View.Count))
	// KEYS (k.Script() and the latch) then ARGV, in one slice.
	kv := append(k.appendScript(make([]string, 0, 14)), latchKey(k, u.RequestID),
		u.Owner, n[0], u.Wake.ChannelPrefix, u.Wake.Publish, n[1], n[2], n[3], flag(u.Retry),
	)
	return backend.Call{Script: s.unlock, Keys: kv[:6:6], Args: kv[6:]}
}

// latchKey is the latch of request id: k.Latch, ":" and the ID in hex,
// built in one allocation.
func latchKey(k Keys, id [16]byte) string {
	var hexID [2 * len(id)]byte
	hex.Encode(hexID[:], id[:])
	var b strings.Builder
	b.Grow(len(k.Latch) + 1 + len(hexID))
	b.WriteString(k.Latch)
	b.WriteByte(':')
	b.Write(hexID[:])
	return b.String()
}

// DecodeUnlock returns the hold count left (0: released), or -1 when the
// owner did not hold the lock.
func DecodeUnlock(rep backend.Reply) (int, error) {
	n, err := rep.AsInt()
	if err != nil || n < -1 {
		return 0, unexpected("unlock", rep)
	}
	return int(n), nil
}

// Leave is one run of leave.lua: take the owner out of the queue.
type Leave struct {
	Owner string
	Wake  Wake
	Known int64 // the token of the hold the client knows (0: none); its grant is kept
	// Until is the server's time, in ms, from which the leave does
	// nothing (Expired): the client has given up on it by then, and the
	// owner may have queued again. 0: no limit.
	Until int64
}

// Call returns the script invocation.
func (l Leave) Call(s *Scripts, k Keys) backend.Call {
	n := decimals(l.Known, l.Until)
	return backend.Call{Script: s.leave, Keys: k.Script(), Args: []string{l.Owner, l.Wake.ChannelPrefix, l.Wake.Publish, n[0], n[1]}}
}

// LeaveReply is what leave.lua reports: whether the owner was queued, and
// the hold it has on the server (Count 0: none).
type LeaveReply struct {
	Queued bool
	Held   View
	// Expired: the leave reached the server at its Until or later, and
	// did nothing; Now is the server's time then (µs).
	Expired bool
	Now     int64
}

// DecodeLeave decodes leave.lua's reply.
func DecodeLeave(rep backend.Reply) (LeaveReply, error) {
	v, err := rep.AsInts()
	switch {
	case err == nil && len(v) == 2 && v[0] == -1:
		return LeaveReply{Expired: true, Now: v[1]}, nil
	case err != nil || len(v) != 3:
		return LeaveReply{}, unexpected("leave", rep)
	}
	return LeaveReply{Queued: v[0] == 1, Held: View{Token: v[2], Count: int(v[1])}}, nil
}

// Renew is one run of renew.lua: a renewal, an Extend, or (Lease 0) a
// check that the hold still exists.
type Renew struct {
	Owner string
	Lease time.Duration // 0: only check
	Token int64
	// HoldLease is the lease the hold was taken with: a hand-over grant
	// not taken up yet gets the longer of it and Lease.
	HoldLease time.Duration
	Wake      Wake // to tell the head when a grant's expiry comes down
}

// Call returns the script invocation.
func (r Renew) Call(s *Scripts, k Keys) backend.Call {
	n := decimals(r.Lease.Milliseconds(), r.Token, r.HoldLease.Milliseconds())
	return backend.Call{Script: s.renew, Keys: k.Script(), Args: []string{r.Owner, n[0], n[1], n[2], r.Wake.ChannelPrefix, r.Wake.Publish}}
}

// RenewReply is renew.lua's answer.
type RenewReply int

// Renew answers.
const (
	RenewLost   RenewReply = 0 // the hold no longer exists
	RenewHeld   RenewReply = 1 // it does (renewed to the lease, if one was sent)
	RenewTookUp RenewReply = 2 // it does, and this call took its hand-over grant up with the longer lease
)

// Credit is the lease r moved the server's expiry to, counted from the
// request's send time (0: none the client may count).
func (a RenewReply) Credit(r Renew) time.Duration {
	if a == RenewTookUp {
		return max(r.Lease, r.HoldLease)
	}
	return r.Lease
}

// DecodeRenew decodes renew.lua's reply.
func DecodeRenew(rep backend.Reply) (RenewReply, error) {
	n, err := rep.AsInt()
	if err != nil || n < int64(RenewLost) || n > int64(RenewTookUp) {
		return RenewLost, unexpected("renew", rep)
	}
	return RenewReply(n), nil
}

// Evict is one run of force_unlock.lua (Delete false) or delete.lua.
type Evict struct {
	Delete bool
	Wake   Wake
}

// Call returns the script invocation.
func (e Evict) Call(s *Scripts, k Keys) backend.Call {
	script := s.forceUnlock
	if e.Delete {
		script = s.deleteLock
	}
	return backend.Call{Script: script, Keys: k.Script(), Args: []string{e.Wake.ChannelPrefix, e.Wake.Publish, ClientChannelPrefix}}
}

// Prune is one run of prune.lua: drop every dead waiter.
type Prune struct{ Wake Wake }

// Call returns the script invocation.
func (p Prune) Call(s *Scripts, k Keys) backend.Call {
	return backend.Call{Script: s.prune, Keys: k.Script(), Args: []string{p.Wake.ChannelPrefix, p.Wake.Publish}}
}

// DecodeCount decodes the count force_unlock.lua (holders removed),
// delete.lua (keys removed) and prune.lua (entries removed) return.
func DecodeCount(c backend.Call, rep backend.Reply) (int, error) {
	n, err := rep.AsInt()
	if err != nil || n < 0 {
		return 0, unexpected(c.Script.Name, rep)
	}
	return int(n), nil
}

// Describe is one run of describe.lua: write a client's description for
// TTL, or delete it (Value "").
type Describe struct {
	Key   string // DescriptionPrefix + client ID, after the key prefix
	Value string
	TTL   time.Duration
}

// Call returns the script invocation.
func (d Describe) Call(s *Scripts) backend.Call {
	return backend.Call{Script: s.describe, Keys: []string{d.Key}, Args: []string{d.Value, ms(d.TTL)}}
}

// ReadDescription is one run of read_description.lua; its reply is the
// description (a string) or nil.
func ReadDescription(s *Scripts, key string) backend.Call {
	return backend.Call{Script: s.readDescription, Keys: []string{key}}
}

func unexpected(script string, rep backend.Reply) error {
	return fmt.Errorf("%w: %s: %v", backend.ErrUnexpectedReply, script, rep)
}
