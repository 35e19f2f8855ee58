package conformance

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/fairlock/fairlock/lock"
)

// Benchmark runs the lock's benchmarks on the backends newBackend returns:
// uncontended Lock+Unlock (two round trips), a FIFO hand-over between
// parallel owners of one lock, and independent locks sharing one client.
// Call it from a backend package's benchmark function.
func Benchmark(b *testing.B, newBackend Factory) {
	newClient := func(b *testing.B) *lock.Client {
		c, err := lock.NewClient(newBackend(b))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return c
	}
	lockUnlock := func(b *testing.B, m *lock.Mutex) bool {
		ctx := context.Background()
		if _, err := m.Lock(ctx); err != nil {
			b.Error(err)
			return false
		}
		if err := m.Unlock(ctx); err != nil {
			b.Error(err)
			return false
		}
		return true
	}
	b.Run("Uncontended", func(b *testing.B) {
		m, _ := newClient(b).NewMutex("bench:uncontended")
		b.ReportAllocs()
		for b.Loop() {
			if !lockUnlock(b, m) {
				return
			}
		}
	})
	b.Run("Contended", func(b *testing.B) {
		c := newClient(b)
		b.SetParallelism(2) // 2 x GOMAXPROCS owners take turns
		b.RunParallel(func(pb *testing.PB) {
			m, _ := c.NewMutex("bench:contended")
			for pb.Next() && lockUnlock(b, m) {
			}
		})
	})
	b.Run("ManyLocks", func(b *testing.B) {
		c := newClient(b)
		var next atomic.Int64
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			m, _ := c.NewMutex(fmt.Sprintf("bench:many:%d", next.Add(1)))
			for pb.Next() && lockUnlock(b, m) {
			}
		})
	})
}
