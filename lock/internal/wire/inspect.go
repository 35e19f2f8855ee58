package wire

import (
	"fmt"
	"strconv"
	"time"

	"github.com/fairlock/fairlock/backend"
)

// Inspect is one run of inspect.lua: read the lock's state, with up to
// Limit queue entries.
type Inspect struct{ Limit int }

// Call returns the script invocation.
func (i Inspect) Call(s *Scripts, k Keys) backend.Call {
	return backend.Call{Script: s.inspect, Keys: k.Script(), Args: []string{strconv.Itoa(i.Limit)}}
}

// Snapshot is a lock's state as inspect.lua reads it at one instant (or
// the cached reads put it together).
type Snapshot struct {
	Now         time.Time // the server's clock (ms)
	HashTTL     int64     // the lock hash's PTTL in ms: -2 no key, -1 no expiry
	Token       int64     // the latest fencing token issued (0: none)
	QueueLength int       // queued owners, without entries owners left behind
	Holders     []Holder
	Queue       []Queued // the first Limit live entries, head first
	TokenTTL    int64    // the token counter's PTTL in ms
}

// Holder is a field of the lock hash.
type Holder struct {
	Owner string
	Count int // a hand-over grant not taken up yet counts as 1
}

// Queued is one listed waiter.
type Queued struct {
	Owner string
	// Deadline is its fairlock liveness deadline, else its Redisson
	// deadline; zero when it has neither.
	Deadline time.Time
	// Heartbeats: it has a liveness deadline, so it is a fairlock waiter.
	Heartbeats bool
}

// DecodeInspect decodes inspect.lua's reply: {now ms, hash pttl, token,
// queue length, {field, count, ...}, {owner, deadline, heartbeats, ...},
// token pttl}.
func DecodeInspect(rep backend.Reply) (Snapshot, error) {
	bad := func(what string) (Snapshot, error) {
		return Snapshot{}, fmt.Errorf("%w: inspect: %s", backend.ErrUnexpectedReply, what)
	}
	if rep.Kind != backend.Array || len(rep.Elems) != 7 {
		return bad("not a 7-element array")
	}
	e := rep.Elems
	var nums [5]int64
	for i, j := range []int{0, 1, 2, 3, 6} {
		n, err := e[j].AsInt()
		if err != nil {
			return bad(err.Error())
		}
		nums[i] = n
	}
	s := Snapshot{Now: time.UnixMilli(nums[0]), HashTTL: nums[1], Token: nums[2], QueueLength: int(nums[3]), TokenTTL: nums[4]}
	var err error
	if s.Holders, err = decodeHolders(e[4].Elems); err != nil {
		return bad(err.Error())
	}
	if s.Queue, err = decodeQueue(e[5].Elems); err != nil {
		return bad(err.Error())
	}
	return s, nil
}

// decodeHolders decodes an HGETALL of the lock hash.
func decodeHolders(fields []backend.Reply) ([]Holder, error) {
	if len(fields)%2 != 0 {
		return nil, fmt.Errorf("odd field list")
	}
	var out []Holder
	for i := 0; i < len(fields); i += 2 {
		n, err := fields[i+1].AsInt()
		if err != nil {
			return nil, err
		}
		// 0: handed over to this owner and not yet taken up by its
		// client (hand_over_to in prelude.lua): one hold.
		out = append(out, Holder{Owner: fields[i].Str, Count: max(int(n), 1)})
	}
	return out, nil
}

func decodeQueue(entries []backend.Reply) ([]Queued, error) {
	if len(entries)%3 != 0 {
		return nil, fmt.Errorf("odd queue list")
	}
	var out []Queued
	for i := 0; i < len(entries); i += 3 {
		q := Queued{Owner: entries[i].Str}
		if s := entries[i+1].Str; s != "" {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return nil, err
			}
			q.Deadline = time.UnixMilli(int64(f))
		}
		beats, err := entries[i+2].AsInt()
		if err != nil {
			return nil, err
		}
		q.Heartbeats = beats == 1
		out = append(out, q)
	}
	return out, nil
}
