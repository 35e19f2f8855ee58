package otel_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock"
	fairotel "github.com/fairlock/fairlock/otel"
	"github.com/fairlock/fairlock/redistest"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/fairlock/fairlock/valkeybackend"
)

// TestMain fails the run when goroutines started by the tests outlive them.
func TestMain(m *testing.M) {
	before := runtime.NumGoroutine()
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(10 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			runtime.Gosched()
			time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<20)
			fmt.Fprintf(os.Stderr, "leaked goroutines: %d before, %d after\n%s\n", before, n, buf[:runtime.Stack(buf, true)])
			code = 1
		}
	}
	os.Exit(code)
}

// adapter connects a lock backend to a server through one Redis client
// library, with the client traced per command the way rueidisotel and
// valkeyotel trace it: one CLIENT span per command, named after it, started
// from the context the command was given.
type adapter struct {
	name string
	dial func(t *testing.T, addr string, tp trace.TracerProvider) backend.Backend
}

var adapters = []adapter{
	{"rueidis", func(t *testing.T, addr string, tp trace.TracerProvider) backend.Backend {
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			t.Fatalf("rueidis.NewClient: %v", err)
		}
		t.Cleanup(rc.Close)
		b := rueidisbackend.New(tracedRueidis{rc, tp.Tracer("rueidis")})
		t.Cleanup(func() { b.Close() })
		return b
	}},
	{"valkey", func(t *testing.T, addr string, tp trace.TracerProvider) backend.Backend {
		vc, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			t.Fatalf("valkey.NewClient: %v", err)
		}
		t.Cleanup(vc.Close)
		b := valkeybackend.New(tracedValkey{vc, tp.Tracer("valkey")})
		t.Cleanup(func() { b.Close() })
		return b
	}},
}

// tracedRueidis stands in for rueidisotel (not available from this
// module's proxy): a span per command from the caller's context.
type tracedRueidis struct {
	rueidis.Client
	tracer trace.Tracer
}

func (c tracedRueidis) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	ctx, span := c.tracer.Start(ctx, cmd.Commands()[0], trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	return c.Client.Do(ctx, cmd)
}

func (c tracedRueidis) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	ctx, span := c.tracer.Start(ctx, "pipeline "+cmds[0].Commands()[0], trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	return c.Client.DoMulti(ctx, cmds...)
}

// tracedValkey stands in for valkeyotel, as tracedRueidis.
type tracedValkey struct {
	valkey.Client
	tracer trace.Tracer
}

func (c tracedValkey) Do(ctx context.Context, cmd valkey.Completed) valkey.ValkeyResult {
	ctx, span := c.tracer.Start(ctx, cmd.Commands()[0], trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	return c.Client.Do(ctx, cmd)
}

func (c tracedValkey) DoMulti(ctx context.Context, cmds ...valkey.Completed) []valkey.ValkeyResult {
	ctx, span := c.tracer.Start(ctx, "pipeline "+cmds[0].Commands()[0], trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	return c.Client.DoMulti(ctx, cmds...)
}

// env is one real Redis, an SDK tracer provider exporting synchronously to
// memory, a manual metric reader, and an Observer reporting to both.
type env struct {
	t      *testing.T
	a      adapter
	srv    *redistest.Server
	spans  *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
	mp     *sdkmetric.MeterProvider
	reader *sdkmetric.ManualReader
	opts   []fairotel.Option // the Observer's
	obs    *fairotel.Observer
	caller trace.Tracer // for the callers' own spans
}

func newEnv(t *testing.T, a adapter, opts ...fairotel.Option) *env {
	t.Helper()
	e := &env{t: t, a: a, srv: redistest.Start(t), spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader()}
	e.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(e.spans))
	e.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))
	t.Cleanup(func() {
		_ = e.tp.Shutdown(context.Background())
		_ = e.mp.Shutdown(context.Background())
	})
	e.opts = append([]fairotel.Option{fairotel.WithTracerProvider(e.tp), fairotel.WithMeterProvider(e.mp)}, opts...)
	e.newObserver()
	e.caller = e.tp.Tracer("caller")
	return e
}

// newObserver replaces the env's Observer with a new one on the same
// providers, as a restarted process makes: clients made after it use it.
func (e *env) newObserver() {
	e.t.Helper()
	obs, err := fairotel.NewObserver(e.opts...)
	if err != nil {
		e.t.Fatalf("NewObserver: %v", err)
	}
	e.obs = obs
}

// client returns a new lock client on the env's server with its Observer;
// it is closed (before its backend and Redis client) when the test ends.
func (e *env) client(opts ...lock.Option) *lock.Client {
	e.t.Helper()
	b := e.a.dial(e.t, e.srv.Addr(), e.tp)
	c, err := lock.NewClient(b, append([]lock.Option{lock.WithObserver(e.obs)}, opts...)...)
	if err != nil {
		e.t.Fatalf("NewClient: %v", err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

func (e *env) mutex(c *lock.Client, name string) *lock.Mutex {
	e.t.Helper()
	m, err := c.NewMutex(name)
	if err != nil {
		e.t.Fatalf("NewMutex: %v", err)
	}
	return m
}

// goLock starts m.Lock(ctx) beside the test, for a waiter; the returned
// func waits for it to return (10 s at most) and fails the test unless it
// got the lock.
func goLock(t *testing.T, ctx context.Context, m *lock.Mutex) (locked func()) {
	done := make(chan error, 1)
	go func() {
		_, err := m.Lock(ctx)
		done <- err
	}()
	return func() {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("waiter Lock: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter did not get the lock")
		}
	}
}

// request starts a caller span, as a traced service's handler would.
func (e *env) request() (context.Context, trace.Span) {
	return e.caller.Start(context.Background(), "request")
}

// named returns the ended spans called name, oldest first.
func (e *env) named(name string) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range e.spans.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// one returns the only ended span called name under parent (any parent
// when parent is invalid).
func (e *env) one(name string, parent trace.SpanContext) tracetest.SpanStub {
	e.t.Helper()
	var out tracetest.SpanStubs
	for _, s := range e.named(name) {
		if !parent.IsValid() || s.Parent.SpanID() == parent.SpanID() {
			out = append(out, s)
		}
	}
	if len(out) != 1 {
		e.t.Fatalf("%d %q spans under %v, want 1; all spans: %s", len(out), name, parent.SpanID(), e.dump())
	}
	return out[0]
}

// children returns the ended spans whose parent is sc.
func (e *env) children(sc trace.SpanContext) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range e.spans.GetSpans() {
		if s.Parent.SpanID() == sc.SpanID() && s.Parent.TraceID() == sc.TraceID() {
			out = append(out, s)
		}
	}
	return out
}

func (e *env) dump() string {
	var b strings.Builder
	for _, s := range e.spans.GetSpans() {
		fmt.Fprintf(&b, "\n  %s span=%s parent=%s %v", s.Name, s.SpanContext.SpanID(), s.Parent.SpanID(), s.Attributes)
	}
	return b.String()
}

// waitSpan polls until a span called name has ended.
func (e *env) waitSpan(name string) tracetest.SpanStub {
	e.t.Helper()
	redistest.Eventually(e.t, 5*time.Second, "span "+name, func() bool { return len(e.named(name)) > 0 })
	return e.named(name)[0]
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(s.Attributes))
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func eventAttrs(s tracetest.SpanStub, name string) []map[attribute.Key]attribute.Value {
	var out []map[attribute.Key]attribute.Value
	for _, ev := range s.Events {
		if ev.Name == name {
			m := make(map[attribute.Key]attribute.Value)
			for _, kv := range ev.Attributes {
				m[kv.Key] = kv.Value
			}
			out = append(out, m)
		}
	}
	return out
}

// checkAttrs compares the span's attributes with want; a nil value in want
// means the attribute must be absent.
func checkAttrs(t *testing.T, s tracetest.SpanStub, want map[attribute.Key]any) {
	t.Helper()
	got := attrs(s)
	for k, w := range want {
		v, ok := got[k]
		switch {
		case w == nil && ok:
			t.Errorf("%s: attribute %s = %v, want absent", s.Name, k, v.Emit())
		case w == nil:
		case !ok:
			t.Errorf("%s: attribute %s missing, want %v", s.Name, k, w)
		case v.AsInterface() != w:
			t.Errorf("%s: attribute %s = %#v, want %#v", s.Name, k, v.AsInterface(), w)
		}
	}
}

// checkWoken checks that an acquire span that waited records its
// wake-ups: at least one fairlock.woken event, the first not a reconnect,
// and fairlock.wakeup.count one per event.
func checkWoken(t *testing.T, s tracetest.SpanStub) {
	t.Helper()
	woken := eventAttrs(s, "fairlock.woken")
	if len(woken) == 0 {
		t.Fatalf("no fairlock.woken event; events %v", s.Events)
	}
	if woken[0]["fairlock.wakeup.reconnect"].AsBool() {
		t.Errorf("first wake-up has reconnect = true, want false")
	}
	if n := attrs(s)["fairlock.wakeup.count"].AsInt64(); n != int64(len(woken)) {
		t.Errorf("fairlock.wakeup.count = %d, want %d (one per fairlock.woken event)", n, len(woken))
	}
}

// collect reads the metrics recorded so far.
func (e *env) collect() map[string]metricdata.Metrics {
	e.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := e.reader.Collect(context.Background(), &rm); err != nil {
		e.t.Fatalf("Collect: %v", err)
	}
	out := make(map[string]metricdata.Metrics)
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != fairotel.ScopeName {
			continue
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// point is one data point reduced to what the tests check: its attributes,
// the value of a sum, or the count and sum of a histogram.
type point struct {
	attrs attribute.Set
	value int64
	count uint64
	sum   float64
}

func points(m metricdata.Metrics) []point {
	var out []point
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			out = append(out, point{attrs: p.Attributes, value: p.Value})
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			out = append(out, point{attrs: p.Attributes, count: p.Count, sum: p.Sum})
		}
	}
	return out
}

// find returns the data point of metric name whose attributes are exactly
// want, and whether there is one.
func (e *env) find(name string, want ...attribute.KeyValue) (point, bool) {
	e.t.Helper()
	set := attribute.NewSet(want...)
	for _, p := range points(e.collect()[name]) {
		if p.attrs.Equals(&set) {
			return p, true
		}
	}
	return point{}, false
}

// waiters returns fairlock.waiter.count without a lock name: the calls
// queued in all the env's clients.
func (e *env) waiters() int64 {
	p, _ := e.find("fairlock.waiter.count")
	return p.value
}
