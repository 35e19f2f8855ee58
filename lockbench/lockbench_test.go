package lockbench_test

import (
	"context"
	"errors"
	"math"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lockbench"
)

// fifoLock is an in-process FIFO lock: a ticket queue.
type fifoLock struct {
	mu      sync.Mutex
	held    bool
	waiters []chan struct{}
	token   int64
}

func (f *fifoLock) locker() lockbench.Locker {
	return lockbench.LockerFuncs{
		LockFunc: func(ctx context.Context) (int64, error) {
			f.mu.Lock()
			if !f.held && len(f.waiters) == 0 {
				f.held = true
				f.token++
				t := f.token
				f.mu.Unlock()
				return t, nil
			}
			ch := make(chan struct{})
			f.waiters = append(f.waiters, ch)
			f.mu.Unlock()
			select {
			case <-ch: // handed over: held for us
				f.mu.Lock()
				f.token++
				t := f.token
				f.mu.Unlock()
				return t, nil
			case <-ctx.Done():
				f.mu.Lock()
				defer f.mu.Unlock()
				for i, w := range f.waiters {
					if w == ch {
						f.waiters = append(f.waiters[:i], f.waiters[i+1:]...)
						return 0, ctx.Err()
					}
				}
				// Handed over meanwhile: pass it on.
				f.releaseLocked()
				return 0, ctx.Err()
			}
		},
		UnlockFunc: func(context.Context) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.releaseLocked()
			return nil
		},
	}
}

func (f *fifoLock) releaseLocked() {
	if len(f.waiters) == 0 {
		f.held = false
		return
	}
	close(f.waiters[0])
	f.waiters = f.waiters[1:]
}

func TestContended_CountBoundFIFO(t *testing.T) {
	f := &fifoLock{}
	lockers := []lockbench.Locker{f.locker(), f.locker(), f.locker(), f.locker()}
	run, err := lockbench.Contended(context.Background(), lockers, lockbench.Contention{Acquisitions: 400, Hold: 10 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(run.Acquisitions); got != 400 || run.InWindow() != 400 || len(run.Unfinished) != 0 {
		t.Fatalf("%d acquisitions, %d in window, %d unfinished; want 400, 400, 0", got, run.InWindow(), len(run.Unfinished))
	}
	for i, a := range run.Acquisitions {
		if a.Token != int64(i+1) {
			t.Fatalf("acquisition %d has token %d: not in acquisition order", i, a.Token)
		}
		if i > 0 && a.Acquired.Before(run.Acquisitions[i-1].Acquired) {
			t.Fatalf("acquisition %d is out of order", i)
		}
	}
	if j := run.Fairness(); j < 0.9 {
		t.Errorf("FIFO lock fairness %.3f, want near 1 (per contender %v)", j, run.PerContender())
	}
	if run.Throughput() <= 0 || run.MaxWait() <= 0 || len(run.Handovers()) == 0 {
		t.Errorf("throughput %v, max wait %v, %d hand-overs", run.Throughput(), run.MaxWait(), len(run.Handovers()))
	}
}

func TestContended_TimeBoundDrainsAndCancels(t *testing.T) {
	// A lock that is never released after the first hold: the others wait
	// through the drain and are then cancelled.
	block := make(chan struct{})
	var once sync.Once
	first := true
	var mu sync.Mutex
	l := func() lockbench.Locker {
		return lockbench.LockerFuncs{
			LockFunc: func(ctx context.Context) (int64, error) {
				mu.Lock()
				if first {
					first = false
					mu.Unlock()
					return 0, nil
				}
				mu.Unlock()
				select {
				case <-block:
					return 0, nil
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			},
			UnlockFunc: func(context.Context) error {
				once.Do(func() { time.Sleep(150 * time.Millisecond) })
				return nil
			},
		}
	}
	start := time.Now()
	run, err := lockbench.Contended(context.Background(), []lockbench.Locker{l(), l(), l()},
		lockbench.Contention{Duration: 50 * time.Millisecond, Drain: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("run took %v: not bounded by Duration+Drain", took)
	}
	// The first holder releases after the window and stops; the other two
	// are cancelled at the end of the drain.
	if len(run.Acquisitions) != 1 || run.InWindow() != 1 || len(run.Unfinished) != 2 {
		t.Fatalf("%d acquisitions (%d in window), %d unfinished; want 1 (1), 2", len(run.Acquisitions), run.InWindow(), len(run.Unfinished))
	}
	if run.MaxWait() < 90*time.Millisecond {
		t.Errorf("max wait %v does not count the cancelled waits", run.MaxWait())
	}
}

func TestContended_ErrorEndsRun(t *testing.T) {
	boom := errors.New("boom")
	l := lockbench.LockerFuncs{
		LockFunc:   func(context.Context) (int64, error) { return 0, boom },
		UnlockFunc: func(context.Context) error { return nil },
	}
	_, err := lockbench.Contended(context.Background(), []lockbench.Locker{l, l}, lockbench.Contention{Acquisitions: 10})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
}

func TestOvertakesAndHandovers(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	run := &lockbench.ContendedRun{
		Contenders: 3, Start: at(0), End: at(100),
		Acquisitions: []lockbench.Acquisition{
			{Contender: 0, Called: at(0), Acquired: at(1), Released: at(10)},
			// 2 called after 1 and acquired while 1 still waited: an overtake.
			{Contender: 2, Called: at(3), Acquired: at(12), Released: at(20)},
			{Contender: 1, Called: at(2), Acquired: at(21), Released: at(30)},
			// 1 again, nobody waiting: no overtake, no hand-over.
			{Contender: 1, Called: at(31), Acquired: at(32), Released: at(40)},
		},
		Unfinished: []lockbench.Unfinished{{Contender: 0, Called: at(11), Ended: at(200)}},
	}
	// Acquisition 3 (contender 1 at 32) happens while contender 0 waits
	// since 11, before 1 called at 31: an overtake too.
	if got := run.Overtakes(); got != 2 {
		t.Errorf("overtakes = %d, want 2", got)
	}
	want := []time.Duration{2 * time.Millisecond, 1 * time.Millisecond}
	if got := run.Handovers(); !reflect.DeepEqual(got, want) {
		t.Errorf("hand-overs = %v, want %v", got, want)
	}
	if got := run.MaxWait(); got != 189*time.Millisecond {
		t.Errorf("max wait = %v, want 189ms", got)
	}
	if got := run.PerContender(); !reflect.DeepEqual(got, []int{1, 2, 1}) {
		t.Errorf("per contender = %v", got)
	}
}

func TestJain(t *testing.T) {
	for _, tc := range []struct {
		counts []int
		want   float64
	}{
		{[]int{5, 5, 5, 5}, 1},
		{[]int{8, 0, 0, 0}, 0.25},
		{[]int{}, 0},
		{[]int{0, 0}, 0},
		{[]int{1, 3}, 16.0 / 20},
	} {
		if got := lockbench.Jain(tc.counts); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Jain(%v) = %v, want %v", tc.counts, got, tc.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	var sample []time.Duration
	for i := 100; i >= 1; i-- {
		sample = append(sample, time.Duration(i)*time.Millisecond)
	}
	s := lockbench.Summarize(sample)
	want := lockbench.Summary{Count: 100, Min: time.Millisecond, P50: 50 * time.Millisecond, P90: 90 * time.Millisecond, P99: 99 * time.Millisecond, Max: 100 * time.Millisecond}
	if s != want {
		t.Errorf("Summarize = %+v, want %+v", s, want)
	}
	if (lockbench.Summarize(nil) != lockbench.Summary{}) {
		t.Error("empty sample")
	}
}

func TestUncontendedAndIdleHandover(t *testing.T) {
	f := &fifoLock{}
	res, err := lockbench.Uncontended(context.Background(), f.locker(), 50, 5)
	if err != nil {
		t.Fatal(err)
	}
	if res.Pair.Count != 50 || res.Lock.Count != 50 || res.Pair.P50 < res.Lock.Min {
		t.Errorf("uncontended %+v", res)
	}
	h, err := lockbench.IdleHandover(context.Background(), f.locker(), f.locker(), 3, 5*time.Millisecond, time.Second)
	if err != nil || len(h) != 3 {
		t.Fatalf("idle hand-over %v, %v", h, err)
	}
}

// TestUncontendedInterleaved: each locker makes its warm-up pairs, then
// the lockers take turns in blocks, each turn after one unmeasured pair,
// the order rotating each round and the last block short, and each gets
// its own n pairs measured.
func TestUncontendedInterleaved(t *testing.T) {
	var order []byte
	locker := func(id byte) lockbench.Locker {
		f := &fifoLock{}
		l := f.locker()
		return lockbench.LockerFuncs{
			LockFunc: func(ctx context.Context) (int64, error) {
				order = append(order, id)
				return l.Lock(ctx)
			},
			UnlockFunc: l.Unlock,
		}
	}
	res, err := lockbench.UncontendedInterleaved(context.Background(), []lockbench.Locker{locker('a'), locker('b')}, 5, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Warm-up a, b; turn 0: a (unmeasured) a a, b b b; turn 1 from b:
	// b b b, a a a; turn 2 from a: a a, b b.
	if got, want := string(order), "abaaabbbbbbaaaaabb"; got != want {
		t.Errorf("calls in the order %s, want %s", got, want)
	}
	for i, r := range res {
		if r.Pair.Count != 5 || r.Lock.Count != 5 || r.Unlock.Count != 5 {
			t.Errorf("locker %d: %+v, want 5 pairs measured", i, r)
		}
	}
	if _, err := lockbench.UncontendedInterleaved(context.Background(), nil, 5, 0, 0); err == nil {
		t.Error("a block of 0 pairs accepted")
	}
}

func TestManyLocks(t *testing.T) {
	locks := make([]*fifoLock, 8)
	for i := range locks {
		locks[i] = &fifoLock{}
	}
	run, err := lockbench.ManyLocks(context.Background(), func(w, k int) (lockbench.Locker, error) {
		return locks[k].locker(), nil
	}, lockbench.Spread{Workers: 4, Locks: 8, Acquisitions: 200})
	if err != nil {
		t.Fatal(err)
	}
	if run.Pairs != 200 || run.Lock.Count() != 200 || run.Throughput() <= 0 {
		t.Errorf("%d pairs, %d locks, throughput %v", run.Pairs, run.Lock.Count(), run.Throughput())
	}
	run, err = lockbench.ManyLocks(context.Background(), func(w, k int) (lockbench.Locker, error) {
		return locks[k].locker(), nil
	}, lockbench.Spread{Workers: 4, Locks: 8, Duration: 30 * time.Millisecond})
	if err != nil || run.Pairs == 0 || run.Lock.Count() != run.Pairs || run.Elapsed > time.Second {
		t.Errorf("time-bound run: %d pairs, %d locks in %v, err %v", run.Pairs, run.Lock.Count(), run.Elapsed, err)
	}
}

func TestCheckArrivalOrder(t *testing.T) {
	got := lockbench.CheckArrivalOrder([]string{"w1", "w2", "w3"}, []string{"w1", "w3"})
	want := []lockbench.FIFOViolation{{Position: 2, Expected: "w2", Got: "w3"}, {Position: 3, Expected: "w3", Got: ""}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CheckArrivalOrder = %+v, want %+v", got, want)
	}
}

func TestCheckSnapshots(t *testing.T) {
	// Tokens 11..15 went to a, b, c, a, b.
	acquiredBy := map[int64]string{11: "a", 12: "b", 13: "c", 14: "a", 15: "b"}
	tests := []struct {
		name        string
		snaps       []lockbench.QueueSnapshot
		wantChecked int
		want        []lockbench.FIFOViolation
	}{
		{name: "consistent", wantChecked: 5, snaps: []lockbench.QueueSnapshot{
			{Token: 10, Queue: []string{"a", "b", "c"}},
			{Token: 12, Queue: []string{"c", "a", "b"}},
		}},
		{name: "beyond the run is not checked", wantChecked: 1, snaps: []lockbench.QueueSnapshot{
			{Token: 15, Queue: []string{"c"}},
			{Token: 14, Queue: []string{"b"}},
		}},
		{name: "head overtaken", wantChecked: 3, snaps: []lockbench.QueueSnapshot{
			{Token: 11, Queue: []string{"c", "b"}},
			{Token: 13, Queue: []string{"a"}},
		}, want: []lockbench.FIFOViolation{{Position: 12, Expected: "c", Got: "b"}, {Position: 13, Expected: "b", Got: "c"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checked, got := lockbench.CheckSnapshots(tc.snaps, acquiredBy)
			if checked != tc.wantChecked || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("CheckSnapshots = %d, %+v; want %d, %+v", checked, got, tc.wantChecked, tc.want)
			}
		})
	}
}

// A histogram's percentiles are within 0.1% (or 1 µs) of the exact ones.
func TestHistogram_WithinOneThousandth(t *testing.T) {
	h := lockbench.NewHistogram()
	var sample []time.Duration
	for i := 1000; i >= 1; i-- {
		d := time.Duration(i) * 37 * time.Microsecond
		sample = append(sample, d)
		h.Record(d)
	}
	exact, got := lockbench.Summarize(sample), h.Summary()
	if got.Count != exact.Count {
		t.Fatalf("count %d, want %d", got.Count, exact.Count)
	}
	for _, f := range []struct {
		name      string
		got, want time.Duration
	}{
		{"min", got.Min, exact.Min}, {"p50", got.P50, exact.P50}, {"p90", got.P90, exact.P90},
		{"p99", got.P99, exact.P99}, {"max", got.Max, exact.Max},
	} {
		if diff := math.Abs(float64(f.got - f.want)); diff > max(float64(f.want)/1000, float64(time.Microsecond)) {
			t.Errorf("%s = %v, want %v within 0.1%% or 1µs", f.name, f.got, f.want)
		}
	}
	// Out of range: counted at the bounds.
	h.Record(-time.Second)
	h.Record(2 * time.Hour)
	if s := h.Summary(); s.Count != 1002 || s.Max < 59*time.Minute {
		t.Errorf("out-of-range samples: %+v", s)
	}
	other := lockbench.NewHistogram()
	other.Record(time.Millisecond)
	h.Merge(other)
	if h.Count() != 1003 || (lockbench.NewHistogram().Summary() != lockbench.Summary{}) {
		t.Errorf("merge: %d, empty summary %+v", h.Count(), lockbench.NewHistogram().Summary())
	}
}

// Runs given a Progress count their operations into it as they go.
func TestProgress_CountsOperations(t *testing.T) {
	var p lockbench.Progress
	ctx := lockbench.WithProgress(context.Background(), &p)
	f := &fifoLock{}
	if _, err := lockbench.Uncontended(ctx, f.locker(), 30, 5); err != nil {
		t.Fatal(err)
	}
	if got := p.Done(); got != 30 {
		t.Errorf("uncontended: %d done, want 30 (warm-up not counted)", got)
	}
	p.Reset()
	if _, err := lockbench.Contended(ctx, []lockbench.Locker{f.locker(), f.locker()}, lockbench.Contention{Acquisitions: 50}); err != nil {
		t.Fatal(err)
	}
	if got := p.Done(); got != 50 {
		t.Errorf("contended: %d done, want 50", got)
	}
	p.Reset()
	if _, err := lockbench.ManyLocks(ctx, func(_, _ int) (lockbench.Locker, error) { return f.locker(), nil },
		lockbench.Spread{Workers: 2, Locks: 1, Acquisitions: 40}); err != nil {
		t.Fatal(err)
	}
	if got := p.Done(); got != 40 {
		t.Errorf("many locks: %d done, want 40", got)
	}
}
