package lockbench

import (
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram bounds: durations from 1 µs to 1 h with 3 significant digits,
// about 190 KB per histogram whatever the number of samples.
const (
	histLowest  = int64(time.Microsecond)
	histHighest = int64(time.Hour)
	histDigits  = 3
)

// Histogram is a distribution of durations kept in constant memory, an HDR
// histogram (github.com/HdrHistogram/hdrhistogram-go): every percentile is
// within 0.1% of the exact one (or 1 µs, whichever is larger); a duration
// outside 1 µs to 1 h counts at the nearer bound. Safe for concurrent use.
// Make one with NewHistogram.
type Histogram struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram {
	return &Histogram{h: hdrhistogram.New(histLowest, histHighest, histDigits)}
}

// Record adds one duration.
func (h *Histogram) Record(d time.Duration) {
	v := min(max(int64(d), 0), histHighest)
	h.mu.Lock()
	_ = h.h.RecordValue(v) // cannot fail: v is within the bounds
	h.mu.Unlock()
}

// Merge adds every duration recorded in o.
func (h *Histogram) Merge(o *Histogram) {
	if h == o {
		return
	}
	o.mu.Lock()
	c := o.h.Export()
	o.mu.Unlock()
	h.mu.Lock()
	h.h.Merge(hdrhistogram.Import(c))
	h.mu.Unlock()
}

// Count returns the number of durations recorded.
func (h *Histogram) Count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return int(h.h.TotalCount())
}

// Percentile returns the p-th percentile (0 < p <= 100), 0 when empty.
func (h *Histogram) Percentile(p float64) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.h.TotalCount() == 0 {
		return 0
	}
	return time.Duration(h.h.ValueAtPercentile(p))
}

// Summary returns the distribution's summary; all fields are zero when
// it is empty.
func (h *Histogram) Summary() Summary {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.h.TotalCount()
	if n == 0 {
		return Summary{}
	}
	q := h.h.ValueAtPercentiles([]float64{50, 90, 99})
	return Summary{
		Count: int(n),
		Min:   time.Duration(h.h.Min()),
		P50:   time.Duration(q[50]),
		P90:   time.Duration(q[90]),
		P99:   time.Duration(q[99]),
		Max:   time.Duration(h.h.Max()),
	}
}
