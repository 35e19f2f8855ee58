package faultsuite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/goredisbackend"
	"github.com/fairlock/fairlock/internal/redisson"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// noticeBound is the p99 a loss notice must meet (issue 37), from the
// ending call's return to the holder's Done closing, wherever something
// tells the holder's client at once: its own channel (a fairlock
// ForceUnlock or Delete) or its watch on the held hash (anything else).
const noticeBound = 50 * time.Millisecond

// watchArm is how far into a hold its client arms the watch on the held
// hash (lock's armDelay): a loss that publishes nothing, of a hold younger
// than that, is noticed once the watch is armed, so its bound counts from
// then.
const watchArm = 30 * time.Millisecond

// noWatchLease is the holder's lease on a mode that cannot watch keys. A
// loss that publishes nothing (a DEL by hand, an eviction, Redisson's
// forceUnlock) is noticed there at the watchdog's next tick, every third
// of the lease: 3 s keeps a trial to about 1 s (the default 30 s: 10 s).
const noWatchLease = 3 * time.Second

// noticeWait is how long a holder may go untold before the run fails.
const noticeWait = 5 * time.Second

// lossMode is one adapter mode, as the soak mixes them (internal/soak's
// Adapters), and whether its backends watch keys (client-side caching):
// what tells a holder of a loss that publishes nothing.
type lossMode struct {
	dialer
	watches bool
}

// lossModes returns the adapter modes on addr: rueidis with and without
// client-side caching, valkey-go, go-redis made by Dial and by New (whose
// client is closed at t's cleanup: a Backend from New leaves it open).
func lossModes(t testing.TB, addr string) []lossMode {
	ds := dialers(addr) // rueidis, valkey-go, go-redis (Dial)
	return []lossMode{
		{ds[0], true},
		{dialer{"rueidis-nocache", func() (backend.Backend, error) {
			return rueidisbackend.Dial(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		}}, false},
		{ds[1], true},
		{ds[2], true},
		{dialer{"go-redis-new", func() (backend.Backend, error) {
			rc := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { rc.Close() })
			return goredisbackend.New(rc), nil
		}}, true},
	}
}

// holderOpts returns the options of m's holder clients: noWatchLease
// where m cannot watch keys, else the default lease (30 s).
func (m lossMode) holderOpts() []lock.Option {
	if m.watches {
		return nil
	}
	return []lock.Option{lock.WithLease(noWatchLease)}
}

// bound returns the p99 bound on m of a loss the holder's client is told
// of on its channel (told) or not: noticeBound; for a loss that publishes
// nothing, of a hold younger than watchArm (fresh), watchArm plus
// noticeBound, as the watch that notices it is armed only then (CI, 6c7ee4d:
// go-redis-new's first trial, 50.8 ms); on a mode that cannot watch keys,
// the watchdog's tick (a third of noWatchLease) plus noticeBound for the
// check it sends then.
func (m lossMode) bound(told, fresh bool) time.Duration {
	switch {
	case told:
		return noticeBound
	case !m.watches:
		return noWatchLease/3 + noticeBound
	case fresh:
		return watchArm + noticeBound
	}
	return noticeBound
}

// leaseNote says which lease m's holder has, for the figures.
func (m lossMode) leaseNote() string {
	if m.watches {
		return ""
	}
	return fmt.Sprintf(" (no key watch, %v lease)", noWatchLease)
}

// lossKind is one way someone else ends a hold.
type lossKind struct {
	name string // as the figures say it
	key  string // in lock names
	told bool   // a fairlock script tells the holder's client on its channel
}

// lossKinds are the kinds of loss TestEvictionNotice sends, in its order.
var lossKinds = []lossKind{
	{"ForceUnlock", "force-unlock", true},
	{"Delete", "delete", true},
	{"DEL", "del", false},
	{"Redisson forceUnlock", "redisson-force-unlock", false},
}

// lossCell is one kind of loss (an index into lossKinds) at one hold age:
// fresh (sent as soon as Lock returned) or aged (holdAge old).
type lossCell struct {
	kind int
	aged bool
}

// lossRig measures loss notices on one adapter mode: a fresh holder
// client, an admin client for fairlock's ForceUnlock and Delete, and the
// Redisson model on its own backend connection; one lock name per cell.
type lossRig struct {
	t      *testing.T
	srv    *redistest.Server
	mode   lossMode
	java   *redisson.Client
	names  map[lossCell]string
	held   map[lossCell]*lock.Mutex // the holder's
	admin  map[lossCell]*lock.Mutex
	delays map[lossCell][]time.Duration
}

// newLossRig returns a rig on m whose holder client has held nothing yet.
func newLossRig(t *testing.T, srv *redistest.Server, m lossMode) *lossRig {
	t.Helper()
	holder, admin := clientOf(t, m.dialer, m.holderOpts()...), clientOf(t, m.dialer)
	b, err := m.dial()
	if err != nil {
		t.Fatalf("%s: %v", m.name, err)
	}
	t.Cleanup(func() { b.Close() })
	rb, ok := b.(redisson.Backend)
	if !ok {
		t.Fatalf("%s: the backend cannot carry the Redisson model", m.name)
	}
	r := &lossRig{t: t, srv: srv, mode: m, names: map[lossCell]string{}, held: map[lossCell]*lock.Mutex{},
		admin: map[lossCell]*lock.Mutex{}, delays: map[lossCell][]time.Duration{}}
	if r.java, err = redisson.New(rb, false); err != nil {
		t.Fatal(err)
	}
	for kind, k := range lossKinds {
		for _, aged := range []bool{false, true} {
			c := lossCell{kind, aged}
			r.names[c] = fmt.Sprintf("%s:%s:%s:aged=%t", lockName(t), m.name, k.key, aged)
			r.held[c] = newMutex(t, holder, r.names[c])
			r.admin[c] = newMutex(t, admin, r.names[c])
		}
	}
	return r
}

// label names cell c of the rig, for errors.
func (r *lossRig) label(c lossCell) string {
	age := "fresh"
	if c.aged {
		age = holdAge.String() + " old"
	}
	return fmt.Sprintf("%s, %s, hold %s", r.mode.name, lossKinds[c.kind].name, age)
}

// pendingLoss is a hold someone else has just ended: when the ending call
// returned, and when the hold's Done closed (watchDone).
type pendingLoss struct {
	cell     lossCell
	hold     *lock.Hold
	done     <-chan time.Time
	returned time.Time
}

// round ends a hold by every kind of loss twice: as soon as its Lock
// returned, and holdAge into it - the fresh ones first, so that the
// holder client's first hold is a fresh one - and records how long after
// each ending call returned its hold's Done closed.
func (r *lossRig) round(ctx context.Context) error {
	var ps []pendingLoss
	for kind := range lossKinds {
		c := lossCell{kind, false}
		h, err := r.held[c].Lock(ctx)
		if err != nil {
			return fmt.Errorf("%s: Lock: %w", r.label(c), err)
		}
		p, err := r.end(ctx, c, h)
		if err != nil {
			return err
		}
		ps = append(ps, p)
	}
	aged, err := r.agedLosses(ctx)
	if err != nil {
		return err
	}
	return r.await(append(ps, aged...))
}

// agedLosses takes a hold for every kind of loss, and ends each holdAge
// into it.
func (r *lossRig) agedLosses(ctx context.Context) ([]pendingLoss, error) {
	holds := make([]*lock.Hold, len(lossKinds))
	for kind := range lossKinds {
		h, err := r.held[lossCell{kind, true}].Lock(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: Lock: %w", r.label(lossCell{kind, true}), err)
		}
		holds[kind] = h
	}
	time.Sleep(holdAge) // the holds' age, not a synchronisation
	var ps []pendingLoss
	for kind, h := range holds {
		p, err := r.end(ctx, lossCell{kind, true}, h)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// end ends h, the hold of cell c, by c's kind of loss, and returns it
// pending its notice. A loss that ended no hold is an error.
func (r *lossRig) end(ctx context.Context, c lossCell, h *lock.Hold) (pendingLoss, error) {
	if err := h.Err(); err != nil {
		return pendingLoss{}, fmt.Errorf("%s: the hold ended before the loss was sent: %w", r.label(c), err)
	}
	done := watchDone(h)
	ended, err := r.lose(ctx, c)
	p := pendingLoss{cell: c, hold: h, done: done, returned: time.Now()}
	if err == nil && !ended {
		err = errors.New("it found no hold to end")
	}
	if err != nil {
		return p, fmt.Errorf("%s: %w", r.label(c), err)
	}
	return p, nil
}

// lose sends c's kind of loss and reports whether it ended a hold.
func (r *lossRig) lose(ctx context.Context, c lossCell) (bool, error) {
	name := r.names[c]
	switch lossKinds[c.kind].key {
	case "force-unlock":
		return r.admin[c].ForceUnlock(ctx)
	case "delete":
		return r.admin[c].Delete(ctx)
	case "del":
		// A fresh connection, as redis-cli's.
		n, _ := r.srv.Do(r.t, "DEL", name).(int64)
		return n == 1, nil
	default:
		return r.java.Lock(name, 1).ForceUnlock(ctx)
	}
}

// await waits for the Done of every pending loss, noticeWait at most, and
// records each delay (0 when Done closed before the call returned). The
// hold must have ended as lost.
func (r *lossRig) await(ps []pendingLoss) error {
	limit := time.NewTimer(noticeWait)
	defer limit.Stop()
	for _, p := range ps {
		select {
		case at := <-p.done:
			r.delays[p.cell] = append(r.delays[p.cell], max(at.Sub(p.returned), 0))
		case <-limit.C:
			return fmt.Errorf("%s: the holder was not told within %v", r.label(p.cell), noticeWait)
		}
		if err := p.hold.Err(); !errors.Is(err, lock.ErrLockLost) {
			return fmt.Errorf("%s: the hold ended with %v, want ErrLockLost", r.label(p.cell), err)
		}
	}
	return nil
}

// figures returns the mode's line - per kind, p50/p99 of the fresh holds,
// then of the aged ones - and fails the test for each cell whose p99 is
// past its bound.
func (r *lossRig) figures() string {
	var kinds []string
	for kind, k := range lossKinds {
		var ages []string
		for _, aged := range []bool{false, true} {
			c := lossCell{kind, aged}
			p99 := percentile(r.delays[c], 99)
			ages = append(ages, msNum(percentile(r.delays[c], 50))+"/"+msNum(p99))
			if bound := r.mode.bound(k.told, !aged); p99 > bound {
				worst := slices.Index(r.delays[c], slices.Max(r.delays[c])) + 1
				r.t.Errorf("%s: p99 %v over %d trials (the worst in trial %d), past its bound %v", r.label(c), p99, len(r.delays[c]), worst, bound)
			}
		}
		kinds = append(kinds, k.name+" "+strings.Join(ages, " "))
	}
	return r.mode.name + r.mode.leaseNote() + ": " + strings.Join(kinds, ", ")
}

// msNum formats d in milliseconds, without the unit: two decimals below
// 100 ms, whole milliseconds above.
func msNum(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
