package wire

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fairlock/fairlock/redistest"
	"github.com/redis/rueidis"
)

// TestHandOverTellsNextHeadOnlyWhatItsHeartbeatWouldNot: a hand-over
// leaves the waiter behind the new holder first in line. The grant lives
// twice the new holder's liveness left, longer than that waiter's own
// liveness deadline, by which it heartbeats and learns it is first: it is
// sent nothing (X3). When the grant is taken up with a lease shorter than
// that, the hold ends before its heartbeat, and it is told "head:<ms>".
func TestHandOverTellsNextHeadOnlyWhatItsHeartbeatWouldNot(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	r := newCostRig(t, srv)
	k := r.k
	token := r.queue(2) // owner 0 holds, 1 and 2 wait

	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	heard := make(chan string, 8)
	channel := k.OwnerChannel(owner(2))
	go func() {
		_ = c.Receive(ctx, c.B().Subscribe().Channel(channel).Build(), func(m rueidis.PubSubMessage) { heard <- m.Message })
	}()
	for deadline := time.Now().Add(10 * time.Second); ; {
		n, _ := c.Do(ctx, c.B().PubsubNumsub().Channel(channel).Build()).AsIntMap()
		if n[channel] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the subscription to owner 2's channel did not start within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// next is the next message on owner 2's channel: a marker published
	// after each step comes after whatever the step sent.
	next := func(step string) string {
		t.Helper()
		if err := c.Do(ctx, c.B().Publish().Channel(channel).Message("marker").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-heard:
			if m != "marker" {
				select {
				case <-heard: // the marker behind it
				case <-time.After(10 * time.Second):
					t.Fatalf("%s: the marker did not follow %q within 10 s", step, m)
				}
			}
			return m
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no message on owner 2's channel within 10 s", step)
			return ""
		}
	}

	if got := fmt.Sprint(r.unlock(0, View{Token: token, Count: 1})); got != "0" {
		t.Fatalf("unlock by owner 0: %s, want 0", got)
	}
	if m := next("hand-over to owner 1"); m != "marker" {
		t.Errorf("hand-over to owner 1 sent owner 2 %q; want nothing: the grant outlives owner 2's liveness deadline", m)
	}
	short := time.Second
	reply := fmt.Sprint(r.run(Renew{Owner: owner(1), Lease: short, Token: r.token(), HoldLease: short, Wake: r.w}.Call(r.s, r.k)))
	if reply != "2" {
		t.Fatalf("take-up by owner 1: %s, want 2 (a grant taken up)", reply)
	}
	m := ParseMessage(next("take-up with a 1 s lease"))
	if m.Kind != Head || m.TTL <= 0 || m.TTL > short {
		t.Errorf("take-up with a 1 s lease sent owner 2 %+v; want head:<ms> with at most 1000 ms", m)
	}
}
