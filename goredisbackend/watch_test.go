package goredisbackend_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/goredisbackend"
	"github.com/fairlock/fairlock/redistest"
	"github.com/redis/go-redis/v9"
)

// watchTrials is the number of DELs timed per client kind.
const watchTrials = 50

// eventWithin waits at most d for an event on s.
func eventWithin(t *testing.T, s *backend.Subscription, d time.Duration, what string) backend.Event {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case e := <-s.Events():
		return e
	case <-timer.C:
		t.Fatalf("%s: no event within %v", what, d)
		return backend.Event{}
	}
}

// noEvent fails when s has an event pending.
func noEvent(t *testing.T, s *backend.Subscription, what string) {
	t.Helper()
	select {
	case e := <-s.Events():
		t.Fatalf("%s: unexpected event %+v", what, e)
	default:
	}
}

func watcher(t *testing.T, b *goredisbackend.Backend) backend.KeyWatcher {
	t.Helper()
	var kw backend.KeyWatcher = b
	return kw
}

// testWatch checks key watching on b, with other (a client without
// client-side caching) making the changes: a missing key fires at once; a
// DEL, an overwrite and an expiry fire; the DEL's latency is logged.
func testWatch(t *testing.T, b *goredisbackend.Backend, other redis.UniversalClient) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kw := watcher(t, b)
	prefix := fmt.Sprintf("{watch-%d}", time.Now().UnixNano())

	t.Run("MissingKeyFiresAtOnce", func(t *testing.T) {
		s, err := kw.WatchKey(ctx, prefix+":missing")
		if err != nil {
			t.Fatalf("WatchKey: %v", err)
		}
		defer s.Close()
		// Delivered before WatchKey returned.
		select {
		case <-s.Events():
		default:
			t.Fatal("no event for a missing key")
		}
	})

	t.Run("Overwrite", func(t *testing.T) {
		key := prefix + ":overwrite"
		if err := other.Set(ctx, key, "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		s, err := kw.WatchKey(ctx, key)
		if err != nil {
			t.Fatalf("WatchKey: %v", err)
		}
		defer s.Close()
		noEvent(t, s, "before the write")
		if err := other.Set(ctx, key, "2", 0).Err(); err != nil {
			t.Fatal(err)
		}
		eventWithin(t, s, 5*time.Second, "after SET")
	})

	t.Run("Expiry", func(t *testing.T) {
		key := prefix + ":expiry"
		if err := other.Set(ctx, key, "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		s, err := kw.WatchKey(ctx, key)
		if err != nil {
			t.Fatalf("WatchKey: %v", err)
		}
		defer s.Close()
		// PEXPIRE is a change too; the expiry itself is checked by the
		// second watch.
		if err := other.PExpire(ctx, key, 50*time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
		eventWithin(t, s, 5*time.Second, "after PEXPIRE")
		s.Close()
		s2, err := kw.WatchKey(ctx, key)
		if err != nil {
			t.Fatalf("WatchKey: %v", err)
		}
		defer s2.Close()
		eventWithin(t, s2, 10*time.Second, "after the key expired")
	})

	t.Run("DeleteLatency", func(t *testing.T) {
		lat := make([]time.Duration, 0, watchTrials)
		for i := range watchTrials {
			key := fmt.Sprintf("%s:del:%d", prefix, i)
			if err := other.HSet(ctx, key, "token", "1").Err(); err != nil {
				t.Fatal(err)
			}
			s, err := kw.WatchKey(ctx, key)
			if err != nil {
				t.Fatalf("WatchKey: %v", err)
			}
			noEvent(t, s, "before DEL")
			start := time.Now()
			if err := other.Del(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
			e := eventWithin(t, s, 5*time.Second, "after DEL")
			lat = append(lat, time.Since(start))
			if e.Reconnect {
				t.Logf("trial %d: Reconnect event", i)
			}
			s.Close()
		}
		slices.Sort(lat)
		p := func(q float64) time.Duration { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
		t.Logf("DEL to event over %d trials: p50 %v, p90 %v, p99 %v, max %v", len(lat), p(0.50), p(0.90), p(0.99), lat[len(lat)-1])
	})

	t.Run("SeveralWatchesOfOneKey", func(t *testing.T) {
		key := prefix + ":shared"
		if err := other.Set(ctx, key, "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		var subs []*backend.Subscription
		for range 3 {
			s, err := kw.WatchKey(ctx, key)
			if err != nil {
				t.Fatalf("WatchKey: %v", err)
			}
			defer s.Close()
			subs = append(subs, s)
		}
		subs[1].Close() // a closed watch leaves the others armed
		if err := other.Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
		eventWithin(t, subs[0], 5*time.Second, "first watch after DEL")
		eventWithin(t, subs[2], 5*time.Second, "third watch after DEL")
	})
}

func TestWatchKeyStandalone(t *testing.T) {
	srv := redistest.Start(t)
	b := goredisbackend.Dial(&redis.UniversalOptions{Addrs: []string{srv.Addr()}})
	t.Cleanup(func() { b.Close() })
	other := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { other.Close() })
	testWatch(t, b, other)

	// The server closes every connection: the watch hears of it.
	t.Run("ConnectionKilled", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		key := "watch-killed"
		if err := other.Set(ctx, key, "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		s, err := b.WatchKey(ctx, key)
		if err != nil {
			t.Fatalf("WatchKey: %v", err)
		}
		defer s.Close()
		if err := other.Do(ctx, "client", "kill", "type", "normal", "skipme", "yes").Err(); err != nil {
			t.Fatal(err)
		}
		e := eventWithin(t, s, 5*time.Second, "after CLIENT KILL")
		t.Logf("event after CLIENT KILL: %+v", e)
		s.Close()
		// Watching works again on new connections.
		s2, err := b.WatchKey(ctx, key)
		if err != nil {
			t.Fatalf("WatchKey after the kill: %v", err)
		}
		defer s2.Close()
		if err := other.Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
		eventWithin(t, s2, 5*time.Second, "after DEL")
	})

	t.Run("FlushAll", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		key := "watch-flushed"
		if err := other.Set(ctx, key, "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		s, err := b.WatchKey(ctx, key)
		if err != nil {
			t.Fatalf("WatchKey: %v", err)
		}
		defer s.Close()
		if err := other.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		eventWithin(t, s, 5*time.Second, "after FLUSHALL")
	})

	t.Run("Closed", func(t *testing.T) {
		b := goredisbackend.Dial(&redis.UniversalOptions{Addrs: []string{srv.Addr()}})
		b.Close()
		if _, err := b.WatchKey(context.Background(), "k"); !errors.Is(err, backend.ErrClosed) {
			t.Errorf("WatchKey after Close: %v, want backend.ErrClosed", err)
		}
	})
}

// TestWatchKeyNew: a Backend made by New, the way a service plugs in the
// client it already has, watches keys as one made by Dial does, with a
// watch client made from that client's options (a DEL by hand used to
// reach its holders only at the watchdog's tick); closing the Backend
// leaves the service's client open.
func TestWatchKeyNew(t *testing.T) {
	srv := redistest.Start(t)
	for name, client := range map[string]redis.UniversalClient{
		"Client":        redis.NewClient(&redis.Options{Addr: srv.Addr()}),
		"ClientWithCSC": redis.NewClient(&redis.Options{Addr: srv.Addr(), ClientSideCacheConfig: &redis.ClientSideCacheConfig{}}),
	} {
		t.Run(name, func(t *testing.T) {
			t.Cleanup(func() { client.Close() })
			b := goredisbackend.New(client)
			t.Cleanup(func() { b.Close() })
			testWatch(t, b, client)
			b.Close()
			if err := client.Ping(context.Background()).Err(); err != nil {
				t.Errorf("the service's client after the Backend's Close: %v", err)
			}
		})
	}
}

func TestWatchKeySentinel(t *testing.T) {
	primary := redistest.Start(t)
	redistest.StartReplica(t, primary)
	sentinel := redistest.StartSentinel(t, primary, "fairlock")
	b := goredisbackend.Dial(&redis.UniversalOptions{Addrs: []string{sentinel.Addr()}, MasterName: "fairlock"})
	t.Cleanup(func() { b.Close() })
	other := redis.NewClient(&redis.Options{Addr: primary.Addr()})
	t.Cleanup(func() { other.Close() })
	testWatch(t, b, other)
}

func TestWatchKeyCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	b := goredisbackend.Dial(&redis.UniversalOptions{Addrs: cluster.Addrs(), IsClusterMode: true})
	t.Cleanup(func() { b.Close() })
	other := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	t.Cleanup(func() { other.Close() })
	testWatch(t, b, other)

	// Keys on every node.
	t.Run("EveryNode", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for i := range 12 {
			key := fmt.Sprintf("watch-node-%d", i)
			if err := other.Set(ctx, key, "1", 0).Err(); err != nil {
				t.Fatal(err)
			}
			s, err := b.WatchKey(ctx, key)
			if err != nil {
				t.Fatalf("WatchKey %s: %v", key, err)
			}
			noEvent(t, s, key+" before DEL")
			if err := other.Del(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
			eventWithin(t, s, 5*time.Second, key+" after DEL")
			s.Close()
		}
	})
}

// TestWatchKeyNotSupported: clients that cannot track keys say so.
func TestWatchKeyNotSupported(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cases := []struct {
		name string
		b    func() *goredisbackend.Backend
	}{
		{"NewProtocol2", func() *goredisbackend.Backend {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Protocol: 2})
			t.Cleanup(func() { c.Close() })
			return goredisbackend.New(c)
		}},
		{"NewDB1", func() *goredisbackend.Backend {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr(), DB: 1})
			t.Cleanup(func() { c.Close() })
			return goredisbackend.New(c)
		}},
		{"DialProtocol2", func() *goredisbackend.Backend {
			return goredisbackend.Dial(&redis.UniversalOptions{Addrs: []string{srv.Addr()}, Protocol: 2})
		}},
		{"DialDB1", func() *goredisbackend.Backend {
			// go-redis turns client-side caching off outside DB 0.
			return goredisbackend.Dial(&redis.UniversalOptions{Addrs: []string{srv.Addr()}, DB: 1})
		}},
		{"DialCredentialsProvider", func() *goredisbackend.Backend {
			return goredisbackend.Dial(&redis.UniversalOptions{Addrs: []string{srv.Addr()},
				CredentialsProvider: func() (string, string) { return "", "" }})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := c.b()
			t.Cleanup(func() { b.Close() })
			s, err := b.WatchKey(ctx, "k")
			if !errors.Is(err, backend.ErrNotSupported) {
				if s != nil {
					s.Close()
				}
				t.Fatalf("WatchKey: %v, want backend.ErrNotSupported", err)
			}
			// The rest of the adapter still works.
			if _, err := b.Eval(ctx, backend.NewScript("one", "return 1"), []string{"k"}, nil); err != nil {
				t.Errorf("Eval: %v", err)
			}
		})
	}
}

// TestWatchKeyServerRefusesTracking: a server without CLIENT TRACKING
// (here: CLIENT renamed away) makes go-redis turn client-side caching off
// at run time; WatchKey notices that its EXISTS bypassed the cache.
func TestWatchKeyServerRefusesTracking(t *testing.T) {
	srv := redistest.Start(t, redistest.WithArgs("--rename-command", "CLIENT", "client-renamed-away"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := goredisbackend.Dial(&redis.UniversalOptions{Addrs: []string{srv.Addr()}})
	t.Cleanup(func() { b.Close() })
	s, err := b.WatchKey(ctx, "k")
	if !errors.Is(err, backend.ErrNotSupported) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("WatchKey: %v, want backend.ErrNotSupported", err)
	}
	if _, err := b.Eval(ctx, backend.NewScript("one", "return 1"), []string{"k"}, nil); err != nil {
		t.Errorf("Eval: %v", err)
	}
}

// TestWatchKeyOnReplica: a watch client whose connections are on a replica
// (as after a Sentinel failover demoted their server) hears of the changes
// the replica applies from its primary.
func TestWatchKeyOnReplica(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.StartReplica(t, primary)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	other := redis.NewClient(&redis.Options{Addr: primary.Addr()})
	t.Cleanup(func() { other.Close() })
	onReplica := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	t.Cleanup(func() { onReplica.Close() })
	b := goredisbackend.Dial(&redis.UniversalOptions{Addrs: []string{replica.Addr()}})
	t.Cleanup(func() { b.Close() })
	key := "watch-replicated"
	if err := other.Set(ctx, key, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 10*time.Second, "the key on the replica", func() bool {
		return onReplica.Exists(ctx, key).Val() == 1
	})
	s, err := b.WatchKey(ctx, key)
	if err != nil {
		t.Fatalf("WatchKey: %v", err)
	}
	defer s.Close()
	noEvent(t, s, "before DEL")
	if err := other.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	eventWithin(t, s, 5*time.Second, "after DEL on the primary")
}
