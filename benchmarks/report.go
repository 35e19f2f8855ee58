package main

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fairlock/fairlock/lockbench"
)

// spread is a figure over rounds: the median and the range.
type spread struct {
	med, lo, hi float64
	n           int
}

func spreadOf(xs []float64) spread {
	if len(xs) == 0 {
		return spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{med: med, lo: s[0], hi: s[len(s)-1], n: len(s)}
}

func spreadBy[T any](rounds []T, f func(T) float64) spread {
	xs := make([]float64, len(rounds))
	for i, r := range rounds {
		xs[i] = f(r)
	}
	return spreadOf(xs)
}

func durSpread[T any](rounds []T, f func(T) time.Duration) spread {
	return spreadBy(rounds, func(r T) float64 { return float64(f(r)) })
}

// cell formats a spread: "median (lo–hi)"; the range is left out when the
// rounds agree to the digits shown.
func (s spread) cell(format func(float64) string) string {
	if s.n == 0 {
		return "-"
	}
	m, lo, hi := format(s.med), format(s.lo), format(s.hi)
	if lo == hi {
		return m
	}
	if ln, lu := splitUnit(lo); lu == unitPart(hi) {
		lo = ln
	}
	return m + " (" + lo + "–" + hi + ")"
}

// splitUnit splits "1.25ms" into "1.25" and "ms".
func splitUnit(v string) (num, unit string) {
	i := strings.LastIndexAny(v, "0123456789")
	return v[:i+1], v[i+1:]
}

func unitPart(v string) string {
	_, u := splitUnit(v)
	return u
}

func fmtDur(ns float64) string {
	d := time.Duration(ns)
	switch a := d.Abs(); {
	case a == 0:
		return "0"
	case a < 999_500*time.Nanosecond:
		return strconv.FormatFloat(ns/1e3, 'f', 0, 64) + "µs"
	case a < 9_995*time.Microsecond:
		return strconv.FormatFloat(ns/1e6, 'f', 2, 64) + "ms"
	case a < 999_950*time.Microsecond:
		return strconv.FormatFloat(ns/1e6, 'f', 1, 64) + "ms"
	default:
		return strconv.FormatFloat(ns/1e9, 'f', 2, 64) + "s"
	}
}

func fmtInt(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

func fmtRate(v float64) string  { return fmtInt(int64(math.Round(v))) + "/s" }
func fmtCount(v float64) string { return fmtInt(int64(math.Round(v))) }
func fmtF(digits int) func(float64) string {
	return func(v float64) string { return strconv.FormatFloat(v, 'f', digits, 64) }
}
func fmtPct(v float64) string   { return strconv.FormatFloat(v*100, 'f', 1, 64) + "%" }
func fmtRatio(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) + "x" }

// table writes a Markdown table.
type table struct {
	b *strings.Builder
}

// newTable starts a table of figures: the first column left-aligned, the
// others right-aligned.
func newTable(b *strings.Builder, header ...string) *table {
	return startTable(b, " ---: |", header)
}

// newTextTable starts a table of text, every column left-aligned.
func newTextTable(b *strings.Builder, header ...string) *table {
	return startTable(b, " --- |", header)
}

func startTable(b *strings.Builder, align string, header []string) *table {
	fmt.Fprintf(b, "| %s |\n|", strings.Join(header, " | "))
	for i := range header {
		if i == 0 {
			b.WriteString(" --- |")
		} else {
			b.WriteString(align)
		}
	}
	b.WriteString("\n")
	return &table{b: b}
}

func (t *table) row(cells ...string) {
	fmt.Fprintf(t.b, "| %s |\n", strings.Join(cells, " | "))
}

// report holds what the sections share.
type report struct {
	*results
	b   strings.Builder
	rtt float64 // PING p50, ns (median over rounds)
}

func (r *report) p(format string, a ...any) { fmt.Fprintf(&r.b, format+"\n", a...) }

func (r *report) headline(kind string) []contendedRound {
	return r.Contended[kind][r.Settings.Headline]
}

func (r *report) kind(name string) (kindInfo, bool) {
	for _, k := range r.Kinds {
		if k.Name == name {
			return k, true
		}
	}
	return kindInfo{}, false
}

func renderReport(res *results, chartPath string) string {
	r := &report{results: res}
	r.rtt = durSpread(res.Ping, func(p pingRound) time.Duration { return p.RTT.P50 }).med
	set := res.Settings
	r.p("# Benchmarks")
	r.p("")
	r.p("fairlock on each of its adapters against other Redis lock libraries, measured in one run of")
	r.p("`scripts/benchmarks.sh` (the `benchmarks/` module, which starts its own redis-server on a free")
	r.p("loopback port without persistence). Generated on %s in %s; do not edit by hand.",
		res.Meta.Date.Format("2006-01-02 15:04 UTC"), res.Meta.Elapsed.Round(time.Second))
	r.p("Every figure is the median over %d rounds with the range in parentheses when the rounds differ;", set.Rounds)
	r.p("each round runs every scenario for every lock in turn, the locks in the order listed in odd rounds and reversed in even ones. The measuring code is package `lockbench`,")
	r.p("shared with `fairlock bench`. Raw figures: `benchmarks/results.json`.")
	r.p("")
	if len(res.Errors) > 0 {
		r.p("**Errors during the run** (the figures affected are missing):")
		r.p("")
		for _, e := range res.Errors {
			r.p("- %s", e)
		}
		r.p("")
	}
	r.setup()
	r.targets()
	r.uncontended()
	r.contended(chartPath)
	r.idleHandover()
	r.manyLocks()
	r.queueScaling()
	r.idleWaiters()
	r.bounds()
	return r.b.String()
}

func (r *report) setup() {
	m, set := r.Meta, r.Settings
	r.p("## Setup")
	r.p("")
	r.p("- Machine: %s, %d cores (GOMAXPROCS %d), %s memory, Linux %s; the benchmark process and redis-server share the cores.", m.CPU, m.Cores, m.GOMAXPROCS, m.Memory, m.Kernel)
	r.p("- Load before: `%s`", m.LoadBefore)
	r.p("- Load after: `%s`", m.LoadAfter)
	r.p("- %s (%s), Redis %s, loopback TCP. PING round trip (rueidis client, one caller, %d pings per round): p50 %s, p99 %s.",
		m.Go, m.Platform, m.Redis, set.PingSamples,
		durSpread(r.Ping, func(p pingRound) time.Duration { return p.RTT.P50 }).cell(fmtDur),
		durSpread(r.Ping, func(p pingRound) time.Duration { return p.RTT.P99 }).cell(fmtDur))
	dirty := "no uncommitted library changes"
	if len(m.Dirty) > 0 {
		dirty = fmt.Sprintf("**with uncommitted changes** in the library (`git status`: %s)", strings.Join(m.Dirty, ", "))
	}
	r.p("- fairlock: the working tree at commit %s, %s.", m.Commit, dirty)
	r.p("- Client libraries: %s.", strings.Join(m.Deps, ", "))
	r.p("")
	t := newTextTable(&r.b, "lock", "module", "settings")
	for _, k := range r.Kinds {
		v := k.Version
		if k.Fairlock {
			v = "commit " + m.Commit
		}
		t.row(k.Name, "`"+k.Module+"` "+v, k.Settings)
	}
	r.p("")
	r.p("Scenarios (every loop is bounded in count and time):")
	r.p("")
	r.p("1. **Uncontended**: one owner, %s Lock+Unlock pairs after 50 unmeasured ones, timed with the locks taking turns (%s pairs a turn), then again in a window of its own for each lock. What a pair costs, over that window divided by the pairs: server CPU (INFO cpu of redis-server, used_cpu_sys + used_cpu_user), client CPU (this process, getrusage), server commands and writes (INFO commandstats), allocations (the whole process's, runtime.MemStats).", fmtInt(int64(set.UncontendedOps)), fmtInt(uncontendedBlock))
	r.p("2. **Contention**: 1 to %d contenders on one lock, each with its own client, lock and unlock back to back for %s; those still waiting then get up to %s to finish. Throughput counts acquisitions within the window. Hand-over: holder changed, from the previous Unlock returning to the next Lock returning. Commands: INFO commandstats, every call including the commands scripts run, over the run, per acquisition. FIFO (fairlock): a separate run of %d contenders with a sampler reading the queue and latest fencing token atomically every millisecond; a snapshot with token t and queue q1..qk predicts that token t+i goes to qi (`lockbench.CheckSnapshots`). Overtakes (all locks): acquisitions by a contender that called Lock later than another contender still waiting, by client clocks (so a FIFO lock shows a few: calls microseconds apart reach the server in either order).",
		slices.Max(set.Contenders), set.ContendedFor, set.Drain, set.Headline)
	r.p("3. **Idle hand-over**: one holder, one waiter that has waited %s; from Unlock returning to the waiter's Lock returning, %d times per round.", set.IdleFor, set.IdleHandovers)
	r.p("4. **Many locks**: %d goroutines on one client over %s lock names picked at random, for %s; its cost per pair measured as in scenario 1.", set.ManyWorkers, fmtInt(int64(set.ManyLocks)), set.ManyFor)
	r.p("5. **Queue scaling** (fairlock): server time per call from SLOWLOG (slowlog-log-slower-than 0, which times each call on its own), with 0 to %s owners injected into the queue behind a real waiter first in line, as if they had queued one a millisecond: list and both zsets as acquire.lua writes them (deadlines 10 minutes ahead, a millisecond apart, the keys' expiries past them), then one read of each owner's two deadlines, as one round of their heartbeats would make (the injection itself is not logged, and the Lua garbage it leaves is collected before the timed calls, as a queue that grew one owner at a time leaves none); then one owner queues and gives up, untimed, as the steady traffic a queue that long lives with keeps the server's caches warm where the set-up left them cold; %d samples per length and round.",
		fmtInt(int64(slices.Max(set.QueueLengths))), set.QueueSamples)
	r.p("6. **Idle waiters**: one holder and %s waiters on one lock, each waiter with a client of its own (all %s of them fit), for %s after all are waiting: server CPU (INFO cpu, used_cpu_sys + used_cpu_user) and this process's CPU (getrusage). Clients here use 64 KiB connection buffers instead of the default 0.5 MiB (the same for both locks).",
		fmtInt(int64(set.IdleWaiters)), fmtInt(int64(set.IdleWaiters)), set.IdleWaitersFor)
	r.p("")
	r.p("Instrumented runs, kept apart from the measured ones: the FIFO runs (queue sampler, observe.Observer recording wake-ups, SLOWLOG of every command, and in the first round a CPU profile of this process) and, for fairlock, a second many-locks run with the observer.")
	r.p("")
}

// peers are the locks that are not fairlock.
func (r *report) peers() []kindInfo {
	var out []kindInfo
	for _, k := range r.Kinds {
		if !k.Fairlock {
			out = append(out, k)
		}
	}
	return out
}

func (r *report) fairlocks() []kindInfo {
	var out []kindInfo
	for _, k := range r.Kinds {
		if k.Fairlock {
			out = append(out, k)
		}
	}
	return out
}

const reference = "rueidislock" // the lock the targets compare with

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

// missed collects the targets not met, for "What bounds it".
var missed []string

func (r *report) targets() {
	missed = nil
	r.p("## Targets")
	r.p("")
	r.p("The lock was changed to get closer to these targets (CHANGELOG: the one-message hand-over, head messages, lingering subscriptions, shared SUBSCRIBEs); every figure below is from this one run. \"%s\" is rueidislock with one key (the stronger of its two settings here).", reference)
	r.p("")
	t := newTextTable(&r.b, "target", "lock", "measured", "met")
	thr := func(kind string) spread {
		return spreadBy(r.headline(kind), func(c contendedRound) float64 { return c.Throughput })
	}
	ref := thr(reference)
	for _, k := range r.fairlocks() {
		s := thr(k.Name)
		ok := s.n > 0 && ref.n > 0 && s.med >= 1.5*ref.med
		t.row(fmt.Sprintf("%d contenders: acquisitions/s >= 1.5x %s's", r.Settings.Headline, reference), k.Name,
			fmt.Sprintf("%s vs %s: %s", s.cell(fmtRate), ref.cell(fmtRate), fmtRatio(s.med/ref.med)), yesNo(ok))
		if !ok {
			missed = append(missed, "throughput:"+k.Name)
		}
	}
	for _, k := range r.fairlocks() {
		rounds := r.FIFO[k.Name]
		var v, checked int
		for _, c := range rounds {
			v += c.FIFOViolations
			checked += c.FIFOChecked
		}
		ok := len(rounds) > 0 && v == 0 && checked > 0
		t.row("0 FIFO violations", k.Name, fmt.Sprintf("%d in %s acquisitions checked (%d rounds)", v, fmtInt(int64(checked)), len(rounds)), yesNo(ok))
		if !ok {
			missed = append(missed, "fifo:"+k.Name)
		}
	}
	for _, k := range r.fairlocks() {
		h := durSpread(r.headline(k.Name), func(c contendedRound) time.Duration { return c.Handover.P50 })
		ok := h.n > 0 && r.rtt > 0 && h.med <= 1.5*r.rtt
		t.row("hand-over p50 <= 1.5 round trips", k.Name, fmt.Sprintf("%s = %.1f PING round trips (%s)", h.cell(fmtDur), h.med/r.rtt, fmtDur(r.rtt)), yesNo(ok))
		if !ok {
			missed = append(missed, "handover:"+k.Name)
		}
	}
	// The old "at most 15 server commands per contended acquisition" is
	// retired (issue 22): the Redisson layout bounds the count, and the
	// server CPU per pair below is the measure.
	refMany := r.Many[reference]
	rt := manyThroughput(refMany)
	rp := durSpread(refMany, func(m manyRound) time.Duration { return m.Lock.P99 })
	for _, k := range r.fairlocks() {
		s := manyThroughput(r.Many[k.Name])
		ok := s.n > 0 && rt.n > 0 && s.med >= 0.85*rt.med
		t.row(fmt.Sprintf("%d goroutines / %s names: acquisitions/s >= 0.85x %s's", r.Settings.ManyWorkers, fmtInt(int64(r.Settings.ManyLocks)), reference), k.Name,
			fmt.Sprintf("%s vs %s: %s", s.cell(fmtRate), rt.cell(fmtRate), fmtRatio(s.med/rt.med)), yesNo(ok))
		if !ok {
			missed = append(missed, "many:"+k.Name)
		}
		p := durSpread(r.Many[k.Name], func(m manyRound) time.Duration { return m.Lock.P99 })
		ok = p.n > 0 && rp.n > 0 && p.med <= 2*rp.med
		t.row(fmt.Sprintf("%d goroutines / %s names: Lock p99 <= 2x %s's", r.Settings.ManyWorkers, fmtInt(int64(r.Settings.ManyLocks)), reference), k.Name,
			fmt.Sprintf("%s vs %s: %s", p.cell(fmtDur), rp.cell(fmtDur), fmtRatio(p.med/rp.med)), yesNo(ok))
		if !ok {
			missed = append(missed, "manyp99:"+k.Name)
		}
	}
	if len(r.Queue) > 0 {
		lengths := r.Settings.QueueLengths
		lo, hi := lengths[0], lengths[len(lengths)-1]
		for _, op := range queueOps {
			a := durSpread(r.Queue, func(q queueRound) time.Duration { return q.Times[lo][op].P50 })
			z := durSpread(r.Queue, func(q queueRound) time.Duration { return q.Times[hi][op].P50 })
			if a.med == 0 || z.med == 0 {
				t.row(fmt.Sprintf("%s at %s queued <= 1.5x at %d", op, fmtInt(int64(hi)), lo), r.Kinds[0].Name, "no such call (see section 5)", "-")
				continue
			}
			ok := z.med <= 1.5*a.med
			t.row(fmt.Sprintf("%s at %s queued <= 1.5x at %d", op, fmtInt(int64(hi)), lo), r.Kinds[0].Name,
				fmt.Sprintf("%s vs %s: %s", z.cell(fmtDur), a.cell(fmtDur), fmtRatio(z.med/a.med)), yesNo(ok))
			if !ok {
				missed = append(missed, "queue:"+op)
			}
		}
	}
	fw := spreadBy(r.Waiters[r.Kinds[0].Name], func(w waitersRound) float64 { return w.ServerCPU / w.Window.Seconds() })
	rw := spreadBy(r.Waiters[reference], func(w waitersRound) float64 { return w.ServerCPU / w.Window.Seconds() })
	if fw.n > 0 && rw.n > 0 {
		ok := fw.med <= rw.med
		t.row(fmt.Sprintf("%s idle waiters: server CPU <= %s's", fmtInt(int64(r.Settings.IdleWaiters)), reference), r.Kinds[0].Name,
			fmt.Sprintf("%s vs %s of a core", fw.cell(fmtPct), rw.cell(fmtPct)), yesNo(ok))
		if !ok {
			missed = append(missed, "waiters")
		}
	}
	uc := r.uncontendedCosts()
	rs, rc := uc[reference].serverCPU(), uc[reference].clientCPU()
	for _, k := range r.fairlocks() {
		if rs.n == 0 {
			break
		}
		s, c := uc[k.Name].serverCPU(), uc[k.Name].clientCPU()
		ok := within(s, rs, 1.3)
		t.row(fmt.Sprintf("server CPU per uncontended pair <= 1.3x %s's", reference), k.Name, cpuVsRef(s, rs), yesNo(ok))
		if !ok {
			missed = append(missed, "cpuserver:"+k.Name)
		}
		ok = within(c, rc, 1.2)
		t.row(fmt.Sprintf("client CPU per uncontended pair <= 1.2x %s's", reference), k.Name, cpuVsRef(c, rc), yesNo(ok))
		if !ok {
			missed = append(missed, "cpuclient:"+k.Name)
		}
	}
	for _, k := range r.fairlocks() {
		for _, q := range []struct {
			name  string
			bound float64 // issue 22's targets
			f     func(u uncontendedRound) time.Duration
		}{{"p50", 1.2, func(u uncontendedRound) time.Duration { return u.latency().Pair.P50 }}, {"p99", 1.3, func(u uncontendedRound) time.Duration { return u.latency().Pair.P99 }}} {
			s := durSpread(r.Uncontended[k.Name], q.f)
			best, bestName := math.Inf(1), ""
			for _, p := range r.peers() {
				if v := durSpread(r.Uncontended[p.Name], q.f); v.n > 0 && v.med < best {
					best, bestName = v.med, p.Name
				}
			}
			ok := s.n > 0 && s.med <= q.bound*best
			t.row(fmt.Sprintf("uncontended Lock+Unlock %s <= %.1fx the best peer's", q.name, q.bound), k.Name,
				fmt.Sprintf("%s vs best peer %s %s", s.cell(fmtDur), bestName, fmtDur(best)), yesNo(ok))
			if !ok {
				missed = append(missed, "uncontended"+q.name+":"+k.Name)
			}
		}
	}
	r.p("")
}

func (r *report) uncontended() {
	r.p("## 1. Uncontended Lock and Unlock")
	r.p("")
	t := newTable(&r.b, "lock", "Lock p50", "Lock p99", "Unlock p50", "Unlock p99", "pair p50", "pair p99", "pair p50 alone", "pair p99 alone")
	for _, k := range r.Kinds {
		u := r.Uncontended[k.Name]
		d := func(f func(lockbench.Latency) time.Duration) string {
			return durSpread(u, func(x uncontendedRound) time.Duration { return f(x.latency()) }).cell(fmtDur)
		}
		alone := func(f func(uncontendedRound) time.Duration) string { return durSpread(u, f).cell(fmtDur) }
		t.row(k.Name,
			d(func(x lockbench.Latency) time.Duration { return x.Lock.P50 }), d(func(x lockbench.Latency) time.Duration { return x.Lock.P99 }),
			d(func(x lockbench.Latency) time.Duration { return x.Unlock.P50 }), d(func(x lockbench.Latency) time.Duration { return x.Unlock.P99 }),
			d(func(x lockbench.Latency) time.Duration { return x.Pair.P50 }), d(func(x lockbench.Latency) time.Duration { return x.Pair.P99 }),
			alone(func(x uncontendedRound) time.Duration { return x.Pair.P50 }), alone(func(x uncontendedRound) time.Duration { return x.Pair.P99 }))
	}
	r.p("")
	if floor := r.reportFloor(); len(floor) > 0 {
		p50, p99 := pairCells(floor)
		others := ""
		for _, f := range floorClients[1:] {
			if rounds := r.ClientFloors[f.name]; len(rounds) > 0 {
				p50, p99 := pairCells(rounds)
				others += fmt.Sprintf(" On %s (the options its fairlock adapter is measured with, see Setup): p50 %s, p99 %s.", f.name, p50, p99)
			}
		}
		r.p("The floor, two empty scripts (EVALSHA of `return 1`, one for Lock and one for Unlock, on a rueidis client with the defaults) taking their turns with the locks: pair p50 %s, p99 %s. It is what any lock that runs one script to lock and another to unlock pays before its scripts do anything.%s", p50, p99, others)
		r.p("")
	}
	if len(r.UncontendedBare) > 0 {
		p50, p99 := pairCells(r.UncontendedBare)
		r.p("%s: fairlock's own acquire and unlock scripts, the same Lua as the lock package runs (checked against its digests), sent by a bare rueidis client with the defaults, with no lock package around them (no owner state, watchdog, retries or timers), in the same turns: pair p50 %s, p99 %s. Between the floor and this line is what the scripts themselves cost; between this line and fairlock/rueidis, what the lock package's client path costs.",
			bareName, p50, p99)
		r.p("")
	}
	r.p("Latency: every lock's client open, the locks taking turns, %d pairs each per turn after one unmeasured pair, the order of the locks rotating by one each round of turns, until each has made the pairs of the round, so that the machine's speed drifting during the round (on this shared 2-core machine it does, by tens of percent within minutes) slows them alike. All locks share this process, so one lock's garbage may be collected during another's turn. \"Alone\": as many pairs again, timed in the lock's own window below (a new client, a new lock name), one lock after the other, as runs before this one measured latency.", uncontendedBlock)
	r.p("")
	r.p("### What a pair costs")
	r.p("")
	costTable(&r.b, r.kindNames(), r.uncontendedCosts(), reference)
	r.p("")
	r.p("%s", costNote)
	r.p("")
	r.p("Server commands per pair by command, and the writes among them (first round):")
	r.p("")
	for _, k := range r.Kinds {
		if u := r.Uncontended[k.Name]; len(u) > 0 {
			per := float64(r.Settings.UncontendedOps)
			r.p("- %s: %s; %s", k.Name, topCommands(u[0].Commands, per, 8), writesLine(u[0].Commands, per))
		}
	}
	r.p("")
}

func (r *report) kindNames() []string {
	names := make([]string, len(r.Kinds))
	for i, k := range r.Kinds {
		names[i] = k.Name
	}
	return names
}

// uncontendedCosts are the pair costs of scenario 1, by lock.
func (r *report) uncontendedCosts() map[string]costs {
	return costsBy(r.Uncontended, func(u uncontendedRound) pairCost { return u.cost(r.Settings.UncontendedOps) })
}

// manyThroughput is the acquisitions/s of scenario 4's rounds.
func manyThroughput(rounds []manyRound) spread {
	return spreadBy(rounds, func(m manyRound) float64 { return m.Throughput })
}

// pairCells are the pair p50 and p99 of rounds, as table cells.
func pairCells(rounds []lockbench.Latency) (p50, p99 string) {
	return durSpread(rounds, func(x lockbench.Latency) time.Duration { return x.Pair.P50 }).cell(fmtDur),
		durSpread(rounds, func(x lockbench.Latency) time.Duration { return x.Pair.P99 }).cell(fmtDur)
}

// headlineRounds are scenario 2's rounds at the headline number of
// contenders, by lock.
func (r *report) headlineRounds() map[string][]contendedRound {
	rounds := map[string][]contendedRound{}
	for _, k := range r.Kinds {
		rounds[k.Name] = r.headline(k.Name)
	}
	return rounds
}

// manyCosts are the pair costs of scenario 4, by lock.
func (r *report) manyCosts() map[string]costs {
	return costsBy(r.Many, manyRound.cost)
}

func (r *report) contended(chartPath string) {
	n := r.Settings.Headline
	r.p("## 2. Contention: %d contenders on one lock, each with its own client", n)
	r.p("")
	t := newTable(&r.b, "lock", "acquisitions/s", "hand-over p50", "hand-over p99", "p50 in RTTs", "FIFO violations / checked", "overtakes", "max wait", "Jain", "commands/acq", "server CPU/acq", "client CPU/acq")
	for _, k := range r.Kinds {
		c := r.headline(k.Name)
		fifo := "-"
		if k.Fairlock {
			var v, checked int
			for _, f := range r.FIFO[k.Name] {
				v += f.FIFOViolations
				checked += f.FIFOChecked
			}
			fifo = fmt.Sprintf("%d / %s", v, fmtInt(int64(checked)))
		}
		perAcq := func(x contendedRound, v float64) float64 {
			if x.Acquisitions == 0 {
				return 0
			}
			return v / float64(x.Acquisitions)
		}
		t.row(k.Name,
			spreadBy(c, func(x contendedRound) float64 { return x.Throughput }).cell(fmtRate),
			durSpread(c, func(x contendedRound) time.Duration { return x.Handover.P50 }).cell(fmtDur),
			durSpread(c, func(x contendedRound) time.Duration { return x.Handover.P99 }).cell(fmtDur),
			spreadBy(c, func(x contendedRound) float64 { return float64(x.Handover.P50) / r.rtt }).cell(fmtF(1)),
			fifo,
			spreadBy(c, func(x contendedRound) float64 { return float64(x.Overtakes) / math.Max(1, float64(x.Acquisitions)) }).cell(fmtPct),
			durSpread(c, func(x contendedRound) time.Duration { return x.MaxWait }).cell(fmtDur),
			spreadBy(c, func(x contendedRound) float64 { return x.Fairness }).cell(fmtF(2)),
			spreadBy(c, func(x contendedRound) float64 { return x.CommandsPerAcq }).cell(fmtF(1)),
			spreadBy(c, func(x contendedRound) float64 { return perAcq(x, x.ServerCPU*1e9) }).cell(fmtDur),
			spreadBy(c, func(x contendedRound) float64 { return perAcq(x, float64(x.ClientCPU)) }).cell(fmtDur))
	}
	r.p("")
	r.p("Overtakes are a share of all acquisitions. Max wait counts waits cancelled at the end of the drain up to their cancellation. CPU per acquisition is server (INFO cpu) and this process (getrusage) over the run, divided by all acquisitions. A negative hand-over means the next holder's Lock returned before the previous holder's Unlock did (rueidislock's release returns only after its key-watching goroutine has finished).")
	r.p("")
	r.p("### What an acquisition costs, %d contenders", n)
	r.p("")
	acquisitionTable(&r.b, r.kindNames(), costsBy(r.headlineRounds(), contendedRound.cost))
	r.p("")
	r.p("The same run as the table above, over all its acquisitions: commands and script calls from INFO commandstats; script time, commands' time and scripts' rest as in section 1's cost table (commands' time counts every call but the scripts, so a lock that sends commands of its own, redsync's SET NX, has them there and its rest understated).")
	r.p("")
	for _, k := range r.fairlocks() {
		f := r.FIFO[k.Name]
		if len(f) == 0 {
			continue
		}
		r.p("%s hand-over split at the new holder's wake-up message (observe.Observer's Woken, in the FIFO runs, where %s of hand-overs had one): previous Unlock returning to the message p50 %s (p99 %s), message to Lock returning p50 %s (p99 %s); the FIFO runs' own hand-over p50 was %s.",
			k.Name, spreadBy(f, func(x contendedRound) float64 { return x.WokenShare }).cell(fmtPct),
			durSpread(f, func(x contendedRound) time.Duration { return x.ToWake.P50 }).cell(fmtDur),
			durSpread(f, func(x contendedRound) time.Duration { return x.ToWake.P99 }).cell(fmtDur),
			durSpread(f, func(x contendedRound) time.Duration { return x.WakeToLock.P50 }).cell(fmtDur),
			durSpread(f, func(x contendedRound) time.Duration { return x.WakeToLock.P99 }).cell(fmtDur),
			durSpread(f, func(x contendedRound) time.Duration { return x.Handover.P50 }).cell(fmtDur))
		r.p("")
		if sc := r.scriptsPerAcq(k.Name); sc != "" {
			r.p("%s script calls in the first FIFO run (SLOWLOG, which also logs the commands inside scripts and so keeps only the end of the run: counted per unlock, one per acquisition; the scripts named by a calibration run at the start; inspect is the FIFO sampler's): %s.", k.Name, sc)
			r.p("")
		}
		if p := r.profileLine(k.Name); p != "" {
			r.p("%s client CPU profile of the first FIFO run (runtime/pprof, %s of samples): %s.", k.Name, fmtDur(float64(f[0].Profile.Total)), p)
			r.p("")
		}
	}
	r.p("Commands per acquisition by command, %d contenders:", n)
	r.p("")
	for _, k := range r.Kinds {
		c := r.headline(k.Name)
		if len(c) == 0 {
			continue
		}
		r.p("- %s: %s", k.Name, topCommands(c[0].TopCommands, float64(c[0].Acquisitions), 8))
	}
	r.p("")
	r.p("### Against the number of contenders")
	r.p("")
	r.p("![Throughput and hand-over p50 against contenders](%s)", chartPath)
	r.p("")
	r.p("Log scales; peers dashed. A hand-over p50 of zero or less (see the table) has no point on the chart.")
	r.p("")
	levels := r.Settings.Contenders
	header := []string{"acquisitions/s"}
	for _, l := range levels {
		header = append(header, strconv.Itoa(l))
	}
	t = newTable(&r.b, header...)
	for _, k := range r.Kinds {
		row := []string{k.Name}
		for _, l := range levels {
			row = append(row, spreadBy(r.Contended[k.Name][l], func(x contendedRound) float64 { return x.Throughput }).cell(fmtRate))
		}
		t.row(row...)
	}
	r.p("")
	header[0] = "hand-over p50"
	t = newTable(&r.b, header...)
	for _, k := range r.Kinds {
		row := []string{k.Name}
		for _, l := range levels {
			if l == 1 {
				row = append(row, "-")
				continue
			}
			row = append(row, durSpread(r.Contended[k.Name][l], func(x contendedRound) time.Duration { return x.Handover.P50 }).cell(fmtDur))
		}
		t.row(row...)
	}
	r.p("")
	header[0] = "Jain fairness"
	t = newTable(&r.b, header...)
	for _, k := range r.Kinds {
		row := []string{k.Name}
		for _, l := range levels {
			row = append(row, spreadBy(r.Contended[k.Name][l], func(x contendedRound) float64 { return x.Fairness }).cell(fmtF(2)))
		}
		t.row(row...)
	}
	r.p("")
}

// topCommands lists the n most called commands per unit (acquisition,
// second), then the rest together.
func topCommands(calls commandCalls, per float64, n int) string {
	if per == 0 {
		return "-"
	}
	names := make([]string, 0, len(calls))
	var total int64
	for k, v := range calls {
		names = append(names, k)
		total += v.Calls
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := calls[names[i]].Calls, calls[names[j]].Calls
		return a > b || a == b && names[i] < names[j]
	})
	var parts []string
	var shown int64
	for i, k := range names {
		if i == n {
			parts = append(parts, fmt.Sprintf("others %.2f", float64(total-shown)/per))
			break
		}
		shown += calls[k].Calls
		parts = append(parts, fmt.Sprintf("%s %.2f", strings.ToUpper(k), float64(calls[k].Calls)/per))
	}
	return fmt.Sprintf("%.1f in all: %s", float64(total)/per, strings.Join(parts, ", "))
}

func (r *report) idleHandover() {
	r.p("## 3. Idle hand-over: one holder, one waiter")
	r.p("")
	t := newTable(&r.b, "lock", "hand-over p50", "hand-over max", "p50 in RTTs")
	for _, k := range r.Kinds {
		i := r.Idle[k.Name]
		t.row(k.Name,
			durSpread(i, func(x idleRound) time.Duration { return x.Handover.P50 }).cell(fmtDur),
			durSpread(i, func(x idleRound) time.Duration { return x.Handover.Max }).cell(fmtDur),
			spreadBy(i, func(x idleRound) float64 { return float64(x.Handover.P50) / r.rtt }).cell(fmtF(1)))
	}
	r.p("")
}

func (r *report) manyLocks() {
	r.p("## 4. Many locks: %d goroutines over %s lock names, one client", r.Settings.ManyWorkers, fmtInt(int64(r.Settings.ManyLocks)))
	r.p("")
	t := newTable(&r.b, "lock", "acquisitions/s", "Lock p50", "Lock p99", "Lock max")
	row := func(name string, m []manyRound) {
		t.row(name, manyThroughput(m).cell(fmtRate),
			durSpread(m, func(x manyRound) time.Duration { return x.Lock.P50 }).cell(fmtDur),
			durSpread(m, func(x manyRound) time.Duration { return x.Lock.P99 }).cell(fmtDur),
			durSpread(m, func(x manyRound) time.Duration { return x.Lock.Max }).cell(fmtDur))
	}
	for _, k := range r.Kinds {
		row(k.Name, r.Many[k.Name])
	}
	names, costs := r.kindNames(), r.manyCosts()
	if m := r.ManyBare; len(m) > 0 {
		row(bareName, m)
		names = append(names, bareName)
		for k, v := range costsBy(map[string][]manyRound{bareName: m}, manyRound.cost) {
			costs[k] = v
		}
	}
	r.p("")
	if len(r.ManyBare) > 0 {
		r.p("%s: fairlock's own acquire and unlock scripts sent by a bare rueidis client, with no lock package (as in section 1), each worker's Lock trying a held lock again at once (the acquire in TryLock's mode, which never queues): what the scripts allow here. Not a lock to use: a worker that finds the lock held spins.", bareName)
		r.p("")
	}
	r.p("What a pair (an acquisition) costs here, measured as in section 1 over the whole run, its drain included:")
	r.p("")
	costTable(&r.b, names, costs, reference)
	r.p("")
	var profiles []string
	var order []string
	for _, k := range r.fairlocks() {
		order = append(order, k.Name)
	}
	for _, name := range append(order, reference, bareName) {
		if p := r.manyProfile(name); p != "" {
			profiles = append(profiles, fmt.Sprintf("- %s: %s", name, p))
		}
	}
	if len(profiles) > 0 {
		r.p("Where this process's CPU went, first round (runtime/pprof over the measured run):")
		r.p("")
		for _, p := range profiles {
			r.p("%s", p)
		}
		r.p("")
	}
	r.p("Writes per pair by command (first round):")
	r.p("")
	for _, k := range r.Kinds {
		if m := r.Many[k.Name]; len(m) > 0 && m[0].Acquisitions > 0 {
			r.p("- %s: %s", k.Name, writesLine(m[0].Commands, float64(m[0].Acquisitions)))
		}
	}
	r.p("")
	for _, k := range r.fairlocks() {
		if line := r.slowLine(k.Name); line != "" {
			r.p("%s: %s", k.Name, line)
			r.p("")
		}
	}
}

func (r *report) queueScaling() {
	r.p("## 5. Queue scaling: server time per call with N owners queued (%s)", r.Kinds[0].Name)
	r.p("")
	r.p("p50 of SLOWLOG's per-call execution time (microsecond resolution; logging every command, those inside the scripts too, adds a little to each script's time, alike at every length). enqueue: a new owner joining the tail; re-check: that owner's next acquire, already queued (after subscribing; a heartbeat costs the same); leave, not last: that owner giving up (TryLock's wait ran out) with another owner queued behind it, whose entry stays in the list, marked dead; leave: that other owner giving up, last in line (popped, with the dead entry before it); unlock: the holder's release, which hands the lock to the waiter first in line; grant: the script calls the new holder makes after that unlock, up to 10 ms after its Lock returned, added up.")
	r.p("")
	lengths := r.Settings.QueueLengths
	header := []string{"operation"}
	for _, n := range lengths {
		header = append(header, "N = "+fmtInt(int64(n)))
	}
	header = append(header, fmt.Sprintf("%s / %d", fmtInt(int64(lengths[len(lengths)-1])), lengths[0]))
	t := newTable(&r.b, header...)
	for _, op := range []string{"enqueue", recheck, leaveMiddle, "leave", "unlock", "grant"} {
		row := []string{op}
		for _, n := range lengths {
			row = append(row, durSpread(r.Queue, func(q queueRound) time.Duration { return q.Times[n][op].P50 }).cell(fmtDur))
		}
		a := durSpread(r.Queue, func(q queueRound) time.Duration { return q.Times[lengths[0]][op].P50 }).med
		z := durSpread(r.Queue, func(q queueRound) time.Duration { return q.Times[lengths[len(lengths)-1]][op].P50 }).med
		if a > 0 {
			row = append(row, fmtRatio(z/a))
		} else {
			row = append(row, "-")
		}
		t.row(row...)
	}
	row := []string{"script calls in grant"}
	for _, n := range lengths {
		row = append(row, spreadBy(r.Queue, func(q queueRound) float64 { return q.GrantCalls[n] }).cell(fmtF(1)))
	}
	t.row(append(row, "")...)
	skipped := 0
	for _, q := range r.Queue {
		skipped += q.Skipped
	}
	r.p("")
	if skipped > 0 {
		r.p("%d samples were skipped because their slowlog did not show the calls expected (a heartbeat in between).", skipped)
		r.p("")
	}
}

func (r *report) idleWaiters() {
	r.p("## 6. %s idle waiters on one held lock, each with its own client", fmtInt(int64(r.Settings.IdleWaiters)))
	r.p("")
	t := newTable(&r.b, "lock", "server CPU", "client CPU", "commands/s", "top commands/s")
	for _, name := range []string{r.Kinds[0].Name, reference} {
		w := r.Waiters[name]
		if len(w) == 0 {
			continue
		}
		top := w[0].CommandsTop
		t.row(name,
			spreadBy(w, func(x waitersRound) float64 { return x.ServerCPU / x.Window.Seconds() }).cell(fmtPct),
			spreadBy(w, func(x waitersRound) float64 { return x.ClientCPU.Seconds() / x.Window.Seconds() }).cell(fmtPct),
			spreadBy(w, func(x waitersRound) float64 { return float64(x.Commands) / x.Window.Seconds() }).cell(fmtCount),
			topCommands(top, w[0].Window.Seconds(), 5))
	}
	r.p("")
	r.p("CPU is a share of one core over the window. Top commands are from the first round.")
	r.p("")
}
