package rueidisbackend_test

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/redistest"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

// The tests of CachedRead (backend.CachedReader), against redis-server.

func cachedBackend(t *testing.T, opt rueidis.ClientOption) *rueidisbackend.Backend {
	t.Helper()
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	t.Cleanup(rc.Close)
	b := rueidisbackend.New(rc)
	t.Cleanup(func() { b.Close() })
	return b
}

// serverCalls is the number of commands the server has run, from INFO
// commandstats, leaving out INFO itself, PING (the client's keep-alive)
// and (UN)SUBSCRIBE (the subscription connection's business).
func serverCalls(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	info, _ := srv.Do(t, "INFO", "commandstats").(string)
	var n int64
	for line := range strings.Lines(info) {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || name == "cmdstat_info" || name == "cmdstat_ping" || strings.HasSuffix(name, "subscribe") {
			continue
		}
		calls, _, _ := strings.Cut(stats, ",")
		c, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("INFO commandstats: %q: %v", line, err)
		}
		n += c
	}
	return n
}

// TestCachedReadAnswersFromCacheUntilTheKeyChanges: a second read of
// unchanged keys sends nothing; a write by another connection reaches the
// next reads through the server's invalidation.
func TestCachedReadAnswersFromCacheUntilTheKeyChanges(t *testing.T) {
	srv := redistest.Start(t)
	srv.Do(t, "HSET", "h", "a:1", "2")
	srv.Do(t, "PEXPIREAT", "h", "4102444800000") // 2100-01-01
	srv.Do(t, "RPUSH", "l", "x", "y")
	srv.Do(t, "ZADD", "z", "1700000000123", "x")
	b := cachedBackend(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmds := [][]string{
		{"HGETALL", "h"}, {"PEXPIRETIME", "h"}, {"GET", "missing"}, {"LLEN", "l"},
		{"LRANGE", "l", "0", "-1"}, {"ZMSCORE", "z", "x", "nobody"},
	}
	want := []backend.Reply{
		backend.ArrayReply(backend.StringReply("a:1"), backend.StringReply("2")),
		backend.IntReply(4102444800000),
		{},
		backend.IntReply(2),
		backend.ArrayReply(backend.StringReply("x"), backend.StringReply("y")),
		backend.ArrayReply(backend.StringReply("1700000000123"), backend.Reply{}),
	}
	got, err := b.CachedRead(ctx, time.Minute, cmds)
	if err != nil {
		t.Fatalf("first CachedRead: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("first CachedRead = %+v, want %+v", got, want)
	}

	before := serverCalls(t, srv)
	for range 10 {
		if got, err = b.CachedRead(ctx, time.Minute, cmds); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("cached CachedRead = %+v, %v; want %+v", got, err, want)
		}
	}
	if sent := serverCalls(t, srv) - before; sent != 0 {
		t.Fatalf("10 reads of unchanged keys sent %d commands, want 0", sent)
	}

	srv.Do(t, "HSET", "h", "a:1", "3")
	deadline := time.Now().Add(2 * time.Second)
	for {
		got, err := b.CachedRead(ctx, time.Minute, cmds[:1])
		if err != nil {
			t.Fatalf("CachedRead after HSET: %v", err)
		}
		if got[0].Elems[1].Str == "3" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CachedRead still shows %+v 2s after HSET: no invalidation", got[0])
		}
	}
}

// TestCachedReadNotSupported: clients that do not cache say so.
func TestCachedReadNotSupported(t *testing.T) {
	srv := redistest.Start(t)
	mini := miniredis.RunT(t)
	for _, tc := range []struct {
		name string
		opt  rueidis.ClientOption
	}{
		{"DisableCache", rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true}},
		{"miniredis", rueidis.ClientOption{InitAddress: []string{mini.Addr()}, DisableCache: true, ForceSingleClient: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := cachedBackend(t, tc.opt)
			_, err := b.CachedRead(context.Background(), time.Second, [][]string{{"GET", "k"}})
			if !errors.Is(err, backend.ErrNotSupported) {
				t.Fatalf("CachedRead = %v, want ErrNotSupported", err)
			}
		})
	}
}

// TestCachedReadRejectsWhatItCannotCache: commands outside the contract's
// list, and a ttl under a millisecond, fail before anything is sent.
func TestCachedReadRejectsWhatItCannotCache(t *testing.T) {
	srv := redistest.Start(t)
	b := cachedBackend(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		cmd  []string
		want string
	}{
		{"PTTL changes with time", time.Second, []string{"PTTL", "k"}, `"PTTL"`},
		{"a write", time.Second, []string{"SET", "k", "v"}, `"SET"`},
		{"no key", time.Second, []string{"GET"}, `"GET"`},
		{"empty", time.Second, nil, "[]"},
		{"zero ttl", 0, []string{"GET", "k"}, "ttl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := serverCalls(t, srv)
			_, err := b.CachedRead(context.Background(), tc.ttl, [][]string{tc.cmd})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CachedRead(%q) = %v, want an error naming %s", tc.cmd, err, tc.want)
			}
			if sent := serverCalls(t, srv) - before; sent != 0 {
				t.Fatalf("a rejected read sent %d commands", sent)
			}
		})
	}
}

// TestCachedReadEntriesLiveAtMostTTL: without any write, a cached reply
// is read from the server again once ttl has passed, not before.
func TestCachedReadEntriesLiveAtMostTTL(t *testing.T) {
	srv := redistest.Start(t)
	b := cachedBackend(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	const ttl = 100 * time.Millisecond
	cmds := [][]string{{"GET", "k"}}
	start := time.Now() // the entry's life starts after this
	if _, err := b.CachedRead(context.Background(), ttl, cmds); err != nil {
		t.Fatalf("CachedRead: %v", err)
	}
	before := serverCalls(t, srv)
	deadline := start.Add(5 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var end time.Time // when the latest read returned
	for serverCalls(t, srv) == before {
		if time.Now().After(deadline) {
			t.Fatalf("a reply cached for %v was still served after 5s", ttl)
		}
		<-tick.C
		if _, err := b.CachedRead(context.Background(), ttl, cmds); err != nil {
			t.Fatalf("CachedRead: %v", err)
		}
		end = time.Now()
	}
	// The read that went to the server returned at end. The client keeps
	// expiry times in whole milliseconds.
	if age := end.Sub(start); age < ttl-2*time.Millisecond {
		t.Fatalf("read from the server again %v after the first read, before the ttl %v", age, ttl)
	}
}
