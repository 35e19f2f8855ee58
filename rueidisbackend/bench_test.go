package rueidisbackend_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

func benchClient(b *testing.B) *lock.Client {
	srv := redistest.Start(b)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	if err != nil {
		b.Fatal(err)
	}
	be := rueidisbackend.New(rc)
	c, err := lock.NewClient(be)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		c.Close()
		be.Close()
		rc.Close()
	})
	return c
}

// BenchmarkUncontended is one Lock+Unlock on a free lock: two round trips.
func BenchmarkUncontended(b *testing.B) {
	c := benchClient(b)
	m, _ := c.NewMutex("bench:uncontended")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := m.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkContended has every parallel goroutine (its own owner) take
// turns on one lock: the cost of a FIFO hand-over.
func BenchmarkContended(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		m, _ := c.NewMutex("bench:contended")
		for pb.Next() {
			if _, err := m.Lock(ctx); err != nil {
				b.Error(err)
				return
			}
			if err := m.Unlock(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkManyLocks has parallel goroutines lock distinct names: the
// throughput of independent locks sharing one client (auto-pipelining).
func BenchmarkManyLocks(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	var next atomic.Int64
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		m, _ := c.NewMutex(fmt.Sprintf("bench:many:%d", next.Add(1)))
		for pb.Next() {
			if _, err := m.Lock(ctx); err != nil {
				b.Error(err)
				return
			}
			if err := m.Unlock(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
