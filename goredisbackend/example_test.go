package goredisbackend_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock/goredisbackend"
	"github.com/fairlock/fairlock/lock"
	"github.com/redis/go-redis/v9"
)

// Example is a go-redis quick start. It runs on an embedded miniredis so
// that it runs anywhere; point Addr at your Redis instead.
func Example() {
	srv, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	b := goredisbackend.Dial(&redis.UniversalOptions{
		Addrs:                 []string{srv.Addr()},
		ContextTimeoutEnabled: true, // lock deadlines bound every call
	})
	locks, err := lock.NewClient(b) // locks.Close closes b, and b its client
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	ctx := context.Background()
	m, err := locks.NewMutex("orders")
	if err != nil {
		log.Fatal(err)
	}
	hold, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding, token > 0:", hold.Token() > 0)

	other, _ := locks.NewMutex("orders")
	_, err = other.TryLock(ctx, 0)
	fmt.Println("other owner refused:", errors.Is(err, lock.ErrNotAcquired))

	if err := m.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	<-hold.Done()
	fmt.Println("hold ended:", errors.Is(hold.Err(), lock.ErrReleased))
	// Output:
	// holding, token > 0: true
	// other owner refused: true
	// hold ended: true
}
