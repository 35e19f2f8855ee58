package main

import (
	"math"
	"strings"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestProjectBroadcast(t *testing.T) {
	// 2 PUBLISH per acquisition, 30 shards with a replica each: 60 nodes,
	// 16,666.67 acquisitions a second in all, 555.56 per shard.
	m := modeInputs{Mode: "broadcast", Publish: 2, OwnerCmds: 40, ReplicaCmds: 16, ElseCmds: 0.2, OwnerPubSub: 2, ElsePubSub: 0.1}
	d := deployment{Shards: 30, Replicas: 1, HandoversPerMin: 1e6}
	r := project(m, d)
	total, per := 1e6/60, 1e6/60/30
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"bus sent per primary", r.BusSentPrimary, per * 2 * 59},
		{"bus received per primary", r.BusRecvPrimary, (total - per) * 2},
		{"bus received per replica", r.BusRecvReplica, total * 2},
		{"commands per primary", r.CmdsPrimary, per*40 + (total-per)*0.2/58},
		{"commands per replica", r.CmdsReplica, per*16 + (total-per)*0.2/58},
		{"pub/sub per primary", r.PubSubPrimary, per*2 + (total-per)*0.1/58},
	} {
		if !near(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	// Sent over the whole cluster = received over the whole cluster.
	sent := r.BusSentPrimary * 30
	recv := r.BusRecvPrimary*30 + r.BusRecvReplica*30
	if !near(sent, recv) {
		t.Errorf("sent %v, received %v in all", sent, recv)
	}
}

func TestProjectSharded(t *testing.T) {
	// SPUBLISH only: each goes to the shard's replicas, nothing else.
	m := modeInputs{Mode: "sharded", SPublish: 1}
	d := deployment{Shards: 30, Replicas: 2, HandoversPerMin: 6000}
	r := project(m, d)
	if want := 100.0 / 30 * 2; !near(r.BusSentPrimary, want) {
		t.Errorf("sent %v, want %v", r.BusSentPrimary, want)
	}
	if r.BusRecvPrimary != 0 {
		t.Errorf("a primary received %v", r.BusRecvPrimary)
	}
	if want := 100.0 / 30; !near(r.BusRecvReplica, want) {
		t.Errorf("a replica received %v, want %v", r.BusRecvReplica, want)
	}
	// Bus messages per acquisition do not grow with the shards.
	if a, b := busPerAcquisition(m, deployment{Shards: 3, Replicas: 2}), busPerAcquisition(m, d); a != 2 || b != 2 {
		t.Errorf("bus per acquisition %v on 3 shards, %v on 30", a, b)
	}
}

func TestBusPerAcquisition(t *testing.T) {
	// The measured cluster: 3 primaries + 3 replicas; PUBLISH to 5 nodes,
	// SPUBLISH to 1.
	m := modeInputs{Publish: 1.97, SPublish: 1.97}
	if got := busPerAcquisition(m, deployment{Shards: 3, Replicas: 1}); !near(got, 1.97*6) {
		t.Errorf("got %v", got)
	}
}

func TestProjectEmpty(t *testing.T) {
	if r := project(modeInputs{Publish: 1}, deployment{}); r.BusSentPrimary != 0 || r.CmdsPrimary != 0 {
		t.Errorf("no shards: %+v", r)
	}
	// One shard, no replica: nothing falls outside the shard.
	r := project(modeInputs{Publish: 1, ElseCmds: 5}, deployment{Shards: 1, HandoversPerMin: 60})
	if r.BusSentPrimary != 0 || r.CmdsPrimary != 0 || r.BusRecvPrimary != 0 {
		t.Errorf("one node: %+v", r)
	}
}

func TestMemoryPerShard(t *testing.T) {
	if got := memoryPerShard(1e7, 300, 30); !near(got, 1e8) {
		t.Errorf("got %v", got)
	}
	if got := memoryPerShard(1, 1, 0); got != 0 {
		t.Errorf("no shards: %v", got)
	}
}

func TestRoleOf(t *testing.T) {
	// 3 primaries (0-2), replicas 3-5 of primaries 0-2; the slot at 1.
	want := []string{roleOtherPrimary, roleOwner, roleOtherPrimary, roleOtherReplica, roleReplica, roleOtherReplica}
	for i, w := range want {
		if got := roleOf(i, 1, 3); got != w {
			t.Errorf("node %d: %s, want %s", i, got, w)
		}
	}
}

func TestRoleRowsAndModelFrom(t *testing.T) {
	run := func(owner int, acq int64) clusterRun {
		r := clusterRun{Target: target{Name: "cluster broadcast", Cluster: true, Mode: publishBroadcast}, Owner: owner, Acquisitions: int(acq), Contenders: 4}
		for i := range 6 {
			d := nodeDelta{Calls: commandCalls{}}
			if roleOf(i, owner, 3) == roleOwner {
				d.Bus.PublishSent = 10 * acq
				d.Calls["publish"] = commandStat{Calls: 2 * acq}
				d.Calls["evalsha"] = commandStat{Calls: 2 * acq}
			} else {
				d.Bus.PublishReceived = 2 * acq
				if roleOf(i, owner, 3) == roleOtherPrimary {
					d.Calls["subscribe"] = commandStat{Calls: acq / 10}
				}
			}
			r.PerNode = append(r.PerNode, d)
		}
		return r
	}
	res := &clusterResults{Settings: clusterSettings{Primaries: 3, Replicas: 1}, Contended: []clusterRun{run(0, 100), run(2, 300)}}
	rows := roleRows(runsOf(res.Contended, "cluster broadcast", 0), 3)
	if len(rows) != 4 {
		t.Fatalf("%d rows", len(rows))
	}
	if o := rows[0]; o.Role != roleOwner || o.Nodes != 1 || o.PubSent != 10 || o.Calls["publish"] != 2 || o.Total != 4 || o.PubSub != 2 {
		t.Errorf("owner row %+v", o)
	}
	if o := rows[2]; o.Role != roleOtherPrimary || o.Nodes != 2 || o.PubRecv != 2 || !near(o.PubSub, 0.1) {
		t.Errorf("other primary row %+v", o)
	}
	in := modelFrom(res)
	if len(in.Modes) != 2 || in.Modes[0].Publish != 2 || !near(in.Modes[0].ElsePubSub, 0.2) || in.Modes[1].Publish != 0 {
		t.Errorf("model inputs %+v", in.Modes)
	}
	if got := busPerAcquisition(in.Modes[0], deployment{Shards: 3, Replicas: 1}); got != 10 {
		t.Errorf("bus per acquisition %v, measured 10", got)
	}
}

func TestSpliceCluster(t *testing.T) {
	section := clusterBegin + "\nnew\n" + clusterEnd + "\n"
	if got := spliceCluster("", section); got != section {
		t.Errorf("empty: %q", got)
	}
	if got, want := spliceCluster("# B\n\ntext\n", section), "# B\n\ntext\n\n"+section; got != want {
		t.Errorf("append: %q", got)
	}
	old := "# B\n\n" + clusterBegin + "\nold\n" + clusterEnd + "\n\n## after\n"
	if got, want := spliceCluster(old, section), "# B\n\n"+section+"\n## after\n"; got != want {
		t.Errorf("replace: %q, want %q", got, want)
	}
	if again := spliceCluster(spliceCluster(old, section), section); again != spliceCluster(old, section) {
		t.Errorf("a second splice changed the report: %q", again)
	}
}

func TestRenderClusterSection(t *testing.T) {
	res := &clusterResults{
		Settings: clusterQuick,
		Modes:    map[string]string{"broadcast": "b", "sharded": "s"},
		Contended: []clusterRun{
			{Target: target{Name: "standalone"}, Contenders: 4, Acquisitions: 10, Throughput: 500},
		},
		Memory: &memoryResult{Names: 10, Held: memStep{Count: 10, PrimaryBytes: 5000, Keys: 20}},
	}
	s := renderClusterSection(res, "benchmarks/cluster.svg")
	for _, want := range []string{clusterBegin, clusterEnd, "## 7. ", "### 7a.", "### 7b.", "### 7c.", "### 7d.", "| standalone | 500/s", "(benchmarks/cluster.svg)", "| held locks | 10,000,000 | 158.9 MiB |"} {
		if !strings.Contains(s, want) {
			t.Errorf("section has no %q", want)
		}
	}
	if svg := renderClusterChart(res); !strings.HasPrefix(svg, "<svg") || !strings.HasSuffix(svg, "</svg>\n") {
		t.Errorf("chart: %.100s", svg)
	}
}

func TestFmtBytes(t *testing.T) {
	for v, want := range map[float64]string{0: "0 B", 500: "500 B", 20 << 10: "20 KiB", 3 << 20: "3.0 MiB", 1.5 * (1 << 30): "1.5 GiB"} {
		if got := fmtBytes(v); got != want {
			t.Errorf("fmtBytes(%v) = %q, want %q", v, got, want)
		}
	}
}
