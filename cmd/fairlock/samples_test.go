package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/redistest"
)

// updateSamples rewrites the output samples in docs/cli.md from this run:
//
//	go test ./cmd/fairlock -run TestDocSamples -update-samples
var updateSamples = flag.Bool("update-samples", false, "rewrite the output samples in docs/cli.md from this run")

const samplesDoc = "../../docs/cli.md"

// sampleMarker precedes each sample block in docs/cli.md.
var sampleMarker = regexp.MustCompile("(?m)^<!-- sample ([a-z-]+): .* -->\n```\n((?s:.*?))```\n")

// TestDocSamples: every output sample in docs/cli.md is what the command
// prints now. Each sample's command runs against a server the test
// starts; its output and the sample must have the same lines, the same
// words and the same layout, figures aside (durations, counts, times,
// IDs and addresses differ from run to run). -update-samples writes this
// run's output into the document instead.
func TestDocSamples(t *testing.T) {
	doc, err := os.ReadFile(samplesDoc)
	if err != nil {
		t.Fatal(err)
	}
	samples := map[string]func(t *testing.T) (shown, out string){
		"demo":             sampleDemo,
		"inspect":          sampleInspect,
		"inspect-redisson": sampleInspectRedisson,
		"bench":            sampleBench,
	}
	seen := map[string]bool{}
	updated := sampleMarker.ReplaceAllStringFunc(string(doc), func(block string) string {
		m := sampleMarker.FindStringSubmatch(block)
		name, body := m[1], m[2]
		run, ok := samples[name]
		if !ok {
			t.Errorf("docs/cli.md: unknown sample %q", name)
			return block
		}
		seen[name] = true
		shown, out := run(t)
		fresh := "$ " + shown + "\n" + out
		if !*updateSamples && shape(body) != shape(fresh) {
			t.Errorf("docs/cli.md sample %q differs from what the command prints now (run go test ./cmd/fairlock -run TestDocSamples -update-samples):\n--- doc\n%s\n--- now\n%s", name, body, fresh)
		}
		return strings.Replace(block, body, fresh, 1)
	})
	for name := range samples {
		if !seen[name] {
			t.Errorf("docs/cli.md has no sample %q", name)
		}
	}
	if *updateSamples {
		if err := os.WriteFile(samplesDoc, []byte(updated), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// figures are the parts of an output that change from run to run.
var figures = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`), "ID"},
	{regexp.MustCompile(`\d+\.\d+\.\d+\.\d+:\d+`), "ADDR"},
	{regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?`), "TIME"},
	{regexp.MustCompile(`\d\d:\d\d:\d\d(\.\d+)?`), "TIME"},
	{regexp.MustCompile(`-?\d[\d,]*(\.\d+)?(ns|µs|ms|s|m|h)(\d+(\.\d+)?(ms|s))?\b`), "DUR"},
	{regexp.MustCompile(`-?\d[\d,]*(\.\d+)?`), "N"},
	{regexp.MustCompile(`[ \t]+`), " "},
}

// shape is an output with its figures replaced and its columns closed
// up, line by line.
func shape(s string) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		for _, f := range figures {
			l = f.re.ReplaceAllString(l, f.with)
		}
		lines = append(lines, strings.TrimSpace(l))
	}
	return strings.Join(lines, "\n")
}

func sampleDemo(t *testing.T) (string, string) {
	r := runCLI(t, nil, "demo")
	if r.code != exitOK {
		t.Fatalf("demo: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	return "go run ./cmd/fairlock demo", r.stdout
}

func sampleBench(t *testing.T) (string, string) {
	s := startRedis(t)
	r := runCLI(t, nil, "bench", "--addr", s.addr, "--ops", "500", "--quiet")
	if r.code != exitOK {
		t.Fatalf("bench: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	return "fairlock bench --addr " + s.addr + " --ops 500", r.stdout
}

// sampleInspect: a lock held twice by one owner, with three waiters.
func sampleInspect(t *testing.T) (string, string) {
	s := startRedis(t)
	c := lockClient(t, s.addr)
	holder := mustMutex(t, c, "orders")
	ctx := context.Background()
	for range 2 { // hold count 2
		if _, err := holder.Lock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i := range 3 {
		m := mustMutex(t, lockClient(t, s.addr), "orders")
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = m.Lock(wctx) // ends when the test cancels wctx
		}()
		redistest.Eventually(t, 10*time.Second, fmt.Sprintf("waiter %d to queue", i+1), func() bool {
			st, err := holder.Inspect(ctx, 0)
			return err == nil && st.QueueLength == i+1
		})
	}
	r := runCLI(t, nil, "inspect", "orders", "--addr", s.addr)
	if r.code != exitOK {
		t.Fatalf("inspect: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	return "fairlock inspect orders --addr " + s.addr, r.stdout
}

// sampleInspectRedisson: a lock in Redisson's keys, held twice, with a
// live waiter, one whose deadline has passed and one with none.
func sampleInspectRedisson(t *testing.T) (string, string) {
	s := startRedis(t)
	seedRedissonLock(t, s.addr)
	r := runCLI(t, nil, "inspect", "invoices", "--addr", s.addr)
	if r.code != exitOK {
		t.Fatalf("inspect: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	return "fairlock inspect invoices --addr " + s.addr, r.stdout
}
