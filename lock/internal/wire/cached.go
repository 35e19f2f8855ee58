package wire

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/fairlock/fairlock/backend"
)

// Cached reads stand in for inspect.lua on the client-side cache
// (backend.CachedReader): the same keys, read with plain commands the
// server tracks, decoded into the Snapshot the script would give.
//
//	inspect.lua                      cached read
//	redis.call('time')               the server's clock, estimated by the caller
//	PTTL hash                        PEXPIRETIME hash, less the server's clock
//	GET token                        GET token
//	LLEN queue                       LLEN queue
//	ZCOUNT alive 0 0, ZRANGE         ZCOUNT alive 0 0 (not 0: the script, ErrLeftMarks)
//	HGETALL hash                     HGETALL hash
//	LRANGE queue 0 limit-1           LRANGE queue 0 limit-1
//	ZSCORE alive|timeouts owner      ZMSCORE alive|timeouts owners...  (Waiters)
//	PTTL token                       PEXPIRETIME token, less the server's clock
//	read_description.lua             GET description key               (DescriptionRead)
//
// PTTL cannot be cached: its reply changes with time, which invalidates
// nothing. The script reads everything at one instant; the cached reads
// are several reads, each as fresh as its own cache entry.

// CachedKind says what a cached read needs of the lock's state.
type CachedKind int

// What a cached read reads.
const (
	CachedHolders CachedKind = iota // the hash: who holds, with what count
	CachedTTL                       // the hash's lease left
	CachedAll                       // everything inspect.lua reads
)

// leftMark is prelude.lua's left_mark: the liveness deadline of an entry
// an owner left behind in the middle of the queue (leave.lua).
const leftMark = "0"

// CachedRead is the first round of a cached read.
type CachedRead struct {
	Kind  CachedKind
	Limit int // CachedAll: queue entries to list
}

// Commands returns the commands to read through the cache.
func (r CachedRead) Commands(k Keys) [][]string {
	switch r.Kind {
	case CachedHolders:
		return [][]string{{"HGETALL", k.Hash}}
	case CachedTTL:
		return [][]string{{"PEXPIRETIME", k.Hash}}
	}
	cmds := [][]string{{"HGETALL", k.Hash}, {"PEXPIRETIME", k.Hash}, {"GET", k.Token}, {"LLEN", k.Queue}, {"ZCOUNT", k.Alive, leftMark, leftMark}, {"PEXPIRETIME", k.Token}}
	if r.Limit > 0 {
		cmds = append(cmds, []string{"LRANGE", k.Queue, "0", strconv.Itoa(r.Limit - 1)})
	}
	return cmds
}

// size is how many commands Commands returns.
func (r CachedRead) size() int {
	switch {
	case r.Kind != CachedAll:
		return 1
	case r.Limit > 0:
		return 7
	}
	return 6
}

// Decode turns the replies to Commands into a Snapshot, as of now (the
// server's clock as the caller estimates it), and returns the owners the
// queue listed, whose deadlines a second round reads (Waiters). A PTTL
// not read is -2, as for a key that does not exist.
func (r CachedRead) Decode(reps []backend.Reply, now time.Time) (Snapshot, []string, error) {
	s := Snapshot{Now: now, HashTTL: -2, TokenTTL: -2}
	if want := r.size(); len(reps) != want {
		return Snapshot{}, nil, fmt.Errorf("%w: %d replies to %d cached reads", backend.ErrUnexpectedReply, len(reps), want)
	}
	var err error
	switch r.Kind {
	case CachedHolders:
		s.Holders, err = decodeHolders(reps[0].Elems)
		return s, nil, err
	case CachedTTL:
		s.HashTTL, err = pttl(reps[0], now)
		return s, nil, err
	}
	return r.decodeAll(s, reps, now)
}

func (r CachedRead) decodeAll(s Snapshot, reps []backend.Reply, now time.Time) (Snapshot, []string, error) {
	var err error
	if s.HashTTL, err = pttl(reps[1], now); err != nil {
		return Snapshot{}, nil, err
	}
	if s.TokenTTL, err = pttl(reps[5], now); err != nil {
		return Snapshot{}, nil, err
	}
	if s.QueueLength, err = queueLength(reps[3], reps[4]); err != nil {
		return Snapshot{}, nil, err
	}
	if reps[2].Kind != backend.Nil { // nil: no token issued yet, 0
		if s.Token, err = reps[2].AsInt(); err != nil {
			return Snapshot{}, nil, err
		}
	}
	if s.HashTTL != 0 && s.HashTTL != -2 { // else the hash is gone, or its lease ran out
		if s.Holders, err = decodeHolders(reps[0].Elems); err != nil {
			return Snapshot{}, nil, fmt.Errorf("%w: cached HGETALL: %v", backend.ErrUnexpectedReply, err)
		}
	}
	var waiters []string
	if r.Limit > 0 {
		for _, w := range reps[6].Elems {
			waiters = append(waiters, w.Str)
		}
	}
	return s, waiters, nil
}

// ErrLeftMarks says a cached Inspect must be the script's: entries owners
// left behind (leave.lua) do not count in the queue length, and only the
// script can tell their marks from those of entries a Redisson purge has
// dropped since (left_in_queue in prelude.lua compares the zsets with the
// server's clock, which no cacheable read does). Such marks are rare and
// short-lived: while there are none, Inspect reads from the cache.
var ErrLeftMarks = errors.New("wire: entries left behind in the queue: read with the script")

// queueLength is inspect.lua's queue length from the LLEN and ZCOUNT
// replies when no entry is marked as left behind (ErrLeftMarks).
func queueLength(llen, left backend.Reply) (int, error) {
	n, err := llen.AsInt()
	if err != nil {
		return 0, err
	}
	l, err := left.AsInt()
	if err != nil {
		return 0, err
	}
	if l > 0 {
		return 0, ErrLeftMarks
	}
	return int(n), nil
}

// pttl turns a PEXPIRETIME reply into inspect.lua's PTTL: -2 for no key,
// -1 for no expiry, else the milliseconds left by the server's clock now,
// 0 once they have run out.
func pttl(expireTime backend.Reply, now time.Time) (int64, error) {
	at, err := expireTime.AsInt()
	switch {
	case err != nil:
		return 0, err
	case at < 0:
		return at, nil
	}
	return max(at-now.UnixMilli(), 0), nil
}

// Waiters returns the commands of the second round for the listed
// waiters: their deadlines in both zsets (none for no waiters).
func Waiters(k Keys, waiters []string) [][]string {
	if len(waiters) == 0 {
		return nil
	}
	return [][]string{
		append([]string{"ZMSCORE", k.Alive}, waiters...),
		append([]string{"ZMSCORE", k.Timeouts}, waiters...),
	}
}

// DecodeWaiters returns inspect.lua's queue entries from the replies to
// Waiters: the liveness deadline, else the Redisson one; entries owners
// left behind are skipped, as inspect.lua skips them.
func DecodeWaiters(waiters []string, reps []backend.Reply) ([]Queued, error) {
	if len(waiters) == 0 {
		return nil, nil
	}
	if len(reps) != 2 || len(reps[0].Elems) != len(waiters) || len(reps[1].Elems) != len(waiters) {
		return nil, fmt.Errorf("%w: ZMSCORE of %d waiters: %v", backend.ErrUnexpectedReply, len(waiters), reps)
	}
	alive, timeouts := reps[0].Elems, reps[1].Elems
	var out []Queued
	for i, w := range waiters {
		var score string
		switch {
		case isLeftMark(alive[i]):
			continue // an entry its owner left behind
		case alive[i].Kind != backend.Nil:
			score = alive[i].Str
		case timeouts[i].Kind != backend.Nil:
			score = timeouts[i].Str
		}
		q := Queued{Owner: w, Heartbeats: alive[i].Kind != backend.Nil}
		if score != "" {
			f, err := strconv.ParseFloat(score, 64)
			if err != nil {
				return nil, fmt.Errorf("%w: deadline %q", backend.ErrUnexpectedReply, score)
			}
			q.Deadline = time.UnixMilli(int64(f))
		}
		out = append(out, q)
	}
	return out, nil
}

// isLeftMark reports whether a liveness deadline read from the alive zset
// is leftMark.
func isLeftMark(score backend.Reply) bool {
	if score.Kind != backend.String {
		return false
	}
	f, err := strconv.ParseFloat(score.Str, 64)
	return err == nil && f == 0
}

// DescriptionRead is the cached stand-in for read_description.lua.
func DescriptionRead(key string) []string { return []string{"GET", key} }
