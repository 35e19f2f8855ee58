package otel_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/fairlock/fairlock/lock"
	fairotel "github.com/fairlock/fairlock/otel"
	"github.com/fairlock/fairlock/redistest"
)

// series returns, per metric, the attribute sets of its data points,
// encoded as "{k=v,...}" and sorted.
func series(ms map[string]metricdata.Metrics) map[string][]string {
	out := make(map[string][]string, len(ms))
	for name, m := range ms {
		for _, p := range points(m) {
			out[name] = append(out[name], "{"+p.attrs.Encoded(attribute.DefaultEncoder())+"}")
		}
		slices.Sort(out[name])
	}
	return out
}

// total is the sum of a counter's data points over all attribute sets.
func (e *env) total(metric string) int64 {
	var n int64
	for _, p := range points(e.collect()[metric]) {
		n += p.value
	}
	return n
}

// recordEveryMetric drives client c through one of each thing the Observer
// measures on lock "orders": an acquire, a re-entry, a TryLock with no wait that
// finds it taken, a queued waiter, a watchdog renewal, two releases and a
// lease that runs out.
func recordEveryMetric(t *testing.T, e *env, c *lock.Client) {
	t.Helper()
	ctx := context.Background()
	holder, other := e.mutex(c, "orders"), e.mutex(c, "orders")
	renewals, lost := e.total("fairlock.lease.renewals"), e.total("fairlock.lease.lost")
	for range 2 {
		if _, err := holder.Lock(ctx); err != nil {
			t.Fatalf("holder Lock: %v", err)
		}
	}
	if _, err := other.TryLockWithLease(ctx, 0, time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryLock(ctx, 0) on a held lock = %v, want ErrNotAcquired", err)
	}
	locked := goLock(t, ctx, other)
	redistest.Eventually(t, 5*time.Second, "the waiter to queue", func() bool {
		for _, p := range points(e.collect()["fairlock.waiter.count"]) {
			if p.value == 1 {
				return true
			}
		}
		return false
	})
	redistest.Eventually(t, 5*time.Second, "a watchdog renewal", func() bool { return e.total("fairlock.lease.renewals") > renewals })
	for range 2 {
		if err := holder.Unlock(ctx); err != nil {
			t.Fatalf("holder Unlock: %v", err)
		}
	}
	locked()
	if err := other.Unlock(ctx); err != nil {
		t.Fatalf("waiter Unlock: %v", err)
	}
	h, err := holder.LockWithLease(ctx, 100*time.Millisecond)
	if err != nil {
		t.Fatalf("LockWithLease: %v", err)
	}
	select {
	case <-h.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lease did not run out")
	}
	redistest.Eventually(t, 5*time.Second, "fairlock.lease.lost", func() bool { return e.total("fairlock.lease.lost") > lost })
}

// TestMetricSeries_BoundedAcrossRestarts (issue 13): a restarted process -
// a new Observer and a new client with a new random ID - records into the
// series the first one made on the same lock and no others. Every metric's
// attribute sets are built from operation, outcome, error.type and, when
// asked for, the lock name; never from the client ID or owner.
func TestMetricSeries_BoundedAcrossRestarts(t *testing.T) {
	want := map[string][]string{
		"fairlock.acquire.attempts": {
			"{fairlock.operation=Lock,fairlock.outcome=acquired}",
			"{fairlock.operation=Lock,fairlock.outcome=reentered}",
			"{fairlock.operation=TryLock,fairlock.outcome=timed_out}",
		},
		"fairlock.hold.duration":  {"{fairlock.outcome=lost}", "{fairlock.outcome=released}"},
		"fairlock.lease.lost":     {"{}"},
		"fairlock.lease.renewals": {"{}"},
		"fairlock.waiter.count":   {"{}"},
	}
	want["fairlock.acquire.duration"] = want["fairlock.acquire.attempts"]

	for _, withName := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "WithLockNameInMetrics"}[withName], func(t *testing.T) {
			var opts []fairotel.Option
			if withName {
				opts = append(opts, fairotel.WithLockNameInMetrics())
			}
			e := newEnv(t, adapters[0], opts...)
			var ids []string
			for run := 1; run <= 2; run++ {
				if run > 1 {
					e.newObserver()
				}
				c := e.client(lock.WithLease(1500 * time.Millisecond))
				ids = append(ids, c.ID())
				recordEveryMetric(t, e, c)
				if err := c.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				got := series(e.collect())
				for metric, sets := range want {
					if withName {
						sets = withLockName(sets, "orders")
					}
					if !slices.Equal(got[metric], sets) {
						t.Errorf("run %d: %s attribute sets\n  got  %v\n  want %v", run, metric, got[metric], sets)
					}
				}
				if len(got) != len(want) {
					t.Errorf("run %d: metrics %v, want the %d of the table", run, got, len(want))
				}
			}
			if ids[0] == ids[1] {
				t.Fatalf("both clients have ID %s; the test needs a new one", ids[0])
			}
			for metric, sets := range series(e.collect()) {
				for _, set := range sets {
					for _, id := range ids {
						if strings.Contains(set, id) {
							t.Errorf("%s set %s carries client ID %s", metric, set, id)
						}
					}
				}
			}
		})
	}
}

// withLockName adds fairlock.lock.name=name to each encoded set.
func withLockName(sets []string, name string) []string {
	out := make([]string, len(sets))
	for i, s := range sets {
		kvs := strings.Split(strings.Trim(s, "{}"), ",")
		kvs = slices.DeleteFunc(append(kvs, "fairlock.lock.name="+name), func(kv string) bool { return kv == "" })
		slices.Sort(kvs)
		out[i] = "{" + strings.Join(kvs, ",") + "}"
	}
	slices.Sort(out)
	return out
}

// TestLockNamesInMetrics_Capped: with WithLockNameInMetrics the first
// MaxMetricLockNames names get their own series and later ones share
// fairlock.lock.name _OTHER, so per-entity names cannot grow the series
// without bound.
func TestLockNamesInMetrics_Capped(t *testing.T) {
	const extra = 5
	e := newEnv(t, adapters[0], fairotel.WithLockNameInMetrics())
	c := e.client()
	for i := range fairotel.MaxMetricLockNames + extra {
		if _, err := e.mutex(c, fmt.Sprintf("order:%d", i)).TryLockWithLease(context.Background(), 0, time.Minute); err != nil {
			t.Fatalf("TryLock(ctx, 0) order:%d: %v", i, err)
		}
	}
	named := make(map[string]int64)
	for _, p := range points(e.collect()["fairlock.acquire.attempts"]) {
		v, _ := p.attrs.Value("fairlock.lock.name")
		named[v.AsString()] += p.value
	}
	if len(named) != fairotel.MaxMetricLockNames+1 {
		t.Errorf("%d lock names in fairlock.acquire.attempts, want %d and _OTHER", len(named), fairotel.MaxMetricLockNames)
	}
	for i := range fairotel.MaxMetricLockNames {
		if n := named[fmt.Sprintf("order:%d", i)]; n != 1 {
			t.Errorf("order:%d counted %d times, want 1", i, n)
		}
	}
	if n := named["_OTHER"]; n != extra {
		t.Errorf("_OTHER counted %d times, want %d (the names past the cap)", n, extra)
	}
}
