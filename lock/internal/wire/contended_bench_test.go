package wire

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/redistest"
	"github.com/redis/rueidis"
)

// What the server spends per contended acquisition on the scripts alone,
// with no lock package around them: 16 owners take turns on one lock, each
// turn the holder's Unlock handing the lock over to the head of the queue
// and the holder queuing again behind the other 14 (the per-acquisition
// line of TestScriptCommands, over and over). Run it with
//
//	go test -run '^$' -bench Contended -benchtime 3000x ./lock/internal/wire/
//
// It reports, per acquisition: the server's CPU (INFO cpu, used_cpu_sys +
// used_cpu_user: the whole process, so reading and replying count too),
// the same for as many empty scripts (EVALSHA of "return 1": what the
// requests cost before any script runs), the scripts' own time
// (INFO commandstats), the commands they call and those commands' own
// time (the rest of the scripts' time is Lua and each redis.call's work
// around its command). The sub-benchmarks run
// the same Lua two ways: EVALSHA, as the lock does, and FCALL, the same
// code loaded once as a Redis Functions library whose helpers are made at
// load time, not at every call (benchLibrary) - the measurement behind
// DESIGN.md's decision to stay with EVALSHA (the wire contract).

// benchLibrary is the acquire and unlock scripts as one Redis Functions
// library: base.lua and prelude.lua at the top (made once, when the
// library loads), a reset of the per-run state they keep, and each
// script's own text as a function's body.
func benchLibrary() string {
	var b strings.Builder
	b.WriteString("#!lua name=fairlock_bench\n")
	b.WriteString(baseLua + "\n" + preludeLua + "\n")
	b.WriteString(`local function reset()
  clock_us, clock_ms = 0, nil
  front, front_whole, front_lives = nil, false, nil
  also, also_live = nil, nil
  token_read = nil
end
`)
	for _, f := range []struct{ name, fast, body string }{
		{"fairlock_acquire", acquireFastLua, acquireLua},
		{"fairlock_unlock", unlockFastLua, unlockLua},
	} {
		fmt.Fprintf(&b, "redis.register_function('%s', function(KEYS, ARGV)\nreset()\n%s\n%s\nend)\n", f.name, f.fast, f.body)
	}
	return b.String()
}

// serverCPU is the server's CPU time so far, in µs.
func serverCPU(tb testing.TB, c rueidis.Client) float64 {
	tb.Helper()
	s, err := c.Do(context.Background(), c.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		tb.Fatal(err)
	}
	var sum float64
	for line := range strings.Lines(s) {
		for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), k); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					tb.Fatalf("INFO cpu %s: %v", line, err)
				}
				sum += f
			}
		}
	}
	return sum * 1e6
}

// scriptStats is the scripts' time in µs, the commands they called and
// those commands' own time in µs, from INFO commandstats.
func scriptStats(tb testing.TB, c rueidis.Client) (scriptUsec, commands, commandUsec float64) {
	tb.Helper()
	s, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		tb.Fatal(err)
	}
	for name, st := range commandStats(s) {
		switch name {
		case "info", "config|resetstat":
		case "evalsha", "fcall":
			scriptUsec += float64(st.usec)
		default:
			commands += float64(st.calls)
			commandUsec += float64(st.usec)
		}
	}
	return scriptUsec, commands, commandUsec
}

func BenchmarkContended(b *testing.B) {
	srv := redistest.Start(b)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	s := NewScripts()
	for _, sc := range []*backend.Script{s.acquire, s.unlock} {
		if err := c.Do(ctx, c.B().ScriptLoad().Script(sc.Source).Build()).Error(); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.Do(ctx, c.B().FunctionLoad().Replace().FunctionCode(benchLibrary()).Build()).Error(); err != nil {
		b.Fatal(err)
	}
	empty, err := c.Do(ctx, c.B().ScriptLoad().Script("return 1").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	evalsha := func(call backend.Call) rueidis.Completed {
		return c.B().Evalsha().Sha1(call.Script.SHA1).Numkeys(int64(len(call.Keys))).Key(call.Keys...).Arg(call.Args...).Build()
	}
	fcall := func(call backend.Call) rueidis.Completed {
		return c.B().Fcall().Function("fairlock_" + call.Script.Name).Numkeys(int64(len(call.Keys))).Key(call.Keys...).Arg(call.Args...).Build()
	}
	for _, way := range []struct {
		name string
		cmd  func(backend.Call) rueidis.Completed
	}{{"evalsha", evalsha}, {"fcall", fcall}} {
		b.Run(way.name, func(b *testing.B) {
			benchContended(b, c, s, way.cmd, empty, benchContenders)
		})
	}
	// One owner, nobody queued: the uncontended pair, each turn an Unlock
	// and the Lock after it (the fast paths, acquire_fast.lua and
	// unlock_fast.lua).
	b.Run("evalsha_pair", func(b *testing.B) {
		benchContended(b, c, s, evalsha, empty, 1)
	})
}

// benchContenders is how many owners take turns in the contended runs.
const benchContenders = 16

func benchContended(b *testing.B, c rueidis.Client, s *Scripts, cmd func(backend.Call) rueidis.Completed, empty string, owners int) {
	ctx := context.Background()
	do := func(call backend.Call) string {
		v, err := c.Do(ctx, cmd(call)).ToAny()
		if err != nil {
			b.Fatalf("%s: %v", call.Script.Name, err)
		}
		return fmt.Sprint(v)
	}
	if err := c.Do(ctx, c.B().Flushall().Build()).Error(); err != nil {
		b.Fatal(err)
	}
	tr := newTurns(b, s, "bench-"+b.Name(), owners, do)
	for range 100 {
		tr.turn()
	}
	if err := c.Do(ctx, c.B().ConfigResetstat().Build()).Error(); err != nil {
		b.Fatal(err)
	}
	cpu0 := serverCPU(b, c)
	b.ResetTimer()
	for range b.N {
		tr.turn()
	}
	b.StopTimer()
	cpu1 := serverCPU(b, c)
	scriptUsec, commands, commandUsec := scriptStats(b, c)
	for range 2 * b.N {
		c.Do(ctx, c.B().Evalsha().Sha1(empty).Numkeys(0).Build())
	}
	cpu2 := serverCPU(b, c)
	n := float64(b.N)
	b.ReportMetric((cpu1-cpu0)/n, "server-µs/acq")
	b.ReportMetric((cpu2-cpu1)/n, "empty-µs/acq")
	b.ReportMetric(scriptUsec/n, "script-µs/acq")
	b.ReportMetric(commandUsec/n, "cmd-µs/acq") // the commands' own share of script-µs
	b.ReportMetric(commands/n, "cmds/acq")
}
