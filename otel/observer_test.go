package otel_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	otelapi "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/fairlock/fairlock/lock"
	fairotel "github.com/fairlock/fairlock/otel"
	"github.com/fairlock/fairlock/redistest"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

// forEachAdapter runs f once per Redis client library.
func forEachAdapter(t *testing.T, f func(t *testing.T, a adapter)) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) { f(t, a) })
	}
}

// checkRedisChildren checks that the Redis client's command spans nest
// under span: at least one EVALSHA (or EVAL) span has it as parent.
func checkRedisChildren(t *testing.T, e *env, span tracetest.SpanStub) {
	t.Helper()
	for _, c := range e.children(span.SpanContext) {
		if (c.Name == "EVALSHA" || c.Name == "EVAL") && c.SpanKind == trace.SpanKindClient {
			return
		}
	}
	t.Errorf("%s span has no EVALSHA child; spans: %s", span.Name, e.dump())
}

func checkUnset(t *testing.T, s tracetest.SpanStub) {
	t.Helper()
	if s.Status.Code != codes.Unset {
		t.Errorf("%s: status %v %q, want Unset", s.Name, s.Status.Code, s.Status.Description)
	}
	if s.SpanKind != trace.SpanKindInternal {
		t.Errorf("%s: kind %v, want internal", s.Name, s.SpanKind)
	}
}

// TestAcquireRelease_SpansNestUnderCallerAndOverRedis: Lock and Unlock make
// fairlock.acquire and fairlock.release spans under the caller's span, with
// the Redis command spans under them, and the full attribute set.
func TestAcquireRelease_SpansNestUnderCallerAndOverRedis(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter) {
		e := newEnv(t, a)
		m := e.mutex(e.client(), "orders")
		ctx, req := e.request()
		called := time.Now()
		h, err := m.Lock(ctx)
		elapsed := time.Since(called)
		if err != nil {
			t.Fatalf("Lock: %v", err)
		}
		if err := m.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		req.End()

		acq := e.one("fairlock.acquire", req.SpanContext())
		checkUnset(t, acq)
		checkAttrs(t, acq, map[attribute.Key]any{
			"fairlock.lock.name":      "orders",
			"fairlock.owner":          m.Owner(),
			"fairlock.operation":      "Lock",
			"fairlock.outcome":        "acquired",
			"fairlock.hold.count":     int64(1),
			"fairlock.fencing.token":  h.Token(),
			"fairlock.wakeup.count":   int64(0),
			"fairlock.queue.position": nil,
			"error.type":              nil,
		})
		wait := attrs(acq)["fairlock.wait.duration"].AsFloat64()
		if wait <= 0 || wait > elapsed.Seconds() {
			t.Errorf("fairlock.wait.duration = %v s, want in (0, %v s], the time Lock took", wait, elapsed.Seconds())
		}
		if acq.SpanContext.TraceID() != req.SpanContext().TraceID() {
			t.Errorf("acquire span in trace %v, want the caller's %v", acq.SpanContext.TraceID(), req.SpanContext().TraceID())
		}
		checkRedisChildren(t, e, acq)

		rel := e.one("fairlock.release", req.SpanContext())
		checkUnset(t, rel)
		checkAttrs(t, rel, map[attribute.Key]any{
			"fairlock.lock.name":  "orders",
			"fairlock.owner":      m.Owner(),
			"fairlock.operation":  "Unlock",
			"fairlock.outcome":    "released",
			"fairlock.hold.count": int64(0),
		})
		if held := attrs(rel)["fairlock.hold.duration"].AsFloat64(); held <= 0 {
			t.Errorf("fairlock.hold.duration = %v, want > 0", held)
		}
		checkRedisChildren(t, e, rel)
	})
}

// TestAcquireOutcomes: every way an acquire ends is its fairlock.outcome;
// only a real error sets the span status.
func TestAcquireOutcomes(t *testing.T) {
	type result struct {
		holdCount int64
		token     int64 // 0: absent
		position  int64 // 0: absent
	}
	tests := []struct {
		name    string
		op      string
		outcome string
		// act runs the acquire under test with m while other holds the
		// lock when busy is set; it returns what the span must say.
		busy bool
		act  func(t *testing.T, e *env, ctx context.Context, m *lock.Mutex) result
	}{
		{
			name: "reentered", op: "Lock", outcome: "reentered",
			act: func(t *testing.T, e *env, ctx context.Context, m *lock.Mutex) result {
				h, err := m.Lock(context.Background()) // first hold, outside the request
				if err != nil {
					t.Fatalf("Lock: %v", err)
				}
				if _, err := m.Lock(ctx); err != nil {
					t.Fatalf("second Lock: %v", err)
				}
				return result{holdCount: 2, token: h.Token()}
			},
		},
		{
			name: "TryLock timed out", op: "TryLock", outcome: "timed_out", busy: true,
			act: func(t *testing.T, e *env, ctx context.Context, m *lock.Mutex) result {
				_, err := m.TryLock(ctx, 50*time.Millisecond)
				if !errors.Is(err, lock.ErrNotAcquired) {
					t.Fatalf("TryLock = %v, want ErrNotAcquired", err)
				}
				return result{position: 1}
			},
		},
		{
			name: "TryLock no wait, taken", op: "TryLock", outcome: "timed_out", busy: true,
			act: func(t *testing.T, e *env, ctx context.Context, m *lock.Mutex) result {
				_, err := m.TryLock(ctx, 0)
				if !errors.Is(err, lock.ErrNotAcquired) {
					t.Fatalf("TryLock(ctx, 0) = %v, want ErrNotAcquired", err)
				}
				return result{}
			},
		},
		{
			name: "TryLock no wait, acquired", op: "TryLock", outcome: "acquired",
			act: func(t *testing.T, e *env, ctx context.Context, m *lock.Mutex) result {
				h, err := m.TryLockWithLease(ctx, 0, time.Minute)
				if err != nil {
					t.Fatalf("TryLock(ctx, 0): %v", err)
				}
				return result{holdCount: 1, token: h.Token()}
			},
		},
		{
			name: "cancelled while queued", op: "Lock", outcome: "cancelled", busy: true,
			act: func(t *testing.T, e *env, ctx context.Context, m *lock.Mutex) result {
				ctx, cancel := context.WithCancel(ctx)
				defer cancel()
				done := make(chan error, 1)
				go func() {
					_, err := m.Lock(ctx)
					done <- err
				}()
				redistest.Eventually(t, 5*time.Second, "the waiter to queue", func() bool { return e.waiters() == 1 })
				cancel()
				select {
				case err := <-done:
					if !errors.Is(err, context.Canceled) {
						t.Fatalf("Lock = %v, want context.Canceled", err)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("Lock did not return after cancel")
				}
				return result{position: 1}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forEachAdapter(t, func(t *testing.T, a adapter) {
				e := newEnv(t, a)
				c := e.client()
				if tt.busy {
					if _, err := e.mutex(c, "orders").Lock(context.Background()); err != nil {
						t.Fatalf("holder Lock: %v", err)
					}
				}
				m := e.mutex(c, "orders")
				ctx, req := e.request()
				want := tt.act(t, e, ctx, m)
				req.End()

				s := e.one("fairlock.acquire", req.SpanContext())
				checkUnset(t, s)
				w := map[attribute.Key]any{
					"fairlock.operation":  tt.op,
					"fairlock.outcome":    tt.outcome,
					"fairlock.hold.count": want.holdCount,
					"error.type":          nil,
				}
				w["fairlock.fencing.token"] = nil
				if want.token != 0 {
					w["fairlock.fencing.token"] = want.token
				}
				w["fairlock.queue.position"] = nil
				if want.position != 0 {
					w["fairlock.queue.position"] = want.position
				}
				checkAttrs(t, s, w)
				queued := eventAttrs(s, "fairlock.queued")
				switch {
				case want.position == 0 && len(queued) != 0:
					t.Errorf("fairlock.queued events %v, want none", queued)
				case want.position != 0 && (len(queued) != 1 || queued[0]["fairlock.queue.position"].AsInt64() != want.position):
					t.Errorf("fairlock.queued events %v, want one at position %d", queued, want.position)
				}
				checkRedisChildren(t, e, s)

				p, ok := e.find("fairlock.acquire.attempts",
					attribute.String("fairlock.operation", tt.op), attribute.String("fairlock.outcome", tt.outcome))
				if !ok || p.value != 1 {
					t.Errorf("fairlock.acquire.attempts{%s,%s} = %v (found %v), want 1", tt.op, tt.outcome, p.value, ok)
				}
				h, ok := e.find("fairlock.acquire.duration",
					attribute.String("fairlock.operation", tt.op), attribute.String("fairlock.outcome", tt.outcome))
				if !ok || h.count != 1 || h.sum <= 0 {
					t.Errorf("fairlock.acquire.duration{%s,%s} = count %d sum %v (found %v), want one positive", tt.op, tt.outcome, h.count, h.sum, ok)
				}
				if n := e.waiters(); n != 0 {
					t.Errorf("fairlock.waiter.count = %d after the call, want 0", n)
				}
			})
		})
	}
}

// TestAcquireWoken: a queued waiter's span records when it joined the queue
// and each wake-up, and fairlock.waiter.count counts it while it waits.
func TestAcquireWoken(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter) {
		e := newEnv(t, a)
		holderClient, waiterClient := e.client(), e.client()
		holder := e.mutex(holderClient, "orders")
		if _, err := holder.Lock(context.Background()); err != nil {
			t.Fatalf("holder Lock: %v", err)
		}
		waiter := e.mutex(waiterClient, "orders")
		ctx, req := e.request()
		locked := goLock(t, ctx, waiter)
		redistest.Eventually(t, 5*time.Second, "fairlock.waiter.count = 1", func() bool { return e.waiters() == 1 })
		if m := e.collect()["fairlock.waiter.count"]; m.Unit != "{waiter}" || m.Description == "" {
			t.Errorf("fairlock.waiter.count unit %q description %q, want {waiter} and a description", m.Unit, m.Description)
		}
		// Unlock only after the waiter's second acquire attempt, made once
		// subscribed, has returned: from then on the waiter waits for a
		// wake-up (or its 1.7 s heartbeat), so the unlock's message wakes it.
		redistest.Eventually(t, 5*time.Second, "the waiter's second attempt", func() bool {
			n := 0
			for _, s := range e.spans.GetSpans() {
				if s.SpanContext.TraceID() == req.SpanContext().TraceID() && (s.Name == "EVALSHA" || s.Name == "EVAL") {
					n++
				}
			}
			return n >= 2
		})
		if err := holder.Unlock(context.Background()); err != nil {
			t.Fatalf("holder Unlock: %v", err)
		}
		locked()
		req.End()

		s := e.one("fairlock.acquire", req.SpanContext())
		checkUnset(t, s)
		checkAttrs(t, s, map[attribute.Key]any{
			"fairlock.outcome":        "acquired",
			"fairlock.queue.position": int64(1),
			"fairlock.hold.count":     int64(1),
		})
		checkWoken(t, s)
		if q := eventAttrs(s, "fairlock.queued"); len(q) != 1 || s.Events[0].Name != "fairlock.queued" {
			t.Errorf("events %v, want fairlock.queued first and once", s.Events)
		}
		if n := e.waiters(); n != 0 {
			t.Errorf("fairlock.waiter.count = %d after the acquire, want 0", n)
		}
	})
}

// TestAcquireError: a failure that is neither a timeout nor the caller's
// cancellation is outcome error with status Error and error.type. (Lock
// rides through connection errors until its context ends; a TryLock with no wait,
// which does not retry, returns the connection error.)
func TestAcquireError(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter) {
		e := newEnv(t, a)
		c := e.client()
		m, other := e.mutex(c, "orders"), e.mutex(c, "orders")
		// Scripts are loaded and the connection is up; then the server dies.
		if _, err := m.TryLockWithLease(context.Background(), 0, time.Minute); err != nil {
			t.Fatalf("TryLock(ctx, 0): %v", err)
		}
		e.srv.Kill(t)
		ctx, req := e.request()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := other.TryLockWithLease(cctx, 0, time.Minute); err == nil || cctx.Err() != nil {
			t.Fatalf("TryLock(ctx, 0) on a dead server = %v (ctx %v), want a connection error before the deadline", err, cctx.Err())
		}
		req.End()

		s := e.one("fairlock.acquire", req.SpanContext())
		if s.Status.Code != codes.Error || s.Status.Description == "" {
			t.Errorf("status %v %q, want Error with the message", s.Status.Code, s.Status.Description)
		}
		checkAttrs(t, s, map[attribute.Key]any{"fairlock.outcome": "error", "fairlock.hold.count": int64(0)})
		et := attrs(s)["error.type"].AsString()
		t.Logf("error.type %q, status %q", et, s.Status.Description)
		if et != "connection_closed" && et != "network" {
			t.Errorf("error.type = %q, want connection_closed or network", et)
		}
		if _, ok := e.find("fairlock.acquire.attempts", attribute.String("fairlock.operation", "TryLock"),
			attribute.String("fairlock.outcome", "error"), attribute.String("error.type", et)); !ok {
			t.Errorf("no fairlock.acquire.attempts point with outcome error and error.type %q", et)
		}
	})
}

// TestReleaseOutcomes: Unlock and ForceUnlock spans and their outcomes; a
// release of a lock not held is an outcome, not an error.
func TestReleaseOutcomes(t *testing.T) {
	tests := []struct {
		name      string
		op        string
		outcome   string
		holdCount any // after the call; nil: absent
		lockFirst int // Locks before the call
		act       func(ctx context.Context, m *lock.Mutex) error
	}{
		{"Unlock of a reentered hold", "Unlock", "released", int64(1), 2,
			func(ctx context.Context, m *lock.Mutex) error { return m.Unlock(ctx) }},
		{"Unlock by non-holder", "Unlock", "not_held", nil, 0,
			func(ctx context.Context, m *lock.Mutex) error {
				if err := m.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
					return errors.Join(errors.New("want ErrNotHeld"), err)
				}
				return nil
			}},
		{"ForceUnlock of a held lock", "ForceUnlock", "released", nil, 1,
			func(ctx context.Context, m *lock.Mutex) error {
				if ok, err := m.ForceUnlock(ctx); !ok || err != nil {
					return errors.Join(errors.New("want released"), err)
				}
				return nil
			}},
		{"ForceUnlock of a free lock", "ForceUnlock", "not_held", nil, 0,
			func(ctx context.Context, m *lock.Mutex) error {
				if ok, err := m.ForceUnlock(ctx); ok || err != nil {
					return errors.Join(errors.New("want not released"), err)
				}
				return nil
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forEachAdapter(t, func(t *testing.T, a adapter) {
				e := newEnv(t, a)
				m := e.mutex(e.client(), "orders")
				for range tt.lockFirst {
					if _, err := m.Lock(context.Background()); err != nil {
						t.Fatalf("Lock: %v", err)
					}
				}
				ctx, req := e.request()
				if err := tt.act(ctx, m); err != nil {
					t.Fatalf("%s: %v", tt.op, err)
				}
				req.End()
				s := e.one("fairlock.release", req.SpanContext())
				checkUnset(t, s)
				checkAttrs(t, s, map[attribute.Key]any{
					"fairlock.operation":     tt.op,
					"fairlock.outcome":       tt.outcome,
					"fairlock.hold.count":    tt.holdCount,
					"fairlock.hold.duration": nil,
					"error.type":             nil,
				})
				checkRedisChildren(t, e, s)
			})
		})
	}
}

// TestLeaseLost: a hold lost in the background makes a fairlock.lease.lost
// span, child of the acquire span that began the hold, with status Error and
// a fairlock.lease.lost event, and counts in fairlock.lease.lost and
// fairlock.hold.duration{outcome=lost}.
func TestLeaseLost(t *testing.T) {
	tests := []struct {
		name string
		opts []lock.Option
		// lose acquires with m (under ctx) and makes the hold get lost.
		lose func(t *testing.T, e *env, ctx context.Context, m *lock.Mutex, c *lock.Client) *lock.Hold
	}{
		{"lease ran out", nil,
			func(t *testing.T, e *env, ctx context.Context, m *lock.Mutex, c *lock.Client) *lock.Hold {
				h, err := m.LockWithLease(ctx, 200*time.Millisecond)
				if err != nil {
					t.Fatalf("LockWithLease: %v", err)
				}
				return h
			}},
		{"force-unlocked elsewhere, found by the watchdog", []lock.Option{lock.WithLease(300 * time.Millisecond)},
			func(t *testing.T, e *env, ctx context.Context, m *lock.Mutex, c *lock.Client) *lock.Hold {
				h, err := m.Lock(ctx)
				if err != nil {
					t.Fatalf("Lock: %v", err)
				}
				if ok, err := e.mutex(c, "orders").ForceUnlock(context.Background()); !ok || err != nil {
					t.Fatalf("ForceUnlock = %v, %v", ok, err)
				}
				return h
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forEachAdapter(t, func(t *testing.T, a adapter) {
				e := newEnv(t, a)
				c := e.client(tt.opts...)
				m := e.mutex(c, "orders")
				ctx, req := e.request()
				h := tt.lose(t, e, ctx, m, c)
				req.End()
				select {
				case <-h.Done():
				case <-time.After(10 * time.Second):
					t.Fatal("hold not lost")
				}
				if !errors.Is(h.Err(), lock.ErrLockLost) {
					t.Fatalf("Hold.Err = %v, want ErrLockLost", h.Err())
				}
				lost := e.waitSpan("fairlock.lease.lost")
				acq := e.one("fairlock.acquire", req.SpanContext())
				if lost.Parent.SpanID() != acq.SpanContext.SpanID() || lost.SpanContext.TraceID() != acq.SpanContext.TraceID() {
					t.Errorf("lease.lost span parent %v in trace %v, want the acquire span %v in %v",
						lost.Parent.SpanID(), lost.SpanContext.TraceID(), acq.SpanContext.SpanID(), acq.SpanContext.TraceID())
				}
				if lost.Status.Code != codes.Error || !strings.Contains(lost.Status.Description, "lock lost") {
					t.Errorf("status %v %q, want Error with the loss", lost.Status.Code, lost.Status.Description)
				}
				checkAttrs(t, lost, map[attribute.Key]any{
					"fairlock.lock.name":     "orders",
					"fairlock.owner":         m.Owner(),
					"fairlock.fencing.token": h.Token(),
					"error.type":             "lock_lost",
				})
				if held := attrs(lost)["fairlock.hold.duration"].AsFloat64(); held <= 0 {
					t.Errorf("fairlock.hold.duration = %v, want > 0", held)
				}
				ev := eventAttrs(lost, "fairlock.lease.lost")
				if len(ev) != 1 || ev[0]["fairlock.fencing.token"].AsInt64() != h.Token() || ev[0]["exception.message"].AsString() == "" {
					t.Errorf("fairlock.lease.lost events %v, want one with the token and message", ev)
				}
				if m := e.collect()["fairlock.lease.lost"]; m.Unit != "{lease}" || m.Description == "" {
					t.Errorf("fairlock.lease.lost unit %q description %q, want {lease} and a description", m.Unit, m.Description)
				}
				if p, ok := e.find("fairlock.lease.lost"); !ok || p.value != 1 {
					t.Errorf("fairlock.lease.lost = %d (found %v), want 1", p.value, ok)
				}
				if p, ok := e.find("fairlock.hold.duration", attribute.String("fairlock.outcome", "lost")); !ok || p.count != 1 {
					t.Errorf("fairlock.hold.duration{lost} count = %d (found %v), want 1", p.count, ok)
				}
			})
		})
	}
}

// TestRenewals: the watchdog's renewals are counted, and failed ones carry
// error.type.
func TestRenewals(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter) {
		e := newEnv(t, a)
		c := e.client(lock.WithLease(300 * time.Millisecond))
		m := e.mutex(c, "orders")
		if _, err := m.Lock(context.Background()); err != nil {
			t.Fatalf("Lock: %v", err)
		}
		redistest.Eventually(t, 5*time.Second, "a successful renewal", func() bool {
			p, _ := e.find("fairlock.lease.renewals")
			return p.value >= 1
		})
		e.srv.Pause(t)
		redistest.Eventually(t, 10*time.Second, "a failed renewal", func() bool {
			for _, p := range points(e.collect()["fairlock.lease.renewals"]) {
				if v, ok := p.attrs.Value("error.type"); ok && v.AsString() == "timeout" && p.value >= 1 {
					return true
				}
			}
			return false
		})
		e.srv.Resume(t)
		if m := e.collect()["fairlock.lease.renewals"]; m.Unit != "{renewal}" || m.Description == "" {
			t.Errorf("fairlock.lease.renewals unit %q description %q, want {renewal} and a description", m.Unit, m.Description)
		}
		for _, s := range e.spans.GetSpans() {
			if s.InstrumentationScope.Name == fairotel.ScopeName && s.Name != "fairlock.acquire" && s.Name != "fairlock.lease.lost" {
				t.Errorf("unexpected span %q: renewals make no spans", s.Name)
			}
		}
	})
}

// TestMetricsReleaseAndNames: instrument names, units and kinds, and the
// lock name only with WithLockNameInMetrics.
func TestMetricsReleaseAndNames(t *testing.T) {
	for _, withName := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "WithLockNameInMetrics"}[withName], func(t *testing.T) {
			var opts []fairotel.Option
			if withName {
				opts = append(opts, fairotel.WithLockNameInMetrics())
			}
			e := newEnv(t, adapters[0], opts...)
			m := e.mutex(e.client(), "orders")
			if _, err := m.Lock(context.Background()); err != nil {
				t.Fatalf("Lock: %v", err)
			}
			if err := m.Unlock(context.Background()); err != nil {
				t.Fatalf("Unlock: %v", err)
			}
			ms := e.collect()
			for name, unit := range map[string]string{
				"fairlock.acquire.duration": "s",
				"fairlock.acquire.attempts": "{attempt}",
				"fairlock.hold.duration":    "s",
			} {
				if got, ok := ms[name]; !ok || got.Unit != unit || got.Description == "" {
					t.Errorf("metric %s: present %v, unit %q, description %q; want unit %q and a description", name, ok, got.Unit, got.Description, unit)
				}
			}
			var nameAttr []attribute.KeyValue
			if withName {
				nameAttr = append(nameAttr, attribute.String("fairlock.lock.name", "orders"))
			}
			if p, ok := e.find("fairlock.hold.duration", append(nameAttr, attribute.String("fairlock.outcome", "released"))...); !ok || p.count != 1 || p.sum <= 0 {
				t.Errorf("fairlock.hold.duration{released} = count %d sum %v (found %v), want one positive", p.count, p.sum, ok)
			}
			if _, ok := e.find("fairlock.acquire.attempts", append(nameAttr,
				attribute.String("fairlock.operation", "Lock"), attribute.String("fairlock.outcome", "acquired"))...); !ok {
				t.Errorf("no fairlock.acquire.attempts point with attributes %v", nameAttr)
			}
		})
	}
}

// TestDefaultsAreGlobalProviders: with no options the Observer reports to
// the global providers.
func TestDefaultsAreGlobalProviders(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	otelapi.SetTracerProvider(tp)
	t.Cleanup(func() {
		otelapi.SetTracerProvider(tracenoop.NewTracerProvider())
		_ = tp.Shutdown(context.Background())
	})
	obs, err := fairotel.NewObserver()
	if err != nil {
		t.Fatalf("NewObserver: %v", err)
	}

	srv := redistest.Start(t)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	t.Cleanup(rc.Close)
	b := rueidisbackend.New(rc)
	t.Cleanup(func() { b.Close() })
	c, err := lock.NewClient(b, lock.WithObserver(obs))
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	m, _ := c.NewMutex("orders")
	if _, err := m.TryLockWithLease(context.Background(), 0, time.Minute); err != nil {
		t.Fatalf("TryLock(ctx, 0): %v", err)
	}
	got := spans.GetSpans()
	if len(got) != 1 || got[0].Name != "fairlock.acquire" || got[0].InstrumentationScope.Name != fairotel.ScopeName {
		t.Fatalf("spans %v, want one fairlock.acquire from scope %s", got, fairotel.ScopeName)
	}
}

// TestOptionErrors: invalid options fail NewObserver, and WithTracing
// passes the failure on to lock.NewClient.
func TestOptionErrors(t *testing.T) {
	tests := []struct {
		name string
		opts []fairotel.Option
		want string
	}{
		{"nil tracer provider", []fairotel.Option{fairotel.WithTracerProvider(nil)}, "nil tracer provider"},
		{"nil meter provider", []fairotel.Option{fairotel.WithMeterProvider(nil)}, "nil meter provider"},
		{"nil option", []fairotel.Option{nil}, "nil option"},
	}
	srv := redistest.Start(t)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	t.Cleanup(rc.Close)
	b := rueidisbackend.New(rc)
	t.Cleanup(func() { b.Close() })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if o, err := fairotel.NewObserver(tt.opts...); err == nil || o != nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewObserver = %v, %v; want nil and an error containing %q", o, err, tt.want)
			}
			c, err := lock.NewClient(b, fairotel.WithTracing(tt.opts...))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewClient(WithTracing) error = %v, want one containing %q", err, tt.want)
			}
			if c != nil {
				c.Close()
			}
		})
	}
	c, err := lock.NewClient(b, fairotel.WithTracing(fairotel.WithTracerProvider(tracenoop.NewTracerProvider())))
	if err != nil {
		t.Fatalf("NewClient(WithTracing(valid)) = %v", err)
	}
	c.Close()
}

// TestSpansDescribeTheClient: the spans of a client created with
// lock.WithDescription say who holds or waits (name, host, pid); those of
// a client without one carry none of these attributes.
func TestSpansDescribeTheClient(t *testing.T) {
	e := newEnv(t, adapters[0])
	dc := e.client(lock.WithDescription("orders-api"))
	described := e.mutex(dc, "orders")
	plain := e.mutex(e.client(), "orders")
	host, _ := os.Hostname()
	for _, m := range []*lock.Mutex{described, plain} {
		ctx, req := e.request()
		if _, err := m.Lock(ctx); err != nil {
			t.Fatalf("Lock: %v", err)
		}
		if err := m.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		req.End()
		want := map[attribute.Key]any{"fairlock.client.name": nil, "fairlock.client.host": nil, "fairlock.client.pid": nil}
		if m == described {
			want = map[attribute.Key]any{
				"fairlock.client.name": "orders-api",
				"fairlock.client.host": host,
				"fairlock.client.pid":  int64(os.Getpid()),
			}
		}
		checkAttrs(t, e.one("fairlock.acquire", req.SpanContext()), want)
		checkAttrs(t, e.one("fairlock.release", req.SpanContext()), want)
	}
}
