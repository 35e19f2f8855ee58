// Package otel traces and measures fairlock locks with OpenTelemetry.
//
// Install it on a lock client with one option:
//
//	c, err := lock.NewClient(b, otel.WithTracing(
//		otel.WithTracerProvider(tp), otel.WithMeterProvider(mp)))
//
// The package shares its name with go.opentelemetry.io/otel; import one of
// them under another name, such as fairotel. With no options the global
// providers are used (otel.GetTracerProvider
// and otel.GetMeterProvider of go.opentelemetry.io/otel), so a service that
// sets them at start-up needs only otel.WithTracing(). NewObserver builds
// the same Observer for lock.WithObserver when you want to share one
// between clients or check its error yourself.
//
// # Why a hook interface
//
// Package lock imports no telemetry library. It defines the small
// observe.Observer interface, calls it at the points only the lock knows
// about - when the owner joins the queue and at which position, each
// wake-up, the outcome and fencing token, a hold lost in the background,
// each watchdog renewal - and this package implements it. That keeps
// lock's dependency graph to the Redis adapters, lets other telemetry
// systems plug in the same way, and makes the cost of not tracing one nil
// check per call: a client without an observer does no tracing work at
// all. A wrapper around Mutex would see calls and their results, but not
// the queue position, wake-ups, renewals or holds lost in the background.
//
// # Spans
//
// All spans are INTERNAL. Acquire and release spans are children of the
// span in the caller's context, and the context they pass on to the
// backend carries them, so a Redis client traced with rueidisotel or
// valkeyotel shows its EVALSHA spans as their children.
//
//	fairlock.acquire    one per Lock, LockWithLease, TryLock, TryLockWithLease
//	fairlock.release    one per Unlock, ForceUnlock
//	fairlock.lease.lost one per hold that ended without Unlock
//
// Attributes (durations are in seconds, as doubles):
//
//	fairlock.lock.name         lock name without the client's key prefix  (all spans)
//	fairlock.owner             owner field "<clientID>:<ownerID>"         (all spans)
//	fairlock.client.name       the client's lock.WithDescription name     (all spans, described clients)
//	fairlock.client.host       its host name                              (all spans, described clients)
//	fairlock.client.pid        its process ID                             (all spans, described clients)
//	fairlock.operation         Lock, TryLock, Unlock, ForceUnlock
//	fairlock.outcome           acquired, reentered, timed_out, cancelled, error;
//	                           released, not_held, error on release
//	fairlock.wait.duration     acquire: time from the call to its end
//	fairlock.queue.position    acquire: 1-based position when first queued (absent if never queued)
//	fairlock.wakeup.count      acquire: wake-ups - unlock messages, reconnects, and holds of
//	                           the same client on the lock ending (in process)
//	fairlock.hold.count        hold count after the call (acquire; successful Unlock)
//	fairlock.fencing.token     the hold's fencing token (acquired, reentered, lease lost)
//	fairlock.hold.duration     release that ended the hold, and lease lost: from the grant
//	                           (not the call that waited for it) to the release or loss
//	error.type                 only on errors: lock_lost, client_closed, backend_closed,
//	                           unexpected_reply, server_error, timeout, canceled, network,
//	                           connection_closed, else the Go error type or _OTHER
//
// LockWithLease is reported as operation Lock. Calls rejected before they
// start (nil or ended context, invalid duration, closed client) make no
// span.
//
// Events: fairlock.queued (fairlock.queue.position) when the owner joins
// the queue, fairlock.woken (fairlock.wakeup.reconnect: true for a
// subscription reconnect, false for an unlock message or a hold of the
// same client ending, which wakes the waiter in process) on each wake-up,
// and fairlock.lease.lost (fairlock.fencing.token, exception.message) on
// the lease-lost span.
//
// Status: Error only for real errors - outcome error, and a lost lease.
// A timed-out TryLock, a TryLock with no wait that found the lock taken, a
// cancelled wait and an Unlock by a non-holder are outcomes, not errors:
// their status stays Unset and fairlock.outcome says what happened.
//
// A lost lease is noticed in the background (lease timer, watchdog, or a
// later Unlock), after the acquire span has ended and usually outside any
// request. Its fairlock.lease.lost span is a child of the acquire span that
// began the hold, so it appears in that trace; for that the Observer
// remembers the span context of each recorded live hold (a few dozen bytes
// per hold, forgotten on the last Unlock or the loss). Holds still held
// when their Client is closed are not reported by package lock and stay
// remembered; at most 10000 holds are remembered, past that a loss makes a
// root span.
//
// # Metrics
//
//	fairlock.acquire.duration  histogram      s          fairlock.operation, fairlock.outcome, error.type
//	fairlock.acquire.attempts  counter        {attempt}  fairlock.operation, fairlock.outcome, error.type
//	fairlock.hold.duration     histogram      s          fairlock.outcome (released, lost)
//	fairlock.lease.lost        counter        {lease}    (none)
//	fairlock.lease.renewals    counter        {renewal}  error.type (failed renewals only)
//	fairlock.waiter.count      updowncounter  {waiter}   (none): acquire calls queued in this process
//
// error.type is present only with outcome error or on a failed renewal.
// With WithLockNameInMetrics (default off) every metric also carries
// fairlock.lock.name. Histogram buckets run from 1 ms to 5 minutes.
//
// # Cardinality
//
// Metric attribute sets are bounded, and the same in every process: they
// are built only from fairlock.operation (Lock, TryLock),
// fairlock.outcome, error.type (the names listed under Spans, _OTHER, or
// the Go type of an error from elsewhere: a fixed set for a given build)
// and, when asked for, the lock name. Nothing that differs between
// processes or calls - client ID, owner, fencing token - labels a metric,
// so a restarted process, with its new random client ID, goes on with the
// series of the one before. Per Observer that makes at most, without lock
// names:
//
//	fairlock.acquire.duration  12 sets (3 operations x 4 outcomes), +3 per error.type seen
//	fairlock.acquire.attempts  the same
//	fairlock.hold.duration     2
//	fairlock.lease.lost        1
//	fairlock.lease.renewals    1, +1 per error.type seen
//	fairlock.waiter.count      1
//
// With WithLockNameInMetrics, times the number of lock names used, of
// which at most MaxMetricLockNames (50) get their own series; later names
// share fairlock.lock.name "_OTHER". Processes are told apart by the
// resource (service.instance.id, host.name), which the application
// chooses, not by this package.
//
// Spans do carry the per-call fairlock.owner, which holds the client ID,
// and fairlock.fencing.token: a span records one call, not a series, and
// those attributes are what tie it to the holder that fairlock inspect
// shows and to the writes the token guards. Span names are fixed (the lock
// name is an attribute, not part of the name). Do not make fairlock.owner
// or fairlock.fencing.token a dimension of metrics derived from spans
// (such as the Collector's spanmetrics connector). Measurements taken
// inside a sampled span carry it as an exemplar, which links a metric
// point to a trace without adding a series.
//
// # Cost
//
// With no provider configured (the global providers before any is set, or
// the no-op providers) the Observer builds no span attributes - it checks
// Span.IsRecording first - and records metrics with attribute sets built
// once and cached. An uncontended Lock plus Unlock then costs about a
// microsecond and 4 allocations more than without an observer (8 on the
// unset global providers), against a Redis round trip of about 50 us per
// call; the benchmarks in this package measure both.
package otel
