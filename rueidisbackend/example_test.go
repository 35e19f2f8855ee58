package rueidisbackend_test

import (
	"context"
	"fmt"
	"log"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

// Example is the rueidisbackend quick start. It runs on an embedded miniredis so
// that it runs anywhere; point InitAddress at your Redis instead (and
// drop the two miniredis settings).
func Example() {
	srv, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()

	b, err := rueidisbackend.Dial(rueidis.ClientOption{InitAddress: []string{srv.Addr()},
		DisableCache: true, ForceSingleClient: true}) // miniredis: no CLIENT TRACKING
	if err != nil {
		log.Fatal(err)
	}
	locks, err := lock.NewClient(b) // locks.Close closes b, and b its client
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	m, err := locks.NewMutex("orders") // one owner: one Mutex per goroutine that must exclude others
	if err != nil {
		log.Fatal(err)
	}
	hold, err := m.Lock(ctx) // waits in arrival order until ctx ends
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding, token > 0:", hold.Token() > 0) // pass the token to what you guard
	if err := m.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("hold ended:", hold.Err())
	// Output:
	// holding, token > 0: true
	// hold ended: lock: released
}
