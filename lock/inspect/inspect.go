// Package inspect holds what lock.Mutex.Inspect reports of a lock: its
// holders, its queue, and who their clients are. It is the vocabulary of
// status pages and of "fairlock inspect"; package lock fills it in.
package inspect

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// State is a snapshot of a lock, read atomically by one script (or, with
// lock.WithCachedReads, put together from cached reads: see there).
type State struct {
	// ServerTime is Redis' clock when the snapshot was taken (with
	// lock.WithCachedReads, the client's estimate of it).
	ServerTime time.Time
	// Holders lists the owner fields in the lock hash with their hold
	// counts; empty when nobody holds the lock. Normally one entry.
	Holders []Holder
	// TTL is the lease left: 0 when free, -1 when the hash has no expiry.
	TTL time.Duration
	// Token is the latest fencing token issued for this lock (0: none yet).
	Token int64
	// QueueLength is the number of queued owners.
	QueueLength int
	// Queue lists the first queued owners, head first (as many as asked).
	Queue []Waiter
	// DescriptionErr is why Inspect could not read the owners' client
	// descriptions and kinds (read after the snapshot, see Holder); nil
	// when it could, or had nothing to read. The rest of the State is
	// complete either way.
	DescriptionErr error
}

// Holder is one field of the lock hash. The JSON names suit
// "fairlock inspect --json".
type Holder struct {
	Owner string `json:"owner"` // "<clientID>:<ownerID>"; see ParseOwner
	Count int    `json:"count"`
	// Description is the description of the owner's client (see
	// lock.WithDescription); nil when it has none or the owner field has
	// another form. Filled in by Inspect only.
	Description *Description `json:"description,omitempty"`
	// Kind says whether the owner's client is a fairlock or a Redisson
	// client, when Inspect can tell (see Kind). Filled in by Inspect
	// only.
	Kind Kind `json:"kind,omitempty"`
}

// Waiter is one queued owner. The JSON names suit "fairlock inspect
// --json".
type Waiter struct {
	Owner string `json:"owner"`
	// Deadline is when others will treat the waiter as dead unless it
	// heartbeats (zero if the timeouts zset has no entry for it, which
	// makes it dead at once).
	Deadline time.Time `json:"deadline"`
	// Description and Kind are as for Holder.
	Description *Description `json:"description,omitempty"`
	Kind        Kind         `json:"kind,omitempty"`
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

// Description says who a client is, for people looking at a lock: Inspect
// reports it for every holder and waiter whose client has one (see
// lock.WithDescription). The lock hash keeps Redisson's owner field; the
// description lives beside it under its own key per client,
// "<key prefix>fairlock_client_info:<clientID>", as JSON with these
// field names.
type Description struct {
	// Host is the client machine's host name (os.Hostname; "" if unknown).
	Host string `json:"host"`
	// PID is the client process ID (os.Getpid).
	PID int `json:"pid"`
	// Name is what the application called itself in lock.WithDescription.
	Name string `json:"name"`
}

// Kind says which kind of client an owner belongs to, as far as
// Mutex.Inspect can tell from what is in Redis.
type Kind string

// Client kinds. Owner fields have the same form whoever writes them, so
// the kind comes from evidence, per client ID: a description, a waiter's
// liveness deadline (only fairlock waiters heartbeat), the ID of the
// client that inspects, or, for a holder, the fencing counter's expiry
// (fairlock keeps it alive as long as its holds; Redisson never touches
// it).
const (
	// KindUnknown: no evidence either way - a holder of a lock hash without
	// an expiry, and an owner field of another form.
	KindUnknown Kind = ""
	// KindFairlock: a fairlock client - it describes itself, one of its
	// listed waiters heartbeats, it is the client that inspects, or it
	// holds and the fencing counter lives at least as long as the hold.
	KindFairlock Kind = "fairlock"
	// KindRedisson: a client that queues without fairlock's heartbeat - a
	// Redisson client (or another implementation of RFairLock): one of its
	// listed waiters has no fairlock liveness deadline, or it holds and the
	// fencing counter is gone or dies before the hold; and nothing says
	// fairlock.
	KindRedisson Kind = "redisson"
)

// ParseOwner splits an owner field "<clientID>:<ownerID>", as found in the
// lock hash and queue (Redisson writes "<uuid>:<threadId>").
func ParseOwner(field string) (clientID string, ownerID int64, err error) {
	i := strings.LastIndexByte(field, ':')
	if i <= 0 {
		return "", 0, fmt.Errorf("inspect: owner field %q has no \"<client>:<id>\" form", field)
	}
	id, err := strconv.ParseInt(field[i+1:], 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("inspect: owner field %q: %w", field, err)
	}
	return field[:i], id, nil
}
