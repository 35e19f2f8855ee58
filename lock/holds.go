package lock

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// holdIndex is the client's index of its live holds: all of them for the
// watchdog, by lock hash for the hash watches, the loss notices and the
// local wake-ups. It also keeps the loss notices that matched no hold,
// for a grant whose reply is still on its way (early), and when notices
// were last summarised or missed (missed), for the grants on their way
// then. Its lock,
// holdIndex.mu, is taken before hashWatches.mu (the first hold on a hash
// starts its watch, the last one's end stops it, in that order).
type holdIndex struct {
	watches *hashWatches // told of the first hold on a hash and the end of the last

	mu   sync.Mutex
	refs map[*Hold]holdRef
	// byHash has the same holds by lock hash (a watch or a notice names
	// one lock): a short list, one hold per owner of the client holding
	// the lock (a slice, not a set: a new one costs one allocation, not
	// two).
	byHash map[string][]*Hold
	early  map[lossKey]time.Time
	// missed is when the client's notice listener last heard that notices
	// may have been summarised or lost (a burst its subscription could not
	// queue, a reconnect, its first subscription). A notice for a grant
	// whose reply was on its way then reached no hold and was not kept.
	missed time.Time
}

// holdRef is what the watchdog needs of a live hold: its Mutex (keys,
// owner field) and owner.
type holdRef struct {
	m *Mutex
	o *owner
}

// lossKey names one hold in a loss notice: its lock hash and token.
type lossKey struct {
	hash  string
	token int64
}

// earlyLossKeep is how long a loss notice that matched no hold is kept
// for a grant whose reply is still on its way: longer than an attempt
// may take (attemptTimeout).
const earlyLossKeep = 2 * attemptTimeout

func (x *holdIndex) init(watches *hashWatches) {
	x.watches = watches
	x.refs = make(map[*Hold]holdRef)
	x.byHash = make(map[string][]*Hold)
	x.early = make(map[lossKey]time.Time)
}

// track adds h, a new hold, to the index. It returns the hold's own error
// when the hold has ended already (its deadline passed before the grant's
// reply was applied), and ErrLockLost when a notice that someone ended
// it came before the reply. It reports check when notices were missed
// after h's grant was asked for: a notice for h may be among them, so the
// caller asks the server. (A hold tracked before notices were missed is
// among those the re-check that follows checks.)
func (x *holdIndex) track(h *Hold, ref holdRef) (check bool, err error) {
	hash := ref.m.keys.Hash
	x.mu.Lock()
	defer x.mu.Unlock()
	// holdEnded untracks under x.mu: a hold that ends after this check is
	// untracked after it is tracked.
	if err := h.Err(); err != nil {
		return false, err
	}
	if x.takeEarlyLocked(lossKey{hash, h.token}) {
		return false, errEvicted(true)
	}
	x.refs[h] = ref
	on := x.byHash[hash]
	if on == nil {
		x.watches.held(hash)
	}
	x.byHash[hash] = append(on, h)
	return h.asked.Before(x.missed), nil
}

// noticesMissed records that loss notices may have been summarised or
// lost until now: the caller then re-checks every hold tracked, and track
// tells of every grant asked for before now that it must be checked.
func (x *holdIndex) noticesMissed() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.missed = time.Now()
}

// untrack drops h, a hold that ended, and returns what it was tracked
// with; false when it was not tracked.
func (x *holdIndex) untrack(h *Hold) (holdRef, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	ref, ok := x.refs[h]
	if !ok {
		return holdRef{}, false
	}
	delete(x.refs, h)
	hash := ref.m.keys.Hash
	if on := x.byHash[hash]; len(on) > 1 {
		x.byHash[hash] = slices.DeleteFunc(on, func(y *Hold) bool { return y == h })
	} else {
		delete(x.byHash, hash)
		x.watches.released(hash)
	}
	return ref, true
}

// takeAll empties the index, for Close, and returns what it had.
func (x *holdIndex) takeAll() map[*Hold]holdRef {
	x.mu.Lock()
	defer x.mu.Unlock()
	refs := x.refs
	x.refs = make(map[*Hold]holdRef)
	x.byHash = make(map[string][]*Hold)
	return refs
}

// errEvicted is the error of a hold someone else force-unlocked or
// deleted; early: before the grant's reply reached the client.
func errEvicted(early bool) error {
	if early {
		return fmt.Errorf("%w: lock force-unlocked or deleted by another client before its grant reached this client", ErrLockLost)
	}
	return fmt.Errorf("%w: lock force-unlocked or deleted by another client", ErrLockLost)
}

// evicted returns the hold of token on the lock whose hash is hash, and
// its owner, for a notice that someone else force-unlocked or deleted it.
// A notice for a hold the index does not have yet is kept for
// earlyLossKeep, for the grant on its way (nil then).
func (x *holdIndex) evicted(hash string, token int64) (*Hold, *owner) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, h := range x.byHash[hash] {
		if h.token == token {
			return h, x.refs[h].o
		}
	}
	x.keepEarlyLocked(lossKey{hash, token})
	return nil, nil
}

// keepEarlyLocked keeps a notice that matched no hold, and forgets those
// kept too long. The caller holds x.mu.
func (x *holdIndex) keepEarlyLocked(k lossKey) {
	now := time.Now()
	for old, until := range x.early {
		if now.After(until) {
			delete(x.early, old)
		}
	}
	x.early[k] = now.Add(earlyLossKeep)
}

// takeEarlyLocked reports (and forgets) a kept notice for k. The caller
// holds x.mu.
func (x *holdIndex) takeEarlyLocked(k lossKey) bool {
	until, ok := x.early[k]
	delete(x.early, k)
	return ok && time.Now().Before(until)
}

// ref returns what h is tracked with; false when h is not tracked.
func (x *holdIndex) ref(h *Hold) (holdRef, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	ref, ok := x.refs[h]
	return ref, ok
}

// on returns the live holds on the lock whose hash is hash.
func (x *holdIndex) on(hash string) []*Hold {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Clone(x.byHash[hash])
}

// heldByOther reports whether an owner other than o holds the lock whose
// hash is hash.
func (x *holdIndex) heldByOther(hash string, o *owner) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, h := range x.byHash[hash] {
		if x.refs[h].o != o {
			return true
		}
	}
	return false
}

// live returns every live hold, for the watchdog.
func (x *holdIndex) live() []*Hold {
	x.mu.Lock()
	defer x.mu.Unlock()
	hs := make([]*Hold, 0, len(x.refs))
	for h := range x.refs {
		hs = append(hs, h)
	}
	return hs
}
