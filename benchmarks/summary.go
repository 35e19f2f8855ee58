package main

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"time"

	"github.com/fairlock/fairlock/lockbench"
)

// The summary, docs/benchmarks.md: what a user reads in two minutes. Per
// scenario one table of fairlock (on its first adapter, the one every
// scenario measures) and each peer, with fairlock's figure over the
// peer's, and one paragraph on what bounds the result. Written from the
// same raw figures as BENCHMARKS.md, at most summaryWords words.

// summaryWords is the most words (as wc -w counts them) the summary may
// have.
const summaryWords = 600

// summaryPath is where the summary of the report at out goes: docs/
// beside it.
func summaryPath(out string) string {
	return filepath.Join(filepath.Dir(out), "docs", "benchmarks.md")
}

// renderSummary writes the summary; reportPath is BENCHMARKS.md's path
// relative to the summary (the summary links to it).
func renderSummary(res *results, reportPath string) string {
	r := &report{results: res}
	r.rtt = durSpread(res.Ping, func(p pingRound) time.Duration { return p.RTT.P50 }).med
	main := r.Kinds[0].Name
	r.p("# Benchmarks, in short")
	r.p("")
	r.p("The latest `bash scripts/benchmarks.sh` run (%s, Redis %s, %d cores, medians of %d rounds), from `benchmarks/results.json`; do not edit. fairlock runs on rueidis; [BENCHMARKS.md](%s) has the other adapters, ranges and chart.",
		res.Meta.Date.Format("2006-01-02"), res.Meta.Redis, res.Meta.Cores, res.Settings.Rounds, reportPath)
	r.p("")
	if len(res.Errors) > 0 {
		r.p("**The run had errors**: see BENCHMARKS.md.")
		r.p("")
	}
	r.summaryUncontended(main)
	r.summaryContended(main)
	r.summaryIdle(main)
	r.summaryMany(main)
	r.summaryQueue()
	r.summaryWaiters(main)
	r.p("Redis Cluster: BENCHMARKS.md section 7.")
	return r.b.String()
}

// peerTable writes a scenario's table: fairlock's figure, then each
// peer's and fairlock's over it. fig is a lock's median (ok false: the
// lock has none).
func (r *report) peerTable(header string, names []string, fig func(name string) (float64, bool), format func(float64) string) {
	t := newTable(&r.b, "lock", header, "fairlock ÷")
	mine, mok := fig(names[0])
	for i, name := range names {
		v, ok := fig(name)
		if !ok {
			continue
		}
		ratio := ""
		if i > 0 && mok && v != 0 {
			ratio = fmtShortRatio(mine / v)
		}
		t.row(name, format(v), ratio)
	}
	r.p("")
}

// fmtShortRatio is a ratio with two decimals, or two significant digits
// below 0.1 (a latency thousands of times another's).
func fmtShortRatio(v float64) string {
	if math.Abs(v) >= 0.1 {
		return fmtRatio(v)
	}
	return strconv.FormatFloat(v, 'g', 2, 64) + "x"
}

// withPeers is main followed by every peer.
func (r *report) withPeers(main string) []string {
	names := []string{main}
	for _, p := range r.peers() {
		names = append(names, p.Name)
	}
	return names
}

// medianOf adapts a spread of a lock's rounds to peerTable.
func medianOf(s spread) (float64, bool) { return s.med, s.n > 0 }

func (r *report) summaryUncontended(main string) {
	r.p("## Uncontended")
	r.p("")
	r.peerTable("pair p50", r.withPeers(main), func(name string) (float64, bool) {
		return medianOf(durSpread(r.Uncontended[name], func(u uncontendedRound) time.Duration { return u.latency().Pair.P50 }))
	}, fmtDur)
	uc := r.uncontendedCosts()
	commands := func(name string) float64 { return uc[name].of(func(c pairCost) float64 { return c.Commands }, nil).med }
	best, bestName := math.Inf(1), ""
	for _, p := range r.peers() {
		if v := durSpread(r.Uncontended[p.Name], func(u uncontendedRound) time.Duration { return u.latency().Pair.P50 }); v.n > 0 && v.med < best {
			best, bestName = v.med, p.Name
		}
	}
	pairP50 := func(rounds []lockbench.Latency) string {
		return fmtDur(durSpread(rounds, func(x lockbench.Latency) time.Duration { return x.Pair.P50 }).med)
	}
	r.p("Two scripts, %.0f commands (%.0f writes) a pair against %s's %.0f: two empty scripts take %s, fairlock's scripts alone %s, the lock package the rest.",
		commands(main), uc[main].of(func(c pairCost) float64 { return c.Writes }, nil).med, bestName, commands(bestName),
		pairP50(r.reportFloor()), pairP50(r.UncontendedBare))
	r.p("")
}

func (r *report) summaryContended(main string) {
	n := r.Settings.Headline
	r.p("## %d contenders, one lock", n)
	r.p("")
	thr := func(name string) spread {
		return spreadBy(r.headline(name), func(c contendedRound) float64 { return c.Throughput })
	}
	r.peerTable("acquisitions/s", r.withPeers(main), func(name string) (float64, bool) { return medianOf(thr(name)) }, fmtRate)
	var violations, checked int
	for _, c := range r.FIFO[main] {
		violations += c.FIFOViolations
		checked += c.FIFOChecked
	}
	text := fmt.Sprintf("A FIFO lock hands over to one waiter at a time (%d violations in %s checked), each through redis-server's command thread", violations, fmtInt(int64(checked)))
	if s, ok := splitOf(firstContended(r.headline(main))); ok {
		text += fmt.Sprintf(": %s of its CPU per acquisition (first round), %s in the scripts", fmtDur(s.cpu), fmtDur(s.scripts))
		if l, ok := r.contendedLoad(main); ok {
			text += ", one every " + fmtDur(l.cycle)
		}
	}
	// The faster peers: what fairness they gave up for it.
	var jains []float64
	for _, p := range r.peers() {
		if t := thr(p.Name); t.n > 0 && t.med > thr(main).med {
			jains = append(jains, spreadBy(r.headline(p.Name), func(c contendedRound) float64 { return c.Fairness }).med)
		}
	}
	if len(jains) > 0 {
		j := spreadOf(jains)
		jain := fmtF(2)(j.lo)
		if hi := fmtF(2)(j.hi); hi != jain {
			jain += "–" + hi
		}
		text += fmt.Sprintf(". Faster locks let a running caller win again: Jain fairness %s, fairlock's %s",
			jain, fmtF(2)(spreadBy(r.headline(main), func(c contendedRound) float64 { return c.Fairness }).med))
	}
	r.p("%s.", text)
	r.p("")
}

func (r *report) summaryIdle(main string) {
	r.p("## Idle hand-over")
	r.p("")
	p50 := func(name string) spread {
		return durSpread(r.Idle[name], func(i idleRound) time.Duration { return i.Handover.P50 })
	}
	r.peerTable("p50", r.withPeers(main), func(name string) (float64, bool) { return medianOf(p50(name)) }, fmtDur)
	r.p("The unlock script publishes the grant; the waiter's Lock returns on it: %.1f PING round trips (%s).",
		p50(main).med/r.rtt, fmtDur(r.rtt))
	r.p("")
}

func (r *report) summaryMany(main string) {
	r.p("## %d goroutines, %s locks, one client", r.Settings.ManyWorkers, fmtInt(int64(r.Settings.ManyLocks)))
	r.p("")
	r.peerTable("acquisitions/s", r.withPeers(main), func(name string) (float64, bool) { return medianOf(manyThroughput(r.Many[name])) }, fmtRate)
	s, ok := splitOf(firstMany(r.Many[main]))
	if !ok {
		return
	}
	costs := r.manyCosts()
	cost := func(name string) string {
		c := costs[name]
		return fmt.Sprintf("%s for %.1f commands", fmtDur(c.serverCPU().med), c.of(func(c pairCost) float64 { return c.Commands }, nil).med)
	}
	bound := "is"
	if nearLimit(s.busy) {
		bound = "sets the throughput:"
	}
	text := fmt.Sprintf("redis-server's command thread was %s busy (first round); its CPU per pair %s %s against %s's %s", fmtPct(s.busy), bound, cost(main), reference, cost(reference))
	if len(r.ManyBare) > 0 {
		text += fmt.Sprintf(". fairlock's scripts alone made %s %s's",
			fmtRatio(manyThroughput(r.ManyBare).med/math.Max(1, manyThroughput(r.Many[reference]).med)), reference)
	}
	r.p("%s.", text)
	r.p("")
}

func (r *report) summaryQueue() {
	if len(r.Queue) == 0 {
		return
	}
	lengths := r.Settings.QueueLengths
	lo, hi := lengths[0], lengths[len(lengths)-1]
	r.p("## A long queue")
	r.p("")
	t := newTable(&r.b, "server time per call", fmt.Sprintf("%d queued", lo), fmtInt(int64(hi))+" queued", "ratio")
	for _, op := range []string{"enqueue", leaveMiddle, "leave", "unlock"} {
		a := durSpread(r.Queue, func(q queueRound) time.Duration { return q.Times[lo][op].P50 }).med
		z := durSpread(r.Queue, func(q queueRound) time.Duration { return q.Times[hi][op].P50 }).med
		if a > 0 && z > 0 {
			t.row(op, fmtDur(a), fmtDur(z), fmtRatio(z/a))
		}
	}
	r.p("")
	r.p("p50 by SLOWLOG. An owner leaving from inside the line stays, marked dead: no call scans the queue.")
	r.p("")
}

func (r *report) summaryWaiters(main string) {
	w, ref := r.Waiters[main], r.Waiters[reference]
	if len(w) == 0 || len(ref) == 0 {
		return
	}
	r.p("## %s idle waiters", fmtInt(int64(r.Settings.IdleWaiters)))
	r.p("")
	cpu := func(name string) (float64, bool) {
		return medianOf(spreadBy(r.Waiters[name], func(x waitersRound) float64 { return x.ServerCPU / x.Window.Seconds() }))
	}
	r.peerTable("server CPU, of a core", []string{main, reference}, cpu, fmtPct)
	perSecond := func(rounds []waitersRound) string {
		return fmtCount(spreadBy(rounds, func(x waitersRound) float64 { return float64(x.Commands) / x.Window.Seconds() }).med)
	}
	r.p("A fairlock waiter waits for a wake-up message, running acquire only as a heartbeat: %s commands/s in all, against %s's %s.",
		perSecond(w), reference, perSecond(ref))
	r.p("")
}
