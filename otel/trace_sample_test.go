package otel_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/redistest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// updateTraceSample rewrites the trace sample in docs/tracing.md from
// this run:
//
//	go test ./otel -run TestDocTraceSample -update-trace-sample
var updateTraceSample = flag.Bool("update-trace-sample", false, "rewrite the trace sample in docs/tracing.md from this run")

const tracingDoc = "../docs/tracing.md"

var traceSampleBlock = regexp.MustCompile("(?m)^<!-- sample trace: .* -->\n```\n((?s:.*?))```\n")

// TestDocTraceSample: the span tree docs/tracing.md shows for a request
// that had to queue is the one the code makes: a request span, the
// acquire span with its attributes and events and the Redis commands under
// it (the attempt that queued, the re-check once subscribed; the lock
// then comes in the release's wake-up message, with no command), and the
// release span with its command. Durations, event times and the fencing
// token aside, which differ from run to run, the sample and this run's
// tree must be the same: the queue position, the wake-up count and the
// hold counts too.
func TestDocTraceSample(t *testing.T) {
	e := newEnv(t, adapters[0])
	holder := e.mutex(e.client(), "orders")
	waiter := e.mutex(e.client(), "orders")
	if _, err := holder.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, req := e.caller.Start(context.Background(), "ship order")
	locked := goLock(t, ctx, waiter)
	// Queued and subscribed: the attempt that queued and the re-check.
	redistest.Eventually(t, 10*time.Second, "the waiter's two attempts", func() bool {
		n := 0
		for _, s := range e.named("EVALSHA") {
			if s.SpanContext.TraceID() == req.SpanContext().TraceID() {
				n++
			}
		}
		return n == 2
	})
	if err := holder.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	locked()
	if err := waiter.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	req.End()
	tree := renderTree(e, req.SpanContext())

	doc, err := os.ReadFile(tracingDoc)
	if err != nil {
		t.Fatal(err)
	}
	m := traceSampleBlock.FindSubmatchIndex(doc)
	if m == nil {
		t.Fatal("docs/tracing.md has no trace sample block")
	}
	sample := string(doc[m[2]:m[3]])
	if *updateTraceSample {
		out := string(doc[:m[2]]) + tree + string(doc[m[3]:])
		if err := os.WriteFile(tracingDoc, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if traceShape(sample) != traceShape(tree) {
		t.Errorf("docs/tracing.md's trace sample differs from the spans made now (run go test ./otel -run TestDocTraceSample -update-trace-sample):\n--- doc\n%s--- now\n%s", sample, tree)
	}
}

// traceTimings are the figures of a trace that differ between runs of the
// same code: durations, event times and fencing tokens.
var traceTimings = regexp.MustCompile(`((?:duration|token)=|at \+)\d+(\.\d+)?`)

func traceShape(s string) string {
	return strings.Join(strings.Fields(traceTimings.ReplaceAllString(s, "${1}N")), " ")
}

// renderTree draws the spans under root (the request), children in the
// order they started.
func renderTree(e *env, root trace.SpanContext) string {
	var b strings.Builder
	for _, s := range e.spans.GetSpans() {
		if s.SpanContext.SpanID() == root.SpanID() {
			b.WriteString(s.Name + "\n")
		}
	}
	renderChildren(&b, e, root, "")
	return b.String()
}

func renderChildren(b *strings.Builder, e *env, parent trace.SpanContext, indent string) {
	kids := e.children(parent)
	slices.SortFunc(kids, func(x, y tracetest.SpanStub) int { return x.StartTime.Compare(y.StartTime) })
	for i, s := range kids {
		branch, more := "├─ ", "│  "
		if i == len(kids)-1 {
			branch, more = "└─ ", "   "
		}
		fmt.Fprintln(b, strings.TrimRight(fmt.Sprintf("%s%s%-18s %s", indent, branch, s.Name, spanFacts(s)), " "))
		if ev := spanEvents(s); ev != "" {
			below := "   " // the events line continues the tree to the children
			if len(e.children(s.SpanContext)) > 0 {
				below = "│  "
			}
			fmt.Fprintf(b, "%s%s%s%-15s events: %s\n", indent, more, below, "", ev)
		}
		renderChildren(b, e, s.SpanContext, indent+more)
	}
}

// spanFacts lists the attributes a reader looks at, without their
// "fairlock." prefix.
func spanFacts(s tracetest.SpanStub) string {
	var out []string
	for _, k := range []attribute.Key{"fairlock.outcome", "fairlock.wait.duration", "fairlock.queue.position", "fairlock.wakeup.count", "fairlock.hold.count", "fairlock.hold.duration", "fairlock.fencing.token"} {
		v, ok := attrs(s)[k]
		if !ok {
			continue
		}
		val := v.Emit()
		if v.Type() == attribute.FLOAT64 {
			val = fmt.Sprintf("%.3f", v.AsFloat64())
		}
		out = append(out, strings.TrimPrefix(string(k), "fairlock.")+"="+val)
	}
	return strings.Join(out, " ")
}

func spanEvents(s tracetest.SpanStub) string {
	var out []string
	for _, ev := range s.Events {
		text := ev.Name
		for _, kv := range ev.Attributes {
			text += fmt.Sprintf(" (%s %s)", strings.TrimPrefix(string(kv.Key), "fairlock."), kv.Value.Emit())
		}
		out = append(out, fmt.Sprintf("%s at +%d ms", text, ev.Time.Sub(s.StartTime).Milliseconds()))
	}
	return strings.Join(out, ", ")
}
