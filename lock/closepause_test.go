package lock

import (
	"context"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/redistest"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

// sentEvals is a backend that tells, by script name and first key, of
// every Eval it is about to send.
type sentEvals struct {
	backend.Backend
	sent chan string
}

func (b sentEvals) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	name := s.Name
	if len(keys) > 0 {
		name += " " + keys[0]
	}
	select {
	case b.sent <- name:
	default:
	}
	return b.Backend.Eval(ctx, s, keys, args)
}

// TestCloseDuringServerPause_ReturnsWithinBound: Close returns within
// closeBound whatever the server does. The server is paused (SIGSTOP)
// with a read and an acquire attempt in flight, both with contexts that
// never end (and a client library that gives up on a silent server only
// after a minute), three more acquires of the attempt's owner behind it,
// a waiter queued and a description to delete; it is resumed only once
// Close has returned or overrun its bound. Close used to wait for every
// call: one owner's calls send their scripts one at a time, so their
// attempts, 5.5 s each on a silent server, added up past the bound.
func TestCloseDuringServerPause_ReturnsWithinBound(t *testing.T) {
	srv := redistest.Start(t)
	b, err := rueidisbackend.Dial(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, ConnWriteTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	sent := make(chan string, 64)
	c, err := NewClient(sentEvals{Backend: b, sent: sent}, WithDescription("close-pause"))
	if err != nil {
		_ = b.Close()
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = c.Close()
		}
	})
	ctx := context.Background() // the calls in flight never give up by themselves
	holder := newTestMutex(t, c, "close-pause")
	if _, err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	waiter, read, other := newTestMutex(t, c, "close-pause"), newTestMutex(t, c, "close-pause-read"), newTestMutex(t, c, "close-pause-other")
	const sharing = 4 // calls of one owner on "close-pause-other"
	returned := make(chan error, 2+sharing)
	go func() { // queued behind the holder, waiting
		_, err := waiter.Lock(ctx)
		returned <- err
	}()
	awaitSent(t, sent, "acquire "+waiter.keys.Hash)

	srv.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume(t)
		}
	}()
	go func() {
		_, err := read.Inspect(ctx, 0)
		returned <- err
	}()
	awaitSent(t, sent, "inspect "+read.keys.Hash)
	go func() {
		_, err := other.Lock(ctx)
		returned <- err
	}()
	awaitSent(t, sent, "acquire "+other.keys.Hash)
	// More calls of that owner, behind its attempt in flight: an owner
	// runs one script at a time, so their waits for the server add up.
	for range sharing - 1 {
		go func() {
			_, err := other.Lock(ctx)
			returned <- err
		}()
	}
	redistest.Eventually(t, 5*time.Second, "the owner's calls begun", func() bool {
		c.owners.mu.Lock()
		defer c.owners.mu.Unlock()
		e := c.owners.byKey[other.ownerKey]
		return e != nil && e.uses == sharing
	})

	start := time.Now()
	closing := make(chan struct{})
	go func() {
		defer close(closing)
		_ = c.Close()
	}()
	overran := false
	select {
	case <-closing:
		t.Logf("Close took %v with the server paused (its bound %v)", time.Since(start).Round(time.Millisecond), closeBound)
	case <-time.After(closeBound):
		t.Errorf("Close still waits %v into a server pause, its bound", closeBound)
		overran = true
	}
	srv.Resume(t)
	resumed = true
	<-closing
	closed = true
	// Close waited for the calls: each has returned.
	for range 2 + sharing {
		select {
		case err := <-returned:
			t.Logf("a call in flight returned: %v", err)
			if err == nil && !overran {
				t.Errorf("a call in flight at Close succeeded with the server paused")
			}
		default:
			t.Fatal("Close returned before a call in flight did")
		}
	}
}

// awaitSent waits until an Eval of the script name is about to be sent.
func awaitSent(t *testing.T, sent <-chan string, name string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case got := <-sent:
			if got == name {
				return
			}
		case <-timeout:
			t.Fatalf("no %s sent within 10s", name)
		}
	}
}
