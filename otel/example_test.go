package otel_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"slices"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
	otelapi "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock"
	fairotel "github.com/fairlock/fairlock/otel"
	"github.com/fairlock/fairlock/rueidisbackend"
)

// A traced service: OpenTelemetry is set up once at start-up, the lock
// client gets WithTracing, and each request's lock calls show in its trace
// as fairlock.acquire and fairlock.release spans under the request span.
// The example keeps what it records in memory and prints it; a service
// registers an OTLP exporter and a periodic reader instead.
func Example() {
	spans := tracetest.NewInMemoryExporter()
	reader := sdkmetric.NewManualReader()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer tp.Shutdown(context.Background())
	defer mp.Shutdown(context.Background())
	otelapi.SetTracerProvider(tp)
	otelapi.SetMeterProvider(mp)

	// A service makes b with rueidisbackend.New(rc) on its own Redis; wrap
	// rc with rueidisotel.NewClient to see the lock's EVALSHA commands as
	// children of its spans. The example runs on an embedded server.
	b, stop := exampleBackend()
	defer stop()
	c, err := lock.NewClient(b, fairotel.WithTracing()) // the global providers set above
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// A request handler.
	shipOrder := func(ctx context.Context, id string) error {
		ctx, span := otelapi.Tracer("shipping").Start(ctx, "ship order")
		defer span.End()

		m, err := c.NewMutex("order:" + id)
		if err != nil {
			return err
		}
		h, err := m.TryLock(ctx, 5*time.Second)
		if errors.Is(err, lock.ErrNotAcquired) {
			// The acquire span says outcome timed_out, with the queue
			// position and wait time; its status is not an error.
			return fmt.Errorf("order %s is busy", id)
		}
		if err != nil {
			return err
		}
		defer m.Unlock(context.WithoutCancel(ctx))
		// Pass h.Token() with the writes the lock guards.
		fmt.Println("shipping order", id, "with a fencing token:", h.Token() > 0)
		return nil
	}
	if err := shipOrder(context.Background(), "4711"); err != nil {
		log.Print(err)
	}

	printSpans(spans.GetSpans())
	printMetrics(reader)
	// Output:
	// shipping order 4711 with a fencing token: true
	// ship order
	//   fairlock.acquire operation=TryLock outcome=acquired
	//   fairlock.release operation=Unlock outcome=released
	// fairlock.acquire.attempts {fairlock.operation=TryLock,fairlock.outcome=acquired} 1
	// fairlock.acquire.duration {fairlock.operation=TryLock,fairlock.outcome=acquired} count 1
	// fairlock.hold.duration {fairlock.outcome=released} count 1
}

// One Observer shared by two lock clients, with explicit providers and lock
// names in metrics (for an application with a fixed set of lock names).
// Each client has its own random ID: spans show it in fairlock.owner, but
// metrics leave it out, so both clients - or a process and the one that
// replaces it after a restart - count into the same series.
func ExampleNewObserver() {
	spans := tracetest.NewInMemoryExporter()
	reader := sdkmetric.NewManualReader()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer tp.Shutdown(context.Background())
	defer mp.Shutdown(context.Background())
	obs, err := fairotel.NewObserver(
		fairotel.WithTracerProvider(tp),
		fairotel.WithMeterProvider(mp),
		fairotel.WithLockNameInMetrics(),
	)
	if err != nil {
		log.Fatal(err)
	}

	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	for range 2 {
		// A client takes its backend (Close closes it): one each.
		c, err := lock.NewClient(backendAt(srv.Addr()), lock.WithObserver(obs))
		if err != nil {
			log.Fatal(err)
		}
		m, err := c.NewMutex("orders")
		if err != nil {
			log.Fatal(err)
		}
		if _, err := m.Lock(ctx); err != nil {
			log.Fatal(err)
		}
		if err := m.Unlock(ctx); err != nil {
			log.Fatal(err)
		}
		c.Close()
	}

	owners := make(map[string]bool)
	for _, s := range spans.GetSpans() {
		for _, kv := range s.Attributes {
			if kv.Key == "fairlock.owner" {
				owners[kv.Value.AsString()] = true
			}
		}
	}
	fmt.Println("owners on spans:", len(owners))
	printMetrics(reader)
	// Output:
	// owners on spans: 2
	// fairlock.acquire.attempts {fairlock.lock.name=orders,fairlock.operation=Lock,fairlock.outcome=acquired} 2
	// fairlock.acquire.duration {fairlock.lock.name=orders,fairlock.operation=Lock,fairlock.outcome=acquired} count 2
	// fairlock.hold.duration {fairlock.lock.name=orders,fairlock.outcome=released} count 2
}

// exampleBackend returns a lock backend on an embedded miniredis, so the
// examples run anywhere; the tests of this package use a real Redis.
func exampleBackend() (backend.Backend, func()) {
	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		log.Fatal(err)
	}
	b := backendAt(srv.Addr())
	return b, func() {
		b.Close()
		srv.Close()
	}
}

// backendAt returns a rueidis backend, with its own rueidis client, on the
// embedded server at addr.
func backendAt(addr string) backend.Backend {
	b, err := rueidisbackend.Dial(rueidis.ClientOption{
		InitAddress:       []string{addr},
		DisableCache:      true, // miniredis has no CLIENT TRACKING
		ForceSingleClient: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	return b
}

// printSpans prints ended spans as a tree, children indented under their
// parent in the order they started, with their operation and outcome.
func printSpans(spans tracetest.SpanStubs) {
	slices.SortStableFunc(spans, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
	ended := make(map[trace.SpanID]bool, len(spans))
	for _, s := range spans {
		ended[s.SpanContext.SpanID()] = true
	}
	var walk func(parent trace.SpanID, depth int)
	walk = func(parent trace.SpanID, depth int) {
		for _, s := range spans {
			p := s.Parent.SpanID()
			if p == parent || (depth == 0 && !ended[p]) {
				line := strings.Repeat("  ", depth) + s.Name
				for _, kv := range s.Attributes {
					if kv.Key == "fairlock.operation" || kv.Key == "fairlock.outcome" {
						line += " " + strings.TrimPrefix(string(kv.Key), "fairlock.") + "=" + kv.Value.Emit()
					}
				}
				fmt.Println(line)
				walk(s.SpanContext.SpanID(), depth+1)
			}
		}
	}
	walk(trace.SpanID{}, 0)
}

// printMetrics prints this package's metrics, one line per data point:
// name, attribute set, and the value of a sum or the count of a histogram.
func printMetrics(r *sdkmetric.ManualReader) {
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != fairotel.ScopeName {
			continue
		}
		for _, m := range sm.Metrics {
			set := func(s attribute.Set) string { return "{" + s.Encoded(attribute.DefaultEncoder()) + "}" }
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s %s %d", m.Name, set(p.Attributes), p.Value))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s %s count %d", m.Name, set(p.Attributes), p.Count))
				}
			}
		}
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
}
