package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The committed raw figures, report and summary, relative to this module.
const (
	committedResults = "results.json"
	committedReport  = "../BENCHMARKS.md"
)

func committedRun(t *testing.T) *results {
	t.Helper()
	res, err := readResults(committedResults)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestSummaryWords keeps docs/benchmarks.md something a user reads in two
// minutes: at most summaryWords words as wc -w counts them (runs of
// non-space), also when the run had errors.
func TestSummaryWords(t *testing.T) {
	res := committedRun(t)
	rel := relPath(summaryPath(committedReport), committedReport)
	if n := len(strings.Fields(renderSummary(res, rel))); n > summaryWords {
		t.Errorf("the summary has %d words, more than %d", n, summaryWords)
	}
	res.Errors = []string{"round 1: many locks rueidislock: an error"}
	if n := len(strings.Fields(renderSummary(res, rel))); n > summaryWords {
		t.Errorf("the summary of a run with errors has %d words, more than %d", n, summaryWords)
	}
}

// TestSummaryIsGenerated checks that docs/benchmarks.md is what the
// renderer writes from the committed raw figures: it is never edited by
// hand (go run . -render results.json, see main.go, writes it again).
func TestSummaryIsGenerated(t *testing.T) {
	path := summaryPath(committedReport)
	want := renderSummary(committedRun(t), relPath(path, committedReport))
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s is not what -render writes from %s: render it again", path, committedResults)
	}
}

// TestSummaryTables checks the summary's shape on the committed run: a
// table per scenario, fairlock first, every peer with fairlock's ratio.
func TestSummaryTables(t *testing.T) {
	res := committedRun(t)
	text := renderSummary(res, "../BENCHMARKS.md")
	wantAll(t, "summary", text,
		"## Uncontended\n\n| lock | pair p50 | fairlock ÷ |",
		"## 16 contenders, one lock\n\n| lock | acquisitions/s | fairlock ÷ |",
		"[BENCHMARKS.md](../BENCHMARKS.md)")
	// The cells' shapes, whatever the run measured: fairlock's row has no
	// ratio, a peer's has fairlock's against it.
	for _, re := range []string{
		`(?m)^\| fairlock/rueidis \| [0-9.,]+(µs|ms) \|  \|$`,
		`(?m)^\| rueidislock \| [0-9.,]+(µs|ms) \| [0-9.]+x \|$`,
		`(?m)^\| rueidislock \| [0-9,]+/s \| [0-9.]+x \|$`,
		`(?m)^\| redsync default \| [0-9.,]+(µs|ms|s) \| [0-9.]+x \|$`,
		`(?m)^\| enqueue \| [0-9.,]+(µs|ms) \| [0-9.,]+(µs|ms) \| [0-9.]+x \|$`,
		`(?m)^\| rueidislock \| [0-9.]+% \| [0-9.]+x \|$`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("summary has no line matching %s", re)
		}
	}
	r := &report{results: res}
	for _, p := range r.peers() {
		want := 4 // all but the queue's and the idle waiters'
		if p.Name == reference {
			want = 5 // the idle waiters' too
		}
		if n := strings.Count(text, "\n| "+p.Name+" | "); n != want {
			t.Errorf("%s is in %d tables, want %d", p.Name, n, want)
		}
	}
}
