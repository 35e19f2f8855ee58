package wire

import (
	"context"
	flagpkg "flag"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/redistest"
	"github.com/redis/rueidis"
)

// turns drives the scripts through the turns BenchmarkContended and
// TestScriptTurns measure: owners take the lock in turn, each turn the
// holder's Unlock (handing the lock over to the head of the queue, or
// releasing it when the owner is alone) and the same owner's Lock after it
// (queuing behind the others, or taking the lock back when alone).
type turns struct {
	tb      testing.TB
	s       *Scripts
	k       Keys
	w       Wake
	owners  int
	do      func(backend.Call) string
	req     uint64
	holder  int
	token   int64
	started bool
}

// newTurns queues owners on the lock name (the first holds it) through do,
// which returns a reply as fmt.Sprint prints it. The lock's keys must not
// exist.
func newTurns(tb testing.TB, s *Scripts, name string, owners int, do func(backend.Call) string) *turns {
	tb.Helper()
	k, _ := Derive(name)
	tr := &turns{tb: tb, s: s, k: k, w: Wake{ChannelPrefix: k.Channel, Publish: "publish"}, owners: owners, do: do}
	for i := range owners {
		got := tr.acquire(i)
		if i == 0 {
			// The token alone: the first owner holds with it.
			t, err := strconv.ParseInt(got, 10, 64)
			if err != nil || t <= 0 {
				tb.Fatalf("first acquire: %s, want a hold's token", got)
			}
			tr.token = t
		} else if !strings.HasPrefix(got, "[0 ") {
			tb.Fatalf("acquire by %d: %s, want queued", i, got)
		}
	}
	return tr
}

func (tr *turns) acquire(who int) string {
	return tr.do(Acquire{Owner: owner(who), Lease: costLease, WaiterTimeout: costWaiterTimeout, Wake: tr.w,
		MaxHint: costWaiterTimeout / 3, Slack: costSlack}.Call(tr.s, tr.k))
}

func (tr *turns) unlock(who int, token int64) string {
	tr.req++
	var id [16]byte
	copy(id[:], strconv.FormatUint(tr.req, 16))
	return tr.do(Unlock{Owner: owner(who), Lease: costLease, Wake: tr.w, Latch: costLatch,
		View: View{Token: token, Count: 1}, RequestID: id}.Call(tr.s, tr.k))
}

// turn hands the lock over (or releases it) and has the old holder ask
// again; the new holder's token is the old one's plus one (prelude.lua,
// next_token).
func (tr *turns) turn() {
	if got := tr.unlock(tr.holder, tr.token); got != "0" {
		tr.tb.Fatalf("unlock by %d: %s, want 0", tr.holder, got)
	}
	want := strconv.FormatInt(tr.token+1, 10) // alone: the lock back, the next token
	if tr.owners > 1 {
		want = "[0 " // queued behind the others
	}
	if got := tr.acquire(tr.holder); !strings.HasPrefix(got, want) {
		tr.tb.Fatalf("acquire by %d: %s, want %q", tr.holder, got, want)
	}
	tr.token++
	tr.holder = (tr.holder + 1) % tr.owners
}

var (
	turnsAddr   = flagpkg.String("wire.turns.addr", "", "TestScriptTurns: run on this server (host:port) instead of one of its own, and shut it down at the end (scripts/script-instructions.sh)")
	turnsOwners = flagpkg.Int("wire.turns.owners", 16, "TestScriptTurns with -wire.turns.addr: owners taking turns (1: the uncontended pair)")
	turnsN      = flagpkg.Int("wire.turns.n", 200, "TestScriptTurns: turns to run")
)

// TestScriptTurns runs the contended turn (16 owners) and the uncontended
// pair (1 owner) many times over on a real server, checking every reply:
// each Unlock releases, each Lock after it queues (or, alone, takes the
// lock back with the next token). With -wire.turns.addr it runs one of the
// two on a server of the caller's, started under callgrind by
// scripts/script-instructions.sh, and ends with SHUTDOWN NOSAVE so that
// callgrind writes its counts: the scripts' instructions per turn,
// the same on every run, where their time is not.
func TestScriptTurns(t *testing.T) {
	addr, owners := *turnsAddr, []int{16, 1}
	if addr == "" {
		addr = redistest.Start(t).Addr()
	} else {
		owners = []int{*turnsOwners}
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	s := NewScripts()
	do := func(call backend.Call) string {
		res := c.Do(ctx, c.B().Evalsha().Sha1(call.Script.SHA1).Numkeys(int64(len(call.Keys))).Key(call.Keys...).Arg(call.Args...).Build())
		if rerr, ok := rueidis.IsRedisErr(res.Error()); ok && rerr.IsNoScript() {
			res = c.Do(ctx, c.B().Eval().Script(call.Script.Source).Numkeys(int64(len(call.Keys))).Key(call.Keys...).Arg(call.Args...).Build())
		}
		v, err := res.ToAny()
		if err != nil {
			t.Fatalf("%s: %v", call.Script.Name, err)
		}
		return fmt.Sprint(v)
	}
	for _, n := range owners {
		tr := newTurns(t, s, "turns-"+strconv.Itoa(n), n, do)
		for range *turnsN {
			tr.turn()
		}
	}
	if *turnsAddr != "" {
		c.Do(ctx, c.B().Shutdown().Nosave().Build())
	}
}
