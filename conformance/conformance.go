// Package conformance is the test suite every fairlock backend must pass.
// It checks each behaviour rule of the fair lock (the B-, X- and P-rules of
// RULES.md, named in the subtests) through the lock package running on the
// backend under test, so two backends that pass it behave the same.
//
// Run it from a test in the backend's package, against a real redis-server
// from package github.com/fairlock/fairlock/redistest:
//
//	func TestConformance(t *testing.T) {
//		srv := redistest.Start(t) // or any Redis 7 you control
//		conformance.Run(t, func(t testing.TB) backend.Backend {
//			b := mybackend.New(mybackend.Dial(srv.Addr()))
//			t.Cleanup(func() { b.Close() })
//			return b
//		}, conformance.WithServer(srv))
//	}
//
// The factory is called once per simulated process and must return a new,
// independent backend (its own subscription connection) on the same server
// each time; the suite closes the lock clients it builds, the factory's
// cleanup closes the backend. Everything the suite reads or writes goes
// through the backend under test; WithServer adds the cases that need to
// pause, stop or restart the server, and they are skipped, saying so, when
// it is not given. Subtests use their own lock names and run in parallel,
// except the fault cases, which run one at a time at the end.
package conformance

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
)

// Factory returns a new backend connected to the server under test; it
// registers the backend's closing with tb.Cleanup.
type Factory func(tb testing.TB) backend.Backend

// Server controls the Redis server under test, for the fault cases.
// *redistest.Server (package github.com/fairlock/fairlock/redistest)
// implements it.
type Server interface {
	// Addr is the server's "host:port".
	Addr() string
	// Do sends one raw command and returns its decoded reply.
	Do(t testing.TB, args ...string) any
	// Pause stops the server process (SIGSTOP) until Resume.
	Pause(t testing.TB)
	// Resume continues a paused server and waits until it answers.
	Resume(t testing.TB)
	// Stop shuts the server down; Restart starts it again on the same
	// address, with an empty dataset and script cache (so a
	// redistest.Server started without redistest.WithAOF).
	Stop(t testing.TB)
	Restart(t testing.TB)
}

// Option configures Run.
type Option func(*config)

type config struct {
	server  Server
	replica Server
	scale   int
	cases   []string // name prefixes of the cases to run; nil: all
}

// WithServer gives the suite control of the server, enabling the fault
// cases (server restart, SCRIPT FLUSH, pause).
func WithServer(s Server) Option { return func(c *config) { c.server = s } }

// WithReplica names a replica of the server (Server.Do, Pause and Resume
// are used), enabling the replica-safety case (X9). It is skipped, saying
// so, without one.
func WithReplica(r Server) Option { return func(c *config) { c.replica = r } }

// WithScale multiplies the sizes of the load cases (default 1: 500 owners
// in the many-owners case); values below 1 are taken as 1.
func WithScale(n int) Option { return func(c *config) { c.scale = max(n, 1) } }

// WithCases runs only the cases whose names start with one of prefixes,
// such as "B1_" or "X16_" (default: every case), for a subset that checks
// one concern - a transport, a server setting - without the whole suite's
// minutes. go test's -run selects the same from outside.
func WithCases(prefixes ...string) Option { return func(c *config) { c.cases = prefixes } }

// selected reports whether the case called name runs.
func (c *config) selected(name string) bool {
	if c.cases == nil {
		return true
	}
	for _, p := range c.cases {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// testCase is one subtest that runs in parallel with the others.
type testCase struct {
	// name is the subtest's name, led by the code of the rule it checks
	// (RULES.md).
	name string
	run  func(t *testing.T, s *suite)
}

// sequentialCase is a subtest that runs alone, after the parallel ones.
type sequentialCase struct {
	// name is the subtest's name, led by the code of the rule it checks.
	name string
	run  func(t *testing.T, s *suite)
	// needsServer: the case uses the Server hooks (WithServer).
	needsServer bool
	// needsReplica: the case pauses a replica (WithReplica).
	needsReplica bool
}

// Run runs the suite against the backends newBackend returns.
func Run(t *testing.T, newBackend Factory, opts ...Option) {
	cfg := config{scale: 1}
	for _, o := range opts {
		o(&cfg)
	}
	s := &suite{newBackend: func(tb testing.TB) capable { return capableOf(newBackend(tb)) }, cfg: cfg}
	t.Run("rules", func(t *testing.T) {
		for _, tc := range slices.Concat(ruleCases(), lifecycleCases(), mixedKeyCases(), handOverCases(), parityCases(), historyCases(), defectCases()) {
			if !cfg.selected(tc.name) {
				continue
			}
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.run(t, s)
			})
		}
	})
	// One at a time: these watch or disturb the whole server or process.
	t.Run("sequential", func(t *testing.T) {
		for _, tc := range sequentialCases() {
			if !cfg.selected(tc.name) {
				continue
			}
			t.Run(tc.name, func(t *testing.T) {
				if tc.needsServer && cfg.server == nil {
					t.Skip("conformance: no Server given (WithServer); this case needs one")
				}
				if tc.needsReplica && cfg.replica == nil {
					t.Skip("conformance: no replica given (WithReplica); this case needs one")
				}
				tc.run(t, s)
			})
		}
	})
}

// Bounds used by the timing checks. They are upper bounds for a loaded
// 2-core CI machine running with -race, not speed goals (those live in
// benchmarks).
const (
	// slack is added to every "within" bound.
	slack = 2 * time.Second
	// eventually bounds polling for a state that must come.
	eventually = 10 * time.Second
)
