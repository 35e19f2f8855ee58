package lock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock/inspect"
	"github.com/fairlock/fairlock/lock/internal/wire"
)

// Cached reads (WithCachedReads): IsLocked, IsHeldBy, HoldCount,
// RemainTTL and Inspect through the backend's client-side cache
// (backend.CachedReader), with the plain reads package wire puts in
// place of inspect.lua. The script reads everything at one instant; the
// cached reads are several reads, each as fresh as its own cache entry,
// so a cached State can mix moments (a holder from just before an unlock
// with the queue from just after it) - never by more than the staleness
// bound.

// cachedReads is the state of WithCachedReads, one per Client.
type cachedReads struct {
	maxStale time.Duration // the ttl of every cached reply
	off      atomic.Bool   // the backend or server cannot: use the script
	clock    serverClock
}

// clockRefresh is how often the server's clock is read again (one
// inspect.lua run, which answers a read as well): often enough that
// drift between the two clocks (at most about 100 ppm) stays under a
// millisecond.
const clockRefresh = 10 * time.Second

// serverClock estimates the server's clock from one script read: the
// server's time then, plus the local monotonic time since. The estimate
// is off by at most half that read's round trip plus a millisecond (the
// script reports whole milliseconds), plus drift.
type serverClock struct {
	mu         sync.Mutex
	server     time.Time     // the server's clock at local
	local      time.Time     // local time, with its monotonic reading
	rtt        time.Duration // the round trip of the read that set it
	set        bool
	refreshing bool // a caller is reading the script to refresh it
}

// now returns the server's time now and true; or false when the caller
// should read with the script, which then sets the clock (observe): when
// the clock was never set, and to one caller once it is clockRefresh old
// (the others go on with the old estimate meanwhile).
func (c *serverClock) now() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.set {
		return time.Time{}, false
	}
	age := time.Since(c.local)
	if age >= clockRefresh && !c.refreshing {
		c.refreshing = true
		return time.Time{}, false
	}
	return c.server.Add(age), true
}

// observe sets the clock from a script read sent at sent and answered at
// recv, which saw the server's clock at server (whole milliseconds), or
// failed (err), which lets the next caller try. A fresh estimate from a
// quicker read is kept: it is the more precise.
func (c *serverClock) observe(server, sent, recv time.Time, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refreshing = false
	rtt := recv.Sub(sent)
	if err != nil || c.set && rtt > c.rtt && time.Since(c.local) < clockRefresh {
		return
	}
	c.server = server.Add(500 * time.Microsecond) // the middle of its millisecond
	c.local = sent.Add(rtt / 2)
	c.rtt, c.set = rtt, true
}

// cachedState reads what kind needs through the cache (limit: Inspect's
// queue limit). ok is false when the caller must run the script instead:
// cached reads are off, the backend or server cannot cache, the server's
// clock must be read, or a cached read failed (the script then gives the
// answer or the error). The caller has checked ctx and limit.
func (m *Mutex) cachedState(ctx context.Context, kind wire.CachedKind, limit int) (inspect.State, bool) {
	cr := m.c.cfg.cached
	if cr == nil || cr.off.Load() {
		return inspect.State{}, false
	}
	cb, ok := m.c.b.(backend.CachedReader)
	if !ok {
		cr.off.Store(true)
		return inspect.State{}, false
	}
	var now time.Time
	if kind != wire.CachedHolders {
		if now, ok = cr.clock.now(); !ok {
			return inspect.State{}, false
		}
	}
	r := cachedRead{m: m, ctx: ctx, cb: cb, maxStale: cr.maxStale}
	st, err := r.state(wire.CachedRead{Kind: kind, Limit: limit}, now)
	if err != nil {
		cr.noteFailure(err)
		return inspect.State{}, false
	}
	return st, true
}

// cachedRead is one cached read of a lock's state.
type cachedRead struct {
	m        *Mutex
	ctx      context.Context
	cb       backend.CachedReader
	maxStale time.Duration
}

func (r cachedRead) read(cmds [][]string) ([]backend.Reply, error) {
	reps, err := r.cb.CachedRead(r.ctx, r.maxStale, cmds)
	if err == nil && len(reps) != len(cmds) {
		err = fmt.Errorf("%w: %d replies to %d cached reads", backend.ErrUnexpectedReply, len(reps), len(cmds))
	}
	return reps, err
}

// state reads the State in one round, and for Inspect of a lock with
// holders or listed waiters a second: the clients' descriptions and the
// waiters' deadlines.
func (r cachedRead) state(q wire.CachedRead, now time.Time) (inspect.State, error) {
	reps, err := r.read(q.Commands(r.m.keys))
	if err != nil {
		return inspect.State{}, err
	}
	snap, waiters, err := q.Decode(reps, now)
	if err != nil || q.Kind != wire.CachedAll || len(snap.Holders) == 0 && len(waiters) == 0 {
		return stateOf(snap), err
	}
	index := newOwnerIndex(r.m.c.id)
	for _, h := range snap.Holders {
		index.facts(h.Owner)
	}
	for _, w := range waiters {
		index.facts(w)
	}
	var cmds [][]string
	for _, id := range index.clients {
		cmds = append(cmds, wire.DescriptionRead(r.m.c.descriptionKey(id)))
	}
	if reps, err = r.read(append(cmds, wire.Waiters(r.m.keys, waiters)...)); err != nil {
		return inspect.State{}, err
	}
	if snap.Queue, err = wire.DecodeWaiters(waiters, reps[len(cmds):]); err != nil {
		return inspect.State{}, err
	}
	st := stateOf(snap)
	index.learn(snap)
	if err := index.setDescriptions(reps[:len(cmds)]); err != nil {
		st.DescriptionErr = fmt.Errorf("lock %q: client descriptions: %w", r.m.name, err)
	}
	index.fill(&st)
	return st, nil
}

// noteFailure turns cached reads off for good when the backend cannot
// cache or the server lacks a command they use (PEXPIRETIME: Redis 7).
func (cr *cachedReads) noteFailure(err error) {
	var se *backend.ServerError
	if errors.Is(err, backend.ErrNotSupported) || errors.As(err, &se) && strings.Contains(strings.ToLower(se.Message), "unknown command") {
		cr.off.Store(true)
	}
}
