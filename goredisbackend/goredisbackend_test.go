package goredisbackend_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/conformance"
	"github.com/fairlock/fairlock/goredisbackend"
	"github.com/fairlock/fairlock/internal/backendtest"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestConformance runs the suite on a standalone server with a replica,
// with the fault and replica cases, on go-redis' defaults (RESP3).
func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	replica := redistest.StartReplica(t, srv)
	conformance.Run(t, backendtest.GoRedis(redis.UniversalOptions{Addrs: []string{srv.Addr()}}),
		conformance.WithServer(srv), conformance.WithReplica(replica))
}

// TestConformanceRESP2 covers RESP2 connections, on which subscribe
// confirmations, messages and PING replies have another shape.
func TestConformanceRESP2(t *testing.T) {
	srv := redistest.Start(t)
	conformance.Run(t, backendtest.GoRedis(redis.UniversalOptions{Addrs: []string{srv.Addr()}, Protocol: 2}),
		conformance.WithServer(srv))
}

// TestConformanceCluster runs the suite on a three-primary Redis Cluster
// through go-redis' cluster client: every key of a lock shares a slot, and
// wake-ups published on one node reach the subscription on another.
func TestConformanceCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	conformance.Run(t, backendtest.GoRedis(redis.UniversalOptions{Addrs: cluster.Addrs(), IsClusterMode: true}))
}

// TestConformanceSentinel runs the suite through go-redis' failover
// client: a primary with one replica, found through Redis Sentinel.
func TestConformanceSentinel(t *testing.T) {
	primary := redistest.Start(t)
	redistest.StartReplica(t, primary)
	sentinel := redistest.StartSentinel(t, primary, "fairlock")
	conformance.Run(t, backendtest.GoRedis(redis.UniversalOptions{
		Addrs:      []string{sentinel.Addr()},
		MasterName: "fairlock",
	}))
}

// countScript counts its runs in KEYS[1].
var countScript = backend.NewScript("count", `return redis.call('INCR', KEYS[1])`)

// Lost replies: a proxy delays every byte by replyDelay each way, longer
// than the client's readTimeout, so the client gives up reading before a
// script's reply comes back, although the script has run; once it has run,
// the delay goes, before a retry's back-off (retryAfter) has passed.
const (
	readTimeout = 100 * time.Millisecond
	replyDelay  = 150 * time.Millisecond
	retryAfter  = 500 * time.Millisecond
)

// TestScriptsAreNeverRetried: a script whose reply is lost (here, a read
// timeout) runs once, although go-redis retries other commands after the
// same error - which the control call shows. (EvalWait's connection,
// borrowed with Client.Conn, is never swapped for another, so a retry could
// not run there anyway; the case checks that it stays so.)
//
// The reply used to be lost by a script that spun on TIME for twice the
// read timeout; Valkey 8 answers TIME with the same instant all through a
// script, so there the script never ended. The delay of a proxy holds on
// both servers.
func TestScriptsAreNeverRetried(t *testing.T) {
	srv := redistest.Start(t)
	px := redistest.StartProxy(t, srv.Addr())
	rc := redis.NewClient(&redis.Options{
		Addr:            px.Addr(),
		ReadTimeout:     readTimeout,
		MaxRetries:      1,
		MinRetryBackoff: retryAfter,
		MaxRetryBackoff: retryAfter,
	})
	t.Cleanup(func() { rc.Close() })
	b := goredisbackend.New(rc)
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	// Load the script, so EVALSHA finds it and the calls below make one run each.
	if err := rc.ScriptLoad(ctx, countScript.Source).Err(); err != nil {
		t.Fatal(err)
	}
	lose := func(call func() error, keys ...string) error {
		t.Helper()
		// Idle connections for the calls: a new one's handshake would time
		// out behind the delay.
		pings := make(chan error, 4)
		for range cap(pings) {
			go func() { pings <- rc.Ping(ctx).Err() }()
		}
		for range cap(pings) {
			if err := <-pings; err != nil {
				t.Fatal(err)
			}
		}
		px.SetLatency(replyDelay)
		done := make(chan error, 1)
		go func() { done <- call() }()
		redistest.Eventually(t, 10*time.Second, fmt.Sprintf("the first run of %q", keys), func() bool {
			for _, key := range keys {
				if n, _ := srv.Do(t, "GET", key).(string); n == "" {
					return false
				}
			}
			return true
		})
		px.SetLatency(0)
		return <-done
	}
	runs := func(key string) string {
		t.Helper()
		// Every run, retries included, is over once the count has stayed
		// put for longer than a retry's back-off and read timeout.
		deadline := time.Now().Add(10 * time.Second)
		for {
			n, _ := srv.Do(t, "GET", key).(string)
			time.Sleep(2 * (retryAfter + readTimeout))
			if again, _ := srv.Do(t, "GET", key).(string); again == n || time.Now().After(deadline) {
				return n
			}
		}
	}

	err := lose(func() error { return rc.EvalSha(ctx, countScript.SHA1, []string{"control"}).Err() }, "control")
	n := runs("control")
	t.Logf("control: plain EvalSha ran %s times (%v)", n, err)
	if n != "2" {
		t.Fatalf("control: plain EvalSha ran %q times; this test needs go-redis to retry it once", n)
	}
	cases := []struct {
		name string
		keys func(key string) []string // the keys the call's scripts count in
		call func(key string) error
	}{
		{"Eval", nil, func(key string) error {
			_, err := b.Eval(ctx, countScript, []string{key}, nil)
			return err
		}},
		{"Eval combined", func(key string) []string { return []string{key + ":first", key} }, func(key string) error {
			// Another script on its way: this one waits and goes out in a
			// pipeline.
			first := make(chan error, 1)
			go func() {
				_, err := b.Eval(ctx, countScript, []string{key + ":first"}, nil)
				first <- err
			}()
			for deadline := time.Now().Add(10 * time.Second); goredisbackend.SentAlone(b) != 1; {
				if time.Now().After(deadline) {
					return errors.New("the first script is not on its way")
				}
				time.Sleep(time.Millisecond)
			}
			_, err := b.Eval(ctx, countScript, []string{key}, nil)
			<-first
			return err
		}},
		{"EvalBatch", nil, func(key string) error {
			return b.EvalBatch(ctx, []backend.Call{{Script: countScript, Keys: []string{key}}})[0].Err
		}},
		{"EvalWait", nil, func(key string) error {
			_, _, err := b.EvalWait(ctx, countScript, []string{key}, nil, 0, 10*time.Millisecond)
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := "runs:" + tc.name
			keys := []string{key}
			if tc.keys != nil {
				keys = tc.keys(key)
			}
			if err := lose(func() error { return tc.call(key) }, keys...); err == nil {
				t.Errorf("%s returned no error; want the read timeout", tc.name)
			}
			for _, k := range keys {
				if n := runs(k); n != "1" {
					t.Errorf("%s ran the script counting in %q %s times, want 1", tc.name, k, n)
				}
			}
		})
	}
}

// TestCombinesOnlyOffCluster: scripts are combined on standalone and
// Sentinel clients, never on a cluster client, where a pipeline spans
// nodes and waits for the slowest. Nothing connects here.
func TestCombinesOnlyOffCluster(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		want   bool
	}{
		{"standalone", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), true},
		{"sentinel", redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}}), true},
		{"cluster", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}), false},
	} {
		b := goredisbackend.New(tc.client)
		if got := goredisbackend.Combines(b); got != tc.want {
			t.Errorf("%s: combines %v, want %v", tc.name, got, tc.want)
		}
		b.Close()
		tc.client.Close()
	}
}

// TestReplies checks the mapping of replies and errors.
func TestReplies(t *testing.T) {
	srv := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	b := goredisbackend.New(rc)
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	cases := []struct {
		src  string
		want backend.Reply
	}{
		{"return 7", backend.IntReply(7)},
		{"return 'seven'", backend.StringReply("seven")},
		{"return nil", backend.Reply{}},
		{"return false", backend.Reply{}},
		{"return true", backend.IntReply(1)},
		{"return {1, 'a', {2}, false}", backend.ArrayReply(backend.IntReply(1), backend.StringReply("a"), backend.ArrayReply(backend.IntReply(2)), backend.Reply{})},
		{"return {}", backend.ArrayReply()},
	}
	for _, tc := range cases {
		s := backend.NewScript("reply", tc.src)
		got, err := b.Eval(ctx, s, []string{"k"}, nil)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: got %v, %v; want %v", tc.src, got, err, tc.want)
		}
		batch := b.EvalBatch(ctx, []backend.Call{{Script: s, Keys: []string{"k"}}})
		if batch[0].Err != nil || fmt.Sprint(batch[0].Reply) != fmt.Sprint(tc.want) {
			t.Errorf("%s in a batch: got %v, %v; want %v", tc.src, batch[0].Reply, batch[0].Err, tc.want)
		}
	}

	_, err := b.Eval(ctx, backend.NewScript("fail", "return redis.error_reply('OOPS it failed')"), []string{"k"}, nil)
	var se *backend.ServerError
	if !errors.As(err, &se) || se.Message != "OOPS it failed" {
		t.Errorf("error reply: got %v, want *backend.ServerError \"OOPS it failed\"", err)
	}

	rc.Close()
	closed := backend.NewScript("r", "return 1")
	if _, err := b.Eval(ctx, closed, nil, nil); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Eval on a closed client: %v, want backend.ErrClosed", err)
	}
	if res := b.EvalBatch(ctx, []backend.Call{{Script: closed}, {Script: closed}}); !errors.Is(res[0].Err, backend.ErrClosed) || !errors.Is(res[1].Err, backend.ErrClosed) {
		t.Errorf("EvalBatch on a closed client: %v, want backend.ErrClosed for each call", res)
	}
}

// TestNotSupported: what the adapter cannot do, it says with
// backend.ErrNotSupported.
func TestNotSupported(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr()}})
	t.Cleanup(func() { ring.Close() })
	b := goredisbackend.New(ring)
	t.Cleanup(func() { b.Close() })
	s := backend.NewScript("r", "return 1")
	if _, err := b.Subscribe(ctx, "c"); !errors.Is(err, backend.ErrNotSupported) {
		t.Errorf("Subscribe on a Ring: %v, want backend.ErrNotSupported", err)
	}
	if _, _, err := b.EvalWait(ctx, s, []string{"k"}, nil, 1, time.Millisecond); !errors.Is(err, backend.ErrNotSupported) {
		t.Errorf("EvalWait on a Ring: %v, want backend.ErrNotSupported", err)
	}
	if _, err := b.WatchKey(ctx, "k"); !errors.Is(err, backend.ErrNotSupported) {
		t.Errorf("WatchKey: %v, want backend.ErrNotSupported", err)
	}
}

// TestSubscribeReturnsConfirmed: once Subscribe returns, the server counts
// the subscription, so a message published right then is received.
func TestSubscribeReturnsConfirmed(t *testing.T) {
	srv := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rc.Close() })
	b := goredisbackend.New(rc)
	t.Cleanup(func() { b.Close() })
	for i := range 100 {
		ch := fmt.Sprintf("confirmed:%d", i)
		sub, err := b.Subscribe(context.Background(), ch)
		if err != nil {
			t.Fatal(err)
		}
		if n := srv.Do(t, "PUBLISH", ch, "m"); n != int64(1) {
			t.Fatalf("PUBLISH right after Subscribe reached %v subscribers, want 1", n)
		}
		if e := next(t, sub, 2*time.Second); e.Payload != "m" {
			t.Fatalf("event %+v, want the message", e)
		}
		sub.Close()
	}
}

// TestReconnectIsReported: when the subscription connection breaks - reset,
// or silent - go-redis would re-dial by itself and lose what was published
// meanwhile; subscribers get a Reconnect event, and messages again after.
func TestReconnectIsReported(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	rc := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { rc.Close() })
	b := goredisbackend.New(rc)
	t.Cleanup(func() { b.Close() })
	sub, err := b.Subscribe(context.Background(), "wake")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	for _, fault := range []struct {
		name   string
		within time.Duration
		start  func()
		end    func()
	}{
		{"reset", 2 * time.Second, proxy.ResetAll, func() {}},
		// Nothing is read: the PING after a second of silence goes
		// unanswered for three seconds.
		{"blackhole", 7 * time.Second, func() { proxy.Blackhole(true) }, func() { proxy.Blackhole(false) }},
	} {
		t.Run(fault.name, func(t *testing.T) {
			start := time.Now()
			fault.start()
			if e := next(t, sub, fault.within); !e.Reconnect {
				t.Fatalf("event %+v, want Reconnect", e)
			}
			t.Logf("Reconnect reported %v after the %s", time.Since(start).Round(time.Millisecond), fault.name)
			fault.end()
			deadline := time.Now().Add(10 * time.Second)
			for {
				srv.Do(t, "PUBLISH", "wake", "again")
				select {
				case e := <-sub.Events():
					if e.Payload == "again" {
						return
					}
				case <-time.After(50 * time.Millisecond):
				}
				if time.Now().After(deadline) {
					t.Fatal("no message after the reconnect")
				}
			}
		})
	}
}

func next(t *testing.T, sub *backend.Subscription, within time.Duration) backend.Event {
	t.Helper()
	select {
	case e := <-sub.Events():
		return e
	case <-time.After(within):
		t.Fatalf("no event within %v", within)
		return backend.Event{}
	}
}

// TestRedisotel: a client instrumented by redisotel works as usual, and
// its spans show the lock's scripts (EVALSHA) one per call.
func TestRedisotel(t *testing.T) {
	srv := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rc.Close() })
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	if err := redisotel.InstrumentTracing(rc, redisotel.WithTracerProvider(tp)); err != nil {
		t.Fatal(err)
	}
	b := goredisbackend.New(rc)
	t.Cleanup(func() { b.Close() })
	c, err := lock.NewClient(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	m, err := c.NewMutex("traced")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Warm up (the first call of a script loads it: EVALSHA, then EVAL).
	if _, err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	before := len(spans.Ended())
	if _, err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// Other spans may come between (a pool connection's handshake).
	var names []string
	for _, s := range spans.Ended()[before:] {
		if strings.HasPrefix(s.Name(), "eval") {
			names = append(names, s.Name())
		}
	}
	if fmt.Sprint(names) != "[evalsha evalsha]" {
		t.Errorf("script spans of an uncontended Lock+Unlock: %q, want two evalsha", names)
	}
}

// BenchmarkLock runs conformance.Benchmark against a local redis-server.
func BenchmarkLock(b *testing.B) {
	srv := redistest.Start(b)
	conformance.Benchmark(b, backendtest.GoRedis(redis.UniversalOptions{Addrs: []string{srv.Addr()}}))
}
