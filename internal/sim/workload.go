package sim

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/internal/soak"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/lock/observe"
)

// owner is one Go owner on one lock: its Mutex and what it holds. One
// goroutine (an actor) uses it, or two at once (one Mutex shared by
// goroutines, a user's Lock and TryLock together): mu guards the hold.
type owner struct {
	m      *lock.Mutex
	client string
	rec    *recorder

	mu    sync.Mutex
	hold  *soak.Hold
	lh    *lock.Hold
	count int
}

// actor is one goroutine of an owner, with its own random stream (its
// choices follow from the seed and its name).
type actor struct {
	*owner
	rnd *rand.Rand
}

// current returns what the owner holds, forgetting a hold whose Done has
// closed (its end was recorded).
func (o *owner) current() (*soak.Hold, *lock.Hold, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lh != nil && o.lh.Err() != nil {
		o.lh, o.hold, o.count = nil, nil, 0
	}
	return o.hold, o.lh, o.count
}

// step runs one operation: an acquire when the owner holds nothing, else
// a wait (from microseconds to many leases) and then an Unlock, a
// re-entry or an Extend.
func (o actor) step(ctx context.Context) {
	hold, lh, count := o.current()
	if lh == nil {
		sleep(ctx, time.Duration(o.rnd.Int64N(int64(100*time.Millisecond))))
		o.acquire(ctx)
		return
	}
	sleep(ctx, o.holdFor())
	switch r := o.rnd.IntN(10); {
	case r < 1 && count < 3:
		o.acquireWith(ctx, soak.KindLock, 0, 2*time.Second)
	case r < 2 && hold.Lease > 0:
		o.extend(ctx, hold, lh)
	default:
		o.unlock(ctx)
	}
}

// holdFor draws how long a hold lasts before its next call: mostly
// short, sometimes past many renewals of the watchdog (minutes).
func (o actor) holdFor() time.Duration {
	switch r := o.rnd.IntN(100); {
	case r < 2:
		return time.Duration(o.rnd.Int64N(int64(20 * time.Minute)))
	case r < 10:
		return time.Duration(o.rnd.Int64N(int64(60 * time.Second)))
	case r < 35:
		return time.Duration(o.rnd.Int64N(int64(3 * time.Second)))
	}
	return time.Duration(o.rnd.Int64N(int64(300 * time.Millisecond)))
}

func (o actor) acquire(ctx context.Context) {
	limit := time.Duration(300+o.rnd.IntN(3000)) * time.Millisecond
	switch r := o.rnd.IntN(10); {
	case r < 3:
		o.acquireWith(ctx, soak.KindLock, 0, limit)
	case r < 5:
		o.acquireWith(ctx, soak.KindLockLease, time.Duration(300+o.rnd.IntN(2700))*time.Millisecond, limit)
	case r < 7:
		o.acquireWith(ctx, soak.KindTryOnce, 0, 2*time.Second)
	default:
		o.acquireWith(ctx, soak.KindTryWait, time.Duration(50+o.rnd.IntN(1500))*time.Millisecond, limit)
	}
}

// acquireWith runs one acquire of kind under a context that ends after
// limit (arg: TryLock's wait, or LockWithLease's lease).
func (o actor) acquireWith(ctx context.Context, kind soak.Kind, arg, limit time.Duration) {
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	op := &soak.Op{Kind: kind, Lock: o.m.Name(), Owner: o.m.Owner(), Client: o.client, Limit: limit}
	if kind == soak.KindTryOnce {
		op.Limit = 0
	}
	if kind == soak.KindTryWait {
		op.Wait = arg
	}
	queued := new(atomic.Int64)
	cctx = context.WithValue(cctx, queuedKey{}, queued)
	op.Call = o.rec.h.Now()
	var lh *lock.Hold
	var err error
	switch kind {
	case soak.KindLock:
		lh, err = o.m.Lock(cctx)
	case soak.KindLockLease:
		lh, err = o.m.LockWithLease(cctx, arg)
	case soak.KindTryOnce:
		lh, err = o.m.TryLock(cctx, 0)
	case soak.KindTryWait:
		lh, err = o.m.TryLock(cctx, arg)
	}
	op.Return = o.rec.h.Now()
	op.Queued = time.Duration(queued.Load())
	op.Classify(err, ctx)
	if err == nil {
		o.adopt(op, lh, kind, arg)
	}
	o.rec.h.Add(op)
}

// adopt records the hold an acquire returned: a new one, or a re-entry.
func (o *owner) adopt(op *soak.Op, lh *lock.Hold, kind soak.Kind, arg time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if lh == o.lh && o.hold != nil {
		o.count++
		op.Hold = o.hold
		return
	}
	hd := &soak.Hold{Lock: o.m.Name(), Owner: op.Owner, Client: o.client, Token: lh.Token(), Acquired: op.Return, Called: op.Call}
	if kind == soak.KindLockLease {
		hd.Lease = arg
	}
	o.rec.h.AddHold(hd)
	op.Hold, op.New = hd, true
	o.hold, o.lh, o.count = hd, lh, 1
	go func() {
		<-lh.Done()
		o.rec.ended(hd, lh.Err())
	}()
}

func (o *owner) unlock(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	o.mu.Lock()
	hold := o.hold
	o.mu.Unlock()
	if hold == nil {
		return // the other actor of this owner released it meanwhile
	}
	op := &soak.Op{Kind: soak.KindUnlock, Lock: o.m.Name(), Owner: o.m.Owner(), Client: o.client, Hold: hold, Limit: 3 * time.Second}
	// The count this Unlock left, as the client tells its observer: with
	// two actors on one Mutex, the count when the call starts may be
	// about to change (the other's re-entry in flight, which the client
	// runs first), so only the client knows which Unlock was the last
	// (the simulation, seed 902 with -sim.shared: an Unlock called while
	// the other actor's re-entry was on its way was taken for the last,
	// and the real last one made two).
	left := new(atomic.Int64)
	left.Store(-1)
	cctx = context.WithValue(cctx, releaseKey{}, left)
	op.Call = o.rec.h.Now()
	err := o.m.Unlock(cctx)
	op.Return = o.rec.h.Now()
	op.Final = err == nil && left.Load() == 0
	if op.Final {
		hold.Releasing(op.Call)
	}
	op.Classify(err, ctx)
	o.rec.h.Add(op)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.hold != hold {
		return
	}
	o.count--
	if op.Final || err != nil {
		o.lh, o.hold, o.count = nil, nil, 0
	}
}

func (o *owner) extend(ctx context.Context, hold *soak.Hold, lh *lock.Hold) {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	op := &soak.Op{Kind: soak.KindExtend, Lock: o.m.Name(), Owner: o.m.Owner(), Client: o.client, Hold: hold, Limit: time.Second}
	op.Call = o.rec.h.Now()
	err := o.m.Extend(cctx, lh, hold.Lease)
	op.Return = o.rec.h.Now()
	op.Classify(err, ctx)
	o.rec.h.Add(op)
}

// forceUnlock is the admin's: it ends whatever hold the lock has.
func forceUnlock(ctx context.Context, rec *recorder, m *lock.Mutex, client string) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	op := &soak.Op{Kind: soak.KindForceUnlock, Lock: m.Name(), Owner: m.Owner(), Client: client, Limit: 3 * time.Second}
	op.Call = rec.h.Now()
	released, err := m.ForceUnlock(cctx)
	op.Return = rec.h.Now()
	op.Released = released
	op.Classify(err, ctx)
	rec.h.Add(op)
}

// sleep waits d of virtual time, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// observer tells an acquire call when its owner queued (the FIFO check
// needs it), as the soak's recorder does.
type observer struct{ h *soak.History }

type queuedKey struct{}

func (r observer) StartAcquire(ctx context.Context, c observe.Call) (context.Context, observe.AcquireTracker) {
	cell, _ := ctx.Value(queuedKey{}).(*atomic.Int64)
	return ctx, &tracker{cell: cell, h: r.h}
}

// StartRelease tells an Unlock the count it left (releaseKey).
func (r observer) StartRelease(ctx context.Context, c observe.Call) (context.Context, observe.ReleaseTracker) {
	if cell, _ := ctx.Value(releaseKey{}).(*atomic.Int64); cell != nil {
		return ctx, releaseTracker{cell}
	}
	return ctx, nil
}

type releaseKey struct{}

// releaseTracker keeps the hold count an Unlock left (-1: none told).
type releaseTracker struct{ left *atomic.Int64 }

func (t releaseTracker) End(res observe.ReleaseResult) {
	if res.Err == nil {
		t.left.Store(int64(res.HoldCount))
	}
}

func (r observer) HoldLost(observe.Call, int64, time.Duration, error) {}

func (r observer) Renewed(observe.Call, error) {}

type tracker struct {
	cell *atomic.Int64
	h    *soak.History
}

func (t *tracker) Queued(int) {
	if t.cell != nil {
		t.cell.CompareAndSwap(0, int64(t.h.Now()))
	}
}

func (t *tracker) Woken(bool) {}

func (t *tracker) End(observe.AcquireResult) {}
