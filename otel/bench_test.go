package otel_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/lock/observe"
	fairotel "github.com/fairlock/fairlock/otel"
	"github.com/fairlock/fairlock/redistest"
	"github.com/fairlock/fairlock/rueidisbackend"
)

// benchUncontended measures Lock plus Unlock of a free lock against a real
// Redis, on a client built with opts.
func benchUncontended(b *testing.B, opts ...lock.Option) {
	srv := redistest.Start(b)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	if err != nil {
		b.Fatalf("rueidis.NewClient: %v", err)
	}
	defer rc.Close()
	be := rueidisbackend.New(rc)
	defer be.Close()
	c, err := lock.NewClient(be, opts...)
	if err != nil {
		b.Fatalf("NewClient: %v", err)
	}
	defer c.Close()
	m, err := c.NewMutex("bench")
	if err != nil {
		b.Fatalf("NewMutex: %v", err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Lock(ctx); err != nil {
			b.Fatalf("Lock: %v", err)
		}
		if err := m.Unlock(ctx); err != nil {
			b.Fatalf("Unlock: %v", err)
		}
	}
}

func observer(b *testing.B, opts ...fairotel.Option) lock.Option {
	o, err := fairotel.NewObserver(opts...)
	if err != nil {
		b.Fatalf("NewObserver: %v", err)
	}
	return lock.WithObserver(o)
}

// BenchmarkUncontendedNoObserver is the baseline: no observer at all.
func BenchmarkUncontendedNoObserver(b *testing.B) { benchUncontended(b) }

// BenchmarkUncontendedWithObserverNoopProvider: an Observer on the
// OpenTelemetry no-op tracer and meter providers.
func BenchmarkUncontendedWithObserverNoopProvider(b *testing.B) {
	benchUncontended(b, observer(b,
		fairotel.WithTracerProvider(tracenoop.NewTracerProvider()),
		fairotel.WithMeterProvider(metricnoop.NewMeterProvider())))
}

// BenchmarkUncontendedWithObserverGlobalDefault: an Observer on the global
// providers with none set, as otel.WithTracing() in a service that does
// not configure OpenTelemetry.
func BenchmarkUncontendedWithObserverGlobalDefault(b *testing.B) {
	benchUncontended(b, observer(b))
}

// BenchmarkUncontendedWithObserverSDK: an Observer on the SDK, sampling
// every span (exported synchronously to a no-op exporter) and aggregating
// every metric.
func BenchmarkUncontendedWithObserverSDK(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer tp.Shutdown(context.Background())
	defer mp.Shutdown(context.Background())
	benchUncontended(b, observer(b, fairotel.WithTracerProvider(tp), fairotel.WithMeterProvider(mp)))
}

// BenchmarkObserverCallsOnly measures what the Observer adds to one
// uncontended acquire plus release, without Redis: the calls package lock
// makes, with the results it passes.
func BenchmarkObserverCallsOnly(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer tp.Shutdown(context.Background())
	defer mp.Shutdown(context.Background())
	for _, bc := range []struct {
		name string
		opts []fairotel.Option
	}{
		{"NoopProvider", []fairotel.Option{
			fairotel.WithTracerProvider(tracenoop.NewTracerProvider()),
			fairotel.WithMeterProvider(metricnoop.NewMeterProvider())}},
		{"GlobalDefault", nil},
		{"SDK", []fairotel.Option{fairotel.WithTracerProvider(tp), fairotel.WithMeterProvider(mp)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			o, err := fairotel.NewObserver(bc.opts...)
			if err != nil {
				b.Fatalf("NewObserver: %v", err)
			}
			owner := "6f1c1a52-3c2e-4b8e-9d57-0e2b8f7c1a90:1"
			acq := observe.Call{Op: observe.OpLock, Name: "bench", Owner: owner}
			rel := observe.Call{Op: observe.OpUnlock, Name: "bench", Owner: owner}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_, at := o.StartAcquire(ctx, acq)
				at.End(observe.AcquireResult{Outcome: observe.OutcomeAcquired, Wait: 50 * time.Microsecond, HoldCount: 1, Token: 7})
				_, rt := o.StartRelease(ctx, rel)
				rt.End(observe.ReleaseResult{Outcome: observe.OutcomeReleased, Held: 50 * time.Microsecond})
			}
		})
	}
}
