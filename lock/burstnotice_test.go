package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock/internal/wire"
	"github.com/fairlock/fairlock/lock/observe"
	"github.com/fairlock/fairlock/redistest"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

// heldAcquire is a backend whose acquire reply for one lock hash is held
// back, after the server ran the script, until the test lets it through.
// It has no key watches (only Backend's methods are promoted).
type heldAcquire struct {
	backend.Backend
	hash    string
	ran     chan struct{} // closed when the held script has run
	release chan struct{} // closed by the test: the reply reaches the client
	once    sync.Once
}

func (b *heldAcquire) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	rep, err := b.Backend.Eval(ctx, s, keys, args)
	if s.Name == "acquire" && len(keys) > 0 && keys[0] == b.hash {
		b.once.Do(func() { close(b.ran) })
		<-b.release // the reply's late arrival, not synchronisation
	}
	return rep, err
}

// gatedLosses is an observer whose HoldLost waits at a gate until the
// test opens it: called from the client's notice listener, it holds the
// listener up, so the notices behind it pile up in its subscription.
type gatedLosses struct {
	first chan struct{} // closed at the first HoldLost
	gate  chan struct{} // closed by the test
	once  sync.Once
}

func (g *gatedLosses) StartAcquire(ctx context.Context, _ observe.Call) (context.Context, observe.AcquireTracker) {
	return ctx, nil
}

func (g *gatedLosses) StartRelease(ctx context.Context, _ observe.Call) (context.Context, observe.ReleaseTracker) {
	return ctx, nil
}

func (g *gatedLosses) HoldLost(observe.Call, int64, time.Duration, error) {
	g.once.Do(func() { close(g.first) })
	<-g.gate
}

func (g *gatedLosses) Renewed(observe.Call, error) {}

// TestLossNoticeSummarisedBeforeGrantReply_NotLost: a loss notice for a
// grant whose reply is still on its way, summarised with others into one
// "re-check everything" (the subscription fell behind), still ends that
// grant. A client without key watches holds 200 locks and has a 201st
// acquire whose reply is held back after the script ran; another client
// force-unlocks all 201 in one pipeline, the 201st second, while the
// client's notice listener is held up by its observer, so the notices
// overflow its subscription. The re-check ends the 200 holds; only then
// does the 201st reply arrive. Lock used to return a live hold there,
// which ended only at the watchdog's tick (a third of the 30-s lease)
// while the lock hash was gone.
func TestLossNoticeSummarisedBeforeGrantReply_NotLost(t *testing.T) {
	const held = 200
	srv := redistest.Start(t)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	late, _ := wire.Derive("burst-late")
	hb := &heldAcquire{Backend: rueidisbackend.New(rc), hash: late.Hash, ran: make(chan struct{}), release: make(chan struct{})}
	obs := &gatedLosses{first: make(chan struct{}), gate: make(chan struct{})}
	c, err := NewClient(hb, WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	openGate, letReply := sync.OnceFunc(func() { close(obs.gate) }), sync.OnceFunc(func() { close(hb.release) })
	defer letReply()
	defer openGate() // before Close, which waits for the listener
	other := plainClient(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	holds := make([]*Hold, held)
	evicts := make([]backend.Call, 0, held+1)
	for i := range holds {
		m := newTestMutex(t, c, fmt.Sprintf("burst-%d", i))
		if holds[i], err = m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		om := newTestMutex(t, other, fmt.Sprintf("burst-%d", i))
		evicts = append(evicts, wire.Evict{Wake: om.wake()}.Call(other.scripts, om.keys))
	}
	// The late grant's notice second: the listener is held up on the
	// first, and the 199 behind overflow its subscription.
	om := newTestMutex(t, other, "burst-late")
	evicts = append(evicts[:1], append([]backend.Call{wire.Evict{Wake: om.wake()}.Call(other.scripts, om.keys)}, evicts[1:]...)...)

	// A subscription on the client's subscription connection: a message
	// published after the notices reaches it after they were all queued.
	marker, err := hb.Backend.Subscribe(ctx, "burst-marker")
	if err != nil {
		t.Fatal(err)
	}
	defer marker.Close()

	type result struct {
		h   *Hold
		err error
	}
	got := make(chan result, 1)
	go func() {
		h, err := newTestMutex(t, c, "burst-late").Lock(ctx)
		got <- result{h, err}
	}()
	select {
	case <-hb.ran: // granted on the server; the reply is held back
	case <-ctx.Done():
		t.Fatal("the late acquire never ran")
	}
	for i, r := range other.b.EvalBatch(ctx, evicts) {
		if r.Err != nil {
			t.Fatalf("force-unlock %d: %v", i, r.Err)
		}
	}
	if err := rc.Do(ctx, rc.B().Publish().Channel("burst-marker").Message("after").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-marker.Events():
	case <-ctx.Done():
		t.Fatal("the marker never arrived")
	}
	select {
	case <-obs.first:
	default:
		t.Fatal("no loss was reported while the notices arrived: the listener was never held up")
	}
	// The notices are summarised now; let the listener go, and wait for
	// the re-check to end the 200 holds (long before the watchdog's tick).
	openGate()
	redistest.Eventually(t, 5*time.Second, "the 200 holds ended by the re-check", func() bool {
		for _, h := range holds {
			if h.Err() == nil {
				return false
			}
		}
		return true
	})
	letReply()

	r := <-got
	switch {
	case r.err != nil && errors.Is(r.err, ErrLockLost):
		t.Logf("Lock: %v", r.err) // told at once: no hold
	case r.err != nil:
		t.Fatalf("Lock: %v, want ErrLockLost or a hold that ends with it", r.err)
	default:
		select {
		case <-r.h.Done():
			if !errors.Is(r.h.Err(), ErrLockLost) {
				t.Fatalf("the late hold ended with %v, want ErrLockLost", r.h.Err())
			}
		case <-time.After(time.Second):
			t.Fatalf("Lock returned a hold whose lock was force-unlocked before its reply came; its Done is still open after 1s")
		}
	}
}
