package lock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/backend"
)

// Cached reads (WithCachedReads): IsLocked, IsHeldBy, HoldCount,
// RemainTTL and Inspect through the backend's client-side cache
// (backend.CachedReader). They read the keys inspect.lua reads, with
// plain commands the server tracks, and decode them with decodeInspect
// into the State the script would give:
//
//	inspect.lua                      cached read
//	redis.call('time')               the server's clock, estimated (serverClock)
//	PTTL hash                        PEXPIRETIME hash, less the server's clock
//	GET token                        GET token
//	LLEN queue                       LLEN queue
//	ZCOUNT alive 0 0, ZRANGE         ZCOUNT alive 0 0 (not 0: the script, errLeftMarks)
//	HGETALL hash                     HGETALL hash
//	LRANGE queue 0 limit-1           LRANGE queue 0 limit-1
//	ZSCORE alive|timeouts owner      ZMSCORE alive|timeouts owners...
//	PTTL token                       PEXPIRETIME token, less the server's clock
//
// PTTL cannot be cached: its reply changes with time, which invalidates
// nothing. The script reads everything at one instant; the cached reads
// are several reads, each as fresh as its own cache entry, so a cached
// State can mix moments (a holder from just before an unlock with the
// queue from just after it) - never by more than the staleness bound.

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

// readKind says what a read needs of the lock's state.
type readKind int

const (
	readHolders readKind = iota // the hash: IsLocked, IsHeldBy, HoldCount
	readTTL                     // the lease left: RemainTTL
	readAll                     // everything: Inspect
)

// cachedState reads what kind needs through the cache (limit: Inspect's
// queue limit). ok is false when the caller must run the script instead:
// cached reads are off, the backend or server cannot cache, the server's
// clock must be read, or a cached read failed (the script then gives the
// answer or the error). The caller has checked ctx and limit.
func (m *Mutex) cachedState(ctx context.Context, kind readKind, limit int) (st State, ok bool) {
	cr := m.c.cfg.cached
	if cr == nil || cr.off.Load() {
		return State{}, false
	}
	cb, ok := m.c.b.(backend.CachedReader)
	if !ok {
		cr.off.Store(true)
		return State{}, false
	}
	var now time.Time
	if kind != readHolders {
		if now, ok = cr.clock.now(); !ok {
			return State{}, false
		}
	}
	r := cachedRead{m: m, ctx: ctx, cb: cb, maxStale: cr.maxStale}
	rep, owners, err := r.inspectReply(kind, limit, now)
	var ev evidence
	if err == nil {
		st, ev, err = decodeInspect(rep)
	}
	if err != nil {
		cr.noteFailure(err)
		return State{}, false
	}
	if owners != nil {
		owners.describe(&st, ev)
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

// inspectReply returns inspect.lua's reply {now ms, pttl ms, token, queue
// length, hash fields and counts, queue entries, token pttl ms} from
// cached reads, with what kind does not need left empty; for Inspect,
// also the second read's owners when it made one (the lock has holders or
// listed waiters).
func (r cachedRead) inspectReply(kind readKind, limit int, now time.Time) (backend.Reply, *cachedOwners, error) {
	rep := []backend.Reply{backend.IntReply(now.UnixMilli()), backend.IntReply(-2), backend.IntReply(0), backend.IntReply(0), backend.ArrayReply(), backend.ArrayReply(), backend.IntReply(-2)}
	k := r.m.keys
	switch kind {
	case readHolders:
		reps, err := r.read([][]string{{"HGETALL", k.hash}})
		if err != nil {
			return backend.Reply{}, nil, err
		}
		rep[4] = reps[0]
		return backend.ArrayReply(rep...), nil, nil
	case readTTL:
		reps, err := r.read([][]string{{"PEXPIRETIME", k.hash}})
		if err != nil {
			return backend.Reply{}, nil, err
		}
		rep[1], err = pttl(reps[0], now)
		return backend.ArrayReply(rep...), nil, err
	}
	cmds := [][]string{{"HGETALL", k.hash}, {"PEXPIRETIME", k.hash}, {"GET", k.token}, {"LLEN", k.queue}, {"ZCOUNT", k.alive, leftMark, leftMark}, {"PEXPIRETIME", k.token}}
	if limit > 0 {
		cmds = append(cmds, []string{"LRANGE", k.queue, "0", strconv.Itoa(limit - 1)})
	}
	reps, err := r.read(cmds)
	if err != nil {
		return backend.Reply{}, nil, err
	}
	if rep[1], err = pttl(reps[1], now); err != nil {
		return backend.Reply{}, nil, err
	}
	if rep[6], err = pttl(reps[5], now); err != nil {
		return backend.Reply{}, nil, err
	}
	if rep[3], err = queueLength(reps[3], reps[4]); err != nil {
		return backend.Reply{}, nil, err
	}
	if reps[2].Kind != backend.Nil { // nil: no token issued yet, 0
		rep[2] = reps[2]
	}
	if rep[1].Int != 0 && rep[1].Int != -2 { // else the hash is gone, or its lease ran out
		rep[4] = reps[0]
	}
	var queue []backend.Reply
	if limit > 0 {
		queue = reps[6].Elems
	}
	if len(rep[4].Elems) == 0 && len(queue) == 0 {
		return backend.ArrayReply(rep...), nil, nil
	}
	owners := r.m.newCachedOwners(rep[4].Elems, queue)
	if owners.reps, err = r.read(owners.cmds); err != nil {
		return backend.Reply{}, nil, err
	}
	rep[5], err = owners.entries()
	return backend.ArrayReply(rep...), owners, err
}

// errLeftMarks says a cached Inspect must be the script's: entries owners
// left behind (leave.lua) do not count in the queue length, and only the
// script can tell their marks from those of entries a Redisson purge has
// dropped since (left_in_queue in prelude.lua: it compares the zsets with
// the server's clock, which no cacheable read does). Such marks are rare
// and short-lived: while there are none, Inspect reads from the cache.
var errLeftMarks = errors.New("lock: entries left behind in the queue: read with the script")

// queueLength is inspect.lua's queue length from the LLEN and ZCOUNT
// replies when no entry is marked as left behind (errLeftMarks).
func queueLength(llen, left backend.Reply) (backend.Reply, error) {
	n, err := llen.AsInt()
	if err != nil {
		return backend.Reply{}, err
	}
	l, err := left.AsInt()
	if err != nil {
		return backend.Reply{}, err
	}
	if l > 0 {
		return backend.Reply{}, errLeftMarks
	}
	return backend.IntReply(n), nil
}

// pttl turns a PEXPIRETIME reply into inspect.lua's PTTL: -2 for no key,
// -1 for no expiry, else the milliseconds left by the server's clock now,
// 0 once they have run out.
func pttl(expireTime backend.Reply, now time.Time) (backend.Reply, error) {
	at, err := expireTime.AsInt()
	switch {
	case err != nil:
		return backend.Reply{}, err
	case at < 0:
		return backend.IntReply(at), nil
	}
	return backend.IntReply(max(at-now.UnixMilli(), 0)), nil
}

// noteFailure turns cached reads off for good when the backend cannot
// cache or the server lacks a command they use (PEXPIRETIME: Redis 7).
func (cr *cachedReads) noteFailure(err error) {
	var se *backend.ServerError
	if errors.Is(err, backend.ErrNotSupported) || errors.As(err, &se) && strings.Contains(strings.ToLower(se.Message), "unknown command") {
		cr.off.Store(true)
	}
}

// cachedOwners is the second read of a cached Inspect, for a lock with
// holders or listed waiters: the clients' descriptions
// (read_description.lua reads the same keys) and the waiters' deadlines
// in both zsets, which give inspect.lua's queue entries.
type cachedOwners struct {
	m       *Mutex
	waiters []string
	index   *ownerIndex
	cmds    [][]string      // a GET per client, then ZMSCORE alive and timeouts
	reps    []backend.Reply // their replies
}

// newCachedOwners takes the HGETALL reply's fields and counts and the
// LRANGE reply's owners.
func (m *Mutex) newCachedOwners(fields, queue []backend.Reply) *cachedOwners {
	o := &cachedOwners{m: m, index: newOwnerIndex(m.c.id)}
	for i := 0; i < len(fields); i += 2 {
		o.index.facts(fields[i].Str)
	}
	for _, w := range queue {
		o.waiters = append(o.waiters, w.Str)
		o.index.facts(w.Str)
	}
	for _, id := range o.index.clients {
		o.cmds = append(o.cmds, []string{"GET", m.c.descriptionKey(id)})
	}
	if len(o.waiters) > 0 {
		o.cmds = append(o.cmds,
			append([]string{"ZMSCORE", m.keys.alive}, o.waiters...),
			append([]string{"ZMSCORE", m.keys.timeouts}, o.waiters...))
	}
	return o
}

// entries returns inspect.lua's queue entries {owner, deadline,
// heartbeats, ...} from the ZMSCORE replies: the liveness deadline, else
// the Redisson one, else ""; heartbeats 1 with a liveness deadline.
func (o *cachedOwners) entries() (backend.Reply, error) {
	if len(o.waiters) == 0 {
		return backend.ArrayReply(), nil
	}
	clients := len(o.index.clients)
	alive, timeouts := o.reps[clients].Elems, o.reps[clients+1].Elems
	if len(alive) != len(o.waiters) || len(timeouts) != len(o.waiters) {
		return backend.Reply{}, fmt.Errorf("%w: ZMSCORE of %d waiters: %v, %v", backend.ErrUnexpectedReply, len(o.waiters), o.reps[clients], o.reps[clients+1])
	}
	out := make([]backend.Reply, 0, 3*len(o.waiters))
	for i, w := range o.waiters {
		switch {
		case isLeftMark(alive[i]):
			// an entry its owner left behind: inspect.lua skips it
		case alive[i].Kind != backend.Nil:
			out = append(out, backend.StringReply(w), alive[i], backend.IntReply(1))
		case timeouts[i].Kind != backend.Nil:
			out = append(out, backend.StringReply(w), timeouts[i], backend.IntReply(0))
		default:
			out = append(out, backend.StringReply(w), backend.StringReply(""), backend.IntReply(0))
		}
	}
	return backend.ArrayReply(out...), nil
}

// describe fills in the Description and Kind of st's holders and waiters
// as describeOwners does: the kinds from ev, the descriptions from the GET
// replies.
func (o *cachedOwners) describe(st *State, ev evidence) {
	descriptions := o.reps[:len(o.index.clients)]
	o.index.learn(st, ev)
	if err := o.index.setDescriptions(descriptions); err != nil {
		st.DescriptionErr = fmt.Errorf("lock %q: client descriptions: %w", o.m.name, err)
	}
	o.index.fill(st)
}
