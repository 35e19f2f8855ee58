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

// "What bounds it": for every target the run missed, one table of the
// figures that say where the time or the work went - a row a figure, a
// column a lock, and a last column saying in one line what the figure is.
// Figures are medians over the rounds unless a row says "first round".

// boundTable is the evidence for one missed target.
type boundTable struct {
	title string
	cols  []string // the locks (or whatever the columns are), in order
	rows  [][]string
}

// add appends a row: the figure, its cell in each column, what it says.
func (t *boundTable) add(figure, says string, cell func(col string) string) {
	row := []string{figure}
	for _, c := range t.cols {
		row = append(row, cell(c))
	}
	t.rows = append(t.rows, append(row, says))
}

func (t *boundTable) write(b *strings.Builder) {
	fmt.Fprintf(b, "### %s\n\n", t.title)
	header := append(append([]string{"figure"}, t.cols...), "what it says")
	tt := newTextTable(b, header...)
	for _, row := range t.rows {
		tt.row(row...)
	}
	b.WriteString("\n")
}

// bounds writes "What bounds it": the evidence for every target missed,
// then what the data layout fixes.
func (r *report) bounds() {
	r.p("## What bounds it")
	r.p("")
	if len(missed) == 0 {
		r.p("Every target was met in this run.")
		r.p("")
		return
	}
	r.p("A table per target missed, from this run's figures (commandstats, SLOWLOG, CPU): a row a figure, a column a lock. Medians over the rounds unless a row says first round; the client CPU profiles are in sections 2 and 4.")
	r.p("")
	for _, g := range groupMissed(missed) {
		if t := r.boundTable(g.what, g.kinds); t != nil && len(t.rows) > 0 {
			t.write(&r.b)
		}
	}
	r.layout().write(&r.b)
}

// missedGroup is one target and the locks (or queue operations) that
// missed it.
type missedGroup struct {
	what  string
	kinds []string
}

// groupMissed groups "what:kind" entries by what, in the order they came.
func groupMissed(entries []string) []missedGroup {
	var out []missedGroup
	for _, m := range entries {
		what, kind, _ := strings.Cut(m, ":")
		i := slices.IndexFunc(out, func(g missedGroup) bool { return g.what == what })
		if i < 0 {
			out = append(out, missedGroup{what: what})
			i = len(out) - 1
		}
		if kind != "" {
			out[i].kinds = append(out[i].kinds, kind)
		}
	}
	return out
}

// boundTable is the table for one missed target (nil: none to show).
func (r *report) boundTable(what string, kinds []string) *boundTable {
	switch what {
	case "throughput":
		return r.throughputBounds(kinds)
	case "handover":
		return r.handoverBounds(kinds)
	case "fifo":
		t := &boundTable{title: "FIFO", cols: kinds}
		t.add("FIFO violations", "each is a token that a queue snapshot promised to another owner: see the violations the run logged", func(k string) string {
			var v int
			for _, c := range r.FIFO[k] {
				v += c.FIFOViolations
			}
			return fmt.Sprint(v)
		})
		return t
	case "many", "manyp99":
		return r.manyBounds(what, kinds)
	case "cpuserver":
		return r.serverCPUBounds(kinds)
	case "cpuclient":
		return r.clientCPUBounds(kinds)
	case "queue":
		return r.queueBounds(kinds)
	case "waiters":
		return r.waitersBounds()
	}
	if q, ok := strings.CutPrefix(what, "uncontended"); ok {
		return r.uncontendedBounds(q, kinds)
	}
	return nil
}

// firstOf is the first round of rounds, or a zero round without any.
func firstOf[T any](rounds []T) T {
	var zero T
	if len(rounds) == 0 {
		return zero
	}
	return rounds[0]
}

// orDash is "-" for a column without the figure.
func orDash(ok bool, s string) string {
	if !ok {
		return "-"
	}
	return s
}

// contendedLoad is what a lock's headline contended runs measured of
// time and CPU, medians over the rounds, per acquisition.
type contendedLoad struct {
	cycle     float64 // ns between acquisitions
	hand      float64 // hand-over p50, ns
	scripts   float64 // script calls
	serverCPU float64 // ns
	clientCPU float64 // ns
	ours      float64 // this benchmark's and its server's CPU, a share of all cores
	machine   float64 // every process's, a share of all cores
}

func (r *report) contendedLoad(kind string) (contendedLoad, bool) {
	c := r.headline(kind)
	if len(c) == 0 {
		return contendedLoad{}, false
	}
	perAcq := func(f func(contendedRound) float64) float64 {
		return spreadBy(c, func(x contendedRound) float64 { return f(x) / math.Max(1, float64(x.Acquisitions)) }).med
	}
	return contendedLoad{
		cycle:     float64(time.Second) / spreadBy(c, func(x contendedRound) float64 { return x.Throughput }).med,
		hand:      durSpread(c, func(x contendedRound) time.Duration { return x.Handover.P50 }).med,
		scripts:   perAcq(func(x contendedRound) float64 { return float64(x.TopCommands.scripts().Calls) }),
		serverCPU: perAcq(func(x contendedRound) float64 { return x.ServerCPU * 1e9 }),
		clientCPU: perAcq(func(x contendedRound) float64 { return float64(x.ClientCPU) }),
		ours: spreadBy(c, func(x contendedRound) float64 {
			return (x.ServerCPU + x.ClientCPU.Seconds()) / x.Wall.Seconds() / float64(r.Meta.Cores)
		}).med,
		machine: spreadBy(c, func(x contendedRound) float64 { return x.MachineBusy }).med,
	}, true
}

// coresSays explains the cores-busy row.
const coresSays = "every process's CPU over all cores, and this benchmark's and its server's in brackets; above 85%, CPU-bound: every figure also carries run-queue delays"

// coresCell says how busy the cores were (machine: every process; ours:
// this benchmark and its server) and whether that made the run CPU-bound.
func coresCell(ours, machine float64) string {
	verdict := "not CPU-bound"
	if machine > 0.85 {
		verdict = "CPU-bound"
	}
	return fmt.Sprintf("%s (%s): %s", fmtPct(machine), fmtPct(ours), verdict)
}

func (r *report) throughputBounds(kinds []string) *boundTable {
	t := &boundTable{title: fmt.Sprintf("%d contenders: acquisitions/s", r.Settings.Headline), cols: kinds}
	load := func(f func(contendedLoad) string) func(string) string {
		return func(k string) string {
			l, ok := r.contendedLoad(k)
			return orDash(ok, f(l))
		}
	}
	t.add("time between acquisitions", "one second over the acquisitions per second",
		load(func(l contendedLoad) string { return fmtDur(l.cycle) }))
	t.add("hand-over p50, its share of that time", "a FIFO lock hands over to one waiter at a time, so hand-over latency caps throughput; the spinning locks keep the lock with whoever is already running (see Jain)",
		load(func(l contendedLoad) string { return fmtDur(l.hand) + ", " + fmtPct(l.hand/l.cycle) }))
	t.add("script calls per acquisition", "every hand-over runs through redis-server's one command thread: the holder's unlock script grants the lock to the head and publishes the grant, the new holder's Unlock is the next such script, and the other contenders' enqueues run in between",
		load(func(l contendedLoad) string { return fmtF(1)(l.scripts) }))
	t.add("server CPU per acquisition", "redis-server's INFO cpu over the run",
		load(func(l contendedLoad) string { return fmtDur(l.serverCPU) }))
	t.add("client CPU per acquisition", "this process's getrusage over the run",
		load(func(l contendedLoad) string { return fmtDur(l.clientCPU) }))
	t.add("CPU per acquisition, both", fmt.Sprintf("set against the time between acquisitions, on %d cores", r.Meta.Cores),
		load(func(l contendedLoad) string { return fmtDur(l.serverCPU + l.clientCPU) }))
	t.add("cores busy", coresSays, load(func(l contendedLoad) string { return coresCell(l.ours, l.machine) }))
	t.addSplit("acquisition", func(k string) serverSample { return firstContended(r.headline(k)) })
	return t
}

func (r *report) handoverBounds(kinds []string) *boundTable {
	n := r.Settings.Headline
	t := &boundTable{title: "Hand-over p50", cols: kinds}
	fifo := func(f func([]contendedRound) string) func(string) string {
		return func(k string) string { return orDash(len(r.FIFO[k]) > 0, f(r.FIFO[k])) }
	}
	t.add(fmt.Sprintf("hand-over p50, %d contenders", n), "from the previous Unlock returning to the next Lock returning", func(k string) string {
		return durSpread(r.headline(k), func(x contendedRound) time.Duration { return x.Handover.P50 }).cell(fmtDur)
	})
	t.add("idle hand-over p50", "section 3: one waiter, nobody else", func(k string) string {
		return durSpread(r.Idle[k], func(i idleRound) time.Duration { return i.Handover.P50 }).cell(fmtDur)
	})
	t.add("PING round trip p50", "the round trip the target counts in", func(string) string { return fmtDur(r.rtt) })
	t.add("hand-overs with a wake-up message", "observe.Observer's Woken, in the FIFO runs", fifo(func(f []contendedRound) string {
		return spreadBy(f, func(x contendedRound) float64 { return x.WokenShare }).cell(fmtPct)
	}))
	t.add("previous Unlock returning to the message, p50", "FIFO runs", fifo(func(f []contendedRound) string {
		return durSpread(f, func(x contendedRound) time.Duration { return x.ToWake.P50 }).cell(fmtDur)
	}))
	t.add("message to Lock returning, p50", "FIFO runs", fifo(func(f []contendedRound) string {
		return durSpread(f, func(x contendedRound) time.Duration { return x.WakeToLock.P50 }).cell(fmtDur)
	}))
	if len(r.Queue) > 0 {
		lo := r.Settings.QueueLengths[0]
		grant := fmtF(1)(spreadBy(r.Queue, func(q queueRound) float64 { return q.GrantCalls[lo] }).med)
		t.add("the new holder's own script calls after the unlock", "with nobody else waiting (section 5)", func(string) string { return grant })
	}
	t.add("cores busy under contention", coresSays, func(k string) string {
		l, ok := r.contendedLoad(k)
		return orDash(ok, coresCell(l.ours, l.machine))
	})
	return t
}

// manyRounds are scenario 4's rounds of a lock, or of the bare scripts.
func (r *report) manyRounds(name string) []manyRound {
	if name == bareName {
		return r.ManyBare
	}
	return r.Many[name]
}

func (r *report) manyBounds(what string, kinds []string) *boundTable {
	cols := append(slices.Clone(kinds), reference)
	if what == "many" && len(r.ManyBare) > 0 {
		cols = append(cols, bareName)
	}
	title := fmt.Sprintf("%d goroutines over %s names: acquisitions/s", r.Settings.ManyWorkers, fmtInt(int64(r.Settings.ManyLocks)))
	if what == "manyp99" {
		title = fmt.Sprintf("%d goroutines over %s names: Lock p99", r.Settings.ManyWorkers, fmtInt(int64(r.Settings.ManyLocks)))
	}
	t := &boundTable{title: title, cols: cols}
	ref := r.Many[reference]
	has := func(c string) bool { return len(r.manyRounds(c)) > 0 }
	rate := func(c string) float64 { return manyThroughput(r.manyRounds(c)).med }
	// perPair is the median over c's rounds of f per acquisition.
	perPair := func(c string, f func(manyRound) float64) float64 {
		return spreadBy(r.manyRounds(c), func(x manyRound) float64 { return f(x) / math.Max(1, float64(x.Acquisitions)) }).med
	}
	if what == "manyp99" {
		p99 := func(c string) float64 {
			return durSpread(r.manyRounds(c), func(x manyRound) time.Duration { return x.Lock.P99 }).med
		}
		t.add("Lock p99", "section 4", func(c string) string { return orDash(has(c), fmtDur(p99(c))) })
		t.add("against "+reference+"'s", "", func(c string) string { return orDash(has(c) && len(ref) > 0, fmtRatio(p99(c)/p99(reference))) })
		t.add("slow Lock calls", "a run with an observer: what the calls of 10 ms or more waited for", func(c string) string { return orDash(len(r.ManySlow[c]) > 0, "section 4") })
	} else {
		t.add("acquisitions/s", "section 4", func(c string) string { return orDash(has(c), fmtRate(rate(c))) })
		t.add("against "+reference+"'s", bareName+": the lock's two scripts with no lock package, a held lock tried again at once: what the scripts allow; the rest of the gap is the lock package's client path and its waits",
			func(c string) string {
				return orDash(has(c) && len(ref) > 0, fmtRatio(rate(c)/math.Max(1, rate(reference))))
			})
	}
	t.add("server commands per pair", "commandstats, the commands inside scripts included", func(c string) string {
		return orDash(has(c), fmtF(1)(perPair(c, func(x manyRound) float64 { return float64(x.Commands.total()) })))
	})
	t.add("by command (first round)", "", func(c string) string {
		m := firstOf(r.manyRounds(c))
		return orDash(has(c), topCommands(m.Commands, float64(m.Acquisitions), 6))
	})
	t.add("server CPU per pair", "redis-server's INFO cpu over the run", func(c string) string {
		return orDash(has(c), fmtDur(perPair(c, func(x manyRound) float64 { return x.ServerCPU * 1e9 })))
	})
	t.add("client CPU per pair", "this process's getrusage over the run", func(c string) string {
		return orDash(has(c), fmtDur(perPair(c, func(x manyRound) float64 { return float64(x.ClientCPU) })))
	})
	t.add("cores busy", coresSays, func(c string) string {
		m := r.manyRounds(c)
		ours := spreadBy(m, func(x manyRound) float64 {
			return (x.ServerCPU + x.ClientCPU.Seconds()) / x.Wall.Seconds() / float64(r.Meta.Cores)
		}).med
		return orDash(has(c), coresCell(ours, spreadBy(m, func(x manyRound) float64 { return x.MachineBusy }).med))
	})
	if what == "many" {
		t.addSplit("pair", func(c string) serverSample { return firstMany(r.manyRounds(c)) })
	}
	return t
}

func (r *report) uncontendedBounds(q string, kinds []string) *boundTable {
	t := &boundTable{title: "Uncontended Lock+Unlock " + q, cols: kinds}
	pair := func(rounds []uncontendedRound) float64 {
		return durSpread(rounds, func(x uncontendedRound) time.Duration { return pick(x, q) }).med
	}
	has := func(k string) bool { return len(r.Uncontended[k]) > 0 }
	same := func(s string) func(string) string { return func(string) string { return s } }
	uc := r.uncontendedCosts()
	per := float64(r.Settings.UncontendedOps)
	t.add("pair "+q, "section 1: the locks taking turns", func(k string) string { return orDash(has(k), fmtDur(pair(r.Uncontended[k]))) })
	t.add("Lock p50, Unlock p50", "", func(k string) string {
		u := r.Uncontended[k]
		return orDash(has(k), durSpread(u, func(x uncontendedRound) time.Duration { return x.latency().Lock.P50 }).cell(fmtDur)+", "+
			durSpread(u, func(x uncontendedRound) time.Duration { return x.latency().Unlock.P50 }).cell(fmtDur))
	})
	t.add("allocations per pair (first round)", "this process's heap allocations", func(k string) string {
		return orDash(has(k), fmtCount(firstOf(r.Uncontended[k]).AllocsPerPair))
	})
	t.add("server commands per pair (first round)", "commandstats, the commands inside scripts included", func(k string) string {
		return orDash(has(k), topCommands(firstOf(r.Uncontended[k]).Commands, per, 8))
	})
	t.add("the two scripts' run time per pair", "commandstats, the commands they run included", func(k string) string {
		return orDash(has(k), fmtDur(uc[k].of(func(c pairCost) float64 { return c.ScriptRun }, nil).med))
	})
	floors := func(f func(floorSplit) string) func(string) string {
		return func(k string) string {
			fs, ok := r.overFloors(k, q, pair)
			return orDash(ok, f(fs))
		}
	}
	t.add("the floor on its own client", "two empty scripts (EVALSHA of `return 1`) on the client library the lock runs on, in the same turns: what any lock that runs one script to lock and another to unlock pays before its scripts do anything", floors(func(fs floorSplit) string {
		return fs.client + " " + fmtDur(fs.floor)
	}))
	t.add("added over that floor", "the lock's pair less its own client's floor", floors(func(fs floorSplit) string { return fmtDur(fs.added) }))
	t.add("its own two scripts sent bare", bareName+": on rueidis with no lock package, in the same turns; between the rueidis floor and this is what the scripts cost, between this and "+r.Kinds[0].Name+" what the lock package's client path costs",
		same(durSpread(r.UncontendedBare, func(x lockbench.Latency) time.Duration { return pickLatency(x, q) }).cell(fmtDur)))
	t.add("the best peer, over its own floor", "the other peers: section 1", floors(func(fs floorSplit) string {
		if fs.peer == "" {
			return "-"
		}
		return fmt.Sprintf("%s: %s over %s's %s", fs.peer, fmtDur(fs.peerAdded), fs.peerClient, fmtDur(fs.peerFloor))
	}))
	t.addSplit("pair", func(k string) serverSample { return firstUncontended(r.Uncontended[k], r.Settings.UncontendedOps) })
	return t
}

// serverCPUBounds is the evidence for a missed server-CPU-per-pair target:
// what the lock's pair does against the reference's, from the same
// windows.
func (r *report) serverCPUBounds(kinds []string) *boundTable {
	t := &boundTable{title: "Server CPU per uncontended pair", cols: append(slices.Clone(kinds), reference)}
	uc := r.uncontendedCosts()
	per := float64(r.Settings.UncontendedOps)
	has := func(k string) bool { return len(r.Uncontended[k]) > 0 }
	med := func(f func(pairCost) float64) func(string) string {
		return func(k string) string { return orDash(has(k), fmtF(1)(uc[k].of(f, nil).med)) }
	}
	t.add("server CPU per pair", "redis-server's INFO cpu over the lock's own window", func(k string) string {
		return orDash(has(k), fmtDur(uc[k].serverCPU().med))
	})
	t.add("against "+reference+"'s", "", func(k string) string { return ratioCell(uc[k].serverCPU(), uc[reference].serverCPU()) })
	t.add("commands per pair", "commandstats, the commands inside scripts included", med(func(c pairCost) float64 { return c.Commands }))
	t.add("writes among them", "calls of write commands (section 1)", med(func(c pairCost) float64 { return c.Writes }))
	t.add("script calls per pair", "", med(func(c pairCost) float64 { return c.Scripts }))
	t.add("the scripts' run time per pair", "commandstats, their commands included; the rest of the server CPU is reading, parsing and replying", func(k string) string {
		return orDash(has(k), fmtDur(uc[k].of(func(c pairCost) float64 { return c.ScriptRun }, nil).med))
	})
	t.add("by command (first round)", "", func(k string) string { return orDash(has(k), topCommands(firstOf(r.Uncontended[k]).Commands, per, 10)) })
	t.add("writes by command (first round)", "", func(k string) string { return orDash(has(k), writesLine(firstOf(r.Uncontended[k]).Commands, per)) })
	return t
}

// clientCPUBounds is the evidence for a missed client-CPU-per-pair target.
func (r *report) clientCPUBounds(kinds []string) *boundTable {
	t := &boundTable{title: "Client CPU per uncontended pair", cols: append(slices.Clone(kinds), reference)}
	uc := r.uncontendedCosts()
	has := func(k string) bool { return len(r.Uncontended[k]) > 0 }
	count := func(f func(pairCost) float64) func(string) string {
		return func(k string) string { return orDash(has(k), fmtCount(uc[k].of(f, nil).med)) }
	}
	t.add("client CPU per pair", "this process's getrusage over the lock's own window: the Go runtime's work (GC, scheduler) and the client library's goroutines included", func(k string) string {
		return orDash(has(k), fmtDur(uc[k].clientCPU().med))
	})
	t.add("against "+reference+"'s", "", func(k string) string { return ratioCell(uc[k].clientCPU(), uc[reference].clientCPU()) })
	t.add("pair p50 in that window", "", func(k string) string {
		return orDash(has(k), fmtDur(durSpread(r.Uncontended[k], func(x uncontendedRound) time.Duration { return x.Pair.P50 }).med))
	})
	t.add("allocations per pair", "runtime.MemStats", count(func(c pairCost) float64 { return c.Allocs }))
	t.add("bytes allocated per pair", "", count(func(c pairCost) float64 { return c.Bytes }))
	t.add("script calls (round trips) per pair", "", func(k string) string {
		return orDash(has(k), fmtF(1)(uc[k].of(func(c pairCost) float64 { return c.Scripts }, nil).med))
	})
	return t
}

// queueBounds is the evidence for the queue operations that missed the
// target: their figures, and the commands inside the scripts whose server
// time per call grew most from the shortest queue to the longest
// (commandstats per length, first round).
func (r *report) queueBounds(ops []string) *boundTable {
	if len(r.Queue) == 0 {
		return nil
	}
	lengths := r.Settings.QueueLengths
	lo, hi := lengths[0], lengths[len(lengths)-1]
	t := &boundTable{title: fmt.Sprintf("Queue scaling: %s queued against %d", fmtInt(int64(hi)), lo), cols: []string{r.Kinds[0].Name}}
	for _, op := range ops {
		a := durSpread(r.Queue, func(q queueRound) time.Duration { return q.Times[lo][op].P50 }).med
		z := durSpread(r.Queue, func(q queueRound) time.Duration { return q.Times[hi][op].P50 }).med
		cell := fmt.Sprintf("%s vs %s (%.1fx)", fmtDur(z), fmtDur(a), z/math.Max(a, 1))
		t.add(op, "p50 server time per call (SLOWLOG), section 5", func(string) string { return cell })
	}
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
		from := 0.0
		if a := q.Commands[lo][cmd]; a.Calls > 0 {
			from = float64(a.Usec) / float64(a.Calls)
		}
		g = append(g, growth{cmd, from, float64(st.Usec) / float64(st.Calls)})
	}
	sort.Slice(g, func(i, j int) bool { return g[i].to-g[i].from > g[j].to-g[j].from })
	grew := 0
	for i, x := range g {
		if i == 3 || x.to-x.from < 1 {
			break
		}
		says := "a command inside the scripts whose server time per call grew most (commandstats over the measured calls)"
		if x.cmd == "lrem" {
			says = "LREM takes an owner out of the list by scanning it from the head: O(N) in the queue length"
		}
		cell := fmt.Sprintf("%.1f µs vs %.1f µs", x.to, x.from)
		t.add(strings.ToUpper(x.cmd)+" per call", says, func(string) string { return cell })
		grew++
	}
	if grew == 0 {
		t.add("commands inside the scripts", "", func(string) string { return "none grew by a microsecond per call" })
	}
	if a, z := perCall(q.Commands[lo], queueBlind), perCall(q.Commands[hi], queueBlind); a > 0 && z > 0 {
		cell := fmt.Sprintf("%.1f µs vs %.1f µs (%.1fx)", z, a, z/a)
		t.add(strings.ToUpper(strings.Join(queueBlind, ", "))+" per call", "commands that never read the queue's keys (the lock hash, the token, the clock): how the server as a whole fares with the queue in memory",
			func(string) string { return cell })
	}
	return t
}

// waitersBounds is the evidence for a missed idle-waiters target.
func (r *report) waitersBounds() *boundTable {
	main := r.Kinds[0].Name
	if len(r.Waiters[main]) == 0 || len(r.Waiters[reference]) == 0 {
		return nil
	}
	t := &boundTable{title: fmt.Sprintf("%s idle waiters: server CPU", fmtInt(int64(r.Settings.IdleWaiters))), cols: []string{main, reference}}
	t.add("commands per second (first round)", "every fairlock waiter runs acquire again every third of the waiter timeout (5 s) as its heartbeat, so the server's work grows with the number of waiters", func(k string) string {
		w := r.Waiters[k][0]
		return fmtCount(float64(w.Commands) / w.Window.Seconds())
	})
	t.add("by command", "", func(k string) string {
		w := r.Waiters[k][0]
		return topCommands(w.CommandsTop, w.Window.Seconds(), 4)
	})
	return t
}

// layout is what the data layout fixes, whatever the code.
func (r *report) layout() *boundTable {
	main := r.Kinds[0].Name
	t := &boundTable{title: "What the data layout fixes, whatever the code", cols: []string{main}}
	same := func(s string) func(string) string { return func(string) string { return s } }
	t.add("keys of one lock", "so that Java and Go share one lock",
		same("Redisson's (a hash, a list for the queue, a zset of deadlines Redisson purges by), its own liveness zset, a fencing counter and an unlock latch"))
	t.add("commands per contended acquisition", "two scripts, the waiter's enqueue and the previous holder's unlock (which grants the lock to the head in the same step), read the server time, check the head's deadline, write the queue and the waiter's two deadlines, move the hold, draw a fencing token, wake the next head and keep every key's expiry (X15); a single-key SET NX lock needs 2 to 5",
		same(fmt.Sprintf("%.0f", spreadBy(r.headline(main), func(c contendedRound) float64 { return c.CommandsPerAcq }).med)))
	t.add("commands per uncontended pair", "EVALSHA included; redislock's: 5",
		same(fmt.Sprintf("%.0f", spreadBy(r.Uncontended[main], func(x uncontendedRound) float64 { return x.CommandsPerPair }).med)))
	return t
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
	x := firstOf(rounds)
	return serverSample{x.Acquisitions, x.Wall, x.ServerCPU, x.Commands}
}

// firstContended is the server sample of a contended run's first round.
func firstContended(rounds []contendedRound) serverSample {
	x := firstOf(rounds)
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

// serverSplit is where redis-server's CPU went in one window, per unit (a
// pair or an acquisition): the scripts' run time (commandstats), split
// into the commands they ran and the rest (each redis.call's work around
// its command, Lua, decoding the scripts' keys and arguments), and what
// remains outside the scripts (reading, parsing and replying, expiring
// keys). commandstats times are wall times, so a command the kernel
// preempted counts its wait.
type serverSplit struct {
	busy    float64  // the share of the window redis-server's one command thread ran
	cpu     float64  // server CPU, ns
	scripts float64  // the scripts' run time, their commands included, ns
	calls   float64  // commands run inside the scripts
	inside  float64  // those commands' own time, ns
	top     []string // the longest of them, "SET 3µs"
}

// splitOf is x's server split (false: x measured nothing).
func splitOf(x serverSample) (serverSplit, bool) {
	if x.n == 0 || x.wall <= 0 {
		return serverSplit{}, false
	}
	n := float64(x.n)
	per := func(usec int64) float64 { return float64(usec) * 1e3 / n } // ns
	type cmdTime struct {
		name string
		ns   float64
	}
	s := serverSplit{cpu: x.serverCPU * 1e9 / n, busy: x.serverCPU / x.wall.Seconds()}
	var cmds []cmdTime
	for name, st := range x.commands {
		if slices.Contains(scriptCommands, name) {
			s.scripts += per(st.Usec)
			continue
		}
		s.inside += per(st.Usec)
		s.calls += float64(st.Calls) / n
		cmds = append(cmds, cmdTime{name, per(st.Usec)})
	}
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].ns > cmds[j].ns })
	for i, c := range cmds {
		if i == 6 {
			break
		}
		s.top = append(s.top, fmt.Sprintf("%s %s", strings.ToUpper(c.name), fmtDur(c.ns)))
	}
	return s, true
}

// nearLimit reports whether a command thread busy that share of the time
// is the bound: it runs every command, and it shares the two cores with
// this process.
func nearLimit(busy float64) bool { return busy >= 0.75 }

// addSplit adds the rows of each column's server split (first round), per
// unit ("pair" or "acquisition").
func (t *boundTable) addSplit(unit string, sample func(col string) serverSample) {
	split := func(f func(serverSplit) string) func(string) string {
		return func(c string) string {
			s, ok := splitOf(sample(c))
			return orDash(ok, f(s))
		}
	}
	t.add("command thread busy (first round)", "redis-server runs every command on one thread; at 75% or more, sharing the cores with its clients, it is close to the most it does: its CPU per "+unit+" sets the throughput", split(func(s serverSplit) string {
		if nearLimit(s.busy) {
			return fmtPct(s.busy) + ", close to its most"
		}
		return fmtPct(s.busy)
	}))
	t.add("server CPU per "+unit+" (first round)", "INFO cpu over that window", split(func(s serverSplit) string { return fmtDur(s.cpu) }))
	t.add("the scripts ran", "commandstats time of the script calls, the commands they run included", split(func(s serverSplit) string { return fmtDur(s.scripts) }))
	t.add("the commands in them, their own time", "commandstats of the commands the scripts ran", split(func(s serverSplit) string {
		return fmt.Sprintf("%.1f commands, %s", s.calls, fmtDur(s.inside))
	}))
	t.add("the longest of those", "own time per "+unit, split(func(s serverSplit) string { return strings.Join(s.top, ", ") }))
	t.add("the rest of the scripts' time", "each redis.call's own work around its command (building its arguments, the permission check, turning its reply into Lua values), Lua itself, and decoding each script's keys and arguments",
		split(func(s serverSplit) string { return fmtDur(math.Max(0, s.scripts-s.inside)) }))
	t.add("outside the scripts", "reading, parsing, replying and expiring keys", split(func(s serverSplit) string { return fmtDur(math.Max(0, s.cpu-s.scripts)) }))
}

// floorSplit is an uncontended pair's latency split at the floor of the
// client library the lock runs on (two empty scripts on that client, in
// the same turns): what the lock adds over its client's round trips,
// against what the best peer adds over its own client's.
type floorSplit struct {
	client       string  // the lock's client library
	floor, added float64 // its floor, and what the lock adds over it (ns)
	peer         string  // the best peer ("" without its client's floor)
	peerClient   string
	peerFloor    float64
	peerAdded    float64
}

// overFloors is kind's floorSplit at q ("p50" or "p99"); false without
// the floor of kind's client.
func (r *report) overFloors(kind, q string, pair func([]uncontendedRound) float64) (floorSplit, bool) {
	floor := func(name string) (float64, string, bool) {
		k, ok := r.kind(name)
		if !ok || len(r.ClientFloors[k.Client]) == 0 {
			return 0, "", false
		}
		return durSpread(r.ClientFloors[k.Client], func(x lockbench.Latency) time.Duration { return pickLatency(x, q) }).med, k.Client, true
	}
	mine, client, ok := floor(kind)
	if !ok {
		return floorSplit{}, false
	}
	fs := floorSplit{client: client, floor: mine, added: pair(r.Uncontended[kind]) - mine}
	best, bestName := math.Inf(1), ""
	for _, p := range r.peers() {
		if pu := r.Uncontended[p.Name]; len(pu) > 0 && pair(pu) < best {
			best, bestName = pair(pu), p.Name
		}
	}
	if theirs, pc, ok := floor(bestName); ok {
		fs.peer, fs.peerClient, fs.peerFloor, fs.peerAdded = bestName, pc, theirs, best-theirs
	}
	return fs, true
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
