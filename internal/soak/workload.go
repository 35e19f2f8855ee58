package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/goredisbackend"
	"github.com/fairlock/fairlock/internal/backendtest"
	"github.com/fairlock/fairlock/internal/faultybackend"
	"github.com/fairlock/fairlock/internal/redisson"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/lock/observe"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/fairlock/fairlock/valkeybackend"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"
)

// Adapter is one way to build a backend, with whether its backends
// watch keys.
type Adapter struct {
	Name    string
	Watches bool
	Dial    func(addr string) (backend.Backend, error)
}

// Adapters are the client libraries and modes the soak mixes: rueidis
// with and without client-side caching, valkey-go, go-redis made by Dial
// and by New.
var Adapters = []Adapter{
	{"rueidis", true, func(addr string) (backend.Backend, error) {
		return rueidisbackend.Dial(rueidis.ClientOption{InitAddress: []string{addr}})
	}},
	{"rueidis-nocache", false, func(addr string) (backend.Backend, error) {
		return rueidisbackend.Dial(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	}},
	{"valkey-go", true, func(addr string) (backend.Backend, error) {
		return valkeybackend.Dial(valkey.ClientOption{InitAddress: []string{addr}})
	}},
	{"go-redis", true, func(addr string) (backend.Backend, error) {
		return goredisbackend.Dial(&redis.UniversalOptions{Addrs: []string{addr}, ContextTimeoutEnabled: true}), nil
	}},
	{"go-redis-new", true, func(addr string) (backend.Backend, error) {
		return goredisbackend.New(redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})), nil
	}},
}

// splitAdapter is rueidis with its subscriptions and key watches on a
// backend of their own, dialled at the client's second address
// (goClient.subsAddr): the nemesis stalls that connection alone
// (FaultSubStall).
var splitAdapter = Adapter{"rueidis-split", true, Adapters[0].Dial}

// goClient is one lock.Client on one adapter, behind its own proxy;
// Client.Close replaces it with a new one.
type goClient struct {
	label    string
	adapter  Adapter
	addr     string // the proxy's
	subsAddr string // for splitAdapter, the subscription connection's proxy
	opts     []lock.Option
	rec      *recorder

	mu       sync.RWMutex
	lc       *lock.Client
	faulty   *faultybackend.Faulty // lc's backend's fault switch
	replaced chan struct{}         // closed when open replaces lc
}

func (c *goClient) open() error {
	b, err := c.dial()
	if err != nil {
		return err
	}
	fb, faulty := faultybackend.Wrap(b)
	lc, err := lock.NewClient(fb, append(c.opts, lock.WithObserver(c.rec))...)
	if err != nil {
		b.Close()
		return err
	}
	c.mu.Lock()
	c.lc, c.faulty = lc, faulty
	if c.replaced != nil {
		close(c.replaced)
	}
	c.replaced = make(chan struct{})
	c.mu.Unlock()
	return nil
}

// dial opens c's backend: the adapter's at addr, or for the client made
// of two, scripts at addr and subscriptions at subsAddr.
func (c *goClient) dial() (backend.Backend, error) {
	b, err := c.adapter.Dial(c.addr)
	if err != nil || c.subsAddr == "" {
		return b, err
	}
	subs, err := c.adapter.Dial(c.subsAddr)
	if err != nil {
		b.Close()
		return nil, err
	}
	sw, ok := subs.(backendtest.Subscriber)
	if !ok {
		b.Close()
		subs.Close()
		return nil, fmt.Errorf("%s watches no keys", c.adapter.Name)
	}
	return backendtest.Split{Backend: b, Subs: sw}, nil
}

// faults returns the fault switch of c's current backend.
func (c *goClient) faults() *faultybackend.Faulty {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.faulty
}

func (c *goClient) client() *lock.Client {
	lc, _ := c.current()
	return lc
}

// current returns the client and a channel closed when a new one replaces
// it.
func (c *goClient) current() (*lock.Client, <-chan struct{}) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.lc, c.replaced
}

// goOwner is one Go owner: a fixed owner ID on one lock name, one
// goroutine.
type goOwner struct {
	id      int64
	name    string
	c       *goClient
	h       *History
	rnd     *rand.Rand
	lease   time.Duration // the client's
	private bool          // the only owner of its lock
	long    *longHolds    // where its long holds are marked
	sharing *sharedNow    // where its calls at once are marked

	hold  *Hold
	lh    *lock.Hold
	count int
}

func (o *goOwner) mutex() (*lock.Mutex, error) {
	return o.c.client().NewMutex(o.name, lock.WithOwnerID(o.id))
}

// step runs one random operation.
func (o *goOwner) step(ctx context.Context) {
	lc, replaced := o.c.current()
	m, err := lc.NewMutex(o.name, lock.WithOwnerID(o.id))
	if err != nil {
		// Closed meanwhile: the next step gets the new client. Waiting for
		// it rather than trying again at once matters: six owners that
		// spun on NewMutex while their client closed and reopened kept
		// both cores busy for up to seconds, which made every client of
		// the run late (its timers 35 ms late every 40 ms, a plain Unlock
		// 180 ms at the median) and the checks report the lateness.
		select {
		case <-replaced:
		case <-ctx.Done():
		}
		return
	}
	if o.lh != nil && o.lh.Err() != nil {
		o.lh, o.hold, o.count = nil, nil, 0 // lost; its Done was recorded
	}
	if o.lh != nil {
		o.holding(ctx, m)
		return
	}
	o.acquire(ctx, m)
}

func (o *goOwner) holding(ctx context.Context, m *lock.Mutex) {
	hold := 300 * time.Millisecond
	switch r := o.rnd.IntN(40); {
	case o.private && r == 0:
		// Past many renewals: a private lock, so no queue waits it out.
		o.long.during([]string{o.name}, func() { sleepFor(ctx, longHold(o.rnd)) })
		hold = 0
	case r < 4:
		hold = 5 * time.Second // a long hold: a loss the holder is not told of shows
	case o.private || r < 12:
		hold = 1500 * time.Millisecond // a client holds several locks at once
	}
	pause(ctx, o.rnd, hold)
	switch r := o.rnd.IntN(10); {
	case r < 1 && o.count < 3:
		o.acquireWith(ctx, m, KindLock, 0, 2*time.Second)
	case r < 2 && o.hold.Lease > 0:
		o.extend(ctx, m)
	default:
		o.unlock(ctx, m)
	}
}

func (o *goOwner) acquire(ctx context.Context, m *lock.Mutex) {
	pause(ctx, o.rnd, 100*time.Millisecond)
	limit := time.Duration(300+o.rnd.IntN(3000)) * time.Millisecond
	switch r := o.rnd.IntN(10); {
	case r < 3:
		o.acquireWith(ctx, m, KindLock, 0, limit)
	case r < 5:
		o.acquireWith(ctx, m, KindLockLease, time.Duration(300+o.rnd.IntN(2700))*time.Millisecond, limit)
	case r < 7:
		o.acquireWith(ctx, m, KindTryOnce, 0, 2*time.Second)
	case r >= 8 && !o.private:
		// One owner's calls at once, a fifth of a shared lock's acquires.
		o.sharedCalls(ctx, m)
	default:
		o.acquireWith(ctx, m, KindTryWait, time.Duration(50+o.rnd.IntN(1500))*time.Millisecond, limit)
	}
}

// acquireWith runs one acquire of kind under a context that ends after
// limit (for TryLock(wait), arg is the wait; for LockWithLease the lease).
func (o *goOwner) acquireWith(ctx context.Context, m *lock.Mutex, kind Kind, arg, limit time.Duration) {
	o.acquireOne(ctx, m, kind, arg, limit, 0, nil)
}

// newAcquireOp is the record of one acquire of kind by owner, with arg as
// acquireWith takes it, under a context that ends after limit, or after
// cancelAfter when that is not 0 and comes first: the caller gives up
// then, and its Limit says so (the checker takes a waiter for gone from
// then on: seed 42781790588260, a TryLock cancelled while the lock was
// handed on, its leave passing the grant to the next owner, was taken
// for overtaken until its return 0.1 ms later).
func newAcquireOp(kind Kind, lock, owner, client string, arg, limit, cancelAfter time.Duration) *Op {
	op := &Op{Kind: kind, Lock: lock, Owner: owner, Client: client, Limit: limit}
	if cancelAfter > 0 {
		op.Limit = min(limit, cancelAfter)
	}
	if kind == KindTryOnce {
		op.Limit = 0 // one attempt, within the client's attempt bound
	}
	if kind == KindTryWait {
		op.Wait = arg
	}
	return op
}

// acquireOne runs one acquire as acquireWith does, cancelling it after
// cancelAfter when that is not 0, and records it; with mu (the owner's
// calls at once) it adopts the hold and records the call under mu, as
// soon as the call returns.
func (o *goOwner) acquireOne(ctx context.Context, m *lock.Mutex, kind Kind, arg, limit, cancelAfter time.Duration, mu *sync.Mutex) {
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if cancelAfter > 0 {
		stop := time.AfterFunc(cancelAfter, cancel) // the caller gives up: context.Canceled
		defer stop.Stop()
	}
	op := newAcquireOp(kind, o.name, m.Owner(), o.c.label, arg, limit, cancelAfter)
	queued := new(atomic.Int64)
	cctx = context.WithValue(cctx, queuedKey{}, queued)
	op.Call = o.h.Now()
	var lh *lock.Hold
	var err error
	switch kind {
	case KindLock:
		lh, err = m.Lock(cctx)
	case KindLockLease:
		lh, err = m.LockWithLease(cctx, arg)
	case KindTryOnce:
		lh, err = m.TryLock(cctx, 0)
	case KindTryWait:
		lh, err = m.TryLock(cctx, arg)
	}
	op.Return = o.h.Now()
	op.Queued = time.Duration(queued.Load())
	op.Classify(err, ctx)
	if mu != nil {
		mu.Lock()
		defer mu.Unlock()
	}
	if err == nil {
		o.adopt(op, lh, kind, arg)
	}
	o.h.Add(op)
}

// adopt records the hold an acquire returned: a new one, or a re-entry.
func (o *goOwner) adopt(op *Op, lh *lock.Hold, kind Kind, arg time.Duration) {
	if lh == o.lh && o.hold != nil {
		o.count++
		op.Hold = o.hold
		return
	}
	hd := &Hold{Lock: o.name, Owner: op.Owner, Client: o.c.label, Token: lh.Token(), Acquired: op.Return, Called: op.Call, Watches: o.c.adapter.Watches}
	if kind == KindLockLease {
		hd.Lease = arg
	}
	o.h.AddHold(hd)
	op.Hold, op.New = hd, true
	o.hold, o.lh, o.count = hd, lh, 1
	go func() {
		<-lh.Done()
		hd.End(o.h.Now(), lh.Err())
	}()
}

func (o *goOwner) unlock(ctx context.Context, m *lock.Mutex) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	op := &Op{Kind: KindUnlock, Lock: o.name, Owner: m.Owner(), Client: o.c.label, Hold: o.hold, Limit: 3 * time.Second}
	op.Call = o.h.Now()
	if o.count == 1 {
		o.hold.Releasing(op.Call)
	}
	err := m.Unlock(cctx)
	op.Return = o.h.Now()
	op.Final = o.count == 1 && err == nil
	op.Classify(err, ctx)
	o.h.Add(op)
	o.count--
	if o.count <= 0 || err != nil {
		o.lh, o.hold, o.count = nil, nil, 0
	}
}

func (o *goOwner) extend(ctx context.Context, m *lock.Mutex) {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	op := &Op{Kind: KindExtend, Lock: o.name, Owner: m.Owner(), Client: o.c.label, Hold: o.hold, Limit: time.Second}
	op.Call = o.h.Now()
	err := m.Extend(cctx, o.lh, o.hold.Lease)
	op.Return = o.h.Now()
	op.Classify(err, ctx)
	o.h.Add(op)
}

// Classify records in op what err, the error op's call returned, means;
// run is the run's context (its end is not the call's doing).
func (op *Op) Classify(err error, run context.Context) {
	if err == nil {
		return
	}
	op.Err = err.Error()
	op.NotAcq = errors.Is(err, lock.ErrNotAcquired)
	op.Unavail = errors.Is(err, lock.ErrUnavailable)
	op.Lost = errors.Is(err, lock.ErrLockLost)
	op.NotHeld = errors.Is(err, lock.ErrNotHeld)
	op.Canceled = errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
	if run.Err() != nil || errors.Is(err, lock.ErrClosed) {
		op.Limit = 0 // the run ended, or the client was closed under it
	}
}

// pause waits a random time up to max, or until ctx ends.
func pause(ctx context.Context, rnd *rand.Rand, max time.Duration) {
	t := time.NewTimer(time.Duration(rnd.Int64N(int64(max) + 1)))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// recorder is the clients' observer: it tells an acquire call when its
// owner queued.
type recorder struct {
	h *History
}

// queuedKey carries, in an acquire's context, where its tracker records
// when the owner queued (an atomic: a call whose caller gave up may go on
// in the background).
type queuedKey struct{}

// StartAcquire implements observe.Observer.
func (r *recorder) StartAcquire(ctx context.Context, c observe.Call) (context.Context, observe.AcquireTracker) {
	cell, _ := ctx.Value(queuedKey{}).(*atomic.Int64)
	return ctx, &tracker{cell: cell, h: r.h}
}

// StartRelease implements observe.Observer.
func (r *recorder) StartRelease(ctx context.Context, c observe.Call) (context.Context, observe.ReleaseTracker) {
	return ctx, nil
}

// HoldLost implements observe.Observer.
func (r *recorder) HoldLost(observe.Call, int64, time.Duration, error) {}

// Renewed implements observe.Observer.
func (r *recorder) Renewed(observe.Call, error) {}

type tracker struct {
	cell *atomic.Int64
	h    *History
}

func (t *tracker) Queued(int) {
	if t.cell != nil {
		t.cell.CompareAndSwap(0, int64(t.h.Now()))
	}
}
func (t *tracker) Woken(bool)                {}
func (t *tracker) End(observe.AcquireResult) {}

// javaOwner is one Redisson thread on one lock.
type javaOwner struct {
	l    *redisson.Lock
	name string
	h    *History
	rnd  *rand.Rand
}

// javaLease is every Java hold's lease: Redisson's lock(leaseTime), no
// watchdog.
const javaLease = 5 * time.Second

func (j *javaOwner) step(ctx context.Context) {
	pause(ctx, j.rnd, 150*time.Millisecond)
	lease := javaLease
	op := &Op{Lock: j.name, Owner: j.l.Field, Client: "java", Java: true}
	var held bool
	var err error
	r := j.rnd.IntN(10)
	op.Call = j.h.Now()
	switch {
	case r < 4:
		op.Kind, op.Limit = KindJavaLock, 0
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		err = j.l.LockWithLease(cctx, lease)
		cancel()
		held = err == nil
	case r < 9:
		wait := time.Duration(100+j.rnd.IntN(2000)) * time.Millisecond
		op.Kind = KindJavaTryLock
		held, err = j.l.TryLock(ctx, wait, lease)
	default:
		op.Kind = KindJavaForceUnlock
		op.Released, err = j.l.ForceUnlock(ctx)
	}
	op.Return = j.h.Now()
	if err != nil {
		op.Err = err.Error()
	}
	if held {
		hd := &Hold{Lock: j.name, Owner: j.l.Field, Client: "java", Java: true, Acquired: op.Return, Called: op.Call, Lease: lease}
		j.h.AddHold(hd)
		op.Hold, op.New = hd, true
	}
	j.h.Add(op)
	if !held {
		return
	}
	hold := 300 * time.Millisecond
	if j.rnd.IntN(5) == 0 {
		// A long hold that writes nothing (a fixed lease, no watchdog):
		// a Go holder whose hold this one took over unnoticed stays
		// untold through it, where a short one's unlock would tell it.
		hold = 3 * time.Second
	}
	pause(ctx, j.rnd, hold)
	u := &Op{Kind: KindJavaUnlock, Lock: j.name, Owner: j.l.Field, Client: "java", Java: true, Hold: op.Hold}
	u.Call = j.h.Now()
	op.Hold.Releasing(u.Call)
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	if err := j.l.Unlock(uctx); err != nil {
		u.Err = err.Error()
	}
	cancel()
	u.Return = j.h.Now()
	op.Hold.End(u.Return, nil)
	j.h.Add(u)
}

func label(a Adapter, i int) string { return fmt.Sprintf("%s#%d", a.Name, i) }
