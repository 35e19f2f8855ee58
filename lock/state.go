package lock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/fairlock/fairlock/backend"
)

// State is a snapshot of a lock, read atomically by one script.
type State struct {
	// ServerTime is Redis' clock when the snapshot was taken.
	ServerTime time.Time
	// Holders lists the owner fields in the lock hash with their hold
	// counts; empty when the lock is free. Normally one entry.
	Holders []Holder
	// TTL is the lease left: 0 when free, -1 when the hash has no expiry.
	TTL time.Duration
	// Token is the latest fencing token issued for this lock (0: none yet).
	Token int64
	// QueueLength is the number of queued owners.
	QueueLength int
	// Queue lists the first queued owners, head first (as many as asked).
	Queue []Waiter
}

// Holder is one field of the lock hash.
type Holder struct {
	Owner string // "<clientID>:<ownerID>"; see ParseOwner
	Count int
}

// Waiter is one queued owner.
type Waiter struct {
	Owner string
	// Deadline is when others will treat the waiter as dead unless it
	// heartbeats (zero if the timeouts zset has no entry for it, which
	// makes it dead at once).
	Deadline time.Time
}

// Locked reports whether anyone holds the lock.
func (s State) Locked() bool { return len(s.Holders) > 0 }

// CountOf returns the hold count of owner (0 if it does not hold).
func (s State) CountOf(owner string) int {
	for _, h := range s.Holders {
		if h.Owner == owner {
			return h.Count
		}
	}
	return 0
}

// Inspect reads the lock's state with up to limit queue entries (0: none).
// The read visits at most limit waiters.
func (m *Mutex) Inspect(ctx context.Context, limit int) (State, error) {
	if err := m.checkCall(ctx); err != nil {
		return State{}, err
	}
	if limit < 0 {
		return State{}, m.errorf(fmt.Errorf("%w: negative queue limit %d", ErrInvalidOption, limit))
	}
	var rep backend.Reply
	var err error
	// Reads change nothing, so a network error (a connection the server
	// closed, say) is retried, a few times at most.
	for attempt := 1; ; attempt++ {
		rep, err = m.c.b.Eval(ctx, m.c.scripts.inspect,
			[]string{m.keys.hash, m.keys.queue, m.keys.timeouts, m.keys.token, m.keys.alive},
			[]string{strconv.Itoa(limit)})
		if !retryable(ctx, err, attempt) {
			break
		}
	}
	if err != nil {
		return State{}, m.errorf(err)
	}
	st, err := parseState(rep)
	if err != nil {
		return State{}, m.errorf(err)
	}
	return st, nil
}

func parseState(rep backend.Reply) (State, error) {
	bad := func(what string) (State, error) {
		return State{}, fmt.Errorf("%w: inspect: %s", ErrUnexpectedReply, what)
	}
	if rep.Kind != backend.Array || len(rep.Elems) != 6 {
		return bad("not a 6-element array")
	}
	e := rep.Elems
	var nums [4]int64
	for i := range nums {
		n, err := e[i].AsInt()
		if err != nil {
			return bad(err.Error())
		}
		nums[i] = n
	}
	st := State{ServerTime: time.UnixMilli(nums[0]), Token: nums[2], QueueLength: int(nums[3])}
	switch pttl := nums[1]; {
	case pttl == -1:
		st.TTL = -1
	case pttl > 0:
		st.TTL = time.Duration(pttl) * time.Millisecond
	}
	fields, queue := e[4].Elems, e[5].Elems
	if len(fields)%2 != 0 || len(queue)%2 != 0 {
		return bad("odd field list")
	}
	for i := 0; i < len(fields); i += 2 {
		n, err := fields[i+1].AsInt()
		if err != nil {
			return bad(err.Error())
		}
		st.Holders = append(st.Holders, Holder{Owner: fields[i].Str, Count: int(n)})
	}
	for i := 0; i < len(queue); i += 2 {
		w := Waiter{Owner: queue[i].Str}
		if s := queue[i+1].Str; s != "" {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return bad(err.Error())
			}
			w.Deadline = time.UnixMilli(int64(f))
		}
		st.Queue = append(st.Queue, w)
	}
	return st, nil
}

// IsLocked reports whether anyone holds the lock (B9).
func (m *Mutex) IsLocked(ctx context.Context) (bool, error) {
	st, err := m.Inspect(ctx, 0)
	return st.Locked(), err
}

// IsHeldBy reports whether owner holds the lock (B9).
func (m *Mutex) IsHeldBy(ctx context.Context, owner Owner) (bool, error) {
	st, err := m.Inspect(ctx, 0)
	return st.CountOf(owner.String()) > 0, err
}

// HoldCount returns this owner's hold count, 0 when it does not hold the
// lock (B9).
func (m *Mutex) HoldCount(ctx context.Context) (int, error) {
	st, err := m.Inspect(ctx, 0)
	return st.CountOf(m.field), err
}

// RemainTTL returns the lease left on the lock: 0 when it is free, -1 when
// it has no expiry (B9).
func (m *Mutex) RemainTTL(ctx context.Context) (time.Duration, error) {
	st, err := m.Inspect(ctx, 0)
	return st.TTL, err
}
