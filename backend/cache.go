package backend

import (
	"context"
	"time"
)

// CachedReader is an optional Backend capability: plain read-only
// commands answered from the client's server-assisted client-side cache
// (CLIENT TRACKING), so that reading a key that has not changed sends
// nothing to the server. Package lock uses it, when the Client asks for
// cached reads (lock.WithCachedReads), for IsLocked, IsHeldBy, HoldCount,
// RemainTTL and Inspect.
//
// Commands: each is a read-only command on one key, the key at cmds[i][1],
// whose reply changes only when that key is written: GET, HGET, HGETALL,
// HLEN, LLEN, LRANGE, ZCARD, ZCOUNT, ZMSCORE, ZSCORE and PEXPIRETIME. Not PTTL or
// TTL (their reply changes with time, which invalidates nothing), not
// scripts (the server does not track EVAL), nothing that writes.
//
// Staleness: a reply may come from the cache. A cached reply is dropped
// when the server reports that its key was written, deleted or expired
// (the server sends that invalidation as it completes the write, so the
// reader learns of it one network delay later), when ttl has passed since
// it was read from the server, when the key's own expiry time passes, and
// with the connection it was read on. So a reply is at most ttl old, and
// normally no older than one network delay behind the server.
//
// Replies have the RESP2 shapes: a map is an array of key, value, key,
// value (order unspecified), a double is a String holding the number in
// decimal, a boolean is 1 or Nil.
type CachedReader interface {
	// CachedRead returns one reply per command, in order, reading the
	// commands it cannot answer from the cache from the server, pipelined.
	// ttl, at least a millisecond, bounds how long a reply stays cached.
	// It returns ErrNotSupported when the client does not cache (a client
	// built with caching disabled, a server without CLIENT TRACKING such
	// as miniredis), an error naming the command for a command outside
	// the list above, and a *ServerError for a command the server refused.
	CachedRead(ctx context.Context, ttl time.Duration, cmds [][]string) ([]Reply, error)
}
