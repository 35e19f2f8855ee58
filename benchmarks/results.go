package main

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/fairlock/fairlock/lockbench"
)

// results is everything one run measured; benchmarks/results.json holds it.
type results struct {
	Meta        meta                          `json:"meta"`
	Settings    settings                      `json:"settings"`
	Kinds       []kindInfo                    `json:"locks"`
	Ping        []pingRound                   `json:"ping"`
	Uncontended map[string][]uncontendedRound `json:"uncontended"`
	// ClientFloors is scenario 1's floor on each client library fairlock
	// runs on (floorClients, by fairlockAdapter.name) in each round: two
	// empty scripts, timed in the same turns as the locks. The report's
	// floor is rueidis's (reportFloor).
	ClientFloors map[string][]lockbench.Latency `json:"uncontended_client_floors,omitempty"`
	// UncontendedFloor is the rueidis floor as raw files older than
	// ClientFloors have it; runs no longer write it (renderFrom moves it).
	UncontendedFloor []lockbench.Latency `json:"uncontended_floor,omitempty"`
	// UncontendedBare is fairlock's own two scripts sent without the lock
	// package (bareScripts) in each round, timed in the same turns.
	UncontendedBare []lockbench.Latency                 `json:"uncontended_bare,omitempty"`
	Contended       map[string]map[int][]contendedRound `json:"contended"`
	FIFO            map[string][]contendedRound         `json:"fifo"`
	Idle            map[string][]idleRound              `json:"idle_handover"`
	Many            map[string][]manyRound              `json:"many_locks"`
	ManySlow        map[string][]slowCalls              `json:"many_locks_observed"`
	// ManyBare is scenario 4 with fairlock's own two scripts sent without
	// the lock package (bareScripts), in each round.
	ManyBare []manyRound               `json:"many_locks_bare,omitempty"`
	Queue    []queueRound              `json:"queue_scaling"`
	Waiters  map[string][]waitersRound `json:"idle_waiters"`
	Errors   []string                  `json:"errors"`
}

func newResults(set settings) *results {
	return &results{
		Settings:    set,
		Uncontended: map[string][]uncontendedRound{},
		Contended:   map[string]map[int][]contendedRound{},
		FIFO:        map[string][]contendedRound{},
		Idle:        map[string][]idleRound{},
		Many:        map[string][]manyRound{},
		ManySlow:    map[string][]slowCalls{},
		Waiters:     map[string][]waitersRound{},
	}
}

func (r *results) addContended(kind string, c contendedRound) {
	if r.Contended[kind] == nil {
		r.Contended[kind] = map[int][]contendedRound{}
	}
	r.Contended[kind][c.Contenders] = append(r.Contended[kind][c.Contenders], c)
}

// reportFloor is the floor the report compares with: rueidis's, the
// first of floorClients.
func (r *results) reportFloor() []lockbench.Latency {
	return r.ClientFloors[floorClients[0].name]
}

type kindInfo struct {
	Name     string `json:"name"`
	Module   string `json:"module"`
	Version  string `json:"version"`
	Settings string `json:"settings"`
	Fairlock bool   `json:"fairlock"`
	Client   string `json:"client,omitempty"` // the client library it runs on (floorClient.name)
}

type meta struct {
	Date       time.Time     `json:"date"`
	Elapsed    time.Duration `json:"elapsed_ns"`
	Go         string        `json:"go"`
	Platform   string        `json:"platform"`
	GOMAXPROCS int           `json:"gomaxprocs"`
	CPU        string        `json:"cpu"`
	Cores      int           `json:"cores"`
	Memory     string        `json:"memory"`
	Kernel     string        `json:"kernel"`
	Redis      string        `json:"redis"`
	Commit     string        `json:"commit"`
	Dirty      []string      `json:"uncommitted"` // library files changed since Commit
	LoadBefore string        `json:"load_before"`
	LoadAfter  string        `json:"load_after"`
	Deps       []string      `json:"deps"` // client libraries, module@version
}

func collectMeta(ctx context.Context, start time.Time) meta {
	m := meta{
		Date: start.UTC(), Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH,
		GOMAXPROCS: runtime.GOMAXPROCS(0), Cores: runtime.NumCPU(), LoadBefore: loadAverage(),
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				m.Memory = strings.TrimSpace(v)
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
	}
	// Library code (the lock, its backends and lockbench; not tests) changed
	// since that commit.
	if out, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--",
		":(top)lock", ":(top)backend", ":(top)rueidisbackend", ":(top)valkeybackend", ":(top)goredisbackend", ":(top)lockbench",
		":(top,exclude,glob)**/*_test.go").Output(); err == nil {
		for line := range strings.Lines(string(out)) {
			m.Dirty = append(m.Dirty, strings.TrimSpace(line))
		}
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/redis/rueidis", "github.com/valkey-io/valkey-go", "github.com/go-redsync/redsync/v4",
				"github.com/bsm/redislock", "github.com/redis/go-redis/v9":
				m.Deps = append(m.Deps, d.Path+" "+d.Version)
			}
		}
	}
	slices.Sort(m.Deps)
	return m
}

// moduleVersion returns the version of a module this program was built
// with ("" when unknown; the replaced fairlock module reports its commit
// elsewhere).
func moduleVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			if d.Replace != nil {
				return "working tree (" + d.Replace.Path + ")"
			}
			return d.Version
		}
	}
	return ""
}

// loadAverage returns `uptime`'s output.
func loadAverage() string {
	out, err := exec.Command("uptime").Output()
	if err != nil {
		b, _ := os.ReadFile("/proc/loadavg")
		return "loadavg " + strings.TrimSpace(string(b))
	}
	return strings.TrimSpace(string(out))
}
