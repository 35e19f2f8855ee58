package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fairlock/fairlock/lock"
)

// The workload's shapes beyond one call at a time per owner: one owner's
// calls at once (a Mutex two goroutines share), a client holding many
// locks at once, and holds that outlive many renewals.

// sharedCalls runs two acquires of o's owner at once, a Lock and a
// TryLock(wait), as two goroutines sharing one Mutex do; either may start
// first, and often one of them is cancelled early. They are one owner's
// calls: a grant to both is one hold entered twice (RULES.md B1), never
// two owners overtaking each other.
func (o *goOwner) sharedCalls(ctx context.Context, m *lock.Mutex) {
	plan := o.sharedPlan()
	both := &pairMark{mark: func() func() { return o.sharing.during(o.c.label, o.name) }}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range plan {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c.after > 0 && !sleepFor(ctx, c.after) {
				return
			}
			both.start()
			defer both.stop()
			o.acquireOne(ctx, m, c.kind, c.arg, c.limit, c.cancelAfter, &mu)
		}()
	}
	wg.Wait()
}

// pairMark marks (mark) while both of a pair of calls run: from the
// second's start to the first end.
type pairMark struct {
	mark func() (unmark func())

	mu      sync.Mutex
	running int
	unmark  func()
}

func (p *pairMark) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running++; p.running == 2 {
		p.unmark = p.mark()
	}
}

func (p *pairMark) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running--; p.unmark != nil {
		p.unmark()
		p.unmark = nil
	}
}

// sharedCall is one of sharedCalls' two calls.
type sharedCall struct {
	kind        Kind
	arg, limit  time.Duration
	after       time.Duration // started this long after the other
	cancelAfter time.Duration // cancelled then (0: not)
}

// sharedPlan draws sharedCalls' two calls.
func (o *goOwner) sharedPlan() [2]sharedCall {
	plan := [2]sharedCall{
		{kind: KindLock, limit: time.Duration(300+o.rnd.IntN(3000)) * time.Millisecond},
		{kind: KindTryWait, arg: time.Duration(o.rnd.IntN(800)) * time.Millisecond, limit: 2 * time.Second},
	}
	// Half the time one starts while the other may wait already, up to
	// past a waiter's heartbeat (a third of the 5-s waiter timeout).
	late := 50
	if o.rnd.IntN(2) == 0 {
		late = 2000
	}
	plan[o.rnd.IntN(2)].after = time.Duration(o.rnd.IntN(late)) * time.Millisecond
	if o.rnd.IntN(2) == 0 {
		plan[o.rnd.IntN(2)].cancelAfter = time.Duration(20+o.rnd.IntN(400)) * time.Millisecond
	}
	return plan
}

// sharedNow are the shared owners' calls at once in flight now (both of
// a pair), as client label and lock: the nemesis aims faults at them.
type sharedNow struct {
	mu  sync.Mutex
	now map[[2]string]int
}

// during marks client's calls on name as in flight until the returned
// function is called (a nil s marks nothing).
func (s *sharedNow) during(client, name string) func() {
	if s == nil {
		return func() {}
	}
	k := [2]string{client, name}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.now == nil {
		s.now = map[[2]string]int{}
	}
	s.now[k]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.now[k]--; s.now[k] <= 0 {
			delete(s.now, k)
		}
	}
}

// list returns the calls in flight, sorted (a seed's choice among them
// depends on nothing else).
func (s *sharedNow) list() [][2]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([][2]string, 0, len(s.now))
	for k := range s.now {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b [2]string) int { return strings.Compare(a[0]+"\x00"+a[1], b[0]+"\x00"+b[1]) })
	return out
}

// sleepFor waits d, or until ctx ends; it reports whether d passed.
func sleepFor(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// longHold is how long a long hold lasts: past the watchdog's second
// renewal (two thirds of the 15-s lease) and over two leases, as users
// hold locks for minutes; bounded so that a 150-s run still makes plenty
// of operations.
func longHold(rnd *rand.Rand) time.Duration {
	return time.Duration(25_000+rnd.IntN(15_000)) * time.Millisecond
}

// manyLocks is how many locks each client's many-locks owner has: more
// than a subscription queues (backend.SubscriptionBuffer), so a burst of
// force-unlocks over every lock tells one client of more losses at once
// than its channel keeps.
const manyLocks = 24

// manyNames are client i's locks that its many-locks owner holds
// together.
func manyNames(i int) []string {
	names := make([]string, manyLocks)
	for k := range names {
		names[k] = fmt.Sprintf("soak:m%d.%02d", i, k)
	}
	return names
}

// manyOwner is one owner of a client that takes many locks one after the
// other, holds them all - for a few seconds, or one round in three for
// several leases - and then releases them all. Each lock's hold is kept
// by a goOwner of its own (only this actor drives them).
type manyOwner struct {
	owners  []*goOwner
	rnd     *rand.Rand
	long    *longHolds
	started bool
}

func (mo *manyOwner) step(ctx context.Context) {
	wait := 500 * time.Millisecond
	if !mo.started {
		// Not all at the run's start, where every other actor begins too.
		mo.started, wait = true, 5*time.Second
	}
	pause(ctx, mo.rnd, wait)
	held := mo.take(ctx, 4+mo.rnd.IntN(len(mo.owners)-3))
	d, long := time.Duration(500+mo.rnd.IntN(2500))*time.Millisecond, mo.rnd.IntN(3) == 0
	if long {
		d = longHold(mo.rnd)
	}
	var slept bool
	names := make([]string, len(held))
	for i, o := range held {
		names[i] = o.name
	}
	if long {
		mo.long.during(names, func() { slept = sleepFor(ctx, d) })
	} else {
		slept = sleepFor(ctx, d)
	}
	if !slept {
		return // the run ended: quiesce releases what is held
	}
	for _, o := range held {
		o.release(ctx)
	}
}

// take locks n of the owner's locks, drawn at random, one after the
// other, and returns the owners of those it holds.
func (mo *manyOwner) take(ctx context.Context, n int) []*goOwner {
	var held []*goOwner
	for _, k := range mo.rnd.Perm(len(mo.owners))[:n] {
		o := mo.owners[k]
		if ctx.Err() != nil {
			break
		}
		m, err := o.mutex()
		if err != nil {
			break // the client closed: its holds ended with it
		}
		o.acquireWith(ctx, m, KindLock, 0, 2*time.Second)
		if o.lh != nil {
			held = append(held, o)
		}
	}
	return held
}

// release ends o's hold with as many Unlocks as it was entered, or
// forgets a hold that ended already.
func (o *goOwner) release(ctx context.Context) {
	for o.lh != nil && o.count > 0 && ctx.Err() == nil {
		if o.lh.Err() != nil {
			o.lh, o.hold, o.count = nil, nil, 0 // lost; its Done was recorded
			return
		}
		m, err := o.mutex()
		if err != nil {
			return
		}
		o.unlock(ctx, m)
	}
}

// longHolds are the locks in a long hold now. The admin's bursts, which
// force-unlock every lock (one every 3 s or so), spare them nine times in
// ten: otherwise no hold would outlive a burst, let alone many renewals
// (the longest Go hold of two 60-s runs that spared nothing: 10.2 s).
type longHolds struct {
	mu    sync.Mutex
	names map[string]int
}

// during marks names as long-held while f runs (a nil l marks nothing).
func (l *longHolds) during(names []string, f func()) {
	if l == nil {
		f()
		return
	}
	l.mu.Lock()
	if l.names == nil {
		l.names = map[string]int{}
	}
	for _, n := range names {
		l.names[n]++
	}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, n := range names {
			if l.names[n]--; l.names[n] <= 0 {
				delete(l.names, n)
			}
		}
	}()
	f()
}

// has reports whether name is in a long hold.
func (l *longHolds) has(name string) bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.names[name] > 0
}
