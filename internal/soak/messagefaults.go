package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/internal/faultybackend"
	"github.com/fairlock/fairlock/lock"
	"github.com/redis/go-redis/v9"
)

// Faults at the level of one message (FaultReplyLost, FaultHoldBack,
// FaultNoticeBurst): the nemesis arms the faultybackend decorator around
// a Go client's backend for its next script request, or floods the
// client's channels. The standalone nemesis and the cluster's both make
// them (messageFaults).

// messageFaults makes the faults on single messages of a run's Go
// clients, for the standalone nemesis and the cluster's, which embed it:
// what it arms and floods, and the History entries and lost grants the
// checkers read, are the same on both.
type messageFaults struct {
	t       *testing.T
	h       *History
	pub     redis.UniversalClient // a burst publishes through it
	clients []*goClient
	admin   *adminActor // a burst force-unlocks every lock through it
	// without are the fault kinds the nemesis leaves out, these and its
	// own (Config.Without).
	without []FaultKind
	sharing *sharedNow // the shared owners' calls at once, which some faults aim at
	rnd     *rand.Rand // the nemesis' draws, these among them
	// sharded: the clients wake waiters with SPUBLISH and listen with
	// SSUBSCRIBE (PublishAuto on a Redis 7+ cluster, Redisson 3.22+'s
	// way there), so a burst floods their wake-up channels so.
	sharded bool
}

// messageFault runs, one time in two, faults on single messages of the
// Go client target (none for the Java owners' connection) and reports
// them; false when it ran none. They are short and cut nobody off, so
// they take half the nemesis' turns and leave the other faults theirs.
func (n *messageFaults) messageFault(target string) ([]Fault, bool) {
	if f, ok := n.sharedFault(); ok {
		return []Fault{f}, true
	}
	c := n.goClient(target)
	kind, ok := n.draw()
	if c == nil || !ok {
		return nil, false
	}
	if kind == FaultNoticeBurst {
		if u := n.unwatched(); u != nil && n.rnd.IntN(2) == 0 {
			// A client without key watches hears of a loss only by
			// message: a burst matters most there (issue 46 defect 2).
			c = u
		}
		return []Fault{n.burst(c)}, true
	}
	var out []Fault
	for range 1 + n.rnd.IntN(3) {
		if f, ok := n.armOne(c, kind); ok {
			out = append(out, f)
		}
	}
	return out, true
}

// draw draws, one time in two, the kind of the next faults on single
// messages: a reply lost 3 times in 20, a request held back 3, a notice
// burst 4; false for none, and for a kind the nemesis leaves out.
func (n *messageFaults) draw() (FaultKind, bool) {
	var kind FaultKind
	switch r := n.rnd.IntN(20); {
	case r < 3:
		kind = FaultReplyLost
	case r < 6:
		kind = FaultHoldBack
	case r < 10:
		kind = FaultNoticeBurst
	default:
		return "", false
	}
	return kind, !slices.Contains(n.without, kind)
}

// goClient returns the Go client labelled label (nil: none).
func (n *messageFaults) goClient(label string) *goClient {
	for _, c := range n.clients {
		if c.label == label {
			return c
		}
	}
	return nil
}

// unwatched returns the first Go client whose adapter watches no keys
// (nil: none).
func (n *messageFaults) unwatched() *goClient {
	for _, c := range n.clients {
		if !c.adapter.Watches {
			return c
		}
	}
	return nil
}

// faultScripts are the scripts a message-level fault may take: half the
// time an acquire's attempt (whose lost grant is what issue 46 defect 1
// needs), a quarter the others a holder or waiter sends, a quarter any.
var faultScripts = [][]string{{"acquire"}, {"acquire"}, {"unlock", "leave", "renew"}, nil}

// armWithin bounds how long an armed fault waits for a request to take it.
const armWithin = 3 * time.Second

// armOne draws one fault of kind on c's backend and arms it (arm): a
// reply lost, or a request held back, on any request or for a while on
// one owner's attempts.
func (n *messageFaults) armOne(c *goClient, kind FaultKind) (Fault, bool) {
	fault := faultybackend.Fault{Mode: faultybackend.LoseReply, Delay: time.Duration(n.rnd.IntN(300)) * time.Millisecond,
		Scripts: faultScripts[n.rnd.IntN(len(faultScripts))]}
	switch {
	case kind == FaultHoldBack:
		// Below the waiter timeout's margin (a held-back heartbeat leaves
		// its waiter live) and the attempt bound (5 s).
		fault.Mode, fault.Delay = faultybackend.HoldBack, time.Duration(50+n.rnd.IntN(2450))*time.Millisecond
	case n.rnd.IntN(2) == 0:
		// Every reply to one owner's attempts on one lock, for a while:
		// a call may give up with each of its grants' replies lost (issue
		// 46 defect 1 needs that).
		fault.Scripts, fault.For = []string{"acquire"}, time.Duration(200+n.rnd.IntN(1300))*time.Millisecond
	}
	return n.arm(c, kind, fault, nil)
}

// sharedFault, two times in three while a shared owner's calls at once
// are in flight (Lock and TryLock of one Mutex, both), loses every reply
// to that owner's attempts on its lock for 0.3-1.5 s, three times in four
// just after the lock's hash was DELeted by hand, which frees it without a
// message to its waiters: issue 46 defect 1's window (a call that gives
// up with each of its grants' replies lost, its sibling still waiting).
// false when it ran none.
func (n *messageFaults) sharedFault() (Fault, bool) {
	if n.sharing == nil || slices.Contains(n.without, FaultReplyLost) || n.rnd.IntN(3) == 0 {
		return Fault{}, false
	}
	now := n.sharing.list()
	if len(now) == 0 {
		return Fault{}, false
	}
	pick := now[n.rnd.IntN(len(now))]
	c := n.goClient(pick[0])
	if c == nil {
		return Fault{}, false
	}
	fault := faultybackend.Fault{Mode: faultybackend.LoseReply, Scripts: []string{"acquire"}, Key: pick[1],
		For: time.Duration(300+n.rnd.IntN(1200)) * time.Millisecond}
	var free func()
	if n.rnd.IntN(4) != 0 {
		free = func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			n.admin.evict(ctx, c, pick[1], KindDelHash)
		}
	}
	f, ok := n.arm(c, FaultReplyLost, fault, free)
	f.Detail += "; aimed at a pair of calls at once"
	if free != nil {
		f.Detail += ", after a DEL by hand"
	}
	return f, ok
}

// arm arms c's backend with fault, runs then (when not nil), and waits
// for a request to take the fault; it returns the fault as it happened,
// false when no request took it in time.
func (n *messageFaults) arm(c *goClient, kind FaultKind, fault faultybackend.Fault, then func()) (Fault, bool) {
	fb := c.faults()
	hits := fb.Arm(fault)
	if then != nil {
		then()
	}
	t := time.NewTimer(armWithin)
	defer t.Stop()
	var hit faultybackend.Hit
	select {
	case hit = <-hits:
	case <-t.C:
		if fb.Disarm() {
			return Fault{}, false // nothing took it
		}
		// Taken just now: its report comes once it ran and returned.
		select {
		case hit = <-hits:
		case <-time.After(fault.For + fault.Delay + 15*time.Second):
			n.t.Errorf("soak: a %s fault on %s taken but never reported", kind, c.label)
			return Fault{}, false
		}
	}
	end := hit.Returned
	if hit.Ran.After(end) {
		end = hit.Ran
	}
	f := Fault{Kind: kind, Target: c.label, Start: n.h.At(hit.Sent), End: n.h.At(end),
		Detail: fmt.Sprintf("%s %s, delay %v", hit.Script, strings.Join(hit.Keys[:min(1, len(hit.Keys))], " "), fault.Delay)}
	if fault.For > 0 {
		f.Detail += fmt.Sprintf(", %d requests in %v", hit.Requests, fault.For)
	}
	if hit.Err != nil {
		f.Detail += "; the server did not answer it: " + hit.Err.Error()
	}
	f.Lost = n.lostGrants(c, hit)
	if len(f.Lost) > 0 {
		f.Detail += fmt.Sprintf("; %d grants lost", len(f.Lost))
	}
	return f, true
}

// lostGrants are the grants among hit's lost replies: acquire.lua's
// reply token (a new hold) or {1, token, count} (RULES.md, Keyspace), the
// lock its first key.
func (n *messageFaults) lostGrants(c *goClient, hit faultybackend.Hit) []LostGrant {
	if hit.Script != "acquire" || len(hit.Keys) == 0 {
		return nil
	}
	var out []LostGrant
	for _, l := range hit.Lost {
		token := l.Reply.Int
		if v, err := l.Reply.AsInts(); err == nil && len(v) == 3 && v[0] == 1 {
			token = v[1]
		} else if l.Reply.Kind != backend.Int || token < 0 {
			continue
		}
		out = append(out, LostGrant{Lock: hit.Keys[0], Client: c.label, Token: token, Sent: n.h.At(l.Sent), Ran: n.h.At(l.Ran)})
	}
	return out
}

// burstSize is how many messages a notice burst sends on each of its
// channels: four times what a subscription queues.
const burstSize = 4 * backend.SubscriptionBuffer

// burst floods c's channel (where its loss notices come) and its owners'
// wake-up channels on the shared locks, round after round of burstSize
// messages each (flood), while every lock is force-unlocked at once - and, when
// one of c's acquires comes within armWithin, while that acquire's reply
// is held back after its script ran (issue 46 defect 2: the notice that
// its grant was force-unlocked is among what the subscription summarises).
func (n *messageFaults) burst(c *goClient) Fault {
	f := Fault{Kind: FaultNoticeBurst, Target: c.label, Start: n.h.Now()}
	channels, err := burstChannels(c, n.sharded)
	if err != nil {
		f.Detail = err.Error()
		f.End = n.h.Now()
		return f
	}
	fb := c.faults()
	delay := time.Duration(200+n.rnd.IntN(600)) * time.Millisecond
	hits := fb.Arm(faultybackend.Fault{Mode: faultybackend.DelayReply, Delay: delay, Scripts: []string{"acquire"}})
	for end := time.Now().Add(armWithin); fb.Armed() && time.Now().Before(end); {
		time.Sleep(time.Millisecond) // bounded polling: the flood waits for a grant in flight
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	by, spare := n.clients[n.rnd.IntN(len(n.clients))], n.rnd.IntN(4) != 0
	forced := make(chan struct{})
	go func() {
		defer close(forced)
		n.admin.forceAll(ctx, by, spare)
	}()
	rounds, err := n.flood(ctx, channels, forced)
	if err != nil {
		f.Detail = "PUBLISH: " + err.Error()
	}
	<-forced
	if f.Detail == "" {
		f.Detail = fmt.Sprintf("%d messages on each of %s", rounds*burstSize, channelList(channels))
	}
	if !fb.Disarm() {
		select {
		case hit := <-hits:
			f.Detail += fmt.Sprintf("; the reply to %s %s held back %v after it ran", hit.Script, strings.Join(hit.Keys[:min(1, len(hit.Keys))], " "), delay)
		case <-time.After(delay + 15*time.Second):
			n.t.Errorf("soak: a delayed reply on %s taken but never reported", c.label)
		}
	}
	f.End = n.h.Now()
	return f
}

// maxFloodRounds bounds a burst's rounds of burstSize messages.
const maxFloodRounds = 20

// flood publishes burstSize messages on each of channels, in one
// pipeline a round, round after round until forced is closed and one
// round more (at most maxFloodRounds): the force-unlocks' loss notices
// come in the middle of a flood, while the client's queue is full, not
// after a flood it may have drained. It returns the rounds sent.
func (n *messageFaults) flood(ctx context.Context, channels []channel, forced <-chan struct{}) (int, error) {
	last := false
	for rounds := 1; ; rounds++ {
		pipe := n.pub.Pipeline()
		for range burstSize {
			for _, ch := range channels {
				// Redisson's unlock message: a waiter checks again, the
				// client's own channel reads it as nothing.
				if ch.sharded {
					pipe.SPublish(ctx, ch.name, "0") // to the node of the channel's slot, the lock's
				} else {
					pipe.Publish(ctx, ch.name, "0")
				}
			}
		}
		if _, err := pipe.Exec(ctx); err != nil || last || rounds == maxFloodRounds {
			return rounds, err
		}
		select {
		case <-forced:
			last = true
		default:
		}
	}
}

// channel is a channel a burst floods, and whether its listeners
// listen sharded (SSUBSCRIBE: it takes SPUBLISH).
type channel struct {
	name    string
	sharded bool
}

// burstChannels are c's channel and its shared-lock owners' wake-up
// channels (RULES.md, Keyspace: the lock's channel, ":" and the owner's
// field), named from the owner fields of c's current client. The client
// listens on its own channel with SUBSCRIBE everywhere (a cluster's
// PUBLISH reaches every node); on its wake-up channels sharded when
// sharded.
func burstChannels(c *goClient, sharded bool) ([]channel, error) {
	lc := c.client()
	var out []channel
	for k, name := range sharedNames {
		m, err := lc.NewMutex(name, lock.WithOwnerID(int64(100+k)))
		if err != nil {
			return nil, err
		}
		field := m.Owner()
		if k == 0 {
			out = append(out, channel{name: "fairlock_client:" + field[:strings.LastIndexByte(field, ':')]})
		}
		out = append(out, channel{name: "redisson_lock__channel:{" + name + "}:" + field, sharded: sharded})
	}
	return out, nil
}

// channelList names channels, each sharded one marked "(SPUBLISH)".
func channelList(channels []channel) string {
	names := make([]string, len(channels))
	for i, ch := range channels {
		names[i] = ch.name
		if ch.sharded {
			names[i] += " (SPUBLISH)"
		}
	}
	return strings.Join(names, ", ")
}
