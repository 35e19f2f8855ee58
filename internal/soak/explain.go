package soak

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// Slice shrinks the history to what a violation needs: the operations on
// its lock from 3 s before it to 1 s after - or from sliceBefore before
// the first operation it names, when that is earlier (a leftover found at
// quiescence is named by its owner's last acquire, seconds before) - the
// holds on that lock alive then, and the faults in that window.
func Slice(h *History, v Violation) string {
	from, to := v.At-3*time.Second, v.At+time.Second
	for _, op := range h.Ops() {
		if slices.Contains(v.Ops, op.ID) {
			from = min(from, op.Call-sliceBefore)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "=== %v\n", v)
	for _, f := range h.Faults() {
		if f.Start <= to && f.End >= from {
			fmt.Fprintf(&b, "  fault %s on %s [%s, %s]\n", f.Kind, f.Target, ms(f.Start), ms(f.End))
		}
	}
	for _, hd := range h.Holds() {
		done, _ := hd.Done()
		if hd.Lock == v.Lock && hd.Acquired <= to && (done == 0 || done >= from) {
			fmt.Fprintf(&b, "  %v\n", hd)
		}
	}
	for _, op := range h.Ops() {
		if (op.Lock == v.Lock || op.Kind == KindClose) && op.Call <= to && op.Return >= from {
			fmt.Fprintf(&b, "  %v\n", op)
		}
	}
	return b.String()
}

// sliceBefore is how far before the first operation a violation names its
// slice begins: past the attempt bound and the cleanup after it
// (cleanupBound), which an earlier call of the owner's may still have
// been in.
const sliceBefore = 10 * time.Second

// Explain is every violation with its slice.
func Explain(h *History, vs []Violation) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d\n", h.Seed)
	for _, v := range vs {
		b.WriteString(Slice(h, v))
	}
	return b.String()
}

// logNotices prints the notice latencies by kind and client: p50, p99,
// max.
func logNotices(t *testing.T, lat []Latency) {
	by := map[string][]time.Duration{}
	for _, l := range lat {
		k := fmt.Sprintf("%s on %s", l.Kind, strings.SplitN(l.Client, "#", 2)[0])
		by[k] = append(by[k], l.D)
	}
	var keys []string
	for k := range by {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ds := by[k]
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		q := func(p float64) time.Duration { return ds[int(p*float64(len(ds)-1))] }
		t.Logf("notice %-36s n=%-4d p50 %-8s p99 %-8s max %s", k, len(ds), ms(q(0.5)), ms(q(0.99)), ms(ds[len(ds)-1]))
	}
}

// logFirsts prints, for each checker that failed, how many violations it
// found and after how many operations and how long its first one showed.
func logFirsts(t *testing.T, h *History, vs []Violation) {
	first := map[string]Violation{}
	count := map[string]int{}
	var checks []string
	for _, v := range vs {
		if _, ok := first[v.Check]; !ok {
			first[v.Check] = v
			checks = append(checks, v.Check)
		}
		count[v.Check]++
	}
	ops := h.Ops()
	for _, c := range checks {
		v := first[c]
		n := 0
		for _, op := range ops {
			if op.Return <= v.At {
				n++
			}
		}
		t.Logf("check %-9s %4d violations; the first after %d operations, %.1f s: %v", c, count[c], n, v.At.Seconds(), v)
	}
}
