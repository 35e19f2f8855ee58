// Package wire is fairlock's whole contract with the server: the Lua
// scripts, the keys and arguments each takes (built from named fields),
// the typed decoding of every reply, the wake-up message grammar, and the
// plain reads that stand in for inspect.lua on the client-side cache. No
// other package knows a script's KEYS or ARGV order or a reply's shape.
//
// Every lock script is scripts/base.lua (server time, fencing tokens),
// then, for acquire and unlock, a fast path for the common case (a free
// lock nobody waits for) that returns before the rest is defined, then
// scripts/prelude.lua (dead-head purge, wake-ups, hand-over) and the
// script's own body; each body starts with a comment listing its KEYS and
// ARGV and its reply.
package wire

//go:generate go test -run TestScriptDigests -update-digests .

import (
	_ "embed"
	"strconv"
	"time"

	"github.com/fairlock/fairlock/backend"
)

var (
	//go:embed scripts/base.lua
	baseLua string
	//go:embed scripts/acquire_fast.lua
	acquireFastLua string
	//go:embed scripts/unlock_fast.lua
	unlockFastLua string
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
	//go:embed scripts/prune.lua
	pruneLua string
	//go:embed scripts/describe.lua
	describeLua string
	//go:embed scripts/read_description.lua
	readDescriptionLua string
	//go:embed scripts/server_info.lua
	serverInfoLua string
)

// Scripts is every script fairlock runs, built once per client (no
// package-level mutable state).
type Scripts struct {
	acquire, unlock, leave, renew, forceUnlock, deleteLock, inspect, prune *backend.Script
	describe, readDescription, serverInfo                                  *backend.Script
}

// NewScripts builds the script set. Each script's SHA-1, the name EVALSHA
// uses, is the one digests.go holds, written by go generate and checked
// against the source by TestScriptDigests: nothing is hashed at run time,
// so the scripts work in Go's FIPS 140-only mode (GODEBUG=fips140=only),
// which forbids SHA-1.
func NewScripts() *Scripts {
	script := func(name, source string) *backend.Script {
		return &backend.Script{Name: name, Source: source, SHA1: digests[name]}
	}
	lock := func(name, body string) *backend.Script { return script(name, baseLua+"\n"+preludeLua+"\n"+body) }
	fast := func(name, fast, body string) *backend.Script {
		return script(name, baseLua+"\n"+fast+"\n"+preludeLua+"\n"+body)
	}
	return &Scripts{
		acquire:         fast("acquire", acquireFastLua, acquireLua),
		unlock:          fast("unlock", unlockFastLua, unlockLua),
		leave:           lock("leave", leaveLua),
		renew:           lock("renew", renewLua),
		forceUnlock:     lock("force_unlock", forceUnlockLua),
		deleteLock:      lock("delete", deleteLua),
		inspect:         lock("inspect", inspectLua),
		prune:           lock("prune", pruneLua),
		describe:        script("describe", describeLua),
		readDescription: script("read_description", readDescriptionLua),
		serverInfo:      script("server_info", serverInfoLua),
	}
}

// all returns every script of the set.
func (s *Scripts) all() []*backend.Script {
	return []*backend.Script{s.acquire, s.unlock, s.leave, s.renew, s.forceUnlock, s.deleteLock, s.inspect, s.prune, s.describe, s.readDescription, s.serverInfo}
}

// ms formats d as whole milliseconds, the unit of the scripts' arguments.
func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// maxDecimals is the most numbers one call formats with decimals.
const maxDecimals = 9

// decimals formats ns in decimal, as ms and itoa do, into one string cut
// into one part per number: one allocation for all of a call's numbers
// rather than one for each past 99.
func decimals(ns ...int64) (parts [maxDecimals]string) {
	var buf [maxDecimals * 20]byte // 20: the longest int64, "-9223372036854775808"
	var ends [maxDecimals]int
	b := buf[:0]
	for i, n := range ns {
		b = strconv.AppendInt(b, n, 10)
		ends[i] = len(b)
	}
	all, start := string(b), 0
	for i := range ns {
		parts[i], start = all[start:ends[i]], ends[i]
	}
	return parts
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// View is what the client knows of its owner's hold: the token and count
// of the live hold, zero when it knows none. The scripts compare it with
// the server's state so that a retried request never applies twice and a
// leftover the client has ended is never re-entered.
type View struct {
	Token int64
	Count int
}

// Wake says how the scripts wake a waiter: the lock's channel prefix
// (Keys.Channel) and the publish commands ("publish", or
// "publish,spublish").
type Wake struct {
	ChannelPrefix string
	Publish       string
}
