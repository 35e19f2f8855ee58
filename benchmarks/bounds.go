package main

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fairlock/fairlock/lockbench"
)

// boundNote returns the evidence for one missed target: what the run
// measured about where the time or the work goes. Figures are medians over
// the rounds; command breakdowns are from the first round.
func (r *report) boundNote(what, kind string) string {
	switch what {
	case "throughput", "handover", "commands":
		c := r.headline(kind)
		if len(c) == 0 {
			return ""
		}
		perAcq := func(f func(contendedRound) float64) float64 {
			return spreadBy(c, func(x contendedRound) float64 { return f(x) / math.Max(1, float64(x.Acquisitions)) }).med
		}
		serverCPU := perAcq(func(x contendedRound) float64 { return x.ServerCPU * 1e9 })
		clientCPU := perAcq(func(x contendedRound) float64 { return float64(x.ClientCPU) })
		ours := spreadBy(c, func(x contendedRound) float64 {
			return (x.ServerCPU + x.ClientCPU.Seconds()) / x.Wall.Seconds() / float64(r.Meta.Cores)
		}).med
		machine := spreadBy(c, func(x contendedRound) float64 { return x.MachineBusy }).med
		hand := durSpread(c, func(x contendedRound) time.Duration { return x.Handover.P50 }).med
		scripts := perAcq(func(x contendedRound) float64 {
			return float64(x.TopCommands["evalsha"].Calls + x.TopCommands["eval"].Calls)
		})
		switch what {
		case "throughput":
			cycle := float64(time.Second) / spreadBy(c, func(x contendedRound) float64 { return x.Throughput }).med
			prof := ""
			if p := r.profileLine(kind); p != "" {
				prof = " Client CPU profile of the FIFO run: " + p + "."
			}
			return fmt.Sprintf("**%s, %d contenders, throughput**: one acquisition every %s, of which the hand-over (p50 %s) is %s. "+
				"A FIFO lock hands over to one waiter at a time, so hand-over latency caps throughput; the spinning locks keep the lock with whoever is already running (see Jain). "+
				"Per acquisition: %.1f script calls, %s of server CPU and %s of client CPU (%s of CPU per acquisition against %s between acquisitions); %s. "+
				"Every hand-over runs through redis-server's one command thread - the holder's unlock script grants the lock to the head and publishes the grant, and the new holder's Unlock is the next such script - and the other contenders' enqueues run on that thread in between: %s%s",
				kind, r.Settings.Headline, fmtDur(cycle), fmtDur(hand), fmtPct(hand/cycle),
				scripts, fmtDur(serverCPU), fmtDur(clientCPU), fmtDur(serverCPU+clientCPU), fmtDur(cycle), cpuVerdict(ours, machine),
				serverSplit(kind, "acquisition", firstContended(c)), prof)
		case "handover":
			f := r.FIFO[kind]
			split := ""
			if len(f) > 0 {
				split = fmt.Sprintf(" Split at the wake-up message (observe.Observer, in the FIFO runs; %s of hand-overs had one): previous Unlock returning to the message arriving p50 %s, message to Lock returning p50 %s.",
					spreadBy(f, func(x contendedRound) float64 { return x.WokenShare }).cell(fmtPct),
					durSpread(f, func(x contendedRound) time.Duration { return x.ToWake.P50 }).cell(fmtDur),
					durSpread(f, func(x contendedRound) time.Duration { return x.WakeToLock.P50 }).cell(fmtDur))
			}
			grant := ""
			if len(r.Queue) > 0 {
				lo := r.Settings.QueueLengths[0]
				grant = fmt.Sprintf(" With nobody else waiting, the new holder ran %.1f script calls of its own after the unlock (section 5).",
					spreadBy(r.Queue, func(q queueRound) float64 { return q.GrantCalls[lo] }).med)
			}
			idle := durSpread(r.Idle[kind], func(i idleRound) time.Duration { return i.Handover.P50 }).med
			return fmt.Sprintf("**%s, hand-over**: p50 %s with %d contenders and %s to an idle waiter, against a PING round trip of %s.%s%s Under contention %s.",
				kind, fmtDur(hand), r.Settings.Headline, fmtDur(idle), fmtDur(r.rtt), split, grant, cpuVerdict(ours, machine))
		default:
			sc := ""
			if s := r.scriptsPerAcq(kind); s != "" {
				sc = " By script (SLOWLOG of the FIFO run, whose sampler's inspect calls are not the lock's): " + s + "."
			}
			return fmt.Sprintf("**%s, commands per acquisition**: %s. That is %.1f script calls per acquisition, each running its bookkeeping (TIME, deadlines in two zsets, key expiries), all counted by commandstats.%s",
				kind, topCommands(c[0].TopCommands, float64(c[0].Acquisitions), 10), scripts, sc)
		}
	case "cpuserver", "cpuclient":
		return r.cpuNote(what, kind)
	case "fifo":
		return fmt.Sprintf("**%s, FIFO**: see the violations the run logged; each is a token that a queue snapshot promised to another owner.", kind)
	case "many", "manyp99":
		m, ref := r.Many[kind], r.Many[reference]
		if len(m) == 0 || len(ref) == 0 {
			return ""
		}
		per := func(rounds []manyRound) (cmds, server, client float64) {
			n := func(x manyRound) float64 { return math.Max(1, float64(x.Acquisitions)) }
			return spreadBy(rounds, func(x manyRound) float64 { return float64(x.Commands.total()) / n(x) }).med,
				spreadBy(rounds, func(x manyRound) float64 { return x.ServerCPU * 1e9 / n(x) }).med,
				spreadBy(rounds, func(x manyRound) float64 { return float64(x.ClientCPU) / n(x) }).med
		}
		fc, fs, fcl := per(m)
		rc, rs, rcl := per(ref)
		ours := spreadBy(m, func(x manyRound) float64 {
			return (x.ServerCPU + x.ClientCPU.Seconds()) / x.Wall.Seconds() / float64(r.Meta.Cores)
		}).med
		machine := spreadBy(m, func(x manyRound) float64 { return x.MachineBusy }).med
		slow := ""
		if what == "manyp99" {
			slow = " " + r.slowLine(kind)
		}
		var peers []string
		for _, p := range r.peers() {
			if pm := r.Many[p.Name]; len(pm) > 0 {
				peers = append(peers, fmt.Sprintf("%s %s/s", p.Name, fmtInt(int64(manyThroughput(pm).med))))
			}
		}
		bare := ""
		if len(r.ManyBare) > 0 {
			bc, bs, bcl := per(r.ManyBare)
			rate := func(rounds []manyRound) float64 { return manyThroughput(rounds).med }
			bare = fmt.Sprintf(" The same two scripts sent bare (%s: no lock package, a held lock tried again at once) made %s/s, %s %s's, with %.1f commands, %s of server CPU and %s of client CPU per pair: what the scripts allow, so the rest of the gap is the lock package's client path and its waits. %s",
				bareName, fmtInt(int64(rate(r.ManyBare))), fmtRatio(rate(r.ManyBare)/math.Max(1, rate(ref))), reference, bc, fmtDur(bs), fmtDur(bcl), serverSplit(bareName, "pair", firstMany(r.ManyBare)))
		}
		prof := ""
		if p := r.manyProfile(kind); p != "" {
			prof = " Client CPU profile of the first round: " + p + "."
		}
		server := ""
		if what == "many" {
			server = " " + serverSplit(kind, "pair", firstMany(m)) + " " + serverSplit(reference, "pair", firstMany(ref))
		}
		return fmt.Sprintf("**%s, many locks (%s)**: per Lock+Unlock pair %.1f server commands (%s), %s of server CPU and %s of client CPU; %s: %.1f, %s and %s; %s.%s%s%s%s The peers' acquisitions/s here (their client libraries: see Setup; redislock and redsync run on go-redis, one command per pooled connection at a time): %s.",
			kind, map[string]string{"many": "throughput", "manyp99": "p99"}[what], fc,
			topCommands(m[0].Commands, float64(m[0].Acquisitions), 6), fmtDur(fs), fmtDur(fcl), reference, rc, fmtDur(rs), fmtDur(rcl), cpuVerdict(ours, machine), server, slow, bare, prof, strings.Join(peers, "; "))
	case "queue":
		return "" // one note for all operations: see bounds
	case "waiters":
		f, ref := r.Waiters[r.Kinds[0].Name], r.Waiters[reference]
		if len(f) == 0 || len(ref) == 0 {
			return ""
		}
		return fmt.Sprintf("**%s idle waiters**: %s's server ran %s commands per second (%s); %s's %s (%s). Every fairlock waiter runs acquire again every third of the waiter timeout (5 s) as its heartbeat, so the server's work grows with the number of waiters.",
			fmtInt(int64(r.Settings.IdleWaiters)), r.Kinds[0].Name, fmtCount(float64(f[0].Commands)/f[0].Window.Seconds()), topCommands(f[0].CommandsTop, f[0].Window.Seconds(), 4),
			reference, fmtCount(float64(ref[0].Commands)/ref[0].Window.Seconds()), topCommands(ref[0].CommandsTop, ref[0].Window.Seconds(), 4))
	}
	if q, ok := strings.CutPrefix(what, "uncontended"); ok {
		u := r.Uncontended[kind]
		if len(u) == 0 {
			return ""
		}
		pair := func(rounds []uncontendedRound) float64 {
			return durSpread(rounds, func(x uncontendedRound) time.Duration { return pick(x, q) }).med
		}
		var peers []string
		for _, p := range r.peers() {
			if pu := r.Uncontended[p.Name]; len(pu) > 0 {
				peers = append(peers, fmt.Sprintf("%s %s, %.1f commands", p.Name, fmtDur(pair(pu)), pu[0].CommandsPerPair))
			}
		}
		uc := r.uncontendedCosts()
		run := uc[kind].of(func(c pairCost) float64 { return c.ScriptRun }, nil).med
		return fmt.Sprintf("**%s, uncontended %s**: %s (Lock p50 %s, Unlock p50 %s), %s allocations per pair, server commands per pair %s, its two scripts running %s per pair (commandstats). In the same turns, two empty scripts: %s; its own two scripts sent bare (%s, no lock package): %s.%s %s Peers: %s.",
			kind, q, fmtDur(pair(u)),
			durSpread(u, func(x uncontendedRound) time.Duration { return x.latency().Lock.P50 }).cell(fmtDur),
			durSpread(u, func(x uncontendedRound) time.Duration { return x.latency().Unlock.P50 }).cell(fmtDur),
			fmtCount(u[0].AllocsPerPair), topCommands(u[0].Commands, float64(r.Settings.UncontendedOps), 8), fmtDur(run),
			durSpread(r.reportFloor(), func(x lockbench.Latency) time.Duration { return pickLatency(x, q) }).cell(fmtDur),
			bareName, durSpread(r.UncontendedBare, func(x lockbench.Latency) time.Duration { return pickLatency(x, q) }).cell(fmtDur),
			r.overFloors(kind, q, pair), serverSplit(kind, "pair", firstUncontended(u, r.Settings.UncontendedOps)),
			strings.Join(peers, "; "))
	}
	return ""
}

// serverSample is what a server-side profile needs of one measured
// window: how many pairs (or acquisitions) it made, how long it lasted,
// the server's CPU over it (INFO cpu) and its commands (commandstats).
type serverSample struct {
	n         int
	wall      time.Duration
	serverCPU float64 // seconds
	commands  commandCalls
}

// firstMany is the server sample of a many-locks run's first round (a
// zero sample without rounds).
func firstMany(rounds []manyRound) serverSample {
	if len(rounds) == 0 {
		return serverSample{}
	}
	x := rounds[0]
	return serverSample{x.Acquisitions, x.Wall, x.ServerCPU, x.Commands}
}

// firstContended is the server sample of a contended run's first round.
func firstContended(rounds []contendedRound) serverSample {
	if len(rounds) == 0 {
		return serverSample{}
	}
	x := rounds[0]
	return serverSample{x.Acquisitions, x.Wall, x.ServerCPU, x.TopCommands}
}

// firstUncontended is the server sample of an uncontended run's first
// round, whose window made pairs Lock+Unlock pairs.
func firstUncontended(rounds []uncontendedRound, pairs int) serverSample {
	if len(rounds) == 0 {
		return serverSample{}
	}
	x := rounds[0]
	return serverSample{pairs, x.Wall, x.ServerCPU, x.Commands}
}

// serverSplit is a server-side profile of one window (first round), per
// unit ("pair" or "acquisition"): how busy redis-server's one command
// thread was, and where its CPU per unit went - the scripts' run time
// (commandstats), split into the commands they ran and the rest (Lua, and
// decoding the scripts' keys and arguments), and what remains outside the
// scripts (reading, parsing and replying, expiring keys). commandstats
// times are wall times, so a command the kernel preempted counts its wait.
func serverSplit(kind, unit string, x serverSample) string {
	if x.n == 0 || x.wall <= 0 {
		return ""
	}
	n := float64(x.n)
	per := func(usec int64) float64 { return float64(usec) * 1e3 / n } // ns
	type cmdTime struct {
		name string
		ns   float64
	}
	var scripts, inside, calls float64
	var cmds []cmdTime
	for name, st := range x.commands {
		if slices.Contains(scriptCommands, name) {
			scripts += per(st.Usec)
			continue
		}
		inside += per(st.Usec)
		calls += float64(st.Calls)
		cmds = append(cmds, cmdTime{name, per(st.Usec)})
	}
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].ns > cmds[j].ns })
	var top []string
	for i, c := range cmds {
		if i == 6 {
			break
		}
		top = append(top, fmt.Sprintf("%s %s", strings.ToUpper(c.name), fmtDur(c.ns)))
	}
	cpu, busy := x.serverCPU*1e9/n, x.serverCPU/x.wall.Seconds()
	return fmt.Sprintf("%s's server (first round): its one command thread %s busy%s; of %s of server CPU per %s, the scripts ran %s - the %.1f commands in them %s of their own (%s), the rest %s: each redis.call's own work around its command (building its arguments, the permission check, turning its reply into Lua values), Lua itself, and decoding each script's keys and arguments - and %s went to reading, parsing, replying and expiring keys.",
		kind, fmtPct(busy), nearLimit(busy, unit), fmtDur(cpu), unit, fmtDur(scripts), calls/n, fmtDur(inside), strings.Join(top, ", "), fmtDur(math.Max(0, scripts-inside)), fmtDur(math.Max(0, cpu-scripts)))
}

// nearLimit says, for a server whose command thread was busy share of the
// time, when that thread is the bound: it runs every command, and it
// shares the two cores with this process.
func nearLimit(busy float64, unit string) string {
	if busy < 0.75 {
		return ""
	}
	return " - close to the most one thread does while it shares the cores with its clients: the server's CPU per " + unit + " sets the throughput"
}

// overFloors splits an uncontended pair's latency at the floor of the
// client library it runs on (two empty scripts on that client, in the same
// turns): what the lock adds over its client's round trips, against what
// the best peer adds over its own client's. "" without the floors.
func (r *report) overFloors(kind, q string, pair func([]uncontendedRound) float64) string {
	floor := func(name string) (float64, string, bool) {
		k, ok := r.kind(name)
		if !ok || len(r.ClientFloors[k.Client]) == 0 {
			return 0, "", false
		}
		return durSpread(r.ClientFloors[k.Client], func(x lockbench.Latency) time.Duration { return pickLatency(x, q) }).med, k.Client, true
	}
	mine, client, ok := floor(kind)
	if !ok {
		return ""
	}
	best, bestName := math.Inf(1), ""
	for _, p := range r.peers() {
		if pu := r.Uncontended[p.Name]; len(pu) > 0 && pair(pu) < best {
			best, bestName = pair(pu), p.Name
		}
	}
	peer := ""
	if theirs, pc, ok := floor(bestName); ok {
		peer = fmt.Sprintf("; the best peer, %s, %s over the floor on %s (%s)", bestName, fmtDur(best-theirs), pc, fmtDur(theirs))
	}
	return fmt.Sprintf(" Over the floor on its own client, %s (%s), it adds %s%s.",
		client, fmtDur(mine), fmtDur(pair(r.Uncontended[kind])-mine), peer)
}

// scriptsPerAcq lists the script calls per acquisition of a lock's first
// FIFO run, with their mean server time. SLOWLOG keeps only its latest
// entries (the commands inside scripts are logged too), so the counts are
// per unlock call in the part of the run it kept: every acquisition ends
// with exactly one unlock.
func (r *report) scriptsPerAcq(kind string) string {
	f := r.FIFO[kind]
	if len(f) == 0 || len(f[0].Scripts) == 0 {
		return ""
	}
	per := float64(f[0].Acquisitions)
	for _, s := range f[0].Scripts {
		if s.Script == "unlock" && s.Calls > 0 {
			per = float64(s.Calls)
		}
	}
	if per == 0 {
		return ""
	}
	var parts []string
	for _, s := range f[0].Scripts {
		parts = append(parts, fmt.Sprintf("%s %.2f per acquisition, %s each", s.Script, float64(s.Calls)/per, fmtDur(float64(s.Server)/float64(s.Calls))))
	}
	return strings.Join(parts, "; ")
}

// profileLine summarises the CPU profile of a lock's first FIFO run.
func (r *report) profileLine(kind string) string {
	for _, f := range r.FIFO[kind] {
		if f.Profile != nil {
			return profileText(f.Profile)
		}
	}
	return ""
}

// manyProfile is the client CPU profile of kind's first many-locks round
// (bareName: the bare scripts'), or "".
func (r *report) manyProfile(kind string) string {
	rounds := r.Many[kind]
	if kind == bareName {
		rounds = r.ManyBare
	}
	for _, m := range rounds {
		if m.Profile != nil {
			return profileText(m.Profile)
		}
	}
	return ""
}

// profileText summarises a CPU profile in one line.
func profileText(p *profileSummary) string {
	share := func(xs []profileShare, n int) string {
		var parts []string
		for i, x := range xs {
			if i == n {
				break
			}
			parts = append(parts, fmt.Sprintf("%s %s", x.Name, fmtPct(x.Share)))
		}
		return strings.Join(parts, ", ")
	}
	return fmt.Sprintf("by package (own time): %s; most own time: %s; most time in library code, callees included: %s",
		share(p.Packages, 6), share(p.Functions, 6), share(p.Cum, 6))
}

func pick(u uncontendedRound, q string) time.Duration { return pickLatency(u.latency(), q) }

// pickLatency is l's pair p99 when q is "p99", else its pair p50.
func pickLatency(l lockbench.Latency, q string) time.Duration {
	if q == "p99" {
		return l.Pair.P99
	}
	return l.Pair.P50
}

// cpuVerdict says whether the cores were the limit: ours is the server's
// and this process's CPU, machine everything on the machine, both as a
// share of all cores.
func cpuVerdict(ours, machine float64) string {
	s := fmt.Sprintf("the cores were %s busy (%s of it this benchmark and its server, the rest other work on the machine)", fmtPct(machine), fmtPct(ours))
	if machine > 0.85 {
		return s + ": CPU-bound, so every figure here also carries run-queue delays"
	}
	return s + ": not CPU-bound"
}

// slowLine describes the slow Lock calls of the observed many-locks runs.
func (r *report) slowLine(kind string) string {
	s := r.ManySlow[kind]
	if len(s) == 0 {
		return ""
	}
	x := s[0]
	if x.Slow == 0 {
		return fmt.Sprintf("In a run with an observer, no Lock call of %s took %s or more.", fmtInt(int64(x.Calls)), x.Threshold)
	}
	return fmt.Sprintf("In a run with an observer (first round), %s of %s Lock calls took %s or more; %s of those queued and %s got a wake-up message, "+
		"the first p50 %s (max %s) after the call, and returned p50 %s (max %s) after the last; %s got none and acquired by an attempt of their own after p50 %s (max %s).",
		fmtInt(int64(x.Slow)), fmtInt(int64(x.Calls)), x.Threshold, fmtInt(int64(x.Queued)), fmtInt(int64(x.Woken)),
		fmtDur(float64(x.ToWake.P50)), fmtDur(float64(x.ToWake.Max)), fmtDur(float64(x.WakeToEnd.P50)), fmtDur(float64(x.WakeToEnd.Max)),
		fmtInt(int64(x.Slow-x.Woken)), fmtDur(float64(x.Unwoken.P50)), fmtDur(float64(x.Unwoken.Max)))
}

// queueBlind are commands the measured calls run on keys other than the
// queue's (the lock hash, the token counter) or on none: their cost tells
// how the server as a whole fares with the queue in memory.
var queueBlind = []string{"time", "get", "hget", "hgetall"}

// perCall is the mean server time per call, in µs, of the commands cmds
// over calls (0: none ran).
func perCall(calls commandCalls, cmds []string) float64 {
	var n, usec int64
	for _, c := range cmds {
		n += calls[c].Calls
		usec += calls[c].Usec
	}
	if n == 0 {
		return 0
	}
	return float64(usec) / float64(n)
}

// queueNote gives the figures of the queue operations that missed the
// target and names the commands inside the scripts whose server time grew
// most from the shortest queue to the longest (commandstats per length).
func (r *report) queueNote(ops []string) string {
	if len(r.Queue) == 0 {
		return ""
	}
	lengths := r.Settings.QueueLengths
	lo, hi := lengths[0], lengths[len(lengths)-1]
	q := r.Queue[0]
	type growth struct {
		cmd      string
		from, to float64 // µs per call
	}
	var g []growth
	for cmd, st := range q.Commands[hi] {
		if st.Calls == 0 || cmd == "evalsha" || cmd == "eval" {
			continue // the scripts themselves
		}
		to := float64(st.Usec) / float64(st.Calls)
		from := 0.0
		if a := q.Commands[lo][cmd]; a.Calls > 0 {
			from = float64(a.Usec) / float64(a.Calls)
		}
		g = append(g, growth{cmd, from, to})
	}
	sort.Slice(g, func(i, j int) bool { return g[i].to-g[i].from > g[j].to-g[j].from })
	var parts []string
	for i, x := range g {
		if i == 3 || x.to-x.from < 1 {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.1f µs per call at %s queued vs %.1f µs at %d", strings.ToUpper(x.cmd), x.to, fmtInt(int64(hi)), x.from, lo))
	}
	var figures []string
	for _, op := range ops {
		a := durSpread(r.Queue, func(q queueRound) time.Duration { return q.Times[lo][op].P50 }).med
		z := durSpread(r.Queue, func(q queueRound) time.Duration { return q.Times[hi][op].P50 }).med
		figures = append(figures, fmt.Sprintf("%s %s vs %s (%.1fx)", op, fmtDur(z), fmtDur(a), z/math.Max(a, 1)))
	}
	what := "No command grew by a microsecond per call"
	if len(parts) > 0 {
		what = "The commands whose server time per call grew most (commandstats over the measured calls, the commands inside scripts included): " + strings.Join(parts, "; ")
	}
	if a, z := perCall(q.Commands[lo], queueBlind), perCall(q.Commands[hi], queueBlind); a > 0 && z > 0 {
		what += fmt.Sprintf(". Commands that never read the queue's keys (%s, on the lock hash, the token and the clock) took %.1f µs per call at %s queued vs %.1f µs at %d (%.1fx)",
			strings.ToUpper(strings.Join(queueBlind, ", ")), z, fmtInt(int64(hi)), a, lo, z/a)
	}
	lrem := ""
	if len(g) > 0 && g[0].cmd == "lrem" {
		lrem = " LREM, which takes an owner out of the list, scans the list from the head: O(N) in the queue length."
	}
	return fmt.Sprintf("**queue scaling** at %s queued against %d: %s. %s.%s",
		fmtInt(int64(hi)), lo, strings.Join(figures, ", "), what, lrem)
}

// cpuNote is the evidence for a missed CPU-per-uncontended-pair target:
// what the lock's pair does against the reference's, from the same
// windows.
func (r *report) cpuNote(what, kind string) string {
	u, ref := r.Uncontended[kind], r.Uncontended[reference]
	if len(u) == 0 || len(ref) == 0 {
		return ""
	}
	uc := r.uncontendedCosts()
	mine, theirs := uc[kind], uc[reference]
	med := func(cs costs, f func(pairCost) float64) float64 { return cs.of(f, nil).med }
	per := float64(r.Settings.UncontendedOps)
	if what == "cpuserver" {
		s, rs := mine.serverCPU(), theirs.serverCPU()
		run, rrun := med(mine, func(c pairCost) float64 { return c.ScriptRun }), med(theirs, func(c pairCost) float64 { return c.ScriptRun })
		return fmt.Sprintf("**%s, server CPU per uncontended pair**: %s against %s's %s (%s). "+
			"Per pair %.1f commands, %.1f of them writes, in %.1f script calls that ran for %s (commandstats, their commands included), the rest of the server CPU reading, parsing and replying; %s: %.1f commands, %.1f writes, %.1f script calls, %s. "+
			"%s: %s; %s. %s: %s; %s.",
			kind, fmtDur(s.med), reference, fmtDur(rs.med), ratioCell(s, rs),
			med(mine, func(c pairCost) float64 { return c.Commands }), med(mine, func(c pairCost) float64 { return c.Writes }),
			med(mine, func(c pairCost) float64 { return c.Scripts }), fmtDur(run),
			reference, med(theirs, func(c pairCost) float64 { return c.Commands }), med(theirs, func(c pairCost) float64 { return c.Writes }),
			med(theirs, func(c pairCost) float64 { return c.Scripts }), fmtDur(rrun),
			kind, topCommands(u[0].Commands, per, 10), writesLine(u[0].Commands, per),
			reference, topCommands(ref[0].Commands, per, 10), writesLine(ref[0].Commands, per))
	}
	c, rc := mine.clientCPU(), theirs.clientCPU()
	pair := durSpread(u, func(x uncontendedRound) time.Duration { return x.Pair.P50 }).med
	return fmt.Sprintf("**%s, client CPU per uncontended pair**: %s against %s's %s (%s), in a pair of p50 %s. "+
		"Per pair %s allocations and %s bytes against %s and %s, and %.1f script calls (round trips) against %.1f; the figure includes the Go runtime's work (GC, scheduler) and the client library's goroutines.",
		kind, fmtDur(c.med), reference, fmtDur(rc.med), ratioCell(c, rc), fmtDur(pair),
		fmtCount(med(mine, func(c pairCost) float64 { return c.Allocs })), fmtCount(med(mine, func(c pairCost) float64 { return c.Bytes })),
		fmtCount(med(theirs, func(c pairCost) float64 { return c.Allocs })), fmtCount(med(theirs, func(c pairCost) float64 { return c.Bytes })),
		med(mine, func(c pairCost) float64 { return c.Scripts }), med(theirs, func(c pairCost) float64 { return c.Scripts }))
}
