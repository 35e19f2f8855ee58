package wire

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
)

var argvRef = regexp.MustCompile(`ARGV\[(\d+)\]`)
var keysRef = regexp.MustCompile(`KEYS\[(\d+)\]`)

// maxRef returns the highest index re finds in a script's source (base.lua
// and prelude.lua name no KEYS or ARGV: their functions take parameters).
func maxRef(re *regexp.Regexp, src string) int {
	n := 0
	for _, m := range re.FindAllStringSubmatch(src, -1) {
		i, _ := strconv.Atoi(m[1])
		n = max(n, i)
	}
	return n
}

// TestCallsMatchScripts: every call sends exactly the KEYS and ARGV its
// script reads - the contract between Go and Lua, checked without a
// server.
func TestCallsMatchScripts(t *testing.T) {
	s := NewScripts()
	k, _ := Derive("orders")
	w := Wake{ChannelPrefix: k.Channel, Publish: "publish"}
	calls := []backend.Call{
		Acquire{Owner: "c:1", Lease: time.Second, WaiterTimeout: time.Second, Wake: w}.Call(s, k),
		Unlock{Owner: "c:1", Lease: time.Second, Wake: w, Latch: time.Second, RequestID: [16]byte{0xab}}.Call(s, k),
		Leave{Owner: "c:1", Wake: w}.Call(s, k),
		Renew{Owner: "c:1", Lease: time.Second, Token: 1, HoldLease: time.Second, Wake: w}.Call(s, k),
		Evict{Wake: w}.Call(s, k),
		Evict{Delete: true, Wake: w}.Call(s, k),
		Inspect{Limit: 3}.Call(s, k),
		Prune{Wake: w}.Call(s, k),
		Describe{Key: "d", Value: "{}", TTL: time.Second}.Call(s),
		ReadDescription(s, "d"),
		ServerInfo(s),
	}
	seen := map[string]bool{}
	for _, c := range calls {
		body := c.Script.Source
		if got, want := len(c.Args), maxRef(argvRef, body); got != want {
			t.Errorf("%s: %d ARGV sent, script reads ARGV[%d]", c.Script.Name, got, want)
		}
		if got, want := len(c.Keys), maxRef(keysRef, body); got != want {
			t.Errorf("%s: %d KEYS sent, script reads KEYS[%d]", c.Script.Name, got, want)
		}
		for _, key := range c.Keys[min(1, len(c.Keys)):] {
			if c.Script.Name != "describe" && c.Script.Name != "read_description" && backend.Slot(key) != backend.Slot(c.Keys[0]) {
				t.Errorf("%s: key %q is not in the lock's slot", c.Script.Name, key)
			}
		}
		seen[c.Script.Name] = true
	}
	if want := len(s.all()); len(seen) != want {
		t.Errorf("calls cover %d scripts, want all %d", len(seen), want)
	}
}

// TestDecodeReplies: each decoder takes the script's documented shapes
// and nothing else.
func TestDecodeReplies(t *testing.T) {
	ints := func(v ...int64) backend.Reply {
		r := backend.ArrayReply()
		for _, n := range v {
			r.Elems = append(r.Elems, backend.IntReply(n))
		}
		return r
	}
	if got, err := DecodeAcquire(ints(1, 7, 2)); err != nil || got != (AcquireReply{Acquired: true, Token: 7, Count: 2}) {
		t.Errorf("acquired: %+v, %v", got, err)
	}
	if got, err := DecodeAcquire(backend.IntReply(7)); err != nil || got != (AcquireReply{Acquired: true, Token: 7, Count: 1}) {
		t.Errorf("new hold: %+v, %v", got, err)
	}
	// A grant taken up after its token counter was lost.
	if got, err := DecodeAcquire(backend.IntReply(0)); err != nil || got != (AcquireReply{Acquired: true, Count: 1}) {
		t.Errorf("new hold, token 0: %+v, %v", got, err)
	}
	if _, err := DecodeAcquire(backend.IntReply(-1)); err == nil {
		t.Error("acquire reply -1: no error")
	}
	if got, err := DecodeAcquire(ints(0, 30, 0)); err != nil || got != (AcquireReply{Hint: 30 * time.Millisecond}) {
		t.Errorf("once refused: %+v, %v", got, err)
	}
	if got, err := DecodeAcquire(ints(0, 30, 2, 1, 99)); err != nil || got != (AcquireReply{Hint: 30 * time.Millisecond, Position: 2, Head: true, Now: 99}) {
		t.Errorf("queued: %+v, %v", got, err)
	}
	if got, err := DecodeAcquire(ints(2)); err != nil || got != (AcquireReply{Gone: true}) {
		t.Errorf("named hold gone: %+v, %v", got, err)
	}
	if n, err := DecodeUnlock(backend.IntReply(-1)); err != nil || n != -1 {
		t.Errorf("unlock not held: %d, %v", n, err)
	}
	if got, err := DecodeLeave(ints(1, 0, 9)); err != nil || got != (LeaveReply{Queued: true, Held: View{Token: 9}}) {
		t.Errorf("leave: %+v, %v", got, err)
	}
	if got, err := DecodeLeave(ints(-1, 99)); err != nil || got != (LeaveReply{Expired: true, Now: 99}) {
		t.Errorf("leave expired: %+v, %v", got, err)
	}
	if got, err := DecodeRenew(backend.IntReply(2)); err != nil || got != RenewTookUp {
		t.Errorf("renew: %v, %v", got, err)
	}
	bad := []func() error{
		func() error { _, err := DecodeAcquire(ints(1, 7)); return err },
		func() error { _, err := DecodeAcquire(ints(1)); return err },
		func() error { _, err := DecodeAcquire(backend.StringReply("x")); return err },
		func() error { _, err := DecodeUnlock(backend.IntReply(-2)); return err },
		func() error { _, err := DecodeLeave(ints(1, 0)); return err },
		func() error { _, err := DecodeLeave(ints(1)); return err },
		func() error { _, err := DecodeLeave(ints(-1)); return err },
		func() error { _, err := DecodeRenew(backend.IntReply(3)); return err },
		func() error { _, err := DecodeInspect(ints(1, 2, 3)); return err },
		func() error {
			_, err := DecodeCount(Prune{}.Call(NewScripts(), Keys{}), backend.IntReply(-1))
			return err
		},
	}
	for i, f := range bad {
		if err := f(); !errors.Is(err, backend.ErrUnexpectedReply) {
			t.Errorf("bad reply %d: %v, want ErrUnexpectedReply", i, err)
		}
	}
}

// TestRenewCredit: a renewal that took a hand-over grant up counts the
// longer of the two leases; any other counts what it sent.
func TestRenewCredit(t *testing.T) {
	r := Renew{Lease: time.Second, HoldLease: 3 * time.Second}
	if got := RenewTookUp.Credit(r); got != 3*time.Second {
		t.Errorf("took up: %v", got)
	}
	if got := RenewHeld.Credit(r); got != time.Second {
		t.Errorf("held: %v", got)
	}
}

func TestDecodeInspect(t *testing.T) {
	rep := backend.ArrayReply(
		backend.IntReply(1000), backend.IntReply(500), backend.IntReply(42), backend.IntReply(2),
		backend.ArrayReply(backend.StringReply("c:1"), backend.StringReply("0")),
		backend.ArrayReply(
			backend.StringReply("c:2"), backend.StringReply("2000"), backend.IntReply(1),
			backend.StringReply("j:3"), backend.StringReply(""), backend.IntReply(0)),
		backend.IntReply(1500))
	got, err := DecodeInspect(rep)
	if err != nil {
		t.Fatal(err)
	}
	want := Snapshot{Now: time.UnixMilli(1000), HashTTL: 500, Token: 42, QueueLength: 2, TokenTTL: 1500,
		Holders: []Holder{{Owner: "c:1", Count: 1}},
		Queue:   []Queued{{Owner: "c:2", Deadline: time.UnixMilli(2000), Heartbeats: true}, {Owner: "j:3"}}}
	if got.Now != want.Now || got.HashTTL != want.HashTTL || got.Token != want.Token || got.QueueLength != want.QueueLength || got.TokenTTL != want.TokenTTL ||
		len(got.Holders) != 1 || got.Holders[0] != want.Holders[0] || len(got.Queue) != 2 || got.Queue[0] != want.Queue[0] || got.Queue[1] != want.Queue[1] {
		t.Errorf("DecodeInspect = %+v, want %+v", got, want)
	}
}

// TestCachedRead: the plain reads decode into what inspect.lua says.
func TestCachedRead(t *testing.T) {
	now := time.UnixMilli(10_000)
	r := CachedRead{Kind: CachedAll, Limit: 2}
	k, _ := Derive("orders")
	if n := len(r.Commands(k)); n != 7 {
		t.Fatalf("%d commands", n)
	}
	for _, q := range []CachedRead{{Kind: CachedHolders}, {Kind: CachedTTL}, {Kind: CachedAll}, r} {
		if q.size() != len(q.Commands(k)) {
			t.Errorf("%+v: size %d, %d commands", q, q.size(), len(q.Commands(k)))
		}
	}
	reps := []backend.Reply{
		backend.ArrayReply(backend.StringReply("c:1"), backend.StringReply("2")), // HGETALL
		backend.IntReply(10_400), // PEXPIRETIME hash
		backend.StringReply("42"),
		backend.IntReply(3), // LLEN
		backend.IntReply(0), // ZCOUNT alive 0 0: no entry left behind
		backend.IntReply(-1),
		backend.ArrayReply(backend.StringReply("c:2"), backend.StringReply("c:3")),
	}
	s, waiters, err := r.Decode(reps, now)
	if err != nil {
		t.Fatal(err)
	}
	if s.HashTTL != 400 || s.Token != 42 || s.QueueLength != 3 || s.TokenTTL != -1 || len(s.Holders) != 1 || s.Holders[0].Count != 2 || len(waiters) != 2 {
		t.Errorf("Decode = %+v, %v", s, waiters)
	}
	q, err := DecodeWaiters(waiters, []backend.Reply{
		backend.ArrayReply(backend.StringReply("0"), backend.Reply{}),
		backend.ArrayReply(backend.StringReply("5"), backend.StringReply("12000")),
	})
	if err != nil || len(q) != 1 || q[0] != (Queued{Owner: "c:3", Deadline: time.UnixMilli(12000)}) {
		t.Errorf("DecodeWaiters = %+v, %v (the left entry is skipped, the Redisson one kept)", q, err)
	}
	if _, _, err := r.Decode(reps[:3], now); !errors.Is(err, backend.ErrUnexpectedReply) {
		t.Errorf("short reply: %v", err)
	}
	reps[4] = backend.IntReply(1) // an entry left behind: only the script can count
	if _, _, err := r.Decode(reps, now); !errors.Is(err, ErrLeftMarks) {
		t.Errorf("with a left mark: %v, want ErrLeftMarks", err)
	}
}

// TestServerInfo: which memory policies may evict lock keys, which
// versions have sharded pub/sub, and the reply's shapes.
func TestServerInfo(t *testing.T) {
	for _, tc := range []struct {
		m      Server
		evicts bool
	}{
		{Server{0, "allkeys-lru", "7.0.15"}, false},
		{Server{1 << 20, "noeviction", "7.0.15"}, false},
		{Server{1 << 20, "allkeys-lru", "7.0.15"}, true},
		{Server{1 << 20, "volatile-ttl", "7.0.15"}, true},
		{Server{1 << 20, "volatile-lfu", "7.0.15"}, true},
	} {
		if got := tc.m.Evicts(); got != tc.evicts {
			t.Errorf("%+v: Evicts() = %v, want %v", tc.m, got, tc.evicts)
		}
	}
	for version, sharded := range map[string]bool{"7.0.0": true, "7.2.4": true, "8.0.1": true, "10.0": true, "6.2.14": false, "5": false, "": false, "x.1": false} {
		if got := (Server{Version: version}).ShardedPubSub(); got != sharded {
			t.Errorf("version %q: ShardedPubSub() = %v, want %v", version, got, sharded)
		}
	}
	got, err := DecodeServer(backend.ArrayReply(backend.IntReply(100), backend.StringReply("allkeys-lru"), backend.StringReply("7.0.15")))
	if err != nil || got != (Server{100, "allkeys-lru", "7.0.15"}) {
		t.Errorf("DecodeServer = %+v, %v", got, err)
	}
	for _, bad := range []backend.Reply{
		backend.IntReply(1),
		backend.ArrayReply(backend.IntReply(100), backend.StringReply("noeviction")),
		backend.ArrayReply(backend.IntReply(-1), backend.StringReply("noeviction"), backend.StringReply("7.0.0")),
		backend.ArrayReply(backend.IntReply(100), backend.IntReply(2), backend.StringReply("7.0.0")),
		backend.ArrayReply(backend.IntReply(100), backend.StringReply(""), backend.StringReply("7.0.0")),
		backend.ArrayReply(backend.IntReply(100), backend.StringReply("noeviction"), backend.IntReply(7)),
	} {
		if _, err := DecodeServer(bad); !errors.Is(err, backend.ErrUnexpectedReply) {
			t.Errorf("DecodeServer(%+v): %v, want ErrUnexpectedReply", bad, err)
		}
	}
}

// TestDecimals checks that decimals formats as strconv does, numbers of
// every length included.
func TestDecimals(t *testing.T) {
	ns := []int64{0, 7, -1, 99, 100, 30000, -9223372036854775808, 9223372036854775807}
	got := decimals(ns...)
	for i, n := range ns {
		if want := strconv.FormatInt(n, 10); got[i] != want {
			t.Errorf("decimals: part %d is %q, want %q", i, got[i], want)
		}
	}
	if one := decimals(42); one[0] != "42" || one[1] != "" {
		t.Errorf("decimals(42) = %q", one)
	}
}

// TestCallsAllocate bounds the allocations of the calls every
// Lock+Unlock sends: one slice for the keys and arguments, one string for
// all the numbers (and Unlock's latch key).
func TestCallsAllocate(t *testing.T) {
	s := NewScripts()
	k, _ := Derive("alloc")
	w := Wake{ChannelPrefix: k.Channel, Publish: "publish"}
	v := View{Token: 123456, Count: 2}
	for _, c := range []struct {
		name string
		max  float64
		call func() backend.Call
	}{
		{"acquire", 2, func() backend.Call {
			return Acquire{Owner: "c:1", Lease: 30 * time.Second, WaiterTimeout: 5 * time.Second, Wake: w, MaxHint: 1666 * time.Millisecond, Slack: time.Second, View: v}.Call(s, k)
		}},
		{"unlock", 3, func() backend.Call {
			return Unlock{Owner: "c:1", Lease: 30 * time.Second, Wake: w, Latch: 10 * time.Second, View: v, RequestID: [16]byte{0xab}}.Call(s, k)
		}},
	} {
		if n := testing.AllocsPerRun(100, func() { _ = c.call() }); n > c.max {
			t.Errorf("%s: %v allocations per call, want at most %v", c.name, n, c.max)
		}
	}
}

// TestLatchKey: an unlock's latch is the lock's latch prefix, ":" and its
// request ID in hex.
func TestLatchKey(t *testing.T) {
	k, _ := Derive("orders")
	id := [16]byte{0x01, 0xab, 15: 0xff}
	call := Unlock{RequestID: id}.Call(NewScripts(), k)
	if want := k.Latch + ":01ab" + strings.Repeat("00", 13) + "ff"; call.Keys[5] != want {
		t.Errorf("latch key %q, want %q", call.Keys[5], want)
	}
}

// TestScriptsPrintNoLong: no script prints a number with string.format's
// %d (or %i, %x...), which Lua 5.1 casts to a C long - 32 bits on 32-bit
// builds of Redis, where tokens, microseconds and milliseconds since 1970
// do not fit (base.lua). '%.0f' prints them whole on every build.
func TestScriptsPrintNoLong(t *testing.T) {
	format := regexp.MustCompile(`string\.format\('([^']*)'`)
	long := regexp.MustCompile(`%[-+ #0-9.]*[dicouxX]`)
	for _, s := range NewScripts().all() {
		for _, m := range format.FindAllStringSubmatch(s.Source, -1) {
			if long.MatchString(m[1]) {
				t.Errorf("%s: string.format('%s') prints through a C long", s.Name, m[1])
			}
		}
	}
}

// TestTokenKeep: the client's tokenKeep, which it adds to the lease for
// the token counter's lifetime (acquire.lua's ARGV[14]), is base.lua's
// token_keep, which the scripts add where they compute it.
func TestTokenKeep(t *testing.T) {
	m := regexp.MustCompile(`\nlocal token_keep = (\d+)\n`).FindStringSubmatch(baseLua)
	if m == nil {
		t.Fatal("base.lua defines no token_keep")
	}
	if want := strconv.FormatInt(tokenKeep.Milliseconds(), 10); m[1] != want {
		t.Errorf("base.lua's token_keep is %s ms, the client's tokenKeep %s ms", m[1], want)
	}
}
