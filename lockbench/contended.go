package lockbench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Contention bounds a contended run. At least one of Acquisitions and
// Duration must be set.
type Contention struct {
	// Acquisitions is how many Lock calls the run makes in all (0: no
	// limit). A contender claims one before it calls Lock, so exactly this
	// many happen unless Duration ends the run first.
	Acquisitions int
	// Duration is how long contenders keep starting Lock calls (0: no
	// limit). Contenders still waiting then may take the lock during Drain.
	Duration time.Duration
	// Drain is how long, after Duration, the contenders still waiting may
	// take the lock before their Lock calls are cancelled (default 2 s).
	// Only used with Duration.
	Drain time.Duration
	// Hold is how long each holder keeps the lock (default 0).
	Hold time.Duration
	// UnlockTimeout bounds each Unlock call (default 10 s).
	UnlockTimeout time.Duration
}

// Acquisition is one Lock that returned during a contended run.
type Acquisition struct {
	Contender int       // index of the contender's Locker
	Token     int64     // fencing token, 0 for locks without
	Called    time.Time // Lock called
	Acquired  time.Time // Lock returned
	Released  time.Time // Unlock returned
}

// Unfinished is a Lock call cancelled at the end of the drain.
type Unfinished struct {
	Contender     int
	Called, Ended time.Time
}

// ContendedRun is what a contended run recorded.
type ContendedRun struct {
	Contenders int
	Start      time.Time
	// End closes the measuring window: Start+Duration for a run bounded in
	// time, else when the last contender finished.
	End          time.Time
	Acquisitions []Acquisition // in acquisition order
	Unfinished   []Unfinished
}

// errDrained cancels the Lock calls still waiting when the drain ends.
var errDrained = errors.New("lockbench: run over")

// Contended runs one contender per Locker, all on the same lock: each
// calls Lock, holds for c.Hold, calls Unlock, and repeats until the run
// ends (c). Any error but the cancellation at the end of the drain ends
// the run with that error.
func Contended(ctx context.Context, lockers []Locker, c Contention) (*ContendedRun, error) {
	if c.Acquisitions <= 0 && c.Duration <= 0 {
		return nil, errors.New("lockbench: a contended run needs Acquisitions or Duration")
	}
	if c.Drain <= 0 {
		c.Drain = 2 * time.Second
	}
	if c.UnlockTimeout <= 0 {
		c.UnlockTimeout = 10 * time.Second
	}
	run := &ContendedRun{Contenders: len(lockers)}
	// waitCtx is cancelled by the caller, by a failing contender, or when
	// the drain ends (errDrained).
	waitCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	var (
		claimed    atomic.Int64
		wg         sync.WaitGroup
		acquired   = make([][]Acquisition, len(lockers))
		unfinished = make([]*Unfinished, len(lockers))
		progress   = progressOf(ctx)
	)
	run.Start = time.Now()
	deadline := run.Start.Add(c.Duration)
	claim := func() bool {
		switch {
		case waitCtx.Err() != nil:
			return false
		case c.Duration > 0 && !time.Now().Before(deadline):
			return false
		case c.Acquisitions > 0 && claimed.Add(1) > int64(c.Acquisitions):
			return false
		}
		return true
	}
	for i, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for claim() {
				a := Acquisition{Contender: i, Called: time.Now()}
				tok, err := l.Lock(waitCtx)
				if err != nil {
					if errors.Is(context.Cause(waitCtx), errDrained) {
						unfinished[i] = &Unfinished{Contender: i, Called: a.Called, Ended: time.Now()}
					} else if waitCtx.Err() == nil {
						cancel(fmt.Errorf("contender %d: lock: %w", i, err))
					}
					return
				}
				a.Token, a.Acquired = tok, time.Now()
				if c.Hold > 0 {
					time.Sleep(c.Hold)
				}
				// The lock is released even when the run is being cancelled.
				uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), c.UnlockTimeout)
				err = l.Unlock(uctx)
				ucancel()
				if err != nil {
					cancel(fmt.Errorf("contender %d: unlock: %w", i, err))
					return
				}
				a.Released = time.Now()
				acquired[i] = append(acquired[i], a)
				progress.add()
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	if c.Duration > 0 {
		select {
		case <-done:
		case <-time.After(time.Until(deadline) + c.Drain):
			cancel(errDrained)
			<-done
		}
		run.End = deadline
	} else {
		<-done
		run.End = time.Now()
	}
	if err := context.Cause(waitCtx); err != nil && !errors.Is(err, errDrained) {
		return nil, err
	}
	for i := range lockers {
		run.Acquisitions = append(run.Acquisitions, acquired[i]...)
		if unfinished[i] != nil {
			run.Unfinished = append(run.Unfinished, *unfinished[i])
		}
	}
	sort.Slice(run.Acquisitions, func(a, b int) bool {
		return run.Acquisitions[a].Acquired.Before(run.Acquisitions[b].Acquired)
	})
	if c.Duration <= 0 && len(run.Acquisitions) > 0 {
		if last := run.Acquisitions[len(run.Acquisitions)-1].Released; last.After(run.End) {
			run.End = last
		}
	}
	return run, nil
}

// InWindow returns the number of acquisitions whose Lock returned by End.
func (r *ContendedRun) InWindow() int {
	return sort.Search(len(r.Acquisitions), func(i int) bool { return r.Acquisitions[i].Acquired.After(r.End) })
}

// Throughput returns the acquisitions per second within the window.
func (r *ContendedRun) Throughput() float64 {
	d := r.End.Sub(r.Start)
	if d <= 0 {
		return 0
	}
	return float64(r.InWindow()) / d.Seconds()
}

// PerContender returns each contender's number of acquisitions within the
// window.
func (r *ContendedRun) PerContender() []int {
	counts := make([]int, r.Contenders)
	for _, a := range r.Acquisitions[:r.InWindow()] {
		counts[a.Contender]++
	}
	return counts
}

// Fairness returns Jain's index over PerContender.
func (r *ContendedRun) Fairness() float64 { return Jain(r.PerContender()) }

// Waits returns the wait of every acquisition, in acquisition order.
func (r *ContendedRun) Waits() []time.Duration {
	out := make([]time.Duration, len(r.Acquisitions))
	for i, a := range r.Acquisitions {
		out[i] = a.Acquired.Sub(a.Called)
	}
	return out
}

// MaxWait returns the longest wait, counting Lock calls still waiting when
// the run was cancelled up to their cancellation.
func (r *ContendedRun) MaxWait() time.Duration {
	var m time.Duration
	for _, a := range r.Acquisitions {
		m = max(m, a.Acquired.Sub(a.Called))
	}
	for _, u := range r.Unfinished {
		m = max(m, u.Ended.Sub(u.Called))
	}
	return m
}

// Handovers returns, for each pair of consecutive acquisitions by
// different contenders, the time from the first one's Unlock returning to
// the second one's Lock returning.
func (r *ContendedRun) Handovers() []time.Duration {
	var out []time.Duration
	for i := 1; i < len(r.Acquisitions); i++ {
		prev, next := r.Acquisitions[i-1], r.Acquisitions[i]
		if prev.Contender != next.Contender {
			out = append(out, next.Acquired.Sub(prev.Released))
		}
	}
	return out
}

// Overtakes returns the number of acquisitions by a contender that called
// Lock later than another contender that was still waiting when it
// acquired (at most one per acquisition).
func (r *ContendedRun) Overtakes() int {
	// Each contender's waits, in order; a contender waits for one lock at
	// a time, so they do not overlap.
	type span struct{ from, to time.Time }
	waits := make([][]span, r.Contenders)
	for _, a := range r.Acquisitions {
		waits[a.Contender] = append(waits[a.Contender], span{a.Called, a.Acquired})
	}
	for _, u := range r.Unfinished {
		waits[u.Contender] = append(waits[u.Contender], span{u.Called, u.Ended})
	}
	for _, w := range waits {
		slices.SortFunc(w, func(a, b span) int { return a.from.Compare(b.from) })
	}
	n := 0
	for _, a := range r.Acquisitions {
		for j, w := range waits {
			if j == a.Contender {
				continue
			}
			// The latest wait of j that started before a's: the only one
			// that can still be running when a acquires.
			k := sort.Search(len(w), func(k int) bool { return !w[k].from.Before(a.Called) }) - 1
			if k >= 0 && w[k].to.After(a.Acquired) {
				n++
				break
			}
		}
	}
	return n
}
