package backendtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/redistest"
)

// EvalByDeadlineWhileRedialing checks that an Eval returns by its
// context's deadline while another call is dialling the connection again
// to a server that accepts and does not answer. dial opens a backend on
// addr (a proxy in front of a new server); the test closes it.
//
// The soak saw an Unlock with a 3 s deadline return after 6.3 s during a
// server stop (seed 203821236997882): rueidis and valkey-go make a call
// wait for another call's dial whatever its own context, and their
// adapters now bound every call by it. go-redis dials each connection
// with its caller's context.
func EvalByDeadlineWhileRedialing(t *testing.T, dial func(addr string) (backend.Backend, error)) {
	srv := redistest.Start(t)
	px := redistest.StartProxy(t, srv.Addr())
	b, err := dial(px.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := backend.NewScript("one", "return 1")
	if _, err := b.Eval(context.Background(), s, nil, nil); err != nil {
		t.Fatal(err)
	}
	// Every connection reset, every new one accepted and never answered.
	px.Blackhole(true)
	px.ResetAll()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err = b.Eval(ctx, s, nil, nil) // finds the reset
	cancel()
	if err == nil {
		t.Fatal("Eval through a reset connection: no error")
	}

	before := px.Conns()
	long := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := b.Eval(ctx, s, nil, nil) // dials, and waits for a handshake
		long <- err
	}()
	for deadline := time.Now().Add(2 * time.Second); px.Conns() <= before && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}

	const wait, slack = 300 * time.Millisecond, time.Second
	ctx, cancel = context.WithTimeout(context.Background(), wait)
	defer cancel()
	start := time.Now()
	_, err = b.Eval(ctx, s, nil, nil)
	took := time.Since(start)
	t.Logf("an Eval with a %v deadline, while another call dials: %v after %v", wait, err, took.Round(time.Millisecond))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Eval: %v, want context.DeadlineExceeded", err)
	}
	if took > wait+slack {
		t.Errorf("Eval returned %v after its deadline, want at most %v", took-wait, slack)
	}
	px.Blackhole(false)
	<-long
}
