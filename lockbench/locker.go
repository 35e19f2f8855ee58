package lockbench

import (
	"context"

	"github.com/fairlock/fairlock/lock"
)

// Locker is one contender's handle on one lock. Implementations must be
// safe to use from one goroutine at a time; each contender gets its own.
type Locker interface {
	// Lock waits for the lock as long as ctx allows and returns the
	// acquisition's fencing token, or 0 for a lock that issues none.
	Lock(ctx context.Context) (token int64, err error)
	// Unlock releases the lock taken by the last Lock.
	Unlock(ctx context.Context) error
}

// LockerFuncs is a Locker made of two functions, for adapting a lock
// library in a few lines.
type LockerFuncs struct {
	LockFunc   func(ctx context.Context) (int64, error)
	UnlockFunc func(ctx context.Context) error
}

// Lock calls LockFunc.
func (f LockerFuncs) Lock(ctx context.Context) (int64, error) { return f.LockFunc(ctx) }

// Unlock calls UnlockFunc.
func (f LockerFuncs) Unlock(ctx context.Context) error { return f.UnlockFunc(ctx) }

// MutexLocker adapts a fairlock Mutex: Lock is m.Lock (watchdog lease),
// its token the Hold's fencing token, Unlock is m.Unlock.
func MutexLocker(m *lock.Mutex) Locker {
	return LockerFuncs{
		LockFunc: func(ctx context.Context) (int64, error) {
			h, err := m.Lock(ctx)
			if err != nil {
				return 0, err
			}
			return h.Token(), nil
		},
		UnlockFunc: m.Unlock,
	}
}
