package lockbench

import (
	"math"
	"slices"
	"time"
)

// Summary is the distribution of a sample of durations. Percentiles use
// the nearest-rank method; all fields are zero for an empty sample.
type Summary struct {
	Count                   int
	Min, P50, P90, P99, Max time.Duration
}

// Summarize returns the summary of sample, which it sorts.
func Summarize(sample []time.Duration) Summary {
	if len(sample) == 0 {
		return Summary{}
	}
	slices.Sort(sample)
	return Summary{
		Count: len(sample),
		Min:   sample[0],
		P50:   Percentile(sample, 50),
		P90:   Percentile(sample, 90),
		P99:   Percentile(sample, 99),
		Max:   sample[len(sample)-1],
	}
}

// Percentile returns the p-th percentile (0 < p <= 100) of sorted by the
// nearest-rank method, 0 for an empty sample.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// Jain returns Jain's fairness index of counts, (Σx)² / (n·Σx²): 1 when all
// are equal, 1/n when one has everything. It is 0 when all counts are 0
// or there are none.
func Jain(counts []int) float64 {
	var sum, squares float64
	for _, c := range counts {
		sum += float64(c)
		squares += float64(c) * float64(c)
	}
	if squares == 0 {
		return 0
	}
	return sum * sum / (float64(len(counts)) * squares)
}
