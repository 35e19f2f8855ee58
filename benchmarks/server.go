package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"
)

// redisServer is the redis-server process this run starts and stops: a
// free loopback port, no persistence, dying with this process.
type redisServer struct {
	addr    string
	cmd     *exec.Cmd
	exited  chan struct{}
	admin   rueidis.Client // for INFO, SLOWLOG, CONFIG, PING; no client tracking
	version string
}

// startRedis starts binary on a free 127.0.0.1 port and waits (at most
// 10 s) until it answers PING.
func startRedis(binary, dir string) (*redisServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	return startRedisAt(binary, dir, port)
}

// startRedisAt starts binary on port with dir as its directory (its log
// there too), and extra arguments after the usual ones.
func startRedisAt(binary, dir string, port int, extra ...string) (*redisServer, error) {
	var err error
	s := &redisServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), exited: make(chan struct{})}
	args := []string{
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--maxclients", "10000", "--loglevel", "warning",
		"--logfile", dir + "/redis.log"}
	s.cmd = exec.Command(binary, append(args, extra...)...)
	// The server dies with this process, whatever happens to it.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", binary, err)
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.admin, err = rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.addr}, DisableCache: true, ForceSingleClient: true})
		if err == nil {
			break
		}
		select {
		case <-s.exited:
			log, _ := os.ReadFile(dir + "/redis.log")
			return nil, fmt.Errorf("redis-server exited at start: %s", log)
		default:
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("redis-server at %s did not answer within 10s: %w", s.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	info, err := s.info(context.Background(), "server")
	if err != nil {
		s.stop()
		return nil, err
	}
	s.version = info["redis_version"]
	return s, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// stop kills the server and waits for it (at most 5 s).
func (s *redisServer) stop() {
	if s.admin != nil {
		s.admin.Close()
	}
	_ = s.cmd.Process.Kill()
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
	}
}

// do runs one command on the admin connection.
func (s *redisServer) do(ctx context.Context, args ...string) rueidis.RedisResult {
	return s.admin.Do(ctx, s.admin.B().Arbitrary(args...).Build())
}

// info returns the fields of an INFO section.
func (s *redisServer) info(ctx context.Context, section string) (map[string]string, error) {
	text, err := s.do(ctx, "INFO", section).ToString()
	if err != nil {
		return nil, fmt.Errorf("INFO %s: %w", section, err)
	}
	return parseInfo(text), nil
}

// parseInfo parses INFO-style "key:value" lines.
func parseInfo(text string) map[string]string {
	fields := make(map[string]string)
	// RESP3 verbatim strings may keep their "txt:" format prefix.
	text = strings.TrimPrefix(text, "txt:")
	for line := range strings.Lines(text) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && !strings.HasPrefix(k, "#") {
			fields[k] = v
		}
	}
	return fields
}

// infoInt is the integer value of an INFO field.
func infoInt(fields map[string]string, key string) (int64, error) {
	return strconv.ParseInt(fields[key], 10, 64)
}

// commandStat is one command's line of INFO commandstats.
type commandStat struct {
	Calls int64 `json:"calls"`
	Usec  int64 `json:"usec"`
}

// commandCalls is INFO commandstats by command name ("cmdstat_" stripped):
// commands run inside scripts are counted too.
type commandCalls map[string]commandStat

func (s *redisServer) commandCalls(ctx context.Context) (commandCalls, error) {
	fields, err := s.info(ctx, "commandstats")
	if err != nil {
		return nil, err
	}
	calls := make(commandCalls)
	for k, v := range fields {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		var st commandStat
		for _, kv := range strings.Split(v, ",") {
			key, val, _ := strings.Cut(kv, "=")
			var dst *int64
			switch key {
			case "calls":
				dst = &st.Calls
			case "usec":
				dst = &st.Usec
			default:
				continue
			}
			if *dst, err = strconv.ParseInt(val, 10, 64); err != nil {
				return nil, fmt.Errorf("commandstats %s: %w", k, err)
			}
		}
		calls[name] = st
	}
	return calls, nil
}

// since returns the calls made after before, leaving out the commands this
// program sends to measure (INFO, SLOWLOG, CONFIG).
func (c commandCalls) since(before commandCalls) commandCalls {
	d := make(commandCalls)
	for k, v := range c {
		if k == "info" || strings.HasPrefix(k, "slowlog") || strings.HasPrefix(k, "config") {
			continue
		}
		if n := v.Calls - before[k].Calls; n > 0 {
			d[k] = commandStat{Calls: n, Usec: v.Usec - before[k].Usec}
		}
	}
	return d
}

func (c commandCalls) total() int64 {
	var t int64
	for _, v := range c {
		t += v.Calls
	}
	return t
}

// cpuSeconds returns the server's used_cpu_sys + used_cpu_user.
func (s *redisServer) cpuSeconds(ctx context.Context) (float64, error) {
	fields, err := s.info(ctx, "cpu")
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, k := range []string{"used_cpu_sys", "used_cpu_user"} {
		v, err := strconv.ParseFloat(fields[k], 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu %s: %w", k, err)
		}
		sum += v
	}
	return sum, nil
}

// processCPU returns this process's user + system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machineJiffies returns the busy and total CPU time of the machine from
// /proc/stat's cpu line (idle and iowait count as not busy).
func machineJiffies() (busy, all uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0, 0
	}
	for i, f := range fields[1:min(len(fields), 9)] { // guest time is in user time already
		v, _ := strconv.ParseUint(f, 10, 64)
		all += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, all
}

// usage is what the server and this process did over a stretch of time.
type usage struct {
	calls       commandCalls
	serverCPU   float64 // seconds
	clientCPU   time.Duration
	wall        time.Duration
	machineBusy float64 // share of all cores busy, whoever used them (/proc/stat)
}

// meter takes the first reading of a usage; its end takes the second.
type meter struct {
	s         *redisServer
	calls     commandCalls
	serverCPU float64
	clientCPU time.Duration
	at        time.Time
	busy, all uint64 // /proc/stat jiffies
}

func (s *redisServer) startMeter(ctx context.Context) (*meter, error) {
	m := &meter{s: s}
	var err error
	if m.calls, err = s.commandCalls(ctx); err != nil {
		return nil, err
	}
	if m.serverCPU, err = s.cpuSeconds(ctx); err != nil {
		return nil, err
	}
	m.clientCPU, m.at = processCPU(), time.Now()
	m.busy, m.all = machineJiffies()
	return m, nil
}

func (m *meter) end(ctx context.Context) (usage, error) {
	u := usage{clientCPU: processCPU() - m.clientCPU, wall: time.Since(m.at)}
	if busy, all := machineJiffies(); all > m.all {
		u.machineBusy = float64(busy-m.busy) / float64(all-m.all)
	}
	calls, err := m.s.commandCalls(ctx)
	if err != nil {
		return u, err
	}
	cpu, err := m.s.cpuSeconds(ctx)
	if err != nil {
		return u, err
	}
	u.calls, u.serverCPU = calls.since(m.calls), cpu-m.serverCPU
	return u, nil
}

// slowEntry is one SLOWLOG entry.
type slowEntry struct {
	id       int64
	duration time.Duration // execution time, microsecond resolution
	args     []string
}

// slowlogOff is the slowlog threshold outside the instrumented runs: only
// calls slower than 10 ms are logged.
const slowlogOff = 10 * time.Millisecond

// setSlowlog logs every command that runs at least threshold from now on
// (0: every command; negative: none).
func (s *redisServer) setSlowlog(ctx context.Context, threshold time.Duration) error {
	return s.do(ctx, "CONFIG", "SET", "slowlog-log-slower-than", strconv.FormatInt(threshold.Microseconds(), 10)).Error()
}

// slowlog returns every SLOWLOG entry, oldest first.
func (s *redisServer) slowlog(ctx context.Context) ([]slowEntry, error) {
	msgs, err := s.do(ctx, "SLOWLOG", "GET", "-1").ToArray()
	if err != nil {
		return nil, fmt.Errorf("SLOWLOG GET: %w", err)
	}
	out := make([]slowEntry, 0, len(msgs))
	for i := len(msgs) - 1; i >= 0; i-- {
		f, err := msgs[i].ToArray()
		if err != nil || len(f) < 4 {
			return nil, errors.New("SLOWLOG GET: unexpected entry")
		}
		var e slowEntry
		e.id, _ = f[0].AsInt64()
		us, _ := f[2].AsInt64()
		e.duration = time.Duration(us) * time.Microsecond
		if e.args, err = f[3].AsStrSlice(); err != nil {
			return nil, fmt.Errorf("SLOWLOG GET: %w", err)
		}
		out = append(out, e)
	}
	return out, nil
}

// pingRTT returns n PING round trips on the admin client (rueidis, one
// caller: no pipelining with anyone else).
func (s *redisServer) pingRTT(ctx context.Context, n int) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for i := range n + 50 {
		t0 := time.Now()
		if err := s.admin.Do(ctx, s.admin.B().Ping().Build()).Error(); err != nil {
			return nil, err
		}
		if i >= 50 {
			out = append(out, time.Since(t0))
		}
	}
	return out, nil
}
