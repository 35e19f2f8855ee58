package redistest_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/redistest"
)

// TestRestartKeepsDataOnlyWithAOF checks what survives Stop or Kill followed
// by Restart: with WithAOF the keys and their expiry (as an absolute time),
// without it nothing.
func TestRestartKeepsDataOnlyWithAOF(t *testing.T) {
	const ttl = 60_000 // ms
	cases := []struct {
		name string
		opts []redistest.Option
		down func(*redistest.Server, testing.TB)
		kept bool
	}{
		{"AOF/Kill", []redistest.Option{redistest.WithAOF()}, (*redistest.Server).Kill, true},
		{"AOF/Stop", []redistest.Option{redistest.WithAOF()}, (*redistest.Server).Stop, true},
		{"default/Kill", nil, (*redistest.Server).Kill, false},
		{"default/Stop", nil, (*redistest.Server).Stop, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := redistest.Start(t, c.opts...)
			s.Do(t, "SET", "k", "v")
			if got := s.Do(t, "PEXPIRE", "k", strconv.Itoa(ttl)); got != int64(1) {
				t.Fatalf("PEXPIRE = %#v", got)
			}
			expiresBy := time.Now().Add(ttl * time.Millisecond) // the server set its deadline before this
			s.Do(t, "SET", "plain", "p")

			c.down(s, t)
			s.Restart(t)

			if !c.kept {
				if got := s.Do(t, "DBSIZE"); got != int64(0) {
					t.Fatalf("DBSIZE after Restart = %#v, want 0 (no persistence)", got)
				}
				return
			}
			if got := s.Do(t, "GET", "k"); got != "v" {
				t.Fatalf("GET k after Restart = %#v, want \"v\"", got)
			}
			if got := s.Do(t, "GET", "plain"); got != "p" {
				t.Fatalf("GET plain after Restart = %#v, want \"p\"", got)
			}
			if got := s.Do(t, "PTTL", "plain"); got != int64(-1) {
				t.Fatalf("PTTL plain after Restart = %#v, want -1 (no expiry)", got)
			}
			// A deadline reloaded as an absolute time has kept running
			// while the server was down; one re-applied as a relative TTL
			// at load time would exceed this bound by the down time. 1 ms
			// of slack covers the millisecond rounding.
			limit := time.Until(expiresBy).Milliseconds() + 1
			pttl, ok := s.Do(t, "PTTL", "k").(int64)
			if !ok || pttl <= 0 || pttl > limit {
				t.Fatalf("PTTL k after Restart = %d, want in (0, %d]", pttl, limit)
			}
		})
	}
}

// TestRestartReturnsAfterLoading checks that Restart waits until the whole
// append-only file has been loaded: while loading, redis-server answers
// PING with -LOADING, which does not count as ready.
func TestRestartReturnsAfterLoading(t *testing.T) {
	const keys = 200_000
	// Serve clients (with -LOADING) every KB of loading, not every 2 MB, so
	// that the probes during the load are answered.
	s := redistest.Start(t, redistest.WithAOF(), redistest.WithArgs("--loading-process-events-interval-bytes", "1024"))
	fill := "for i = 1, tonumber(ARGV[1]) do redis.call('SET', 'k' .. i, i) end"
	s.Do(t, "EVAL", fill, "0", strconv.Itoa(keys))
	s.Kill(t)
	s.Restart(t)
	info, _ := s.Do(t, "INFO", "persistence").(string)
	if !strings.Contains(info, "loading:0\r\n") {
		t.Fatalf("INFO persistence right after Restart:\n%s", info)
	}
	if got := s.Do(t, "DBSIZE"); got != int64(keys) {
		t.Fatalf("DBSIZE right after Restart = %#v, want %d", got, keys)
	}
}
