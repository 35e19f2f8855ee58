package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
	"github.com/redis/go-redis/v9"
)

// The cluster nemesis' faults on single messages (messageFaults, shared
// with the standalone nemesis).

// TestMessageFaultDraw: a turn draws faults on single messages one time
// in two, each kind among them, and none of a kind left out (Config.Without,
// --without). Without a server.
func TestMessageFaultDraw(t *testing.T) {
	all := []FaultKind{FaultReplyLost, FaultHoldBack, FaultNoticeBurst}
	for _, without := range [][]FaultKind{nil, {FaultNoticeBurst}, all} {
		t.Run(fmt.Sprint(without), func(t *testing.T) {
			n := &messageFaults{without: without, rnd: rand.New(rand.NewPCG(1, 9))}
			got := map[FaultKind]int{}
			const turns = 2000
			for range turns {
				if k, ok := n.draw(); ok {
					got[k]++
				}
			}
			drawn := 0
			for _, k := range all {
				drawn += got[k]
				if left := slices.Contains(without, k); left != (got[k] == 0) {
					t.Errorf("%s drawn %d times, left out: %t", k, got[k], left)
				}
			}
			if without == nil && (drawn < turns*2/5 || drawn > turns*3/5) {
				t.Errorf("%d turns of %d drew faults, want about half", drawn, turns)
			}
		})
	}
}

// TestClusterMessageTurnWithout: with every message-level kind left out,
// the cluster nemesis' turns run none (not even the shared owners' lost
// replies) and draw no client's backend. Without a server.
func TestClusterMessageTurnWithout(t *testing.T) {
	h := NewHistory(1)
	sharing := &sharedNow{}
	done := sharing.during("rueidis#0", sharedNames[0]) // a pair in flight: the shared fault's aim
	defer done()
	n := &clusterNemesis{messageFaults: &messageFaults{h: h, clients: []*goClient{{label: "rueidis#0"}, {label: "go-redis" + ackMark + "#1"}},
		without: []FaultKind{FaultReplyLost, FaultHoldBack, FaultNoticeBurst}, sharing: sharing, rnd: rand.New(rand.NewPCG(1, 9))},
		count: map[FaultKind]int{}}
	for range 200 {
		n.messageTurn() // a fault it ran would need the clients' backends, which they have not
	}
	if len(h.Faults()) != 0 || len(n.count) != 0 {
		t.Errorf("faults %v, counted %v; want none", h.Faults(), n.count)
	}
}

// TestClusterMessageFaults: on a real cluster, the cluster nemesis' turns
// arm each message-level kind on the clients' backends - a client with
// replica acks among them, whose attempts go by EvalWait - and record
// them; a burst floods the wake-up channels with SPUBLISH, which a
// sharded listener hears; the history the owners made meanwhile keeps
// every promise.
func TestClusterMessageFaults(t *testing.T) {
	c := redistest.StartCluster(t, 3, redistest.WithReplicas(1), redistest.WithNodeTimeout(clusterNodeTimeout))
	addrs := strings.Join(c.Addrs(), ",")
	admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	defer admin.Close()
	w := newWorkload(Config{Seed: 1, Lease: 15 * time.Second})
	acks := w.addClient(t, ClusterAdapters[0], "rueidis"+ackMark+"#0", addrs, []lock.Option{lock.WithReplicaAcks(1, clusterAckTimeout)})
	w.addClient(t, ClusterAdapters[1], label(ClusterAdapters[1], 1), addrs, nil)
	stalls := watchStalls(w.h) // as the soak does: a call late by the process's own lateness is not the lock's
	defer stalls()
	w.startOwners()
	ad := &adminActor{h: w.h, clients: w.clients, raw: admin, long: &w.long}
	n := newClusterNemesis(w.messageFaults(t, admin, ad, true), c, lockNames(len(w.clients)))

	for turn := 0; turn < 40 && len(n.count) < 3; turn++ {
		n.messageTurn()
	}
	for _, k := range []FaultKind{FaultReplyLost, FaultHoldBack, FaultNoticeBurst} {
		if n.count[k] == 0 {
			t.Errorf("no %s fault in the turns (counted %v)", k, n.count)
		}
	}

	// The client with acks, one of each kind, a listener on one of its
	// wake-up channels (sharded, as the client's own).
	channels, err := burstChannels(acks, true)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	listener := admin.SSubscribe(ctx, channels[1].name)
	defer listener.Close()
	if _, err := listener.Receive(ctx); err != nil { // the confirmation
		t.Fatal(err)
	}
	var got []Fault
	for _, kind := range []FaultKind{FaultReplyLost, FaultHoldBack} {
		f, ok := n.armOne(acks, kind)
		if !ok {
			t.Fatalf("no request of %s took a %s fault in %v", acks.label, kind, armWithin)
		}
		got = append(got, f)
	}
	got = append(got, n.burst(acks))
	heard := hear(listener, burstSize)
	w.finish()
	for _, f := range got {
		if f.Target != acks.label || f.Start <= 0 || f.End < f.Start || f.Detail == "" {
			t.Errorf("fault %+v: want its target, times and what it took", f)
		}
		t.Logf("%s: %s", f.Kind, f.Detail)
	}
	if d := got[2].Detail; !strings.Contains(d, channels[1].name+" (SPUBLISH)") || !strings.Contains(d, "fairlock_client:") {
		t.Errorf("the burst %q: want the client's channel and its wake-up channels flooded, these by SPUBLISH", d)
	}
	if heard < burstSize {
		t.Errorf("a sharded listener on %s heard %d messages of the burst, want %d or more", channels[1].name, heard, burstSize)
	}
	for _, f := range got {
		w.h.AddFault(f)
	}
	if r := Check(w.h, DefaultBounds(15*time.Second)); len(r.Violations) > 0 {
		t.Errorf("violations: %v", r.Violations)
	}
}

// hear counts the messages sub has queued, up to want, waiting at most a
// second for each.
func hear(sub *redis.PubSub, want int) int {
	ch := sub.Channel()
	for n := 0; n < want; n++ {
		select {
		case <-ch:
		case <-time.After(time.Second):
			return n
		}
	}
	return want
}

// TestClusterCheckMessageFaults: in a cluster run's history the faults on
// single messages excuse what they excuse in a standalone one - a waiter
// overtaken while its client had a reply lost, or its channels flooded,
// is still a violation, and a failover seconds later makes it no
// documented exception - while a failover meanwhile, of any primary,
// excuses it as a standalone server fault does (the cluster refuses every
// slot while one has no primary). Without a server.
func TestClusterCheckMessageFaults(t *testing.T) {
	lost := Fault{Kind: FaultReplyLost, Target: "cs", Start: 120 * msec, End: 150 * msec}
	failover := func(lock string, start time.Duration) Fault {
		return Fault{Kind: FaultFailover, Target: "server", Start: start, End: start + 400*msec, Locks: []string{lock}}
	}
	for _, c := range []struct {
		name   string
		faults []Fault
		want   int
	}{
		{"a reply lost", []Fault{lost}, 1},
		{"a reply lost, a failover of the lock's primary later", []Fault{lost, failover("L", 5*time.Second)}, 1},
		{"a burst, a failover of another primary later", []Fault{{Kind: FaultNoticeBurst, Target: "cs", Start: 120 * msec, End: 150 * msec}, failover("M", 5*time.Second)}, 1},
		{"a reply lost, a failover of another primary meanwhile", []Fault{lost, failover("M", 130*msec)}, 0},
		{"a reply lost, a failover of the lock's primary meanwhile", []Fault{lost, failover("L", 130*msec)}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := NewHistory(1)
			// S (without replica acks) queued at 20 ms; X, called later,
			// is granted at 200 ms, before S's grant (a later token).
			s := hold("L", "s", 6, 400*msec, 500*msec)
			s.Client = "cs"
			acquire(h, s, 10*msec)
			h.Ops()[0].Queued = 20 * msec
			acquire(h, hold("L", "x", 5, 200*msec, 300*msec), 100*msec)
			for _, f := range c.faults {
				h.AddFault(f)
			}
			b := DefaultBounds(15 * time.Second)
			violations, exceptions := splitExceptions(h, Check(h, b).Violations, b)
			if got := count(violations)["fifo"]; got != c.want || len(exceptions) != 0 {
				t.Errorf("%d FIFO violations (want %d), exceptions %v (want none)", got, c.want, exceptions)
			}
		})
	}
}
