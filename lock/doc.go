// Package lock is a fair (first come, first served), reentrant distributed
// lock on Redis and Valkey, wire-compatible with Redisson's RFairLock: a
// Java service using getFairLock(name) and a Go service using this package
// on the same Redis share one lock.
//
// # Model
//
// A Client wraps a backend.Backend (see rueidisbackend, valkeybackend and
// goredisbackend), which it closes when it closes,
// and has a random client ID. A Mutex is one owner's handle on one lock
// name; the owner field written to Redis is "<clientID>:<ownerID>".
// Goroutines sharing a Mutex share ownership (a second Lock re-enters);
// give each goroutine its own Mutex to exclude each other.
//
// Lock queues the owner and waits in arrival order. Each successful acquire
// returns a Hold with a fencing token that grows with every new holder, and
// a Done channel that closes when the hold ends - on the last Unlock, or
// when the lock is lost (lease ran out, force-unlocked, renewal failing).
// Mutex.Do (and TryDo) runs a function under the lock, with a context
// that ends when the hold does, and unlocks whatever the function does.
//
// # How it works
//
// The lock hash, a FIFO list of waiting owners and a zset of their
// deadlines live in one cluster slot, as Redisson lays them out; Lua
// scripts (package lock/internal/wire) change them atomically. Acquire
// takes the lock when it is free and the owner is first in line, else
// queues the owner once and tells it how long to wait. Queued owners
// re-run acquire at least every third of the waiter timeout, which
// refreshes their deadline (a heartbeat), and are woken earlier by a
// message on their own channel when the lock is released or the head
// changes. A release grants the lock to a live fairlock waiter at the head
// in the same script and says so in that message, so the waiter holds
// without another round trip; the waiter that becomes first in line behind
// it is told how long the hold has left. The head never waits longer than
// the lease left, so a crashed holder's lock passes on without an unlock.
// Time is always the server's. DESIGN.md in the repository says which type
// owns what.
//
// # For operators
//
// WithDescription makes a client say who it is (host, process, a name) for
// Inspect and `fairlock inspect`; Mutex.Extend extends an explicit lease;
// Client.PruneWaiters drops dead waiters; WithCachedReads serves the read
// methods from the client-side cache for dashboards; Mutex.Locker adapts a
// Mutex to sync.Locker. Package lock/inspect holds what Inspect reports,
// package lock/observe what an observer (package otel) is told.
//
// # Guarantees
//
// Mutual exclusion holds while the Redis primary keeps the key and the
// holder keeps its lease: a holder paused for longer than its lease, or a
// failover to a replica that missed the write, can end with two holders.
// Guard the resource with Hold.Token and watch Hold.Done.
package lock
