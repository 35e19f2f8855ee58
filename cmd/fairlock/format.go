package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fairlock/fairlock/lockbench"
)

// fmtDur formats d for a table: about three significant digits, in µs, ms
// or s. The bounds are where rounding would reach the next unit.
func fmtDur(d time.Duration) string {
	switch a := d.Abs(); {
	case a == 0:
		return "0"
	case a < 999_500*time.Nanosecond:
		return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 0, 64) + "µs"
	case a < 9_995*time.Microsecond:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 2, 64) + "ms"
	case a < 999_950*time.Microsecond:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
	case a < 59_995*time.Millisecond:
		return strconv.FormatFloat(float64(d)/float64(time.Second), 'f', 2, 64) + "s"
	default:
		return d.Round(time.Second).String()
	}
}

// fmtSince formats an offset from the start of a run: "1.234s".
func fmtSince(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) + "s"
}

// fmtRate formats a rate per second with thousands separators: "12,345/s".
func fmtRate(perSec float64) string {
	return fmtInt(int64(math.Round(perSec))) + "/s"
}

// fmtInt formats n with thousands separators.
func fmtInt(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

// millis converts d to milliseconds for JSON, to the microsecond.
func millis(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}

// durStats summarises a sample of durations; JSON fields are milliseconds.
type durStats struct {
	Count int     `json:"count"`
	Min   float64 `json:"min_ms"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`

	min, p50, p99, max time.Duration
}

// summarise returns the statistics of sample (which it sorts), as
// lockbench computes them.
func summarise(sample []time.Duration) durStats {
	return statsOf(lockbench.Summarize(sample))
}

// String formats the statistics for a summary line.
func (s durStats) String() string {
	if s.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("min %s  p50 %s  max %s  (n=%d)", fmtDur(s.min), fmtDur(s.p50), fmtDur(s.max), s.Count)
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table aligns tab-separated columns, like tabwriter, and writes the lines
// without trailing blanks when flushed.
type table struct {
	*tabwriter.Writer
	buf bytes.Buffer
	out io.Writer
}

func newTable(out io.Writer) *table {
	t := &table{out: out}
	t.Writer = tabwriter.NewWriter(&t.buf, 0, 0, 2, ' ', 0)
	return t
}

// Flush writes the aligned table to its output.
func (t *table) Flush() error {
	if err := t.Writer.Flush(); err != nil {
		return err
	}
	for line := range strings.Lines(t.buf.String()) {
		if _, err := io.WriteString(t.out, strings.TrimRight(line, " \n")+"\n"); err != nil {
			return err
		}
	}
	t.buf.Reset()
	return nil
}
