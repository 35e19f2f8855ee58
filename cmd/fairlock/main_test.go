package main

import (
	"bytes"
	"context"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/redis/rueidis"
)

// cliResult is what one run of the command line printed and returned.
type cliResult struct {
	stdout, stderr string
	code           int
}

// runCLI runs the command line in-process with vars as the environment
// (REDIS_URL of the test process is ignored), bounded by a minute.
func runCLI(t *testing.T, vars map[string]string, args ...string) cliResult {
	t.Helper()
	return runCLIEnv(t, env{getenv: func(k string) string { return vars[k] }}, args...)
}

// runCLIEnv runs the command line in-process in e, whose stdout and stderr
// it replaces to capture them; a nil stdin reads nothing and a nil getenv
// finds nothing.
func runCLIEnv(t *testing.T, e env, args ...string) cliResult {
	t.Helper()
	var out, errb bytes.Buffer
	e.stdout, e.stderr = &out, &errb
	if e.stdin == nil {
		e.stdin = strings.NewReader("")
	}
	if e.getenv == nil {
		e.getenv = func(string) string { return "" }
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := e.run(ctx, args)
	return cliResult{stdout: out.String(), stderr: errb.String(), code: code}
}

// checkNoLeaks fails the test if goroutines started during it are still
// running once its cleanups (registered later, so run earlier) are done.
func checkNoLeaks(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				n := runtime.Stack(buf, true)
				t.Fatalf("%d goroutines leaked:\n%s", runtime.NumGoroutine()-before, buf[:n])
			}
			<-tick.C
		}
	})
}

// testServer is a server the commands run against in tests.
type testServer struct {
	name string
	addr string
	mr   *miniredis.Miniredis // nil for a real redis-server
}

// startMiniredis starts a miniredis whose TTLs follow the wall clock, as
// the demo's embedded server does.
func startMiniredis(t *testing.T) testServer {
	t.Helper()
	mr := miniredis.NewMiniRedis()
	mr.ClockTTL(true)
	if err := mr.Start(); err != nil {
		t.Fatalf("miniredis: %v", err)
	}
	t.Cleanup(mr.Close)
	return testServer{name: "miniredis", addr: mr.Addr(), mr: mr}
}

// startRedis starts a real redis-server (the test fails if it cannot).
func startRedis(t *testing.T) testServer {
	t.Helper()
	return testServer{name: "redis", addr: redistest.Start(t).Addr()}
}

// forEachServer runs f against a miniredis and a real redis-server.
func forEachServer(t *testing.T, f func(t *testing.T, s testServer)) {
	for _, start := range []func(*testing.T) testServer{startMiniredis, startRedis} {
		s := start(t)
		t.Run(s.name, func(t *testing.T) { f(t, s) })
	}
}

// rawClient is a plain rueidis client for setting up and checking keys.
func rawClient(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatalf("rueidis: %v", err)
	}
	t.Cleanup(rc.Close)
	return rc
}

// lockClient is a lock client on addr, closed when the test ends.
func lockClient(t *testing.T, addr string, opts ...lock.Option) *lock.Client {
	t.Helper()
	rc := rawClient(t, addr)
	b := rueidisbackend.New(rc)
	t.Cleanup(func() { _ = b.Close() })
	c, err := lock.NewClient(b, opts...)
	if err != nil {
		t.Fatalf("lock.NewClient: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// refusedAddr returns a loopback address nothing listens on.
func refusedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

func TestRun_HelpAndUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, &out, &errb); code != exitOK {
		t.Fatalf("run --help = %d, stderr %q", code, errb.String())
	}
	for _, want := range []string{"demo", "inspect", "force-unlock", "delete", "bench", "version", "completion", "REDIS_URL", "Exit codes", "130  interrupted"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help output lacks %q:\n%s", want, out.String())
		}
	}

	tests := []struct {
		name     string
		args     []string
		code     int
		stdout   []string // substrings expected on stdout
		stderr   []string // substrings expected on stderr
		noStdout bool
	}{
		{name: "no command", args: nil, code: exitUsage, stderr: []string{"Usage:"}},
		{name: "unknown command", args: []string{"frob"}, code: exitUsage, stderr: []string{`unknown command "frob"`}},
		{name: "help command", args: []string{"help", "bench"}, code: exitOK,
			stdout: []string{"Usage: fairlock bench", "--ops int", "(default 2000)", "(default rueidis,valkey)"}},
		{name: "help unknown", args: []string{"help", "frob"}, code: exitUsage, stderr: []string{`unknown command "frob"`}},
		{name: "demo help lists defaults", args: []string{"demo", "--help"}, code: exitOK,
			stdout: []string{"--workers int", "(default 5)", "--hold duration", "(default 200ms)", "--lease duration", "(default 1s)", "--addr address"}},
		{name: "inspect help", args: []string{"inspect", "-h"}, code: exitOK,
			stdout: []string{"Usage: fairlock inspect [flags] NAME", "--watch", "(default 1s)", "(default 100)"}},
		{name: "bad flag", args: []string{"demo", "--bogus"}, code: exitUsage,
			stderr: []string{"unknown flag --bogus", "fairlock demo --help"}, noStdout: true},
		{name: "one-dash long flag", args: []string{"inspect", "x", "-addr", "h:1"}, code: exitUsage,
			stderr: []string{"unknown flag -addr (long flags take two dashes: --addr)"}},
		{name: "bad flag value", args: []string{"demo", "--hold", "soon"}, code: exitUsage, stderr: []string{`invalid value "soon" for --hold`}},
		{name: "duration without unit", args: []string{"demo", "--lease", "30"}, code: exitUsage,
			stderr: []string{`invalid value "30" for --lease: a duration needs a unit: 30s, 30ms or 30m`}},
		{name: "fractional duration without unit", args: []string{"inspect", "x", "--watch", "--interval", "0.5"}, code: exitUsage,
			stderr: []string{"a duration needs a unit: 0.5s"}},
		{name: "dial timeout without unit", args: []string{"bench", "--dial-timeout=5"}, code: exitUsage,
			stderr: []string{`invalid value "5" for --dial-timeout: a duration needs a unit`}},
		{name: "count without watch", args: []string{"inspect", "x", "--addr", "h:1", "--count", "3"}, code: exitUsage,
			stderr: []string{"--count only counts the refreshes of --watch"}},
		{name: "missing flag value", args: []string{"inspect", "x", "--addr"}, code: exitUsage, stderr: []string{"flag needs an argument: --addr"}},
		{name: "workers out of range", args: []string{"demo", "--workers", "1"}, code: exitUsage, stderr: []string{"--workers must be from 2 to 100"}},
		{name: "bad backend", args: []string{"bench", "--backend", "rueidis,jedis"}, code: exitUsage,
			stderr: []string{`invalid value "rueidis,jedis" for --backend: unknown client library "jedis" (want rueidis, valkey or goredis)`}},
		{name: "two backends where one is wanted", args: []string{"inspect", "x", "--backend", "rueidis,goredis"}, code: exitUsage,
			stderr: []string{"one client library at a time"}},
		{name: "help lists goredis", args: []string{"inspect", "--help"}, code: exitOK, stdout: []string{"rueidis, valkey or goredis"}},
		{name: "unexpected argument", args: []string{"bench", "extra"}, code: exitUsage, stderr: []string{`unexpected argument "extra"`}},
		{name: "two names", args: []string{"force-unlock", "a", "b"}, code: exitUsage, stderr: []string{`unexpected argument "b" (one lock NAME at a time)`}},
		{name: "prune-waiters help", args: []string{"prune-waiters", "--help"}, code: exitOK,
			stdout: []string{"Usage: fairlock prune-waiters [flags] NAME", "Client.PruneWaiters", "--yes"}},
		{name: "force-unlock without name", args: []string{"force-unlock"}, code: exitUsage, stderr: []string{"missing lock NAME"}},
		{name: "delete help", args: []string{"help", "delete"}, code: exitOK,
			stdout: []string{"Usage: fairlock delete [flags] NAME", "--yes", "fencing counter is kept"}},
		{name: "completion", args: []string{"completion", "bash"}, code: exitOK, stdout: []string{"bash completion", "fairlock"}},
		{name: "version flag", args: []string{"--version"}, code: exitOK, stdout: []string{"fairlock ", runtime.Version()}},
		{name: "version command", args: []string{"version"}, code: exitOK,
			stdout: []string{"fairlock ", "go       " + runtime.Version(), "github.com/redis/rueidis v", "github.com/redis/go-redis/v9 v"}},
		{name: "version takes no argument", args: []string{"version", "x"}, code: exitUsage, stderr: []string{`unexpected argument "x"`}},
		{name: "inspect without name", args: []string{"inspect", "--addr", "127.0.0.1:6379"}, code: exitUsage, stderr: []string{"missing lock NAME"}},
		{name: "inspect without server", args: []string{"inspect", "orders"}, code: exitUsage, stderr: []string{"set --addr or REDIS_URL"}},
		{name: "address without port", args: []string{"inspect", "orders", "--addr", "localhost"}, code: exitUsage,
			stderr: []string{`bad --addr "localhost"`, "missing port"}},
		{name: "bad port", args: []string{"inspect", "orders", "--addr", "redis://localhost:99999"}, code: exitUsage,
			stderr: []string{"not a number from 1 to 65535"}},
		{name: "bad scheme", args: []string{"bench", "--addr", "http://localhost:6379"}, code: exitUsage,
			stderr: []string{"invalid URL scheme"}},
		{name: "URL password not printed", args: []string{"inspect", "x", "--addr", "redis://u:hunter2@localhost:x"}, code: exitUsage,
			stderr: []string{"u:xxxxx@"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, nil, tc.args...)
			if r.code != tc.code {
				t.Fatalf("exit code %d, want %d\nstdout: %s\nstderr: %s", r.code, tc.code, r.stdout, r.stderr)
			}
			for _, s := range tc.stdout {
				if !strings.Contains(r.stdout, s) {
					t.Errorf("stdout lacks %q:\n%s", s, r.stdout)
				}
			}
			for _, s := range tc.stderr {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, r.stderr)
				}
			}
			if strings.Contains(r.stderr, "hunter2") {
				t.Errorf("stderr shows the password: %s", r.stderr)
			}
			if tc.noStdout && r.stdout != "" {
				t.Errorf("stdout not empty: %q", r.stdout)
			}
		})
	}
}

func TestRun_UnreachableServer(t *testing.T) {
	checkNoLeaks(t)
	addr := refusedAddr(t)
	for _, args := range [][]string{
		{"demo", "--addr", addr},
		{"demo", "--addr", addr, "--backend", "valkey"},
		{"inspect", "orders", "--addr", "redis://" + addr},
		{"bench", "--addr", addr, "--ops", "1"},
	} {
		r := runCLI(t, nil, args...)
		if r.code != exitUnreachable || !strings.Contains(r.stderr, "cannot connect to "+addr) {
			t.Errorf("%v: exit %d, stderr %q; want %d and \"cannot connect to %s\"", args, r.code, r.stderr, exitUnreachable, addr)
		}
	}
	// REDIS_URL is the default for --addr, and --addr wins over it.
	r := runCLI(t, map[string]string{"REDIS_URL": "redis://" + addr}, "inspect", "orders")
	if r.code != exitUnreachable || !strings.Contains(r.stderr, addr) {
		t.Errorf("REDIS_URL: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runCLI(t, map[string]string{"REDIS_URL": "redis://x:y:z"}, "inspect", "orders", "--addr", addr)
	if r.code != exitUnreachable {
		t.Errorf("--addr over a bad REDIS_URL: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestParse_FlagsAfterArguments(t *testing.T) {
	e := env{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, getenv: func(string) string { return "" }}
	cfg, err := parseInspect(e, []string{"orders", "--addr", "h:1", "--watch", "--count=3"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.name != "orders" || cfg.conn.addr != "h:1" || !cfg.watch || cfg.count != 3 {
		t.Fatalf("parsed %+v", cfg)
	}
	cfg, err = parseInspect(e, []string{"--addr", "h:1", "--", "--odd-name"})
	if err != nil || cfg.name != "--odd-name" {
		t.Fatalf(`"--" then a name: %+v, %v`, cfg, err)
	}
}

// mustMutex returns a new owner's Mutex for name.
func mustMutex(t *testing.T, c *lock.Client, name string) *lock.Mutex {
	t.Helper()
	m, err := c.NewMutex(name)
	if err != nil {
		t.Fatalf("NewMutex(%q): %v", name, err)
	}
	return m
}
