package lock

import "strings"

// Redisson's key and channel prefixes (wire compatibility; the keyspace table in RULES.md).
const (
	queuePrefix   = "redisson_lock_queue"
	timeoutPrefix = "redisson_lock_timeout"
	channelPrefix = "redisson_lock__channel"
	latchPrefix   = "redisson_unlock_latch"
	tokenPrefix   = "redisson_lock_token"
	// alivePrefix is ours, not Redisson's: fairlock waiters' liveness
	// deadlines (see scripts/prelude.lua).
	alivePrefix = "fairlock_lock_alive"
	// clientChannelPrefix + client ID is a channel each client subscribes
	// to while it holds locks, only to hear of reconnects; nothing is
	// published on it.
	clientChannelPrefix = "fairlock_client:"
)

// keyset holds every key and channel name derived from one lock name.
type keyset struct {
	hash     string // the lock hash: the (prefixed) name itself
	queue    string
	timeouts string
	alive    string
	token    string
	channel  string // per-waiter channels are channel + ":" + owner field
	latch    string // unlock latches are latch + ":" + request ID
}

// prefixName is Redisson's prefixName: "p:name" when name already carries a
// "{", else "p:{name}".
func prefixName(p, name string) string {
	if strings.Contains(name, "{") {
		return p + ":" + name
	}
	return p + ":{" + name + "}"
}

// deriveKeys returns the keys of the lock called name (after the key
// prefix), or ErrInvalidName when they would not share one cluster slot
// (X10).
func deriveKeys(name string) (keyset, bool) {
	if name == "" {
		return keyset{}, false
	}
	k := keyset{
		hash:     name,
		queue:    prefixName(queuePrefix, name),
		timeouts: prefixName(timeoutPrefix, name),
		alive:    prefixName(alivePrefix, name),
		token:    prefixName(tokenPrefix, name),
		channel:  prefixName(channelPrefix, name),
		latch:    prefixName(latchPrefix, name),
	}
	// The derived names all share the queue's hash tag by construction
	// (fixed prefixes without braces), so comparing two slots is enough.
	return k, slot(k.hash) == slot(k.queue)
}

// slot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of the hash
// tag - the part between the first "{" and the next "}" when non-empty -
// or of the whole key, modulo 16384.
func slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) & 16383
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
