package lock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestSharedBound_AbandonEndsEveryContext: abandon ends the contexts
// handed out before it, of every epoch, and those handed out after it
// (Close gives up the requests still waiting for the server that way).
func TestSharedBound_AbandonEndsEveryContext(t *testing.T) {
	b := newSharedBound(time.Hour, time.Millisecond)
	now := time.Now()
	old := b.bound(context.Background(), now)
	newer := b.bound(context.Background(), now.Add(time.Second)) // a later epoch
	if old.Err() != nil || newer.Err() != nil {
		t.Fatalf("before abandon: %v, %v; want both live", old.Err(), newer.Err())
	}
	b.abandon()
	after := b.bound(context.Background(), time.Now())
	for name, ctx := range map[string]context.Context{"first epoch": old, "later epoch": newer, "after abandon": after} {
		select {
		case <-ctx.Done():
			if !errors.Is(ctx.Err(), context.Canceled) {
				t.Errorf("%s: Err = %v, want context.Canceled", name, ctx.Err())
			}
		default:
			t.Errorf("%s: not ended by abandon", name)
		}
	}
}
