package main

import (
	"fmt"
	"slices"
	"strings"
)

// What one Lock+Unlock pair costs, in the uncontended and the many-locks
// scenarios: server and client CPU, server commands and the writes among
// them, allocations. Each lock runs in a measured window of its own, so
// the CPU of this process in the window is that lock's (and the Go
// runtime's: GC, scheduler, the client library's goroutines).

// writeCommands are the Redis commands that write the keyspace, by their
// INFO commandstats name (lower case; subcommands as "container|sub").
// A fixed list, not the server's COMMAND flags, so that the count means
// the same on every server; script calls (EVAL, EVALSHA, FCALL) are not
// writes themselves: the commands they run are counted on their own.
var writeCommands = map[string]bool{}

func init() {
	for _, c := range strings.Fields(`
		set setnx setex psetex getset getdel getex append setrange mset msetnx
		incr incrby incrbyfloat decr decrby
		del unlink rename renamenx copy move restore
		expire pexpire expireat pexpireat persist
		hset hsetnx hmset hdel hincrby hincrbyfloat
		lpush rpush lpushx rpushx lpop rpop lrem lset linsert ltrim lmove blmove rpoplpush brpoplpush blpop brpop lmpop blmpop
		sadd srem spop smove sinterstore sunionstore sdiffstore
		zadd zrem zincrby zpopmin zpopmax bzpopmin bzpopmax zmpop bzmpop zremrangebyscore zremrangebyrank zremrangebylex zrangestore zunionstore zinterstore zdiffstore
		xadd xdel xtrim xack xclaim xautoclaim xsetid
		pfadd pfmerge setbit bitop bitfield georadius geoadd geosearchstore
		flushdb flushall swapdb`) {
		writeCommands[c] = true
	}
}

// scriptCommands are the calls that run a script or function.
var scriptCommands = []string{"evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro"}

// isWrite reports whether a commandstats name is a write command.
func isWrite(cmd string) bool { return writeCommands[strings.ToLower(cmd)] }

// writes are the write commands among c.
func (c commandCalls) writes() commandCalls {
	w := make(commandCalls)
	for k, v := range c {
		if isWrite(k) {
			w[k] = v
		}
	}
	return w
}

// scripts are the script calls among c (EVALSHA and the like).
func (c commandCalls) scripts() commandStat {
	var s commandStat
	for _, k := range scriptCommands {
		s.Calls += c[k].Calls
		s.Usec += c[k].Usec
	}
	return s
}

// others are the calls among c that are not script calls: the commands
// the scripts run, and any a lock sends on its own.
func (c commandCalls) others() commandStat {
	var s commandStat
	for k, v := range c {
		if !slices.Contains(scriptCommands, k) {
			s.Calls += v.Calls
			s.Usec += v.Usec
		}
	}
	return s
}

// pairCost is the mean cost of one Lock+Unlock pair over a measured
// window. CPU is known only for runs that measured it (CPU false: an
// older results file), allocations likewise (Allocs false).
type pairCost struct {
	ServerCPU float64 `json:"server_cpu_ns"` // redis-server's used_cpu_sys + used_cpu_user (INFO cpu)
	ClientCPU float64 `json:"client_cpu_ns"` // this process's user + system time (getrusage)
	Commands  float64 `json:"commands"`      // every call in commandstats, those inside scripts included
	Writes    float64 `json:"writes"`        // write commands among them (writeCommands)
	Scripts   float64 `json:"scripts"`       // EVALSHA and the like
	ScriptRun float64 `json:"script_run_ns"` // commandstats usec of the script calls, their commands included
	// CommandRun is the commandstats usec of every other call: the
	// commands the scripts run, and any the lock sends on its own (0: an
	// older results file, which did not keep it).
	CommandRun float64 `json:"command_run_ns"`
	Allocs     float64 `json:"allocs"` // heap allocations of this process (runtime.MemStats)
	Bytes      float64 `json:"bytes"`
	CPU        bool    `json:"-"`
	Alloc      bool    `json:"-"`
}

// costOf divides what a window measured by the pairs it ran: serverCPU in
// seconds, clientCPU in nanoseconds; allocs and bytes are totals, and
// negative when not measured.
func costOf(pairs int, calls commandCalls, serverCPU, clientCPU float64, cpu bool, allocs, bytes float64) pairCost {
	if pairs <= 0 {
		return pairCost{}
	}
	n := float64(pairs)
	scripts := calls.scripts()
	c := pairCost{
		Commands:   float64(calls.total()) / n,
		Writes:     float64(calls.writes().total()) / n,
		Scripts:    float64(scripts.Calls) / n,
		ScriptRun:  float64(scripts.Usec) * 1e3 / n,
		CommandRun: float64(calls.others().Usec) * 1e3 / n,
		CPU:        cpu,
		Alloc:      allocs >= 0,
	}
	if cpu {
		c.ServerCPU, c.ClientCPU = serverCPU*1e9/n, clientCPU/n
	}
	if c.Alloc {
		c.Allocs, c.Bytes = allocs/n, bytes/n
	}
	return c
}

// costs are one lock's pair costs, one per round.
type costs []pairCost

// costsBy are the pair costs of a scenario's rounds, by lock.
func costsBy[T any](rounds map[string][]T, cost func(T) pairCost) map[string]costs {
	by := map[string]costs{}
	for name, rs := range rounds {
		for _, r := range rs {
			by[name] = append(by[name], cost(r))
		}
	}
	return by
}

// of is the spread over the rounds that measured what f reads (need).
func (cs costs) of(f func(pairCost) float64, need func(pairCost) bool) spread {
	var xs []float64
	for _, c := range cs {
		if need == nil || need(c) {
			xs = append(xs, f(c))
		}
	}
	return spreadOf(xs)
}

func hasCPU(c pairCost) bool   { return c.CPU }
func hasAlloc(c pairCost) bool { return c.Alloc }

// hasSplit reports whether c knows its commands' own time.
func hasSplit(c pairCost) bool { return c.CommandRun > 0 }

// scriptRest is the scripts' time less the commands' own: Lua, and each
// redis.call's work around its command (never below 0: a lock that sends
// commands of its own has their time among the commands').
func (c pairCost) scriptRest() float64 { return max(c.ScriptRun-c.CommandRun, 0) }

// scriptCells are the cells of the scripts' time, their commands' own
// time and the rest (both "-" for rounds that did not keep the split).
func (cs costs) scriptCells() (script, commands, rest string) {
	return cs.of(func(c pairCost) float64 { return c.ScriptRun }, nil).cell(fmtDur),
		cs.of(func(c pairCost) float64 { return c.CommandRun }, hasSplit).cell(fmtDur),
		cs.of(pairCost.scriptRest, hasSplit).cell(fmtDur)
}

func (cs costs) serverCPU() spread {
	return cs.of(func(c pairCost) float64 { return c.ServerCPU }, hasCPU)
}

func (cs costs) clientCPU() spread {
	return cs.of(func(c pairCost) float64 { return c.ClientCPU }, hasCPU)
}

// ratioCell is a lock's median against the reference's: "2.83x", or "-".
func ratioCell(s, ref spread) string {
	if s.n == 0 || ref.n == 0 || ref.med <= 0 {
		return "-"
	}
	return fmtRatio(s.med / ref.med)
}

// costTable writes the cost-per-pair table of a scenario: one row per
// lock, in order, with the server and client CPU against ref's.
func costTable(b *strings.Builder, order []string, by map[string]costs, ref string) {
	t := newTable(b, "lock", "server CPU/pair", "client CPU/pair", "server vs "+ref, "client vs "+ref,
		"commands/pair", "writes/pair", "scripts/pair", "script time/pair", "commands' time/pair", "scripts' rest/pair", "allocs/pair", "bytes/pair")
	rs, rc := by[ref].serverCPU(), by[ref].clientCPU()
	for _, name := range order {
		cs := by[name]
		s, c := cs.serverCPU(), cs.clientCPU()
		script, commands, rest := cs.scriptCells()
		t.row(name, s.cell(fmtDur), c.cell(fmtDur), ratioCell(s, rs), ratioCell(c, rc),
			cs.of(func(c pairCost) float64 { return c.Commands }, nil).cell(fmtF(1)),
			cs.of(func(c pairCost) float64 { return c.Writes }, nil).cell(fmtF(1)),
			cs.of(func(c pairCost) float64 { return c.Scripts }, nil).cell(fmtF(1)),
			script, commands, rest,
			cs.of(func(c pairCost) float64 { return c.Allocs }, hasAlloc).cell(fmtCount),
			cs.of(func(c pairCost) float64 { return c.Bytes }, hasAlloc).cell(fmtCount))
	}
}

// acquisitionTable writes what one acquisition costs with contenders: one
// row per lock, in order, from its rounds' costs per acquisition (costOf
// with the acquisitions for pairs).
func acquisitionTable(b *strings.Builder, order []string, by map[string]costs) {
	t := newTable(b, "lock", "commands/acq", "scripts/acq", "script time/acq", "commands' time/acq", "scripts' rest/acq", "server CPU/acq", "client CPU/acq")
	for _, name := range order {
		cs := by[name]
		script, commands, rest := cs.scriptCells()
		t.row(name,
			cs.of(func(c pairCost) float64 { return c.Commands }, nil).cell(fmtF(1)),
			cs.of(func(c pairCost) float64 { return c.Scripts }, nil).cell(fmtF(2)),
			script, commands, rest,
			cs.serverCPU().cell(fmtDur),
			cs.clientCPU().cell(fmtDur))
	}
}

// costNote is the paragraph under a cost table: how each column is measured.
const costNote = "Server CPU: redis-server's used_cpu_sys + used_cpu_user (INFO cpu) over the measured window, divided by the pairs: the whole process, so reading, parsing and replying count as well as the commands (and its timers, 10 a second). " +
	"Client CPU: this process's user + system time (getrusage) over the same window, divided by the pairs: each lock runs in a window of its own, so it is that lock's, the Go runtime's work (GC, scheduler) and the client library's goroutines included. " +
	"Commands: every call in INFO commandstats, those inside scripts included; writes: the calls of write commands among them (a fixed list: SET, DEL, HSET, HDEL, INCR, PEXPIRE, LPUSH, LREM, ZADD, ZREM and the like; EVALSHA itself, GET, PUBLISH are not writes); " +
	"script time: commandstats execution time of the script calls, the commands they run included (no reading, parsing or replying); commands' time: commandstats execution time of every other call - the commands the scripts run, and any a lock sends on its own (redsync's SET NX); scripts' rest: script time less commands' time, what Lua and each redis.call's work around its command cost (understated by a lock's own commands). Allocations: the whole process's heap allocations (runtime.MemStats)."

// writesLine lists the write commands per pair by command, or "none".
func writesLine(calls commandCalls, per float64) string {
	w := calls.writes()
	if len(w) == 0 || per == 0 {
		return "no writes"
	}
	return "writes " + topCommands(w, per, 8)
}

// cpuVsRef is a target's "measured" cell: "34µs (30–38µs) vs 12µs: 2.83x".
func cpuVsRef(s, ref spread) string {
	return fmt.Sprintf("%s vs %s: %s", s.cell(fmtDur), ref.cell(fmtDur), ratioCell(s, ref))
}

// within reports whether s's median is at most limit times ref's.
func within(s, ref spread, limit float64) bool {
	return s.n > 0 && ref.n > 0 && ref.med > 0 && s.med <= limit*ref.med
}
