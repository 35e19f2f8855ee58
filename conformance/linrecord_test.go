package conformance

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock"
)

// linScriptedBackend answers the linearizability wrapper's script calls
// from a function, without a server: the tests below check how the
// wrapper attributes script calls to acquire calls.
type linScriptedBackend struct {
	capable // nil: only Eval is called
	eval    func(ctx context.Context, name string) (backend.Reply, error)
}

func (b linScriptedBackend) Eval(ctx context.Context, s *backend.Script, _, _ []string) (backend.Reply, error) {
	return b.eval(ctx, s.Name)
}

var errLinLostReply = errors.New("reply lost")

// linRecordRig is one actor whose script calls go through the wrapper.
type linRecordRig struct {
	h  *linHistory
	a  *linActor
	wb *linBackend
}

func newLinRecordRig(eval func(ctx context.Context, name string) (backend.Reply, error)) *linRecordRig {
	h := &linHistory{start: time.Now(), clients: 1}
	a := &linActor{h: h, owner: 0, client: 0}
	wb := &linBackend{capable: linScriptedBackend{eval: eval}, actors: map[string]*linActor{linKey("k", "o0"): a}}
	return &linRecordRig{h: h, a: a, wb: wb}
}

// start begins an acquire call of the actor, returning its record and the
// context its script calls run under.
func (r *linRecordRig) start() (*linCall, context.Context) {
	c := &linCall{a: r.a, queuedAt: -1, unknownOp: -1}
	return c, context.WithValue(context.Background(), linCallKey{}, c)
}

func (r *linRecordRig) eval(ctx context.Context, name string) {
	_, _ = r.wb.Eval(ctx, &backend.Script{Name: name}, []string{"k"}, []string{"o0"})
}

// ops returns the recorded operations of kind.
func (r *linRecordRig) ops(kind linKind) []porcupine.Operation {
	var found []porcupine.Operation
	for _, op := range r.h.finish(false) {
		if op.Input.(linInput).kind == kind {
			found = append(found, op)
		}
	}
	return found
}

// A call's leave that the lock finishes in the background while the
// actor's next call runs (X5) belongs to the call it cleans up after: it
// follows that call's failed attempt, whatever the next call's attempts
// did, and it has a porcupine client of its own. Run under -race, the
// leave and the next call touch no shared state.
func TestLinRecord_BackgroundLeaveBelongsToItsCall(t *testing.T) {
	var first *linCall
	r := newLinRecordRig(func(ctx context.Context, name string) (backend.Reply, error) {
		switch {
		case name == "leave":
			return backend.Reply{Kind: backend.Array, Elems: []backend.Reply{backend.IntReply(1)}}, nil
		case linCallOf(ctx) == first:
			return backend.Reply{}, errLinLostReply
		}
		return backend.Reply{}, nil
	})
	first, ctx1 := r.start()
	r.eval(ctx1, "acquire") // fails
	if _, unknown := first.record(0, r.h.now(), nil, errLinLostReply); !unknown {
		t.Fatal("a call whose attempt failed is not recorded as of unknown outcome")
	}
	second, ctx2 := r.start()
	var wg sync.WaitGroup
	wg.Go(func() { r.eval(ctx1, "leave") }) // the first call's leave, late
	r.eval(ctx2, "acquire")                 // the next call's attempt, answered
	wg.Wait()
	second.record(r.h.now(), r.h.now(), nil, lock.ErrNotAcquired)

	leaves := r.ops(linLeave)
	if len(leaves) != 1 {
		t.Fatalf("recorded %d leaves, want 1", len(leaves))
	}
	if in := leaves[0].Input.(linInput); !in.after {
		t.Errorf("the first call's leave is recorded as %v: not as following its failed attempt", in)
	}
	for _, op := range r.h.finish(false) {
		if op.Input.(linInput).kind != linLeave && op.ClientId == leaves[0].ClientId {
			t.Errorf("the background leave shares client %d with %v", op.ClientId, op.Input)
		}
	}
}

// An attempt still in flight when its caller returns has an unknown
// effect that lands by its reply: the call's operation says so, lasts
// until the reply, and the leave after it follows it. An attempt sent
// after the caller returned is recorded on its own.
func TestLinRecord_AttemptInFlightAtReturn(t *testing.T) {
	sent, replied := make(chan struct{}, 1), make(chan struct{})
	r := newLinRecordRig(func(_ context.Context, name string) (backend.Reply, error) {
		if name == "acquire" {
			sent <- struct{}{}
			<-replied
		}
		return backend.Reply{Kind: backend.Array, Elems: []backend.Reply{backend.IntReply(1)}}, nil
	})
	c, ctx := r.start()
	var wg sync.WaitGroup
	wg.Go(func() { r.eval(ctx, "acquire") })
	<-sent // the wrapper has noted the attempt in flight
	returned := r.h.now()
	if _, unknown := c.record(0, returned, nil, context.DeadlineExceeded); !unknown {
		t.Fatal("a call with an attempt in flight is not recorded as of unknown outcome")
	}
	close(replied)
	wg.Wait()
	r.eval(ctx, "leave")
	r.eval(ctx, "acquire") // sent after the caller returned (sent has room)

	joins := r.ops(linJoin)
	if len(joins) != 2 {
		t.Fatalf("recorded %d joins, want the call's and the late attempt's", len(joins))
	}
	call, late := joins[0], joins[1]
	if in, out := call.Input.(linInput), call.Output.(linOutput); !in.failed || !out.unknown() {
		t.Errorf("the call is recorded as %v -> %v, want an attempt of unknown effect", in, out)
	}
	if call.Return <= returned {
		t.Errorf("the call's operation ends at %d, when its caller returned, not at its attempt's reply", call.Return)
	}
	if in := late.Input.(linInput); !in.failed || late.ClientId == r.a.client || late.ClientId == call.ClientId {
		t.Errorf("the late attempt is recorded as %v, client %d", in, late.ClientId)
	}
	if leaves := r.ops(linLeave); len(leaves) != 1 || !leaves[0].Input.(linInput).after {
		t.Errorf("leaves recorded: %v, want one following the attempt", leaves)
	}
}

// The lock's own unlocks of the owner (a late grant given back) are
// recorded; an actor's Unlock call's script call is left to unlockOp.
func TestLinRecord_OwnUnlocksOnly(t *testing.T) {
	r := newLinRecordRig(func(context.Context, string) (backend.Reply, error) {
		return backend.IntReply(0), nil
	})
	r.eval(context.Background(), "unlock")
	r.eval(context.WithValue(context.Background(), linUnlockKey{}, &linRelease{}), "unlock")
	unlocks := r.ops(linUnlock)
	if len(unlocks) != 1 {
		t.Fatalf("recorded %d unlocks, want the lock's own one", len(unlocks))
	}
	if unlocks[0].ClientId == r.a.client {
		t.Errorf("the lock's own unlock shares the actor's client")
	}
}
