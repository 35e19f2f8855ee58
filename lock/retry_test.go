package lock

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
)

// TestTransient: which failures a request may be sent again after. The
// cluster's redirections and reconfigurations ran no script, so they are
// retried; a script's own error is final.
func TestTransient(t *testing.T) {
	for msg, want := range map[string]bool{
		"MOVED 3999 127.0.0.1:7001":                                     true,
		"ASK 3999 127.0.0.1:7001":                                       true,
		"TRYAGAIN Multiple keys request during rehashing of slot":       true,
		"CLUSTERDOWN The cluster is down":                               true,
		"LOADING Redis is loading the dataset in memory":                true,
		"READONLY You can't write against a read only replica.":         true,
		"NOPERM this user has no permissions":                           false,
		"ERR user_script:1: Script attempted to access a non local key": false,
		"OOM command not allowed when used memory > 'maxmemory'.":       false,
	} {
		err := fmt.Errorf("script acquire (EVALSHA): %w", &backend.ServerError{Message: msg})
		if got := transient(err); got != want {
			t.Errorf("transient(%q) = %v, want %v", msg, got, want)
		}
	}
	for _, err := range []error{errors.New("read tcp: connection reset by peer"), context.DeadlineExceeded} {
		if !transient(err) {
			t.Errorf("transient(%v) = false, want true", err)
		}
	}
	for _, err := range []error{context.Canceled, backend.ErrClosed, ErrInvalidArgument} {
		if transient(err) {
			t.Errorf("transient(%v) = true, want false", err)
		}
	}
}

// TestNotRun: a request is known not to have run only when the server
// answered with an error or no connection could be opened.
func TestNotRun(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("x: %w", &backend.ServerError{Message: "CLUSTERDOWN The cluster is down"}), true},
		{fmt.Errorf("dial tcp 127.0.0.1:1: %w", syscall.ECONNREFUSED), true},
		{errors.New("read tcp: connection reset by peer"), false},
		{context.DeadlineExceeded, false},
	} {
		if got := notRun(tc.err); got != tc.want {
			t.Errorf("notRun(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestWithoutCancel checks that withoutCancel keeps ctx's values and
// drops its cancellation and deadline, returning ctx itself only when it
// has neither.
func TestWithoutCancel(t *testing.T) {
	type key struct{}
	plain := context.WithValue(context.Background(), key{}, "v")
	if got := withoutCancel(plain); got != plain {
		t.Errorf("withoutCancel(values on Background) made a new context")
	}
	cancelled, cancel := context.WithCancel(plain)
	cancel()
	timed, cancel2 := context.WithTimeout(plain, time.Hour)
	defer cancel2()
	for _, ctx := range []context.Context{cancelled, timed} {
		got := withoutCancel(ctx)
		_, hasDeadline := got.Deadline()
		if got.Done() != nil || got.Err() != nil || hasDeadline || got.Value(key{}) != "v" {
			t.Errorf("withoutCancel(%v): Done %v, Err %v, deadline %v, value %v", ctx, got.Done(), got.Err(), hasDeadline, got.Value(key{}))
		}
	}
}

// TestRetrierWindow: a closed window stops the retries of a transient
// error, between attempts and during a pause, with DeadlineExceeded that
// wraps the error and ErrUnavailable.
func TestRetrierWindow(t *testing.T) {
	refused := fmt.Errorf("dial: %w", syscall.ECONNREFUSED)
	window := make(chan struct{})
	r := newRetrier(nil)
	r.window = window
	calls := 0
	err := r.do(context.Background(), func() error {
		calls++
		if calls == 3 {
			close(window) // during the third attempt: no fourth
		}
		return refused
	})
	if calls != 3 || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, syscall.ECONNREFUSED) || !errors.Is(err, ErrUnavailable) {
		t.Errorf("window closed in the third attempt: %d attempts, %v; want 3 and DeadlineExceeded wrapping the refusal and ErrUnavailable", calls, err)
	}

	// A window that closes while do pauses ends the pause.
	window = make(chan struct{})
	r = newRetrier(nil)
	r.window = window
	r.b.InitialInterval = time.Hour
	done := make(chan error, 1)
	go func() { done <- r.pause(context.Background(), refused) }()
	close(window)
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("window closed during an hour's pause: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a closed window did not end the pause")
	}
}
