package sim

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock/redistest"
)

// TestDifferential keeps the in-process server honest: the script
// requests a simulated run sent (faults and all) are replayed, in the
// order the simulation's server answered them, on a fresh redis-server
// and a fresh miniredis with the simulation's script engine (which must
// have run them), and the two must reply alike - up to numbers
// that follow the clock (tokens, deadlines, TTLs) and error texts (the
// first word of an error must match).
func TestDifferential(t *testing.T) {
	cfg := DefaultConfig(uint64(time.Now().UnixNano()))
	cfg.Duration = 20 * time.Second
	cfg.Record = true
	res := Run(t, cfg, t.TempDir())
	if len(res.Exchanges) < 100 {
		t.Fatalf("seed %d: only %d script exchanges recorded", cfg.Seed, len(res.Exchanges))
	}
	real := redistest.Start(t)
	mini := miniredis.RunT(t)
	mini.ClockTTL(true) // TTLs run on the wall clock, as redis-server's do
	engine, err := installScripting(mini)
	if err != nil {
		t.Fatal(err)
	}
	replies := replay(t, [2]string{real.Addr(), mini.Addr()}, res.Exchanges)
	onReal, onMini := replies[0], replies[1]
	differ, gaps := 0, 0
	known := knownGaps(res.Exchanges, onMini)
	for i, x := range res.Exchanges {
		a, b := normalise(onReal[i]), normalise(onMini[i])
		if a == b {
			continue
		}
		if known[scriptDigest(x.Request)] {
			gaps++
			continue
		}
		differ++
		if differ <= 5 {
			t.Errorf("seed %d, exchange %d: %q\nredis-server: %q\nminiredis:    %q", cfg.Seed, i, clip(res.Exchanges[i].Request), a, b)
		}
	}
	if engine.Runs() < len(res.Exchanges)*9/10 {
		t.Errorf("seed %d: the script engine ran %d of the %d exchanges", cfg.Seed, engine.Runs(), len(res.Exchanges))
	}
	t.Logf("seed %d: %d script exchanges replayed on both servers, %d replied differently, %d more by the known gap (server_info.lua: miniredis' INFO has no memory or server section)",
		cfg.Seed, len(res.Exchanges), differ, gaps)
}

// knownGaps returns the digests of the scripts miniredis cannot run as
// Redis does: server_info.lua reads INFO's memory and server sections,
// which miniredis refuses ("section (memory) is not supported"), so in
// the simulation the lock goes on without the server's memory limit,
// eviction policy and version.
func knownGaps(xs []Exchange, onMini [][]byte) map[string]bool {
	out := map[string]bool{}
	for i, x := range xs {
		if bytes.Contains(onMini[i], []byte("is not supported")) {
			out[scriptDigest(x.Request)] = true
		}
	}
	return out
}

// scriptDigest returns the SHA-1 (hex) of the script an EVAL carries, or
// the digest an EVALSHA names.
func scriptDigest(request []byte) string {
	words, err := bulkStrings(request)
	if err != nil || len(words) < 2 {
		return ""
	}
	if strings.EqualFold(words[0], "EVAL") {
		sum := sha1.Sum([]byte(words[1]))
		return hex.EncodeToString(sum[:])
	}
	return strings.ToLower(words[1])
}

// replay sends each request to both servers in lockstep - one request
// to the first, its reply, the same request to the second, its reply -
// on one new connection each, and returns the replies of each. In
// lockstep a key's time to live has run down alike on both when a
// script reads it, to within the round trip.
func replay(t *testing.T, addrs [2]string, xs []Exchange) (out [2][][]byte) {
	t.Helper()
	var rs [2]*bufio.Reader
	var cs [2]net.Conn
	for k, addr := range addrs {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.SetDeadline(time.Now().Add(2 * time.Minute)); err != nil {
			t.Fatal(err)
		}
		cs[k], rs[k], out[k] = c, bufio.NewReader(c), make([][]byte, len(xs))
	}
	for i, x := range xs {
		for k := range cs {
			var err error
			if _, err = cs[k].Write(x.Request); err == nil {
				out[k][i], err = readFrame(rs[k])
			}
			if err != nil {
				t.Fatalf("replay on %s, exchange %d: %v", addrs[k], i, err)
			}
		}
	}
	return out
}

var (
	// waitHint is an acquire reply's wait hint, when it did not acquire
	// ({0, hint, ...}): under 100 ms it is the hash's PTTL, which follows
	// the clock however few its digits (CI on d9e4d40: 19 ms on
	// redis-server, 18 on miniredis).
	waitHint = regexp.MustCompile(`^(\*[35]\r\n:0\r\n):-?[0-9]+\r\n`)
	bigInt   = regexp.MustCompile(`(?m)^:-?[0-9]{3,}\r$`)
	bigBulk  = regexp.MustCompile(`\$[0-9]+\r\n-?[0-9]{3,}\r\n`)
	errText  = regexp.MustCompile(`(?m)^-([A-Z]+)[^\r]*\r$`)
)

// normalise hides what follows the clock: integers of three digits or
// more (tokens, deadlines, TTLs and wait hints in milliseconds, as
// integers or strings: a Redisson tryLock's reply is the lock's PTTL, a
// few hundred milliseconds that ran down a little further on the server
// asked second), an acquire's wait hint of any size, and an error's text
// after its first word. Counts, positions and flags stay exact.
func normalise(reply []byte) string {
	s := waitHint.ReplaceAllString(string(reply), "${1}:N\r\n")
	s = bigBulk.ReplaceAllString(s, "$$N\r\nN\r\n")
	s = bigInt.ReplaceAllString(s, ":N\r")
	return errText.ReplaceAllString(s, "-$1\r")
}

func clip(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

// TestNormaliseWaitHint: two acquire replies that differ only in a short
// wait hint (the hash's PTTL, a millisecond apart) normalise alike, and
// ones that differ in position or head do not.
func TestNormaliseWaitHint(t *testing.T) {
	a, b := "*5\r\n:0\r\n:19\r\n:0\r\n:1\r\n:1700000000000000\r\n", "*5\r\n:0\r\n:18\r\n:0\r\n:1\r\n:1700000000000001\r\n"
	if normalise([]byte(a)) != normalise([]byte(b)) {
		t.Errorf("%q and %q normalise to %q and %q", a, b, normalise([]byte(a)), normalise([]byte(b)))
	}
	for _, c := range []string{"*5\r\n:0\r\n:18\r\n:2\r\n:1\r\n:1700000000000001\r\n", "*5\r\n:0\r\n:18\r\n:0\r\n:0\r\n:1700000000000001\r\n"} {
		if normalise([]byte(a)) == normalise([]byte(c)) {
			t.Errorf("%q and %q normalise alike: %q", a, c, normalise([]byte(c)))
		}
	}
}
