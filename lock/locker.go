package lock

import (
	"context"
	"sync"
)

// Locker returns a sync.Locker on this Mutex, for code that wants one (as
// etcd's concurrency.NewLocker). Its Lock is m.Lock and its Unlock is
// m.Unlock, both with context.Background(): the watchdog lease, renewed
// while held. They panic where sync.Mutex cannot fail:
//
//   - Lock panics with the error Mutex.Lock returned. With a context that
//     never ends, Lock waits as long as it takes - through connection
//     errors and server restarts too - so it returns an error only
//     after Close (ErrClosed) or on an error that retrying cannot fix: an
//     error reply from the server (a missing ACL permission, a script
//     error), a reply of the wrong shape (ErrUnexpectedReply), or with
//     WithReplicaAcks an acquire too few replicas acknowledged
//     (ErrNotReplicated).
//   - Unlock panics with the error Mutex.Unlock returned: ErrNotHeld when
//     this owner does not hold the lock (it never locked, or the hold was
//     lost - lease ran out, force-unlocked, deleted), ErrClosed after
//     Close, or the connection error that outlasted Unlock's retries (the
//     hold has then ended, and the lock frees itself within the lease).
//
// The panic value is that error (of type error, with the lock name and
// owner); recover it and test it with errors.Is. The Locker has no way to
// report a lost lock while held: use Lock and Hold.Done for that.
//
// Like the Mutex, the Locker is one owner: a second Lock, from any
// goroutine, re-enters instead of blocking. Give each goroutine that must
// exclude the others its own Mutex (NewMutex is cheap) and its own Locker.
func (m *Mutex) Locker() sync.Locker { return locker{m} }

// locker is the sync.Locker of Mutex.Locker.
type locker struct{ m *Mutex }

func (l locker) Lock() {
	if _, err := l.m.Lock(context.Background()); err != nil {
		panic(err)
	}
}

func (l locker) Unlock() {
	if err := l.m.Unlock(context.Background()); err != nil {
		panic(err)
	}
}
