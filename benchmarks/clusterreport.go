package main

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"strings"
	"time"
)

// The cluster benchmark's section of BENCHMARKS.md sits between these
// markers, so that either run rewrites its own part and keeps the other's.
const (
	clusterBegin = "<!-- cluster benchmark: begin (benchmarks -cluster writes this section) -->"
	clusterEnd   = "<!-- cluster benchmark: end -->"
)

// spliceCluster puts section (markers included) in place of text's
// cluster section, or at its end when it has none.
func spliceCluster(text, section string) string {
	if i := strings.Index(text, clusterBegin); i >= 0 {
		if j := strings.Index(text[i:], clusterEnd); j >= 0 {
			// The section ends with its own newline: the one after the old
			// end marker goes with it.
			return text[:i] + section + strings.TrimPrefix(text[i+j+len(clusterEnd):], "\n")
		}
	}
	if text != "" && !strings.HasSuffix(text, "\n\n") {
		text = strings.TrimRight(text, "\n") + "\n\n"
	}
	return text + section
}

// writeClusterReport writes the cluster chart and puts the cluster section
// into the report, keeping the rest of it.
func writeClusterReport(res *clusterResults, out, chart string) error {
	if err := os.WriteFile(chart, []byte(renderClusterChart(res)), 0o644); err != nil {
		return err
	}
	old, err := os.ReadFile(out)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.WriteFile(out, []byte(spliceCluster(string(old), renderClusterSection(res, relPath(out, chart)))), 0o644)
}

func readClusterResults(raw string) (*clusterResults, error) {
	var res clusterResults
	if err := readJSON(raw, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// renderClusterFrom writes the cluster section and chart from raw figures.
func renderClusterFrom(raw, out, chart string) error {
	res, err := readClusterResults(raw)
	if err != nil {
		return err
	}
	return writeClusterReport(res, out, chart)
}

// clusterSectionFrom returns the cluster section from the raw figures at
// raw, or "" when there are none.
func clusterSectionFrom(raw, out, chart string) (string, error) {
	if raw == "" {
		return "", nil
	}
	res, err := readClusterResults(raw)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return renderClusterSection(res, relPath(out, chart)), nil
}

// Node roles in a run on the cluster, relative to the lock's slot.
const (
	roleOwner        = "slot's primary"
	roleReplica      = "its replica"
	roleOtherPrimary = "other primary"
	roleOtherReplica = "other replica"
)

var roles = []string{roleOwner, roleReplica, roleOtherPrimary, roleOtherReplica}

func roleOf(node, owner, primaries int) string {
	switch {
	case node < primaries && node == owner:
		return roleOwner
	case node < primaries:
		return roleOtherPrimary
	case (node-primaries)%primaries == owner:
		return roleReplica
	default:
		return roleOtherReplica
	}
}

// byRole sums q's used_memory changes by node role.
func (q queuedMem) byRole(primaries int) map[string]int64 {
	by := map[string]int64{}
	for i, v := range q.PerNode {
		by[roleOf(i, q.Owner, primaries)] += v
	}
	return by
}

// pubsubCommands are the commandstats names counted as pub/sub commands.
var pubsubCommands = []string{"publish", "spublish", "subscribe", "ssubscribe", "unsubscribe", "sunsubscribe", "psubscribe", "punsubscribe"}

// roleRow is one node role's counters per acquisition, averaged over the
// nodes of that role and the runs.
type roleRow struct {
	Role                                   string
	Nodes                                  int // nodes of the role in the measured cluster
	PubSent, PubRecv, ShardSent, ShardRecv float64
	Calls                                  map[string]float64
	Total, PubSub                          float64
}

// roleRows pools runs (on the cluster, one mode) by node role.
func roleRows(runs []clusterRun, primaries int) []roleRow {
	type acc struct {
		acq                                    float64 // acquisitions summed over node-runs
		pubSent, pubRecv, shardSent, shardRecv float64
		calls                                  map[string]float64
		nodes                                  int
	}
	accs := map[string]*acc{}
	for _, role := range roles {
		accs[role] = &acc{calls: map[string]float64{}}
	}
	for ri, r := range runs {
		for i, d := range r.PerNode {
			a := accs[roleOf(i, r.Owner, primaries)]
			if ri == 0 {
				a.nodes++
			}
			a.acq += float64(r.Acquisitions)
			a.pubSent += float64(d.Bus.PublishSent)
			a.pubRecv += float64(d.Bus.PublishReceived)
			a.shardSent += float64(d.Bus.ShardSent)
			a.shardRecv += float64(d.Bus.ShardReceived)
			for k, v := range d.Calls {
				a.calls[k] += float64(v.Calls)
			}
		}
	}
	var out []roleRow
	for _, role := range roles {
		a := accs[role]
		if a.acq == 0 {
			continue
		}
		row := roleRow{Role: role, Nodes: a.nodes, PubSent: a.pubSent / a.acq, PubRecv: a.pubRecv / a.acq,
			ShardSent: a.shardSent / a.acq, ShardRecv: a.shardRecv / a.acq, Calls: map[string]float64{}}
		for k, v := range a.calls {
			row.Calls[k] = v / a.acq
			row.Total += v / a.acq
		}
		for _, k := range pubsubCommands {
			row.PubSub += row.Calls[k]
		}
		out = append(out, row)
	}
	return out
}

// modeRows are roleRows of the contended runs on the cluster in mode m.
func (res *clusterResults) modeRows(m publishMode) []roleRow {
	return roleRows(runsOf(res.Contended, clusterTargetName(m), 0), res.Settings.Primaries)
}

// runsOf returns the runs on target name, with contenders n (0: any).
func runsOf(runs []clusterRun, name string, n int) []clusterRun {
	var out []clusterRun
	for _, r := range runs {
		if r.Target.Name == name && (n == 0 || r.Contenders == n) && r.Acquisitions > 0 {
			out = append(out, r)
		}
	}
	return out
}

func targetNames() []string {
	var names []string
	for _, t := range clusterTargets() {
		names = append(names, t.Name)
	}
	return names
}

// modelFrom takes the model's inputs from a run's figures: memory from
// scenario (c), per-acquisition counts from every contended run of each
// mode on the cluster.
func modelFrom(res *clusterResults) modelInputs {
	var in modelInputs
	if m := res.Memory; m != nil {
		in.HeldBytes, in.IdleBytes = m.Held.perItem(), m.IdleToken.perItem()
		in.FreshBytes = in.IdleBytes + m.latchBytes()
		in.SpreadWaiterBytes = m.Spread.perItem()
		if len(m.Queued) > 0 {
			q := m.Queued[len(m.Queued)-1]
			in.QueuedWaiterBytes = q.ownerBytes()
			// A real waiter's subscription lives on some node, not
			// necessarily the slot's primary: add what the nodes outside
			// the shard gained per waiter to the spread waiter (which was
			// queued by hand, without one).
			if outside := q.byRole(res.Settings.Primaries)[roleOtherPrimary]; outside > 0 {
				in.SpreadWaiterBytes += float64(outside) / float64(q.Waiters)
			}
		}
	}
	for _, mode := range publishModes {
		mi := modeInputs{Mode: string(mode)}
		for _, r := range res.modeRows(mode) {
			switch r.Role {
			case roleOwner:
				mi.Publish, mi.SPublish = r.Calls["publish"], r.Calls["spublish"]
				mi.OwnerCmds, mi.OwnerPubSub = r.Total, r.PubSub
			case roleReplica:
				mi.ReplicaCmds, mi.ReplicaPubSub = r.Total, r.PubSub
			default:
				mi.ElseCmds += r.Total * float64(r.Nodes)
				mi.ElsePubSub += r.PubSub * float64(r.Nodes)
			}
		}
		in.Modes = append(in.Modes, mi)
	}
	return in
}

// modelDeployment is the deployment of the model's rate table.
var modelDeployment = deployment{Shards: 30, Replicas: 1, HandoversPerMin: 1e6}

func fmtBytes(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1<<30:
		return fmt.Sprintf("%.1f GiB", v/(1<<30))
	case a >= 1<<20:
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	case a >= 10<<10:
		return fmt.Sprintf("%.0f KiB", v/(1<<10))
	default:
		return fmt.Sprintf("%.0f B", v)
	}
}

func renderClusterSection(res *clusterResults, chartPath string) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	set := res.Settings
	p("%s", clusterBegin)
	p("## 7. Past one server: Redis Cluster")
	p("")
	p("A separate run, `bash scripts/benchmarks.sh --cluster` (`go run . -cluster` in `benchmarks/`), generated on %s in %s; do not edit by hand.",
		res.Meta.Date.Format("2006-01-02 15:04 UTC"), res.Meta.Elapsed.Round(time.Second))
	p("It starts a fresh cluster of %d primaries with %d replica each (Redis %s, loopback, slots in even ranges, `cluster-node-timeout` 5 s) and one standalone server beside it, on %d cores (%s); load before: %s; after: %s.",
		set.Primaries, set.Replicas, res.Meta.Redis, res.Meta.Cores, res.Meta.CPU, res.Meta.LoadBefore, res.Meta.LoadAfter)
	p("fairlock on rueidis (`rueidis.NewClient` with the primaries as seeds: a cluster client on the cluster). Raw figures: `benchmarks/cluster.json`.")
	p("The publish mode is one parameter of the run (`modeOptions` in `benchmarks/clusterbench.go`):")
	p("")
	for _, m := range publishModes {
		p("- **%s**: %s", m, res.Modes[string(m)])
	}
	p("")
	if len(res.Errors) > 0 {
		p("**Errors during the run** (the figures affected are missing):")
		p("")
		for _, e := range res.Errors {
			p("- %s", e)
		}
		p("")
	}
	p("![Cluster-bus messages per acquisition by node, and throughput on one server against the cluster](%s)", chartPath)
	p("")

	// (a)
	p("### 7a. Cluster-bus messages and pub/sub commands per acquisition, node by node")
	p("")
	p("One lock, %s contenders each with its own client, holding %v; counters diffed over each run (CLUSTER INFO `cluster_stats_messages_publish[shard]_{sent,received}`, INFO commandstats, commands run by scripts included, CLUSTER commands left out) and divided by the acquisitions; per node of each role, pooled over %d rounds and the contender counts.",
		joinInts(set.Contenders), set.Hold, set.Rounds)
	p("")
	t := newTable(&b, "mode", "node", "bus PUBLISH sent", "received", "bus SPUBLISH sent", "received", "PUBLISH", "SPUBLISH", "SUBSCRIBE", "SSUBSCRIBE", "[S]UNSUBSCRIBE", "EVALSHA", "all commands")
	f2 := fmtF(2)
	for _, mode := range publishModes {
		for _, r := range res.modeRows(mode) {
			node := r.Role
			if r.Nodes > 1 {
				node += fmt.Sprintf(" (each of %d)", r.Nodes)
			}
			t.row(string(mode), node, f2(r.PubSent), f2(r.PubRecv), f2(r.ShardSent), f2(r.ShardRecv),
				f2(r.Calls["publish"]), f2(r.Calls["spublish"]), f2(r.Calls["subscribe"]), f2(r.Calls["ssubscribe"]),
				f2(r.Calls["unsubscribe"]+r.Calls["sunsubscribe"]), f2(r.Calls["evalsha"]), f2(r.Total))
		}
	}
	p("")
	in := modelFrom(res)
	measured := deployment{Shards: set.Primaries, Replicas: set.Replicas}
	for _, mi := range in.Modes {
		var sent float64
		for _, r := range res.modeRows(publishMode(mi.Mode)) {
			sent += (r.PubSent + r.ShardSent) * float64(r.Nodes)
		}
		p("- %s: %.2f bus publish messages per acquisition in all; the model (section 7d) expects %.2f from the %.2f PUBLISH and %.2f SPUBLISH at the slot's primary on %d nodes.",
			mi.Mode, sent, busPerAcquisition(mi, measured), mi.Publish, mi.SPublish, measured.nodes())
	}
	for _, mode := range publishModes {
		runs := runsOf(res.Many, clusterTargetName(mode), 0)
		var acq, sent float64
		for _, r := range runs {
			acq += float64(r.Acquisitions)
			for _, d := range r.PerNode {
				sent += float64(d.Bus.PublishSent + d.Bus.ShardSent)
			}
		}
		if acq > 0 {
			p("- many locks (7b), %s: %.2f bus publish messages per acquisition in all (most acquisitions there find the lock free and wake nobody).", mode, sent/acq)
		}
	}
	p("")

	// (b)
	p("### 7b. Throughput and hand-over: one server against the cluster")
	p("")
	p("One lock, N contenders each with its own client, each holding %v, for %v (then a drain of %v); many locks: %d goroutines over %d names on one client, for %v. Median over %d rounds (range).",
		set.Hold, set.ContendedFor, set.Drain, set.ManyWorkers, set.ManyLocks, set.ManyFor, set.Rounds)
	p("")
	header := []string{"target"}
	for _, n := range set.Contenders {
		header = append(header, fmt.Sprintf("%d contenders: acquisitions/s", n), "hand-over p50", "p99")
	}
	header = append(header, "many locks: pairs/s", "Lock p50", "p99")
	t = newTable(&b, header...)
	for _, name := range targetNames() {
		cells := []string{name}
		for _, n := range set.Contenders {
			runs := runsOf(res.Contended, name, n)
			cells = append(cells,
				spreadBy(runs, func(r clusterRun) float64 { return r.Throughput }).cell(fmtRate),
				durSpread(runs, func(r clusterRun) time.Duration { return r.Handover.P50 }).cell(fmtDur),
				durSpread(runs, func(r clusterRun) time.Duration { return r.Handover.P99 }).cell(fmtDur))
		}
		runs := runsOf(res.Many, name, 0)
		cells = append(cells,
			spreadBy(runs, func(r clusterRun) float64 { return r.Throughput }).cell(fmtRate),
			durSpread(runs, func(r clusterRun) time.Duration { return r.Lock.P50 }).cell(fmtDur),
			durSpread(runs, func(r clusterRun) time.Duration { return r.Lock.P99 }).cell(fmtDur))
		t.row(cells...)
	}
	p("")

	// (c)
	if m := res.Memory; m != nil {
		p("### 7c. Memory per lock name, held lock and waiter")
		p("")
		p("INFO memory `used_memory` less the replication buffers (`mem_total_replication_buffers`: the backlog fills with every write, up to 1 MiB a primary) before and after each step, summed over the primaries (replicas: the same again, shown apart), divided by the names or waiters; %d names, lock clients in %s mode, the cluster flushed before the idle and before the held steps. "+
			"Tracked keys are INFO stats `tracking_total_keys`: rueidis clients use client-side caching, so the server keeps a tracking-table entry for each key their reads and scripts read (fairlock's holders watch their lock's hash); their memory is in the bytes.", m.Names, m.Mode)
		p("")
		t = newTable(&b, "what", "count", "bytes each, primaries", "bytes each, replicas", "keys each", "tracked keys each", "step took")
		step := func(what string, s memStep) {
			per := func(v int64, digits int) string {
				if s.Count == 0 {
					return "-"
				}
				return fmtF(digits)(float64(v) / float64(s.Count))
			}
			t.row(what, fmtInt(int64(s.Count)), per(s.PrimaryBytes, 0), per(s.ReplicaBytes, 0), per(s.Keys, 2), per(s.Tracked, 2), fmtDur(float64(s.Elapsed)))
		}
		step("held lock (lease 10 min, so no renewal: the hash and the token counter)", m.Held)
		step("one waiter on each held lock (queued by a script as acquire.lua queues one: queue entry, two deadlines; no subscription)", m.Spread)
		step("idle names, right after the last of them was unlocked (token counters, and the unlock latches of the last 3 s)", m.IdleFresh)
		step("idle name, once its unlock latch expired (3 s): the token counter, until lease + 1 s after the unlock", m.IdleToken)
		step("idle name, locked and unlocked with a 1 s lease, after its keys expired", m.Gone)
		p("")
		p("An unlock latch costs %.0f B (the idle steps' difference in bytes over their difference in keys).", m.latchBytes())
		p("So an idle lock name costs nothing once the lease and a second have passed since its last unlock (the token counter's lifetime; with the default 30 s lease, 31 s); until then its token counter, and for 3 s its unlock latch.")
		if len(m.KeyUsage) > 0 {
			var parts []string
			for _, k := range []string{"lock hash (held)", "token counter (held)", "token counter (idle)", "queue, 1 waiter", "timeouts zset, 1 waiter", "alive zset, 1 waiter"} {
				if v, ok := m.KeyUsage[k]; ok {
					parts = append(parts, fmt.Sprintf("%s %d B", k, v))
				}
			}
			p("MEMORY USAGE of one lock's keys: %s (used_memory counts more: the expiry entry, the dicts' tables, the slot-to-key links, the tracking table).", strings.Join(parts, ", "))
		}
		p("")
		if len(m.Queued) > 0 {
			p("Real waiters (goroutines in Lock, over 4 clients) on one held lock: used_memory change per waiter by node, and MEMORY USAGE of the lock's queue, timeouts and alive keys per waiter.")
			p("")
			t = newTable(&b, "waiters", "slot's primary", "its replica", "other nodes (sum)", "lock keys (MEMORY USAGE)", "timeouts zset encoding", "waiter channels")
			for _, q := range m.Queued {
				by := q.byRole(set.Primaries)
				rep, other := by[roleReplica], by[roleOtherPrimary]+by[roleOtherReplica]
				w := float64(q.Waiters)
				t.row(fmtInt(int64(q.Waiters)), fmtF(0)(q.ownerBytes()), fmtF(0)(float64(rep)/w), fmtF(0)(float64(other)/w),
					fmtF(0)(float64(q.DataBytes)/w), q.Encoding, fmtInt(q.Channels))
			}
			p("")
			p("The timeouts and alive zsets leave listpack encoding above 128 members (`zset-max-listpack-entries`), the queue list stays a quicklist of listpacks; each waiter also subscribes to its own channel, on whichever node its client's subscription connection is.")
			p("")
		}
	}

	// (d)
	renderModel(&b, in)
	p("%s", clusterEnd)
	return b.String()
}

func joinInts(xs []int) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprint(x))
	}
	return strings.Join(s, " and ")
}

// renderModel writes section 7d: the model's inputs and its projections.
func renderModel(b *strings.Builder, in modelInputs) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format+"\n", a...) }
	d := modelDeployment
	p("### 7d. A model: 10^6 and 10^7 locks, 10^5 waiters, %d shards", d.Shards)
	p("")
	p("Arithmetic on the figures above (`model.go`, unit-tested): lock names spread evenly over the shards; each PUBLISH goes over the bus to every other node, each SPUBLISH to the shard's replicas; per acquisition, the slot's primary, its replica and the nodes outside the shard run the commands they ran in 7a. Inputs: held lock %.0f B, idle name %.0f B (%.0f B within 3 s of its unlock), waiter %.0f B (one per lock) or %.0f B (queued on one lock, at the slot's primary).",
		in.HeldBytes, in.IdleBytes, in.FreshBytes, in.SpreadWaiterBytes, in.QueuedWaiterBytes)
	p("")
	p("Memory per primary with %d shards (a replica holds the same again):", d.Shards)
	p("")
	t := newTable(b, "what", "count", "per shard")
	for _, row := range []struct {
		what  string
		count float64
		per   float64
	}{
		{"held locks", 1e6, in.HeldBytes},
		{"held locks", 1e7, in.HeldBytes},
		{"idle names used within the last lease + 1 s", 1e6, in.IdleBytes},
		{"idle names used within the last lease + 1 s", 1e7, in.IdleBytes},
		{"idle names unused for longer", 1e7, 0},
		{"waiters, one on each of as many locks (subscription included)", 1e5, in.SpreadWaiterBytes},
		{"waiters queued on few locks (1,000 each)", 1e5, in.QueuedWaiterBytes},
	} {
		t.row(row.what, fmtCount(row.count), fmtBytes(memoryPerShard(row.count, row.per, d.Shards)))
	}
	p("")
	p("At %s hand-overs a minute (%s a second) over %d shards with %d replica each (%d nodes), per node and second:",
		fmtCount(d.HandoversPerMin), fmtCount(d.HandoversPerMin/60), d.Shards, d.Replicas, d.nodes())
	p("")
	t = newTable(b, "mode", "bus publish sent, each primary", "received, each primary", "received, each replica", "commands, each primary", "each replica", "pub/sub commands, each primary", "each replica")
	for _, mi := range in.Modes {
		r := project(mi, d)
		t.row(mi.Mode, fmtCount(r.BusSentPrimary), fmtCount(r.BusRecvPrimary), fmtCount(r.BusRecvReplica),
			fmtCount(r.CmdsPrimary), fmtCount(r.CmdsReplica), fmtCount(r.PubSubPrimary), fmtCount(r.PubSubReplica))
	}
	p("")
	p("Broadcast bus traffic grows with the number of nodes: every node receives every PUBLISH of the whole cluster, so adding shards adds no wake-up capacity; SPUBLISH-only wake-ups would keep it to the shard (bus messages per primary = SPUBLISH per acquisition x replicas x its own acquisitions).")
	p("")
}

// renderClusterChart draws two panels: bus publish messages (sent and
// received) per acquisition by node role, broadcast against sharded; and
// acquisitions per second with one contended lock and with many locks, on
// one server against the cluster.
func renderClusterChart(res *clusterResults) string {
	const w, h = 1000, 440
	var b strings.Builder
	svgStart(&b, w, h)
	fmt.Fprintf(&b, `<text x="%d" y="20" text-anchor="middle" font-size="14">Redis Cluster, %d primaries + %d replica each (Redis %s, %d cores, %s)</text>`+"\n",
		w/2, res.Settings.Primaries, res.Settings.Replicas, res.Meta.Redis, res.Meta.Cores, res.Meta.Date.Format("2006-01-02"))
	// Left: bus messages per acquisition per node.
	var groups []barGroup
	byMode := make([][]roleRow, len(publishModes))
	for i, mode := range publishModes {
		byMode[i] = res.modeRows(mode)
	}
	for _, role := range roles {
		g := barGroup{label: role}
		for _, rows := range byMode {
			var v float64
			for _, r := range rows {
				if r.Role == role {
					v = r.PubSent + r.PubRecv + r.ShardSent + r.ShardRecv
				}
			}
			g.values = append(g.values, v)
		}
		groups = append(groups, g)
	}
	var modeNames []string
	for _, m := range publishModes {
		modeNames = append(modeNames, string(m))
	}
	bars(&b, 60, 60, 400, 280, "bus publish messages per acquisition, per node (sent + received)", groups, modeNames, fmtF(1))
	// Right: throughput.
	groups = nil
	for _, n := range res.Settings.Contenders {
		g := barGroup{label: fmt.Sprintf("1 lock, %d contenders", n)}
		for _, name := range targetNames() {
			g.values = append(g.values, spreadBy(runsOf(res.Contended, name, n), func(r clusterRun) float64 { return r.Throughput }).med)
		}
		groups = append(groups, g)
	}
	g := barGroup{label: fmt.Sprintf("%d locks", res.Settings.ManyLocks)}
	for _, name := range targetNames() {
		g.values = append(g.values, spreadBy(runsOf(res.Many, name, 0), func(r clusterRun) float64 { return r.Throughput }).med)
	}
	groups = append(groups, g)
	bars(&b, 560, 60, 400, 280, "acquisitions per second (median over rounds)", groups, targetNames(), tick)
	b.WriteString("</svg>\n")
	return b.String()
}

type barGroup struct {
	label  string
	values []float64 // one per series
}

var barColours = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"}

// bars draws a grouped bar chart on a linear scale from 0, with a legend
// of series names under it.
func bars(b *strings.Builder, x0, y0, pw, ph int, title string, groups []barGroup, names []string, format func(float64) string) {
	hi := 0.0
	for _, g := range groups {
		for _, v := range g.values {
			hi = math.Max(hi, v)
		}
	}
	if hi <= 0 {
		hi = 1
	}
	step := math.Pow(10, math.Floor(math.Log10(hi)))
	for hi/step < 4 {
		step /= 2
	}
	top := math.Ceil(hi/step) * step
	py := func(v float64) float64 { return float64(y0+ph) - v/top*float64(ph) }
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle" font-size="13">%s</text>`+"\n", x0+pw/2, y0-10, escape(title))
	for v := 0.0; v <= top+step/2; v += step {
		y := py(v)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end" fill="#333">%s</text>`+"\n", x0, y, x0+pw, y, x0-5, y+4, format(v))
	}
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>`+"\n", x0, y0, pw, ph)
	if len(groups) == 0 {
		return
	}
	gw := float64(pw) / float64(len(groups))
	bw := gw * 0.8 / float64(max(1, len(names)))
	for gi, g := range groups {
		gx := float64(x0) + float64(gi)*gw + gw*0.1
		for si, v := range g.values {
			x := gx + float64(si)*bw
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s, %s: %s</title></rect>`+"\n",
				x, py(v), bw-1, float64(y0+ph)-py(v), barColours[si%len(barColours)], escape(g.label), escape(names[si]), format(v))
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#333">%s</text>`+"\n", float64(x0)+float64(gi)*gw+gw/2, y0+ph+16, escape(g.label))
	}
	for si, name := range names {
		x, y := x0+si*140, y0+ph+44
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="14" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", x, y-10, barColours[si%len(barColours)], x+20, y, escape(name))
	}
}
