package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/lockbench"
	"github.com/google/pprof/profile"
)

// scriptStat is one Lua script's calls during an instrumented run, from
// SLOWLOG: named by its SHA-1 prefix and its numbers of keys and arguments.
type scriptStat struct {
	Script string        `json:"script"`
	Calls  int           `json:"calls"`
	Server time.Duration `json:"server_ns"` // summed execution time
}

// startSlowlog makes the server log every command, in a log long enough
// for an instrumented run, and returns the function that reads the log
// and restores the settings.
func (s *redisServer) startSlowlog(ctx context.Context) (stop func() ([]slowEntry, error), err error) {
	if err := s.do(ctx, "CONFIG", "SET", "slowlog-max-len", "65536").Error(); err != nil {
		return nil, err
	}
	if err := s.setSlowlog(ctx, 0); err != nil {
		return nil, err
	}
	if err := s.do(ctx, "SLOWLOG", "RESET").Error(); err != nil {
		return nil, err
	}
	return func() ([]slowEntry, error) {
		if err := s.setSlowlog(ctx, slowlogOff); err != nil {
			return nil, err
		}
		entries, err := s.slowlog(ctx)
		_ = s.do(ctx, "SLOWLOG", "RESET").Error()
		return entries, err
	}, nil
}

// calibrateScripts learns which script is which, by SHA-1 prefix, from
// the SLOWLOG of a few calls of known kinds on a lock of its own: an
// acquire and an unlock by one owner, with watchdog renewals in between
// (a 30 ms lease renews every 10 ms), a second owner queueing and giving
// up (its last call is leave), and an Inspect.
func (b *bench) calibrateScripts(ctx context.Context, k lockKind) (map[string]string, error) {
	clients, err := connectMany(k, b.srv.addr, 2, connOpts{lease: 30 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	defer closeAll(clients)
	name := b.lockName("calibrate")
	m1, err := clients[0].mutex(name)
	if err != nil {
		return nil, err
	}
	m2, err := clients[1].mutex(name)
	if err != nil {
		return nil, err
	}
	calls := func() error {
		if _, err := m1.Lock(ctx); err != nil {
			return err
		}
		if _, err := m2.TryLock(ctx, 5*time.Millisecond); !errors.Is(err, lock.ErrNotAcquired) {
			return fmt.Errorf("calibration: TryLock of a held lock: %v", err)
		}
		time.Sleep(40 * time.Millisecond)
		if err := m1.Unlock(ctx); err != nil {
			return err
		}
		_, err := m1.Inspect(ctx, 1)
		return err
	}
	// Once to load the scripts, so that the second time they are EVALSHA.
	if err := calls(); err != nil {
		return nil, err
	}
	stop, err := b.srv.startSlowlog(ctx)
	if err != nil {
		return nil, err
	}
	if err := calls(); err != nil {
		return nil, err
	}
	entries, err := stop()
	if err != nil {
		return nil, err
	}
	names := map[string]string{}
	var first, second []string // SHA prefixes of each owner's script calls, in order
	var lastOther string
	for _, e := range entries {
		if len(e.args) < 3 || strings.ToUpper(e.args[0]) != "EVALSHA" {
			continue
		}
		sha := e.args[1][:min(8, len(e.args[1]))]
		switch {
		case slices.Contains(e.args, m1.Owner()):
			first = append(first, sha)
		case slices.Contains(e.args, m2.Owner()):
			second = append(second, sha)
		default:
			lastOther = sha
		}
	}
	if len(first) < 2 || len(second) < 2 || lastOther == "" {
		return nil, fmt.Errorf("calibration: unexpected slowlog (%d, %d script calls by the two owners)", len(first), len(second))
	}
	names[first[0]] = "acquire"
	names[first[len(first)-1]] = "unlock"
	for _, sha := range first[1 : len(first)-1] {
		if names[sha] == "" {
			names[sha] = "renew"
		}
	}
	names[second[len(second)-1]] = "leave"
	names[lastOther] = "inspect"
	return names, nil
}

// scriptStats groups the script calls among entries, most called first;
// names maps SHA-1 prefixes to script names (calibrateScripts).
func scriptStats(entries []slowEntry, names map[string]string) []scriptStat {
	by := map[string]*scriptStat{}
	for _, e := range entries {
		if len(e.args) < 3 {
			continue
		}
		cmd := strings.ToUpper(e.args[0])
		if cmd != "EVALSHA" && cmd != "EVAL" {
			continue
		}
		name := e.args[1]
		if cmd == "EVAL" {
			name = "EVAL"
		} else if len(name) > 8 {
			name = name[:8]
		}
		keys, _ := strconv.Atoi(e.args[2])
		label := fmt.Sprintf("%s (%d keys, %d args)", name, keys, max(0, len(e.args)-3-keys))
		if n := names[name]; n != "" {
			label = n
		}
		st := by[label]
		if st == nil {
			st = &scriptStat{Script: label}
			by[label] = st
		}
		st.Calls++
		st.Server += e.duration
	}
	out := make([]scriptStat, 0, len(by))
	for _, st := range by {
		out = append(out, *st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Calls > out[j].Calls })
	return out
}

// profileSummary is where this process's CPU went during an instrumented
// run (runtime/pprof): the share of samples by package and the functions
// with the most CPU of their own.
type profileSummary struct {
	Total     time.Duration  `json:"total_ns"`
	Packages  []profileShare `json:"packages"`  // flat, by package
	Functions []profileShare `json:"functions"` // flat, top functions
	Cum       []profileShare `json:"cumulative"`
	raw       *bytes.Buffer
}

type profileShare struct {
	Name  string  `json:"name"`
	Share float64 `json:"share"`
}

// startProfile starts the CPU profile; stop ends it and summarises it.
func startProfile() (stop func() (*profileSummary, error), err error) {
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		return nil, err
	}
	return func() (*profileSummary, error) {
		pprof.StopCPUProfile()
		p, err := profile.Parse(bytes.NewReader(buf.Bytes()))
		if err != nil {
			return nil, err
		}
		return summarizeProfile(p), nil
	}, nil
}

func summarizeProfile(p *profile.Profile) *profileSummary {
	vi := len(p.SampleType) - 1 // cpu nanoseconds
	var total int64
	flat, pkgs, cum := map[string]int64{}, map[string]int64{}, map[string]int64{}
	for _, s := range p.Sample {
		v := s.Value[vi]
		total += v
		seen := map[string]bool{}
		for i, loc := range s.Location {
			for j, line := range loc.Line {
				if line.Function == nil {
					continue
				}
				fn := line.Function.Name
				if i == 0 && j == 0 {
					flat[fn] += v
					pkgs[packageOf(fn)] += v
				}
				if !seen[fn] {
					seen[fn] = true
					cum[fn] += v
				}
			}
		}
	}
	top := func(m map[string]int64, n int, keep func(string) bool) []profileShare {
		var out []profileShare
		for k, v := range m {
			if keep == nil || keep(k) {
				out = append(out, profileShare{k, float64(v) / float64(max(total, 1))})
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Share > out[j].Share })
		return out[:min(n, len(out))]
	}
	// Cumulative: the library and client code worth naming, not the
	// runtime's or this program's own frames.
	library := func(fn string) bool {
		for _, p := range []string{"github.com/fairlock/fairlock/lock.", "github.com/fairlock/fairlock/backend.", "github.com/fairlock/fairlock/rueidisbackend.", "github.com/fairlock/fairlock/valkeybackend.", "github.com/redis/rueidis.", "github.com/valkey-io/valkey-go."} {
			if strings.HasPrefix(fn, p) {
				return true
			}
		}
		return false
	}
	return &profileSummary{
		Total:     time.Duration(total),
		Packages:  top(pkgs, 8, nil),
		Functions: top(flat, 10, nil),
		Cum:       top(cum, 10, library),
	}
}

// packageOf returns the package path of a function name such as
// "github.com/redis/rueidis.(*pipe).Do" or "runtime.mallocgc".
func packageOf(fn string) string {
	slash := strings.LastIndex(fn, "/")
	dot := strings.Index(fn[slash+1:], ".")
	if dot < 0 {
		return fn
	}
	return fn[:slash+1+dot]
}

// slowCalls describes the Lock calls of an instrumented many-locks run
// that took longer than Threshold.
type slowCalls struct {
	Calls     int               `json:"calls"`
	Threshold time.Duration     `json:"threshold_ns"`
	Slow      int               `json:"slow"`
	Queued    int               `json:"slow_queued"`
	Woken     int               `json:"slow_woken"` // got at least one wake-up message
	ToWake    lockbench.Summary `json:"slow_start_to_first_wake"`
	WakeToEnd lockbench.Summary `json:"slow_last_wake_to_end"`
	Unwoken   lockbench.Summary `json:"slow_unwoken_wait"`
}

func describeSlow(calls []wakeRecord, threshold time.Duration) slowCalls {
	s := slowCalls{Calls: len(calls), Threshold: threshold}
	var toWake, wakeToEnd, unwoken []time.Duration
	for _, c := range calls {
		if c.err != nil || c.end.Sub(c.start) < threshold {
			continue
		}
		s.Slow++
		if !c.queued.IsZero() {
			s.Queued++
		}
		if c.wakeups > 0 {
			s.Woken++
			toWake = append(toWake, c.firstWake.Sub(c.start))
			wakeToEnd = append(wakeToEnd, c.end.Sub(c.lastWake))
		} else {
			unwoken = append(unwoken, c.end.Sub(c.start))
		}
	}
	s.ToWake, s.WakeToEnd, s.Unwoken = lockbench.Summarize(toWake), lockbench.Summarize(wakeToEnd), lockbench.Summarize(unwoken)
	return s
}
