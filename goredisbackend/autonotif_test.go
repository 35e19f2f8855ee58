package goredisbackend_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/goredisbackend"
	"github.com/fairlock/fairlock/redistest"
	"github.com/redis/go-redis/v9"
)

// TestEvalWaitOnAClientOfYoursInAutoMode: replica-acknowledged scripts
// (EvalWait), many at once on new connections, on a Backend made by New from
// a client left in go-redis' default maintenance-notifications mode (auto),
// on a server without maintenance notifications (Redis 7). The handshake of
// each new connection fails, and go-redis v9.23.0 then writes the options its
// client shares with every connection it lends (Conn), each Conn under a lock
// of its own: the race detector reported it in the cluster soak (seed
// 179257987624179, the go-redis-new adapter). EvalWait lends no connection
// when the script and WAIT go out as one pipeline, which the client runs on
// one connection of its pool.
func TestEvalWaitOnAClientOfYoursInAutoMode(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 32})
	defer c.Close()
	b := goredisbackend.New(c)
	defer b.Close()
	s := backend.NewScript("one", "return 1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reply, acked, err := b.EvalWait(ctx, s, []string{"k"}, nil, 0, 100*time.Millisecond)
			if err != nil || reply.Kind != backend.Int || reply.Int != 1 || acked != 0 {
				t.Errorf("EvalWait = %v, %d, %v; want 1, 0 replicas, no error", reply, acked, err)
			}
		}()
	}
	wg.Wait()
}
