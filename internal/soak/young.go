package soak

import (
	"context"
	"slices"
	"time"
)

// Ends in a hold's first moments: a DEL of the hash by hand or a Redisson
// forceUnlock, which nothing publishes to fairlock's holder, sent as soon
// as a Go hold on a shared lock is granted - while its client's watch of
// the hash is not armed yet (RULES.md X16), and with waiters queued to
// take the lock at once. Random timing alone seldom lands there.

// youngWait bounds how long the admin waits for a new Go hold to end.
const youngWait = time.Second

// endYoung waits for the next Go hold on a shared lock and ends it at
// once, by hand or by Redisson.
func (a *adminActor) endYoung(ctx context.Context) {
	hd := a.awaitGrant(ctx)
	if hd == nil {
		return
	}
	var java *javaOwner
	for _, j := range a.javas {
		if j.name == hd.Lock {
			java = j
			break
		}
	}
	if java == nil || a.rnd.IntN(2) == 0 {
		a.evict(ctx, a.clients[0], hd.Lock, KindDelHash)
		return
	}
	op := &Op{Kind: KindJavaForceUnlock, Lock: hd.Lock, Owner: java.l.Field, Client: "java", Java: true}
	op.Call = a.h.Now()
	released, err := java.l.ForceUnlock(ctx)
	op.Return, op.Released = a.h.Now(), released
	if err != nil {
		op.Err = err.Error()
	}
	a.h.Add(op)
}

// awaitGrant returns the first Go hold on a shared lock granted from now
// on, polling the history every millisecond for youngWait; nil when none
// comes.
func (a *adminActor) awaitGrant(ctx context.Context) *Hold {
	a.h.mu.Lock()
	seen := len(a.h.holds)
	a.h.mu.Unlock()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(youngWait)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		a.h.mu.Lock()
		fresh := a.h.holds[seen:]
		seen = len(a.h.holds)
		i := slices.IndexFunc(fresh, func(hd *Hold) bool { return !hd.Java && slices.Contains(sharedNames, hd.Lock) })
		var hd *Hold
		if i >= 0 {
			hd = fresh[i]
		}
		a.h.mu.Unlock()
		if hd != nil {
			return hd
		}
	}
	return nil
}
