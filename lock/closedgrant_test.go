package lock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/redistest"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

// heldReplies is a backend that runs every script at once but hands the
// reply of each script named in hold back until that script's channel
// closes (or the call's context ends): a slow link.
type heldReplies struct {
	backend.Backend
	hold map[string]chan struct{}
	sent chan string
}

func (b heldReplies) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Reply, error) {
	r, err := b.Backend.Eval(ctx, s, keys, args)
	release, ok := b.hold[s.Name]
	if !ok {
		return r, err
	}
	select {
	case b.sent <- s.Name:
	default:
	}
	select {
	case <-release:
		return r, err
	case <-ctx.Done():
		return r, ctx.Err()
	}
}

// TestTryLock_ClientClosedUnderIt_NotBusy: a TryLock on a free lock whose
// grant comes back while its client is being closed says ErrClosed -
// never ErrNotAcquired, which says another owner held the lock or waited
// for it. A closed client cannot keep the grant, and gives it back; that
// give-back is still on its way when the wait has run out and the call's
// grace after it (250 ms) has ended, and the caller returns.
// The soak on Valkey found it (seed 36725175219644: a TryLock with a
// 94 ms wait under a latency fault on its client, the admin closing that
// client 35 ms into the call, "not acquired" 345 ms after the call while
// nobody else held or waited).
func TestTryLock_ClientClosedUnderIt_NotBusy(t *testing.T) {
	srv := redistest.Start(t)
	b, err := rueidisbackend.Dial(rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	grantBack, giveBack := make(chan struct{}), make(chan struct{})
	hb := heldReplies{Backend: b, sent: make(chan string, 8),
		hold: map[string]chan struct{}{"acquire": grantBack, "leave": giveBack, "unlock": giveBack}}
	c, err := NewClient(hb)
	if err != nil {
		_ = b.Close()
		t.Fatal(err)
	}
	m := newTestMutex(t, c, "closed-grant")
	returned := make(chan error, 1)
	go func() {
		_, err := m.TryLock(context.Background(), 94*time.Millisecond)
		returned <- err
	}()
	awaitSent(t, hb.sent, "acquire") // the attempt ran and granted the lock; its reply is held back
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	redistest.Eventually(t, 5*time.Second, "the client to be closing", c.life.isClosed)
	close(grantBack)
	var got error
	select {
	case got = <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("TryLock did not return within 10s")
	}
	close(giveBack)
	if errors.Is(got, ErrNotAcquired) {
		t.Errorf("TryLock under Close on a free lock: %v, want no ErrNotAcquired (nobody else held or waited)", got)
	}
	if !errors.Is(got, ErrClosed) || errors.Is(got, context.DeadlineExceeded) {
		t.Errorf("TryLock under Close: %v, want ErrClosed (and no context error: the caller's context did not end)", got)
	}
	if err := <-closed; err != nil {
		t.Errorf("Close: %v", err)
	}
}
