package otel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	otelapi "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/lock/observe"
)

// ScopeName is the instrumentation scope of the tracer and meter: use it to
// select this package's telemetry in views and samplers.
const ScopeName = "github.com/fairlock/fairlock/otel"

// Span and event names.
const (
	spanAcquire    = "fairlock.acquire"
	spanRelease    = "fairlock.release"
	spanLeaseLost  = "fairlock.lease.lost"
	eventQueued    = "fairlock.queued"
	eventWoken     = "fairlock.woken"
	eventLeaseLost = "fairlock.lease.lost"
)

// Attribute keys.
const (
	keyLockName      = attribute.Key("fairlock.lock.name")
	keyOwner         = attribute.Key("fairlock.owner")
	keyClientName    = attribute.Key("fairlock.client.name")
	keyClientHost    = attribute.Key("fairlock.client.host")
	keyClientPID     = attribute.Key("fairlock.client.pid")
	keyOperation     = attribute.Key("fairlock.operation")
	keyOutcome       = attribute.Key("fairlock.outcome")
	keyWaitDuration  = attribute.Key("fairlock.wait.duration")
	keyQueuePosition = attribute.Key("fairlock.queue.position")
	keyWakeups       = attribute.Key("fairlock.wakeup.count")
	keyReconnect     = attribute.Key("fairlock.wakeup.reconnect")
	keyHoldCount     = attribute.Key("fairlock.hold.count")
	keyHoldDuration  = attribute.Key("fairlock.hold.duration")
	keyToken         = attribute.Key("fairlock.fencing.token")
	keyErrorType     = semconv.ErrorTypeKey
)

// Metric names.
const (
	metricAcquireDuration = "fairlock.acquire.duration"
	metricAcquireAttempts = "fairlock.acquire.attempts"
	metricHoldDuration    = "fairlock.hold.duration"
	metricLeaseLost       = "fairlock.lease.lost"
	metricRenewals        = "fairlock.lease.renewals"
	metricWaiters         = "fairlock.waiter.count"
)

// Values of fairlock.outcome on fairlock.hold.duration.
const (
	holdEndReleased = "released"
	holdEndLost     = "lost"
)

// durationBuckets are the histogram bucket boundaries in seconds: the
// semantic-convention HTTP buckets stretched to five minutes, since a lock
// wait or hold often lasts far longer than a request.
var durationBuckets = []float64{
	0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300,
}

type config struct {
	tp            trace.TracerProvider
	mp            metric.MeterProvider
	nameInMetrics bool
}

// Option configures an Observer.
type Option func(*config) error

// WithTracerProvider makes the Observer create spans with tp (default: the
// global provider, otel.GetTracerProvider, read when the Observer is made;
// the global provider forwards to one set later with otel.SetTracerProvider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) error {
		if tp == nil {
			return errors.New("fairlock/otel: nil tracer provider")
		}
		c.tp = tp
		return nil
	}
}

// WithMeterProvider makes the Observer record metrics with mp (default: the
// global provider, otel.GetMeterProvider, which like the tracer provider
// forwards to one set later).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) error {
		if mp == nil {
			return errors.New("fairlock/otel: nil meter provider")
		}
		c.mp = mp
		return nil
	}
}

// WithLockNameInMetrics adds the fairlock.lock.name attribute to every
// metric (default off). Spans always carry it; metrics do not by default
// because lock names are often per entity ("order:4711"), and one time
// series per name would grow without bound. Turn it on when your
// application uses a small, fixed set of lock names. As a guard against
// turning it on for per-entity names, an Observer gives their own series
// to the first 50 distinct names it sees (MaxMetricLockNames); later
// names are recorded as fairlock.lock.name "_OTHER".
func WithLockNameInMetrics() Option {
	return func(c *config) error {
		c.nameInMetrics = true
		return nil
	}
}

// MaxMetricLockNames is how many distinct lock names an Observer made with
// WithLockNameInMetrics puts in metrics; later names are recorded as
// "_OTHER". fairlock.acquire.attempts has up to 12 attribute sets per name (3
// operations times 4 outcomes) plus 3 per error.type seen, so 50 names with
// up to 9 error types stay under the OpenTelemetry Go SDK's default limit
// of 2000 series per instrument, past which the SDK folds every new set,
// whatever its outcome, into one overflow series.
const MaxMetricLockNames = 50

// otherName stands for the lock names past MaxMetricLockNames, as _OTHER
// stands for unlisted values in the semantic conventions' error.type.
const otherName = "_OTHER"

// Observer implements observe.Observer with OpenTelemetry spans and metrics.
// Create it with NewObserver; it is safe for concurrent use and may be
// shared by several lock clients. The zero value is not usable.
type Observer struct {
	tracer        trace.Tracer
	nameInMetrics bool
	names         metricNames // with nameInMetrics

	acquireDuration metric.Float64Histogram
	acquireAttempts metric.Int64Counter
	holdDuration    metric.Float64Histogram
	leaseLost       metric.Int64Counter
	renewals        metric.Int64Counter
	waiters         metric.Int64UpDownCounter

	attrs attrCache
	holds holdSpans
}

var _ observe.Observer = (*Observer)(nil)

// NewObserver returns an Observer that reports to the configured providers
// (by default the global ones). It fails on an invalid option or when the
// meter refuses an instrument; pass the Observer to lock.WithObserver.
func NewObserver(opts ...Option) (*Observer, error) {
	var cfg config
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("fairlock/otel: nil option")
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.tp == nil {
		cfg.tp = otelapi.GetTracerProvider()
	}
	if cfg.mp == nil {
		cfg.mp = otelapi.GetMeterProvider()
	}
	meter := cfg.mp.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
	o := &Observer{
		tracer:        cfg.tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		nameInMetrics: cfg.nameInMetrics,
	}
	var err, e error
	o.acquireDuration, e = meter.Float64Histogram(metricAcquireDuration,
		metric.WithUnit("s"),
		metric.WithDescription("Duration of lock acquire calls (Lock, TryLock), by outcome."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	err = errors.Join(err, e)
	o.acquireAttempts, e = meter.Int64Counter(metricAcquireAttempts,
		metric.WithUnit("{attempt}"),
		metric.WithDescription("Lock acquire calls, by outcome."))
	err = errors.Join(err, e)
	o.holdDuration, e = meter.Float64Histogram(metricHoldDuration,
		metric.WithUnit("s"),
		metric.WithDescription("How long locks were held, from the grant to release or loss."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	err = errors.Join(err, e)
	o.leaseLost, e = meter.Int64Counter(metricLeaseLost,
		metric.WithUnit("{lease}"),
		metric.WithDescription("Holds that ended without Unlock: lease ran out, force-unlocked, deleted, or renewal failing."))
	err = errors.Join(err, e)
	o.renewals, e = meter.Int64Counter(metricRenewals,
		metric.WithUnit("{renewal}"),
		metric.WithDescription("Watchdog lease renewals; failed ones carry error.type."))
	err = errors.Join(err, e)
	o.waiters, e = meter.Int64UpDownCounter(metricWaiters,
		metric.WithUnit("{waiter}"),
		metric.WithDescription("Acquire calls currently queued for a lock, in this process."))
	err = errors.Join(err, e)
	if err != nil {
		return nil, fmt.Errorf("fairlock/otel: creating instruments: %w", err)
	}
	return o, nil
}

// WithTracing returns a lock.Option that installs NewObserver(opts...) on
// the client: lock.NewClient(b, otel.WithTracing()) traces with the global
// providers. When NewObserver fails, the returned option makes NewClient
// fail with that error.
func WithTracing(opts ...Option) lock.Option {
	o, err := NewObserver(opts...)
	if err != nil {
		return failingOption(lock.Option(nil), err)
	}
	return lock.WithObserver(o)
}

// failingOption returns an option of the same type as like that fails with
// err. lock.Option is func(*config) error over an unexported config type;
// inferring C from a value of that type names it without reflection, and
// a change of lock.Option's shape breaks the build here rather than at run
// time.
func failingOption[C any](_ func(*C) error, err error) func(*C) error {
	return func(*C) error { return err }
}

// StartAcquire implements observe.Observer: it starts a fairlock.acquire span
// as a child of the span in ctx and returns ctx carrying it, so the Redis
// commands of the acquire nest under it.
func (o *Observer) StartAcquire(ctx context.Context, c observe.Call) (context.Context, observe.AcquireTracker) {
	ctx, span := o.startSpan(ctx, spanAcquire, c)
	return ctx, &acquireTracker{o: o, ctx: ctx, span: span, call: c, name: o.metricName(c)}
}

// startSpan starts a span for call c as a child of the span in ctx.
func (o *Observer) startSpan(ctx context.Context, name string, c observe.Call) (context.Context, trace.Span) {
	ctx, span := o.tracer.Start(ctx, name)
	if span.IsRecording() {
		span.SetAttributes(
			keyLockName.String(c.Name),
			keyOwner.String(c.Owner),
			keyOperation.String(string(c.Op)),
		)
		span.SetAttributes(clientAttrs(c)...)
	}
	return ctx, span
}

// clientAttrs describes the calling client on a span - who holds or waits
// - when it has a description (lock.WithDescription).
func clientAttrs(c observe.Call) []attribute.KeyValue {
	if c.Client == nil {
		return nil
	}
	return []attribute.KeyValue{
		keyClientName.String(c.Client.Name),
		keyClientHost.String(c.Client.Host),
		keyClientPID.Int(c.Client.PID),
	}
}

type acquireTracker struct {
	o      *Observer
	ctx    context.Context // carries span, for exemplars
	span   trace.Span
	call   observe.Call
	name   string // fairlock.lock.name in metrics, "" when left out
	queued bool   // counted in fairlock.waiter.count
}

// Queued implements observe.AcquireTracker.
func (t *acquireTracker) Queued(position int) {
	if t.queued {
		return
	}
	t.queued = true
	t.o.waiters.Add(t.ctx, 1, t.o.attrs.get(attrKey{name: t.name}).add...)
	if t.span.IsRecording() {
		t.span.AddEvent(eventQueued, trace.WithAttributes(keyQueuePosition.Int(position)))
	}
}

// Woken implements observe.AcquireTracker.
func (t *acquireTracker) Woken(reconnect bool) {
	if t.span.IsRecording() {
		t.span.AddEvent(eventWoken, trace.WithAttributes(keyReconnect.Bool(reconnect)))
	}
}

// End implements observe.AcquireTracker.
func (t *acquireTracker) End(r observe.AcquireResult) {
	o, span := t.o, t.span
	if t.queued {
		o.waiters.Add(t.ctx, -1, o.attrs.get(attrKey{name: t.name}).add...)
	}
	var errType string
	if r.Outcome == observe.OutcomeError {
		errType = errorType(r.Err)
	}
	mo := o.attrs.get(attrKey{
		op: t.call.Op, outcome: string(r.Outcome), errType: errType, name: t.name,
	})
	o.acquireDuration.Record(t.ctx, r.Wait.Seconds(), mo.rec...)
	o.acquireAttempts.Add(t.ctx, 1, mo.add...)
	if span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 7)
		attrs = append(attrs,
			keyOutcome.String(string(r.Outcome)),
			keyWaitDuration.Float64(r.Wait.Seconds()),
			keyWakeups.Int(r.Wakeups),
			keyHoldCount.Int(r.HoldCount),
		)
		if r.Position > 0 {
			attrs = append(attrs, keyQueuePosition.Int(r.Position))
		}
		if r.Token > 0 {
			attrs = append(attrs, keyToken.Int64(r.Token))
		}
		if errType != "" {
			attrs = append(attrs, keyErrorType.String(errType))
			span.SetStatus(codes.Error, r.Err.Error())
		}
		span.SetAttributes(attrs...)
		if r.Outcome == observe.OutcomeAcquired {
			o.holds.remember(t.call, r.Token, span.SpanContext())
		}
	}
	span.End()
}

// StartRelease implements observe.Observer: it starts a fairlock.release span
// as a child of the span in ctx.
func (o *Observer) StartRelease(ctx context.Context, c observe.Call) (context.Context, observe.ReleaseTracker) {
	ctx, span := o.startSpan(ctx, spanRelease, c)
	return ctx, &releaseTracker{o: o, ctx: ctx, span: span, call: c}
}

type releaseTracker struct {
	o    *Observer
	ctx  context.Context
	span trace.Span
	call observe.Call
}

// End implements observe.ReleaseTracker.
func (t *releaseTracker) End(r observe.ReleaseResult) {
	o, span := t.o, t.span
	if r.Held > 0 {
		o.holdDuration.Record(t.ctx, r.Held.Seconds(),
			o.attrs.get(attrKey{outcome: holdEndReleased, name: o.metricName(t.call)}).rec...)
	}
	if t.call.Op == observe.OpUnlock && r.Outcome == observe.OutcomeReleased && r.HoldCount == 0 {
		o.holds.forget(t.call)
	}
	if span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 4)
		attrs = append(attrs, keyOutcome.String(string(r.Outcome)))
		if t.call.Op == observe.OpUnlock && r.Outcome == observe.OutcomeReleased {
			attrs = append(attrs, keyHoldCount.Int(r.HoldCount))
		}
		if r.Held > 0 {
			attrs = append(attrs, keyHoldDuration.Float64(r.Held.Seconds()))
		}
		if r.Outcome == observe.OutcomeError {
			attrs = append(attrs, keyErrorType.String(errorType(r.Err)))
			span.SetStatus(codes.Error, r.Err.Error())
		}
		span.SetAttributes(attrs...)
	}
	span.End()
}

// HoldLost implements observe.Observer. The acquire span has ended by now, so
// the loss is a short fairlock.lease.lost span of its own, with status
// Error and a fairlock.lease.lost event. It is a child of the acquire span
// that began the hold when that span was recorded (so it shows in the same
// trace, after it), else a root span.
func (o *Observer) HoldLost(c observe.Call, token int64, held time.Duration, err error) {
	ctx := context.Background()
	if sc, ok := o.holds.take(c, token); ok {
		ctx = trace.ContextWithSpanContext(ctx, sc)
	}
	ctx, span := o.tracer.Start(ctx, spanLeaseLost)
	name := o.metricName(c)
	o.leaseLost.Add(ctx, 1, o.attrs.get(attrKey{name: name}).add...)
	o.holdDuration.Record(ctx, held.Seconds(), o.attrs.get(attrKey{outcome: holdEndLost, name: name}).rec...)
	if span.IsRecording() {
		span.SetAttributes(
			keyLockName.String(c.Name),
			keyOwner.String(c.Owner),
			keyToken.Int64(token),
			keyHoldDuration.Float64(held.Seconds()),
			keyErrorType.String(errorType(err)),
		)
		span.SetAttributes(clientAttrs(c)...)
		span.AddEvent(eventLeaseLost, trace.WithAttributes(
			keyToken.Int64(token),
			attribute.String("exception.message", err.Error()),
		))
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Renewed implements observe.Observer: it counts the renewal in
// fairlock.lease.renewals, with error.type when it failed. Renewals make
// no spans: there is one per hold every third of the lease.
func (o *Observer) Renewed(c observe.Call, err error) {
	var errType string
	if err != nil {
		errType = errorType(err)
	}
	o.renewals.Add(context.Background(), 1, o.attrs.get(attrKey{errType: errType, name: o.metricName(c)}).add...)
}

// metricName is the fairlock.lock.name of c in metrics: "" (left out)
// unless WithLockNameInMetrics was given.
func (o *Observer) metricName(c observe.Call) string {
	if !o.nameInMetrics {
		return ""
	}
	return o.names.label(c.Name)
}

// metricNames admits the first MaxMetricLockNames lock names to metrics
// and keeps them for the Observer's life, so a name's measurements (the
// +1 and -1 of fairlock.waiter.count among them) always land in one series.
type metricNames struct {
	mu   sync.RWMutex
	seen map[string]struct{}
}

func (n *metricNames) label(name string) string {
	n.mu.RLock()
	_, ok := n.seen[name]
	full := len(n.seen) >= MaxMetricLockNames
	n.mu.RUnlock()
	switch {
	case ok:
		return name
	case full: // names past the cap take no exclusive lock
		return otherName
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.seen[name]; ok {
		return name
	}
	if len(n.seen) >= MaxMetricLockNames {
		return otherName
	}
	if n.seen == nil {
		n.seen = make(map[string]struct{})
	}
	n.seen[name] = struct{}{}
	return name
}

// errorType is the low-cardinality error.type of err: a short name for the
// lock's and backend's own errors and for connection failures, else the Go
// type of the error, or _OTHER when that type says nothing (errors.New).
func errorType(err error) string {
	var (
		se *backend.ServerError
		ne net.Error
	)
	switch {
	case err == nil:
		return semconv.ErrorTypeOther.Value.AsString()
	case errors.Is(err, lock.ErrLockLost):
		return "lock_lost"
	case errors.Is(err, lock.ErrClosed):
		return "client_closed"
	case errors.Is(err, backend.ErrClosed):
		return "backend_closed"
	case errors.Is(err, lock.ErrUnexpectedReply):
		return "unexpected_reply"
	case errors.As(err, &se):
		return "server_error"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.As(err, &ne):
		return "network"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection_closed"
	}
	switch t := semconv.ErrorType(err).Value.AsString(); t {
	case "*errors.errorString", "*fmt.wrapError", "*fmt.wrapErrors", "*errors.joinError":
		return semconv.ErrorTypeOther.Value.AsString()
	default:
		return t
	}
}

// attrKey is the content of one metric attribute set; empty fields are
// left out of the set. Every field takes a bounded set of values (name
// through metricNames); nothing that differs between processes or clients
// belongs here.
type attrKey struct {
	op      observe.Op
	outcome string
	errType string
	name    string
}

// measureOpts are the prebuilt options for one attribute set, so that
// recording a measurement does not allocate.
type measureOpts struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

// maxCachedSets bounds attrCache: past it (many error types times many
// lock names) sets are built per call instead of kept.
const maxCachedSets = 4096

type attrCache struct {
	mu   sync.RWMutex
	sets map[attrKey]*measureOpts
}

func (a *attrCache) get(k attrKey) *measureOpts {
	a.mu.RLock()
	m, ok := a.sets[k]
	a.mu.RUnlock()
	if ok {
		return m
	}
	kvs := make([]attribute.KeyValue, 0, 4)
	if k.op != "" {
		kvs = append(kvs, keyOperation.String(string(k.op)))
	}
	if k.outcome != "" {
		kvs = append(kvs, keyOutcome.String(k.outcome))
	}
	if k.errType != "" {
		kvs = append(kvs, keyErrorType.String(k.errType))
	}
	if k.name != "" {
		kvs = append(kvs, keyLockName.String(k.name))
	}
	opt := metric.WithAttributeSet(attribute.NewSet(kvs...))
	m = &measureOpts{add: []metric.AddOption{opt}, rec: []metric.RecordOption{opt}}
	a.mu.Lock()
	if a.sets == nil {
		a.sets = make(map[attrKey]*measureOpts)
	}
	if len(a.sets) < maxCachedSets {
		a.sets[k] = m
	}
	a.mu.Unlock()
	return m
}

// holdKey names a hold: one owner holds one lock at most once at a time.
type holdKey struct {
	name  string
	owner string
}

type heldSpan struct {
	token int64
	sc    trace.SpanContext
}

// maxRememberedHolds bounds holdSpans. Holds that end with Client.Close
// are not reported to the Observer, so their entries stay until the cap;
// past it new holds are not remembered and their loss makes a root span.
const maxRememberedHolds = 10000

// holdSpans remembers the acquire span of each recorded live hold, so that
// HoldLost can parent its span there.
type holdSpans struct {
	n  atomic.Int64 // len(m), read without the lock on the release path
	mu sync.Mutex
	m  map[holdKey]heldSpan
}

func (h *holdSpans) remember(c observe.Call, token int64, sc trace.SpanContext) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[holdKey]heldSpan)
	}
	k := holdKey{c.Name, c.Owner}
	if _, ok := h.m[k]; !ok && len(h.m) >= maxRememberedHolds {
		return
	}
	h.m[k] = heldSpan{token, sc}
	h.n.Store(int64(len(h.m)))
}

func (h *holdSpans) forget(c observe.Call) {
	if h.n.Load() == 0 {
		return
	}
	h.mu.Lock()
	delete(h.m, holdKey{c.Name, c.Owner})
	h.n.Store(int64(len(h.m)))
	h.mu.Unlock()
}

// take returns and forgets the acquire span of the hold with token.
func (h *holdSpans) take(c observe.Call, token int64) (trace.SpanContext, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := holdKey{c.Name, c.Owner}
	s, ok := h.m[k]
	if !ok || s.token != token {
		return trace.SpanContext{}, false
	}
	delete(h.m, k)
	h.n.Store(int64(len(h.m)))
	return s.sc, true
}
