package rueidisbackend

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// dialFor registers a dial in progress in d, as the watched DialCtxFn
// does; ending it (abort) closes the returned channel.
func dialFor(d *dials) (ended <-chan struct{}, calls *atomic.Int32) {
	c := make(chan struct{})
	calls = new(atomic.Int32)
	p := &dialing{cancel: func() {
		if calls.Add(1) == 1 {
			close(c)
		}
	}}
	d.mu.Lock()
	d.pending[p] = struct{}{}
	d.inProgress.Store(int32(len(d.pending)))
	d.mu.Unlock()
	return c, calls
}

// A call that finds no dial in progress runs on its caller's goroutine;
// when a dial begins after it and it waits for that dial past its
// deadline, the dial is ended and the call returns its context's error.
func TestByDeadlineEndsADialTheCallWaitsFor(t *testing.T) {
	d := &dials{pending: make(map[*dialing]struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := byDeadline(ctx, d, func() int {
		ended, _ := dialFor(d)
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Error("the dial the call waits for was not ended")
		}
		return 1
	})
	took := time.Since(start)
	t.Logf("returned after %v (deadline 50ms, stuckAfter %v)", took.Round(time.Millisecond), stuckAfter)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("byDeadline: %v, want context.DeadlineExceeded", err)
	}
	if n := d.inProgress.Load(); n != 0 {
		t.Errorf("%d dials still in progress", n)
	}
}

// A call that returns by its deadline on its own, as the client's calls
// do unless they wait for a dial, ends no dial: a slow dial another call
// began goes on.
func TestByDeadlineLeavesDialsAloneWhenTheCallReturns(t *testing.T) {
	d := &dials{pending: make(map[*dialing]struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	var calls *atomic.Int32
	_, err := byDeadline(ctx, d, func() int {
		_, calls = dialFor(d) // begun by another call meanwhile
		<-ctx.Done()
		return 0
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("byDeadline: %v, want context.DeadlineExceeded", err)
	}
	// Past stuckAfter, with room for a loaded machine.
	for deadline := time.Now().Add(3 * stuckAfter); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if calls.Load() != 0 {
			break
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the other call's dial was ended (%d times) by a call that returned by its deadline", n)
	}
}

// A call that starts while a dial is in progress runs on a goroutine of
// its own: it returns by its deadline however long the dial takes, and
// ends no dial, so calls with short deadlines never starve a slow dial
// (found by review: an Eval with a 5 ms deadline every 100 ms kept a
// 300-ms dial from ever completing).
func TestByDeadlineRunsBesideWhileADialIsInProgress(t *testing.T) {
	d := &dials{pending: make(map[*dialing]struct{})}
	ended, calls := dialFor(d)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	release := make(chan struct{})
	defer close(release)
	start := time.Now()
	_, err := byDeadline(ctx, d, func() int {
		select { // waits for the dial, whatever its context
		case <-release:
		case <-ended:
		}
		return 1
	})
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > time.Second {
		t.Errorf("byDeadline: %v after %v, want context.DeadlineExceeded by the deadline", err, took)
	}
	select {
	case <-ended:
		t.Errorf("the dial in progress was ended (%d times)", calls.Load())
	case <-time.After(3 * stuckAfter):
	}
}
