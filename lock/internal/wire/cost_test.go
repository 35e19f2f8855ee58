package wire

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/redistest"
)

// What each standard path of the scripts costs the server, counted exactly:
// the redis.call commands one script run makes (INFO commandstats, reset
// before the run), on a real redis-server. The counts depend only on the
// state the run finds, so they are the same on every machine; the
// microseconds printed beside them are not, and nothing is asserted on
// them.

// costLease and the rest are the lock package's defaults.
const (
	costLease         = 30 * time.Second
	costWaiterTimeout = 5 * time.Second
	costSlack         = 5 * time.Minute
	costLatch         = 3 * time.Second
)

// costRig runs the scripts against one server, on one lock.
type costRig struct {
	t      *testing.T
	srv    *redistest.Server
	s      *Scripts
	k      Keys
	w      Wake
	req    byte // the last unlock request ID's first byte
	loaded map[string]bool
}

// newCostRig returns a rig on srv for the lock "orders", waking with
// PUBLISH.
func newCostRig(t *testing.T, srv *redistest.Server) *costRig {
	k, _ := Derive("orders")
	return &costRig{t: t, srv: srv, s: NewScripts(), k: k, loaded: map[string]bool{}, w: Wake{ChannelPrefix: k.Channel, Publish: "publish"}}
}

func owner(i int) string { return "c:" + strconv.Itoa(i) }

// run sends call as EVALSHA (loading the script first, so that its
// compilation is not in the figures) and returns the reply, failing on an
// error reply.
func (r *costRig) run(c backend.Call) any {
	r.t.Helper()
	if !r.loaded[c.Script.Name] {
		if sha, _ := r.srv.Do(r.t, "SCRIPT", "LOAD", c.Script.Source).(string); sha != c.Script.SHA1 {
			r.t.Fatalf("%s: SCRIPT LOAD says %q, digests.go %q", c.Script.Name, sha, c.Script.SHA1)
		}
		r.loaded[c.Script.Name] = true
	}
	args := append([]string{"EVALSHA", c.Script.SHA1, strconv.Itoa(len(c.Keys))}, c.Keys...)
	reply := r.srv.Do(r.t, append(args, c.Args...)...)
	if err, ok := reply.(error); ok {
		r.t.Fatalf("%s: %v", c.Script.Name, err)
	}
	return reply
}

func (r *costRig) acquire(who int, view View) any {
	r.t.Helper()
	return r.run(Acquire{Owner: owner(who), Lease: costLease, WaiterTimeout: costWaiterTimeout, Wake: r.w,
		MaxHint: costWaiterTimeout / 3, Slack: costSlack, View: view}.Call(r.s, r.k))
}

func (r *costRig) unlock(who int, view View) any {
	r.t.Helper()
	r.req++
	return r.run(Unlock{Owner: owner(who), Lease: costLease, Wake: r.w, Latch: costLatch, View: view,
		RequestID: [16]byte{r.req}}.Call(r.s, r.k))
}

func (r *costRig) renew(who int, token int64) any {
	r.t.Helper()
	return r.run(Renew{Owner: owner(who), Lease: costLease, Token: token, HoldLease: costLease, Wake: r.w}.Call(r.s, r.k))
}

func (r *costRig) leave(who int) any {
	r.t.Helper()
	return r.run(Leave{Owner: owner(who), Wake: r.w}.Call(r.s, r.k))
}

// token is the token counter's value: the latest hold's token.
func (r *costRig) token() int64 {
	r.t.Helper()
	s, _ := r.srv.Do(r.t, "GET", r.k.Token).(string)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		r.t.Fatalf("token counter %q: %v", s, err)
	}
	return n
}

// newHold is the want of a path whose reply is a new hold's token alone
// (acquire.lua).
const newHold = "<token>"

// isNewHold reports whether reply, as fmt.Sprint prints it, is a new
// hold's token alone: a positive integer.
func isNewHold(reply string) bool {
	n, err := strconv.ParseInt(reply, 10, 64)
	return err == nil && n > 0
}

// queue sets up the common state: owner 0 holds (count 1), owners 1..n
// are queued in order. It returns the holder's token.
func (r *costRig) queue(n int) int64 {
	r.t.Helper()
	r.srv.Do(r.t, "FLUSHALL")
	if got := fmt.Sprint(r.acquire(0, View{})); !isNewHold(got) {
		r.t.Fatalf("owner 0 did not take the free lock: %s", got)
	}
	for i := 1; i <= n; i++ {
		if got := fmt.Sprint(r.acquire(i, View{})); !strings.HasPrefix(got, "[0 ") {
			r.t.Fatalf("owner %d was not queued: %s", i, got)
		}
	}
	return r.token()
}

// costRun is what one script run cost: calls per command (the script
// call itself left out) and the microseconds commandstats gives.
type costRun struct {
	calls      map[string]int64
	scriptUsec int64 // the script call's, its commands included
	cmdUsec    int64 // its commands' own
}

func (c costRun) total() int64 {
	var n int64
	for _, v := range c.calls {
		n += v
	}
	return n
}

// byCommand lists the calls, most first.
func (c costRun) byCommand() string {
	names := make([]string, 0, len(c.calls))
	for n := range c.calls {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		if c.calls[a] != c.calls[b] {
			return int(c.calls[b] - c.calls[a])
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %d", strings.ToUpper(n), c.calls[n])
	}
	return strings.Join(parts, ", ")
}

// measure runs f (one script call) between a reset of the server's
// statistics and a read of them.
func (r *costRig) measure(f func() any) (costRun, any) {
	r.t.Helper()
	r.srv.Do(r.t, "CONFIG", "RESETSTAT")
	reply := f()
	info, _ := r.srv.Do(r.t, "INFO", "commandstats").(string)
	run := costRun{calls: map[string]int64{}}
	for name, st := range commandStats(info) {
		switch name {
		case "config|resetstat", "info", "script|load":
		case "eval", "evalsha":
			run.scriptUsec += st.usec
		default:
			run.calls[name] += st.calls
			run.cmdUsec += st.usec
		}
	}
	return run, reply
}

// cmdStat is one command's line of INFO commandstats.
type cmdStat struct{ calls, usec int64 }

// commandStats reads INFO commandstats, by command name ("evalsha",
// "config|resetstat").
func commandStats(info string) map[string]cmdStat {
	stats := map[string]cmdStat{}
	for line := range strings.Lines(info) {
		name, fields, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		var st cmdStat
		for field := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(field, "=")
			switch k {
			case "calls":
				st.calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		stats[name] = st
	}
	return stats
}

// costPath is one measured path: its name, the redis.call commands it may
// make at most (what the scripts make now: a path that makes more fails,
// and one that makes fewer should lower its budget),
// the set-up and the measured call, which returns the reply to check.
type costPath struct {
	name   string
	budget int64
	run    func(r *costRig) (costRun, any)
	want   string // the reply's prefix, as fmt.Sprint prints it
}

// costPaths are the standard paths. "behind K" is a queue of K waiters
// behind the holder; 15 is the benchmark's 16 contenders.
func costPaths() []costPath {
	enqueue := func(k int) func(r *costRig) (costRun, any) {
		return func(r *costRig) (costRun, any) {
			r.queue(k)
			return r.measure(func() any { return r.acquire(k+1, View{}) })
		}
	}
	heartbeat := func(who int) func(r *costRig) (costRun, any) {
		return func(r *costRig) (costRun, any) {
			r.queue(15)
			return r.measure(func() any { return r.acquire(who, View{}) })
		}
	}
	leave := func(who int) func(r *costRig) (costRun, any) {
		return func(r *costRig) (costRun, any) {
			r.queue(15)
			return r.measure(func() any { return r.leave(who) })
		}
	}
	return []costPath{
		{"uncontended acquire (free, no queue)", 5, func(r *costRig) (costRun, any) {
			// The token counter lives on from the pair before, as
			// it does while the lock is in use.
			token := r.queue(0)
			r.unlock(0, View{Token: token, Count: 1})
			return r.measure(func() any { return r.acquire(0, View{}) })
		}, newHold},
		{"first acquire (free, no token counter)", 6, func(r *costRig) (costRun, any) {
			r.srv.Do(r.t, "FLUSHALL")
			return r.measure(func() any { return r.acquire(0, View{}) })
		}, newHold},
		{"uncontended unlock (count 1, no queue)", 5, func(r *costRig) (costRun, any) {
			token := r.queue(0)
			return r.measure(func() any { return r.unlock(0, View{Token: token, Count: 1}) })
		}, "0"},
		{"re-entry (count 1 to 2, no queue)", 8, func(r *costRig) (costRun, any) {
			token := r.queue(0)
			return r.measure(func() any { return r.acquire(0, View{Token: token, Count: 1}) })
		}, "[1 "},
		{"enqueue behind holder, 0 waiters", 14, enqueue(0), "[0 "},
		{"enqueue behind holder, 1 waiter", 14, enqueue(1), "[0 "},
		{"enqueue behind holder, 14 waiters", 14, enqueue(14), "[0 "},
		{"heartbeat, head of 15", 14, heartbeat(1), "[0 "},
		{"heartbeat, 8th of 15", 13, heartbeat(8), "[0 "},
		{"heartbeat, tail of 15", 12, heartbeat(15), "[0 "},
		{"unlock hand-over, 15 waiters", 15, func(r *costRig) (costRun, any) {
			token := r.queue(15)
			return r.measure(func() any { return r.unlock(0, View{Token: token, Count: 1}) })
		}, "0"},
		{"unlock hand-over by a grant not taken up, 14 waiters", 15, func(r *costRig) (costRun, any) {
			token := r.queue(15)
			r.unlock(0, View{Token: token, Count: 1})
			token = r.token()
			return r.measure(func() any { return r.unlock(1, View{Token: token, Count: 1}) })
		}, "0"},
		{"take-up of a grant (renew), 14 waiters", 7, func(r *costRig) (costRun, any) {
			token := r.queue(15)
			r.unlock(0, View{Token: token, Count: 1})
			token = r.token()
			return r.measure(func() any { return r.renew(1, token) })
		}, "2"},
		{"renew of a hold, 15 waiters", 6, func(r *costRig) (costRun, any) {
			token := r.queue(15)
			return r.measure(func() any { return r.renew(0, token) })
		}, "1"},
		{"leave, head of 15", 12, leave(1), "[1 "},
		{"leave, 8th of 15", 10, leave(8), "[1 "},
		{"leave, tail of 15", 13, leave(15), "[1 "},
	}
}

// TestScriptCommands measures the redis.call commands of each standard
// path and prints them as a table (go test -v -run TestScriptCommands
// ./lock/internal/wire/); a path making more than its budget fails. The
// per-acquisition line is what 16 contenders cost: the holder's unlock
// handing over (to a grant not taken up, as when the holder had just been
// handed the lock) and the enqueue of a contender that comes back behind
// 14 others.
func TestScriptCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	r := newCostRig(t, srv)
	k := r.k
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-55s %8s %8s %8s  %s\n", "path", "commands", "script", "cmds", "by command")
	runs := map[string]costRun{}
	for _, p := range costPaths() {
		run, reply := p.run(r)
		runs[p.name] = run
		if got := fmt.Sprint(reply); p.want == newHold && !isNewHold(got) || p.want != newHold && !strings.HasPrefix(got, p.want) {
			t.Errorf("%s: reply %s, want %s...", p.name, got, p.want)
		}
		// Whatever a path does, no key of the lock is left without an
		// expiry (X15).
		for _, key := range k.Script() {
			if ttl, _ := srv.Do(t, "PTTL", key).(int64); ttl == -1 {
				t.Errorf("%s: %s has no expiry", p.name, key)
			}
		}
		if run.total() > p.budget {
			t.Errorf("%s: %d commands, budget %d: %s", p.name, run.total(), p.budget, run.byCommand())
		}
		fmt.Fprintf(&b, "%-55s %8d %6dµs %6dµs  %s\n", p.name, run.total(), run.scriptUsec, run.cmdUsec, run.byCommand())
	}
	pair := runs["uncontended acquire (free, no queue)"].total() + runs["uncontended unlock (count 1, no queue)"].total()
	acq := runs["unlock hand-over by a grant not taken up, 14 waiters"].total() + runs["enqueue behind holder, 14 waiters"].total()
	fmt.Fprintf(&b, "uncontended pair: %d commands + 2 script calls = %d\n", pair, pair+2)
	fmt.Fprintf(&b, "per acquisition, 16 contenders (hand-over unlock + enqueue behind 14): %d commands + 2 script calls = %d\n", acq, acq+2)
	t.Log(b.String())
}

// TestHandOverSkipsDeadHeads: the hand-over reads the queue's first two
// entries once (unlock_fast.lua) and follows them as it pops dead heads:
// whatever run of heads is dead, the grant goes to the first live waiter
// and the queue behind it is left whole.
func TestHandOverSkipsDeadHeads(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	r := newCostRig(t, srv)
	k := r.k
	for _, c := range []struct {
		queued, dead int
	}{{1, 0}, {1, 1}, {2, 1}, {2, 2}, {3, 1}, {3, 2}, {5, 3}, {5, 5}} {
		token := r.queue(c.queued)
		for i := 1; i <= c.dead; i++ {
			srv.Do(t, "ZADD", k.Alive, "1", owner(i)) // liveness deadline long past
		}
		if got := fmt.Sprint(r.unlock(0, View{Token: token, Count: 1})); got != "0" {
			t.Fatalf("%d queued, %d dead: unlock %s, want 0", c.queued, c.dead, got)
		}
		fields := fmt.Sprint(srv.Do(t, "HKEYS", k.Hash))
		queue := fmt.Sprint(srv.Do(t, "LRANGE", k.Queue, "0", "-1"))
		var wantFields, wantQueue []string
		if c.dead < c.queued {
			wantFields = []string{owner(c.dead + 1)}
		}
		for i := c.dead + 2; i <= c.queued; i++ {
			wantQueue = append(wantQueue, owner(i))
		}
		if fields != fmt.Sprint(wantFields) || queue != fmt.Sprint(wantQueue) {
			t.Errorf("%d queued, first %d dead: holder %s and queue %s after the hand-over, want %v and %v",
				c.queued, c.dead, fields, queue, wantFields, wantQueue)
		}
	}
}
