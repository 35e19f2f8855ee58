package lock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

// newExampleClient returns a lock client on an embedded miniredis, so the
// examples run anywhere; use a real Redis in production (and in tests that
// prove behaviour - see package conformance).
func newExampleClient(opts ...lock.Option) (*lock.Client, func()) {
	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		log.Fatal(err)
	}
	b, err := rueidisbackend.Dial(rueidis.ClientOption{
		InitAddress:       []string{srv.Addr()},
		DisableCache:      true, // miniredis has no CLIENT TRACKING
		ForceSingleClient: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	c, err := lock.NewClient(b, opts...) // c.Close closes b, and b its client
	if err != nil {
		log.Fatal(err)
	}
	return c, func() {
		c.Close()
		srv.Close()
	}
}

func Example() {
	locks, done := newExampleClient()
	defer done()
	ctx := context.Background()

	m, err := locks.NewMutex("orders")
	if err != nil {
		log.Fatal(err)
	}
	hold, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding a token:", hold.Token() > 0)

	// The same owner re-enters.
	if _, err := m.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	n, _ := m.HoldCount(ctx)
	fmt.Println("hold count", n)

	// Another owner cannot take it now.
	other, _ := locks.NewMutex("orders")
	_, err = other.TryLock(ctx, 0)
	fmt.Println("other owner:", errors.Is(err, lock.ErrNotAcquired))

	_ = m.Unlock(ctx)
	_ = m.Unlock(ctx)
	<-hold.Done()
	fmt.Println("hold ended:", hold.Err())

	h2, err := other.TryLockWithLease(ctx, 0, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("the next token is larger:", h2.Token() > hold.Token())
	// Output:
	// holding a token: true
	// hold count 2
	// other owner: true
	// hold ended: lock: released
	// the next token is larger: true
}

func ExampleMutex_TryLock() {
	locks, done := newExampleClient()
	defer done()
	ctx := context.Background()

	first, _ := locks.NewMutex("report")
	second, _ := locks.NewMutex("report")
	if _, err := first.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	// Wait at most 50 ms; giving up leaves the queue.
	_, err := second.TryLock(ctx, 50*time.Millisecond)
	fmt.Println(errors.Is(err, lock.ErrNotAcquired))
	st, _ := first.Inspect(ctx, 10)
	fmt.Println("queued:", st.QueueLength)
	// Output:
	// true
	// queued: 0
}

// Do is Lock, the work, and an Unlock that runs whatever the work does.
func ExampleMutex_Do() {
	locks, done := newExampleClient()
	defer done()
	ctx := context.Background()

	m, _ := locks.NewMutex("orders")
	err := m.Do(ctx, func(ctx context.Context, hold *lock.Hold) error {
		// ctx ends, with cause ErrLockLost, if the lock is lost; pass the
		// fencing token to the storage you guard.
		fmt.Println("holding a token:", hold.Token() > 0)
		return nil
	})
	fmt.Println("Do:", err)
	locked, _ := m.IsLocked(ctx)
	fmt.Println("locked after Do:", locked)

	// The work's error comes back; the lock is released all the same.
	errBadOrder := errors.New("bad order")
	err = m.Do(ctx, func(context.Context, *lock.Hold) error { return errBadOrder })
	locked, _ = m.IsLocked(ctx)
	fmt.Println(errors.Is(err, errBadOrder), locked)

	// The lock lost while the work runs: the work's context ends, and Do
	// says so - the work may have overlapped another holder.
	admin, _ := locks.NewMutex("orders")
	err = m.Do(ctx, func(ctx context.Context, _ *lock.Hold) error {
		if _, err := admin.ForceUnlock(ctx); err != nil {
			return err
		}
		<-ctx.Done()
		return context.Cause(ctx)
	})
	fmt.Println("lost:", errors.Is(err, lock.ErrLockLost))
	// Output:
	// holding a token: true
	// Do: <nil>
	// locked after Do: false
	// true false
	// lost: true
}

// TryDo gives up, without running the work, when the lock stays busy.
func ExampleMutex_TryDo() {
	locks, done := newExampleClient()
	defer done()
	ctx := context.Background()

	holder, _ := locks.NewMutex("report")
	if _, err := holder.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	m, _ := locks.NewMutex("report")
	err := m.TryDo(ctx, 50*time.Millisecond, func(context.Context, *lock.Hold) error {
		fmt.Println("not printed: the lock is busy")
		return nil
	})
	fmt.Println(errors.Is(err, lock.ErrNotAcquired))
	// Output:
	// true
}

func ExampleHold_Context() {
	// A short lease: the watchdog, which notices the loss, runs every
	// third of it.
	locks, done := newExampleClient(lock.WithLease(300 * time.Millisecond))
	defer done()
	ctx := context.Background()

	m, _ := locks.NewMutex("job")
	hold, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	work, cancel := hold.Context(ctx)
	defer cancel()

	// Someone else force-unlocks: the holder's context ends with the cause.
	admin, _ := locks.NewMutex("job")
	if _, err := admin.ForceUnlock(ctx); err != nil {
		log.Fatal(err)
	}
	<-work.Done()
	fmt.Println(errors.Is(context.Cause(work), lock.ErrLockLost))
	// Output:
	// true
}

func ExampleMutex_Extend() {
	locks, done := newExampleClient()
	defer done()
	ctx := context.Background()

	m, _ := locks.NewMutex("export")
	hold, err := m.LockWithLease(ctx, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	// The export needs longer: a minute from now.
	if err := m.Extend(ctx, hold, time.Minute); err != nil {
		log.Fatal(err)
	}
	ttl, _ := m.RemainTTL(ctx)
	fmt.Println("lease left over 30s:", ttl > 30*time.Second)

	// An operator force-unlocks it: the next Extend says the lock is lost,
	// and the hold has ended.
	admin, _ := locks.NewMutex("export")
	if _, err := admin.ForceUnlock(ctx); err != nil {
		log.Fatal(err)
	}
	err = m.Extend(ctx, hold, time.Minute)
	fmt.Println("lost:", errors.Is(err, lock.ErrLockLost), errors.Is(hold.Err(), lock.ErrLockLost))
	// Output:
	// lease left over 30s: true
	// lost: true true
}

func ExampleMutex_Locker() {
	locks, done := newExampleClient()
	defer done()

	m, _ := locks.NewMutex("config")
	mu := m.Locker() // a sync.Locker
	mu.Lock()
	fmt.Println("locked")
	mu.Unlock()

	// Unlocking a lock this owner does not hold panics, as sync.Mutex
	// does; the panic value is the error.
	defer func() {
		err, _ := recover().(error)
		fmt.Println("panicked with ErrNotHeld:", errors.Is(err, lock.ErrNotHeld))
	}()
	mu.Unlock()
	// Output:
	// locked
	// panicked with ErrNotHeld: true
}

// Keys names every key a lock keeps its state in, by Redisson's naming
// rule, for ACLs, monitoring or a clean-up by hand.
func ExampleMutex_Keys() {
	locks, done := newExampleClient(lock.WithKeyPrefix("app:"))
	defer done()

	m, err := locks.NewMutex("orders")
	if err != nil {
		log.Fatal(err)
	}
	for _, k := range m.Keys() {
		fmt.Println(k)
	}
	// Output:
	// app:orders
	// redisson_lock_queue:{app:orders}
	// redisson_lock_timeout:{app:orders}
	// fairlock_lock_alive:{app:orders}
	// redisson_lock_token:{app:orders}
}
