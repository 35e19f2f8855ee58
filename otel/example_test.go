package otel_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/rueidis"
	otelapi "go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fairlock/fairlock/lock"
	fairotel "github.com/fairlock/fairlock/otel"
	"github.com/fairlock/fairlock/rueidisbackend"
)

// A traced service: OpenTelemetry is set up once at start-up, the lock
// client gets WithTracing, and each request's lock calls show in its trace
// as fairlock.acquire and fairlock.release spans under the request span.
// (It needs a Redis at 127.0.0.1:6379, so it is compiled but not run.)
func Example() {
	// Start-up: real services add exporters (OTLP, ...) here.
	tp := sdktrace.NewTracerProvider()
	mp := sdkmetric.NewMeterProvider()
	defer tp.Shutdown(context.Background())
	defer mp.Shutdown(context.Background())
	otelapi.SetTracerProvider(tp)
	otelapi.SetMeterProvider(mp)

	// Wrap the client with rueidisotel.NewClient instead to see the lock's
	// EVALSHA commands as children of its spans.
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer rc.Close()
	b := rueidisbackend.New(rc)
	defer b.Close()
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
		h, err := m.TryLock(ctx, 5*time.Second, lock.WatchdogLease)
		if errors.Is(err, lock.ErrNotAcquired) {
			// The acquire span says outcome timed_out, with the queue
			// position and wait time; its status is not an error.
			return fmt.Errorf("order %s is busy", id)
		}
		if err != nil {
			return err
		}
		defer m.Unlock(context.WithoutCancel(ctx))
		fmt.Println("shipping order", id, "with fencing token", h.Token())
		return nil
	}
	if err := shipOrder(context.Background(), "4711"); err != nil {
		log.Print(err)
	}
}

// One Observer shared by two lock clients, with explicit providers and lock
// names in metrics (for an application with a fixed set of lock names).
func ExampleNewObserver() {
	tp := sdktrace.NewTracerProvider()
	mp := sdkmetric.NewMeterProvider()
	obs, err := fairotel.NewObserver(
		fairotel.WithTracerProvider(tp),
		fairotel.WithMeterProvider(mp),
		fairotel.WithLockNameInMetrics(),
	)
	if err != nil {
		log.Fatal(err)
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer rc.Close()
	b := rueidisbackend.New(rc)
	defer b.Close()
	for range 2 {
		c, err := lock.NewClient(b, lock.WithObserver(obs))
		if err != nil {
			log.Fatal(err)
		}
		defer c.Close()
	}
}
