package wire

import (
	"strings"

	"github.com/fairlock/fairlock/backend"
)

// Redisson's key and channel prefixes (wire compatibility; the keyspace
// table in RULES.md), and fairlock's own.
const (
	queuePrefix   = "redisson_lock_queue"
	timeoutPrefix = "redisson_lock_timeout"
	channelPrefix = "redisson_lock__channel"
	latchPrefix   = "redisson_unlock_latch"
	tokenPrefix   = "redisson_lock_token"
	// alivePrefix is ours, not Redisson's: fairlock waiters' liveness
	// deadlines (see scripts/prelude.lua).
	alivePrefix = "fairlock_lock_alive"
	// ClientChannelPrefix + client ID is a channel each client subscribes
	// to while it holds locks, only to hear of reconnects; nothing is
	// published on it.
	ClientChannelPrefix = "fairlock_client:"
	// DescriptionPrefix + client ID, after the key prefix, is a client's
	// description key (describe.lua).
	DescriptionPrefix = "fairlock_client_info:"
)

// Keys holds every key and channel name derived from one lock name.
type Keys struct {
	Hash     string // the lock hash: the (prefixed) name itself
	Queue    string // Redisson's FIFO list of waiting owners
	Timeouts string // Redisson's zset of waiter deadlines
	Alive    string // fairlock's zset of waiter liveness deadlines
	Token    string // the fencing-token counter
	Channel  string // per-owner channels are Channel + ":" + owner field
	Latch    string // unlock latches are Latch + ":" + request ID
}

// prefixName is Redisson's prefixName: "p:name" when name already carries a
// "{", else "p:{name}".
func prefixName(p, name string) string {
	if strings.Contains(name, "{") {
		return p + ":" + name
	}
	return p + ":{" + name + "}"
}

// Derive returns the keys of the lock called name (after the key prefix),
// and false when they would not share one cluster slot (an empty name, an
// empty or unbalanced hash tag).
func Derive(name string) (Keys, bool) {
	if name == "" {
		return Keys{}, false
	}
	k := Keys{
		Hash:     name,
		Queue:    prefixName(queuePrefix, name),
		Timeouts: prefixName(timeoutPrefix, name),
		Alive:    prefixName(alivePrefix, name),
		Token:    prefixName(tokenPrefix, name),
		Channel:  prefixName(channelPrefix, name),
		Latch:    prefixName(latchPrefix, name),
	}
	// A name without braces is every derived key's hash tag, and the lock
	// hash, the name itself, hashes whole: one slot by construction.
	if !strings.ContainsAny(name, "{}") {
		return k, true
	}
	// Every key must hash to the lock hash's slot. Comparing one derived
	// key is not enough: with an empty tag ("{}" when the name starts
	// with "}") each derived key hashes whole, and one may match by chance
	// (found by FuzzLockName).
	slot := backend.Slot(k.Hash)
	for _, key := range []string{k.Queue, k.Timeouts, k.Alive, k.Token, k.Latch + ":x", k.Channel + ":x"} {
		if backend.Slot(key) != slot {
			return k, false
		}
	}
	return k, true
}

// Script returns the five keys every lock script takes, in this order:
// lock hash, queue, Redisson timeouts, fairlock liveness, token counter.
func (k Keys) Script() []string { return k.appendScript(make([]string, 0, 5)) }

// appendScript appends the keys Script returns to dst: the one place that
// orders them.
func (k Keys) appendScript(dst []string) []string {
	return append(dst, k.Hash, k.Queue, k.Timeouts, k.Alive, k.Token)
}

// OwnerChannel is owner's wake-up channel.
func (k Keys) OwnerChannel(owner string) string { return k.Channel + ":" + owner }
