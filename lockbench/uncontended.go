package lockbench

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

// UncontendedResult is one owner locking and unlocking a free lock.
type UncontendedResult struct {
	Latency
	// AllocsPerPair and BytesPerPair are heap allocations of the whole
	// process per Lock+Unlock pair (runtime.MemStats), so they include
	// the client library's background goroutines.
	AllocsPerPair, BytesPerPair float64
}

// Uncontended times n Lock+Unlock pairs of l on a free lock after warmup
// unmeasured pairs (script loading, connection set-up). The times are kept
// in histograms (see Histogram), so n may be large.
func Uncontended(ctx context.Context, l Locker, n, warmup int) (UncontendedResult, error) {
	var res UncontendedResult
	if n < 1 {
		return res, fmt.Errorf("lockbench: n must be at least 1, got %d", n)
	}
	if err := warmUp(ctx, l, warmup); err != nil {
		return res, err
	}
	progress := progressOf(ctx)
	h := newLatencyHistograms()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		if err := h.run(ctx, l); err != nil {
			return res, err
		}
		progress.add()
	}
	runtime.ReadMemStats(&after)
	res.Latency = h.summary()
	res.AllocsPerPair = float64(after.Mallocs-before.Mallocs) / float64(n)
	res.BytesPerPair = float64(after.TotalAlloc-before.TotalAlloc) / float64(n)
	return res, nil
}

// Latency is how long each call of a Lock+Unlock pair took.
type Latency struct {
	Lock, Unlock Summary // each call
	Pair         Summary // Lock call to Unlock return
}

// UncontendedInterleaved times n Lock+Unlock pairs of each of lockers,
// each on a free lock of its own, in turns of block pairs: every locker's
// block, then every locker's next block, until each has made n. A machine
// whose speed drifts during a run (another tenant, a frequency change)
// then slows every locker alike, where runs one after the other would
// each meet a different stretch. Each turn starts with one unmeasured
// pair, which meets what the other lockers' turns left (cold caches,
// parked goroutines), and the order of the lockers rotates by one each
// round of turns, so that none always follows the same one. Each locker
// first makes warmup unmeasured pairs. The result is in the order of
// lockers.
func UncontendedInterleaved(ctx context.Context, lockers []Locker, n, block, warmup int) ([]Latency, error) {
	if n < 1 || block < 1 {
		return nil, fmt.Errorf("lockbench: n and block must be at least 1, got %d and %d", n, block)
	}
	hs := make([]latencyHistograms, len(lockers))
	for i, l := range lockers {
		if err := warmUp(ctx, l, warmup); err != nil {
			return nil, err
		}
		hs[i] = newLatencyHistograms()
	}
	progress := progressOf(ctx)
	for turn, done := 0, 0; done < n; turn, done = turn+1, done+block {
		for j := range lockers {
			i := (j + turn) % len(lockers)
			l := lockers[i]
			if err := pair(ctx, l, nil); err != nil {
				return nil, fmt.Errorf("locker %d: %w", i, err)
			}
			for range min(block, n-done) {
				if err := hs[i].run(ctx, l); err != nil {
					return nil, fmt.Errorf("locker %d: %w", i, err)
				}
				progress.add()
			}
		}
	}
	out := make([]Latency, len(lockers))
	for i, h := range hs {
		out[i] = h.summary()
	}
	return out, nil
}

// latencyHistograms records the times of Lock+Unlock pairs.
type latencyHistograms struct{ lock, unlock, pair *Histogram }

func newLatencyHistograms() latencyHistograms {
	return latencyHistograms{NewHistogram(), NewHistogram(), NewHistogram()}
}

// run runs one Lock+Unlock of l and records its times.
func (h latencyHistograms) run(ctx context.Context, l Locker) error {
	var t pairTimes
	if err := pair(ctx, l, &t); err != nil {
		return err
	}
	h.lock.Record(t.lock)
	h.unlock.Record(t.unlock)
	h.pair.Record(t.lock + t.unlock)
	return nil
}

func (h latencyHistograms) summary() Latency {
	return Latency{Lock: h.lock.Summary(), Unlock: h.unlock.Summary(), Pair: h.pair.Summary()}
}

// warmUp runs n unmeasured Lock+Unlock pairs of l.
func warmUp(ctx context.Context, l Locker, n int) error {
	for range n {
		if err := pair(ctx, l, nil); err != nil {
			return err
		}
	}
	return nil
}

// pairTimes is how long one Lock and the Unlock after it took.
type pairTimes struct{ lock, unlock time.Duration }

// pair runs one Lock+Unlock and stores the times in t, if not nil.
func pair(ctx context.Context, l Locker, t *pairTimes) error {
	t0 := time.Now()
	if _, err := l.Lock(ctx); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	t1 := time.Now()
	if err := l.Unlock(ctx); err != nil {
		return fmt.Errorf("unlock: %w", err)
	}
	if t != nil {
		t.lock, t.unlock = t1.Sub(t0), time.Since(t1)
	}
	return nil
}

// IdleHandover measures n hand-overs to a waiter that has been waiting
// idle: holder takes the lock, waiter calls Lock, and after idle the
// holder unlocks. Each result is the time from the holder's Unlock
// returning to the waiter's Lock returning. Every waiter's Lock is bounded
// by maxWait.
func IdleHandover(ctx context.Context, holder, waiter Locker, n int, idle, maxWait time.Duration) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for range n {
		if _, err := holder.Lock(ctx); err != nil {
			return out, fmt.Errorf("holder lock: %w", err)
		}
		type result struct {
			at  time.Time
			err error
		}
		got := make(chan result, 1)
		wctx, cancel := context.WithTimeout(ctx, idle+maxWait)
		go func() {
			_, err := waiter.Lock(wctx)
			got <- result{time.Now(), err}
		}()
		select {
		case <-time.After(idle):
		case r := <-got: // acquired while held: not a mutual exclusion
			cancel()
			return out, fmt.Errorf("waiter returned while the lock was held (err %v)", r.err)
		}
		if err := holder.Unlock(ctx); err != nil {
			cancel()
			<-got
			return out, fmt.Errorf("holder unlock: %w", err)
		}
		released := time.Now()
		r := <-got
		cancel()
		if r.err != nil {
			return out, fmt.Errorf("waiter lock: %w", r.err)
		}
		out = append(out, r.at.Sub(released))
		if err := waiter.Unlock(ctx); err != nil {
			return out, fmt.Errorf("waiter unlock: %w", err)
		}
		progressOf(ctx).add()
	}
	return out, nil
}
