package lockbench

import (
	"context"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Spread bounds a many-locks run: Workers goroutines lock and unlock locks
// picked at random from Locks. At least one of Acquisitions and Duration
// must be set.
type Spread struct {
	Workers, Locks int
	// Acquisitions is how many Lock+Unlock pairs the run makes in all (0:
	// no limit).
	Acquisitions int
	// Duration is how long workers keep starting pairs (0: no limit);
	// Lock calls still waiting Drain later (default 2 s) are cancelled.
	Duration, Drain time.Duration
}

// ManyLocksRun is what a many-locks run recorded.
type ManyLocksRun struct {
	Elapsed time.Duration // from the start until the last pair ended
	Pairs   int           // completed Lock+Unlock pairs
	Lock    *Histogram    // the time of every completed Lock call
}

// Throughput returns the completed Lock+Unlock pairs per second.
func (r *ManyLocksRun) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Pairs) / r.Elapsed.Seconds()
}

// ManyLocks runs s.Workers workers, each locking and unlocking locks picked
// at random from s.Locks until the run ends (s). newLocker returns worker
// w's Locker for lock k; it is called once per pair the worker first
// uses, from the worker's goroutine.
func ManyLocks(ctx context.Context, newLocker func(w, k int) (Locker, error), s Spread) (*ManyLocksRun, error) {
	switch {
	case s.Workers < 1 || s.Locks < 1:
		return nil, fmt.Errorf("lockbench: a many-locks run needs workers and locks, got %d and %d", s.Workers, s.Locks)
	case s.Acquisitions <= 0 && s.Duration <= 0:
		return nil, errors.New("lockbench: a many-locks run needs Acquisitions or Duration")
	}
	if s.Drain <= 0 {
		s.Drain = 2 * time.Second
	}
	waitCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		claimed  atomic.Int64
		pairs    atomic.Int64
		wg       sync.WaitGroup
		latency  = NewHistogram()
		progress = progressOf(ctx)
	)
	seed := uint64(time.Now().UnixNano())
	start := time.Now()
	deadline := start.Add(s.Duration)
	for w := range s.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := mathrand.New(mathrand.NewPCG(seed, uint64(w)))
			lockers := make(map[int]Locker)
			for waitCtx.Err() == nil &&
				(s.Duration <= 0 || time.Now().Before(deadline)) &&
				(s.Acquisitions <= 0 || claimed.Add(1) <= int64(s.Acquisitions)) {
				k := rng.IntN(s.Locks)
				l, ok := lockers[k]
				if !ok {
					var err error
					if l, err = newLocker(w, k); err != nil {
						cancel(err)
						return
					}
					lockers[k] = l
				}
				t0 := time.Now()
				if _, err := l.Lock(waitCtx); err != nil {
					if waitCtx.Err() == nil {
						cancel(fmt.Errorf("worker %d: lock %d: %w", w, k, err))
					}
					return
				}
				locked := time.Since(t0)
				uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				err := l.Unlock(uctx)
				ucancel()
				if err != nil {
					cancel(fmt.Errorf("worker %d: unlock %d: %w", w, k, err))
					return
				}
				latency.Record(locked)
				pairs.Add(1)
				progress.add()
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	if s.Duration > 0 {
		select {
		case <-done:
		case <-time.After(time.Until(deadline) + s.Drain):
			cancel(errDrained)
			<-done
		}
	} else {
		<-done
	}
	run := &ManyLocksRun{Elapsed: time.Since(start), Pairs: int(pairs.Load()), Lock: latency}
	if err := context.Cause(waitCtx); err != nil && !errors.Is(err, errDrained) {
		return nil, err
	}
	return run, nil
}
