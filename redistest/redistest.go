package redistest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	// envBinary names the environment variable that overrides the
	// redis-server binary.
	envBinary = "FAIRLOCK_REDIS_SERVER"
	// fallbackBinary is used when redis-server is not in PATH.
	fallbackBinary = "/usr/bin/redis-server"

	startTimeout   = 15 * time.Second // until a started server answers PING
	stopTimeout    = 15 * time.Second // until a SIGTERMed server exits
	killTimeout    = 15 * time.Second // until a SIGKILLed server is reaped
	replicaTimeout = 30 * time.Second // until master_link_status:up
	clusterTimeout = 45 * time.Second // until every node reports cluster_state:ok
	pingTimeout    = 2 * time.Second  // one readiness probe
	doTimeout      = 15 * time.Second // one Server.Do round trip
	pollInterval   = 25 * time.Millisecond

	maxBindTries = 5   // redis-server start attempts on bind failures
	maxPortTries = 100 // candidate ports examined by freePort

	clusterBusOffset = 10000 // cluster bus port = port + clusterBusOffset
	maxClusterPort   = 55535 // cluster ports stay below, so the bus port is valid
	clusterSlots     = 16384

	logTailBytes = 4096
)

// errAddrInUse marks a start failure caused by a port already being bound.
var errAddrInUse = errors.New("address already in use")

// Binary returns the path of the redis-server binary used by this package:
// the value of the FAIRLOCK_REDIS_SERVER environment variable if set, else
// redis-server found in PATH, else /usr/bin/redis-server. It returns an
// error if none of them is an executable file.
func Binary() (string, error) {
	if p := os.Getenv(envBinary); p != "" {
		path, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("redistest: %s=%q: %w", envBinary, p, err)
		}
		return path, nil
	}
	if path, err := exec.LookPath("redis-server"); err == nil {
		return path, nil
	}
	if path, err := exec.LookPath(fallbackBinary); err == nil {
		return path, nil
	}
	return "", fmt.Errorf("redistest: redis-server not found in PATH nor at %s; install it (apt-get install redis-server) or set %s", fallbackBinary, envBinary)
}

// config collects the settings applied by Options.
type config struct {
	args    []string
	cluster bool
	aof     bool
	monitor string // sentinel mode: the "sentinel monitor ..." config line
}

// Option configures a server started by Start or StartReplica.
type Option func(*config)

// WithArgs appends extra redis-server command-line arguments, for example
// WithArgs("--notify-keyspace-events", "Kx"). They come after the package's
// own arguments, so they can override them.
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// WithAOF turns on the append-only file (--appendonly yes --appendfsync
// always), so that the data survives Server.Stop, Server.Kill (SIGKILL) or a
// crash followed by Server.Restart: the file lives in the server's directory,
// which Restart reuses, and every write is fsynced before it is answered, so
// whatever a client saw acknowledged is there after the restart. Keys keep
// their expiry as an absolute time (the file records PEXPIREAT), so a TTL
// keeps running while the server is down. Restart returns only once the file
// has been loaded. Without WithAOF (the default) every restart starts with an
// empty dataset. Arguments given with WithArgs still come last and can
// override these.
func WithAOF() Option {
	return func(c *config) { c.aof = true }
}

// withCluster enables cluster mode (used by StartCluster).
func withCluster() Option {
	return func(c *config) { c.cluster = true }
}

// Server is a redis-server process started by Start, StartReplica or
// StartCluster. Its methods may be called from several goroutines, but those
// taking a testing.TB may fail the test and must then follow the testing
// package's rules for Fatal.
type Server struct {
	bin  string
	dir  string
	port int
	args []string

	mu   sync.Mutex
	proc *process // the latest process; nil before the first start
}

// process is one run of redis-server.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has been reaped
	err  error         // result of cmd.Wait; valid once done is closed
}

// exited reports whether the process has exited and been reaped.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits at most d for the process to exit and reports whether it did.
func (p *process) wait(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-p.done:
		return true
	case <-timer.C:
		return false
	}
}

// Start starts a standalone redis-server on a free 127.0.0.1 port, in a
// directory from t.TempDir, without persistence unless WithAOF is given (and
// with repl-diskless-sync-delay 0, so replicas sync at once), and waits (at
// most 15 s) until it answers PING. opts add redis-server arguments. A
// t.Cleanup hook kills the server and reaps the process. If the server
// cannot be started, Start calls t.Fatalf with the reason and the tail of
// the server's log; it never skips the test.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	var cfg config
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	bin, err := Binary()
	if err != nil {
		t.Fatalf("%v", err)
	}
	s := &Server{bin: bin}
	for attempt := 1; ; attempt++ {
		dir := t.TempDir()
		if attempt == 1 {
			// Registered after the first TempDir call, so it runs before
			// the temporary directories are removed.
			t.Cleanup(func() { s.cleanup(t) })
		}
		port, err := freePort(cfg.cluster)
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s.dir, s.port, s.args = dir, port, buildArgs(port, dir, cfg)
		if cfg.monitor != "" {
			// Sentinel keeps its state in a config file it rewrites.
			if err := os.WriteFile(filepath.Join(dir, sentinelConf), []byte(cfg.monitor+"\n"), 0o644); err != nil {
				t.Fatalf("redistest: %v", err)
			}
		}

		s.mu.Lock()
		err = s.startLocked()
		s.mu.Unlock()
		if err == nil {
			return s
		}
		if errors.Is(err, errAddrInUse) && attempt < maxBindTries {
			t.Logf("redistest: port %d (or its cluster bus port) was taken, retrying with another port", port)
			continue
		}
		t.Fatalf("redistest: cannot start redis-server on %s: %v%s", s.Addr(), err, s.logTail())
	}
}

// buildArgs returns the redis-server command line for a server.
func buildArgs(port int, dir string, cfg config) []string {
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		// No RDB snapshots; the append-only file only with WithAOF.
		"--save", "",
		"--appendonly", "no",
		"--logfile", filepath.Join(dir, "redis.log"),
		"--daemonize", "no",
		"--protected-mode", "no",
		// Start a replica's full sync at once instead of waiting 5 s for
		// more replicas to show up.
		"--repl-diskless-sync-delay", "0",
	}
	if cfg.aof {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	}
	if cfg.monitor != "" {
		args = append([]string{filepath.Join(dir, sentinelConf), "--sentinel"}, args...)
	}
	if cfg.cluster {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
		)
	}
	return append(args, cfg.args...)
}

// freePort returns a port on 127.0.0.1 that was free a moment ago. With
// withBus the port is below 55535 and its cluster bus port (port+10000) was
// free as well.
func freePort(withBus bool) (int, error) {
	var lastErr error
	for range maxPortTries {
		port, err := listenPort(0)
		if err != nil {
			lastErr = err
			continue
		}
		if !withBus {
			return port, nil
		}
		if port >= maxClusterPort {
			lastErr = fmt.Errorf("port %d too high for a cluster node", port)
			continue
		}
		if _, err := listenPort(port + clusterBusOffset); err != nil {
			lastErr = fmt.Errorf("cluster bus port: %w", err)
			continue
		}
		return port, nil
	}
	return 0, fmt.Errorf("no free port on 127.0.0.1 after %d tries: %v", maxPortTries, lastErr)
}

// listenPort binds 127.0.0.1:port (0 = any), closes the listener again and
// returns the port.
func listenPort(port int) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return 0, err
	}
	p := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, err
	}
	return p, nil
}

// startLocked launches a new process with s.args and waits until it
// answers PING. On failure no process is left running. s.mu must be held.
func (s *Server) startLocked() error {
	logOff := fileSize(s.logPath())
	stdioOff := fileSize(s.stdioPath())
	p, err := s.launch()
	if err != nil {
		return err
	}
	s.proc = p
	err = waitReady(s.Addr(), p, startTimeout)
	if err == nil {
		return nil
	}
	if !p.exited() {
		if kerr := s.killLocked(); kerr != nil {
			err = fmt.Errorf("%w; %v", err, kerr)
		}
		return err
	}
	if bytes.Contains(readFrom(s.logPath(), logOff), []byte("Address already in use")) ||
		bytes.Contains(readFrom(s.stdioPath(), stdioOff), []byte("Address already in use")) {
		return fmt.Errorf("%w: %v", errAddrInUse, err)
	}
	return err
}

// launch starts redis-server and a goroutine that reaps it.
func (s *Server) launch() (*process, error) {
	stdio, err := os.OpenFile(s.stdioPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.dir
	cmd.Stdout = stdio
	cmd.Stderr = stdio
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		stdio.Close()
		return nil, fmt.Errorf("exec %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		stdio.Close()
		close(p.done)
	}()
	return p, nil
}

// waitReady polls addr with PING until the server answers PONG (or
// -NOAUTH), the process exits, or timeout elapses. A server loading its
// data answers -LOADING and is not ready yet.
func waitReady(addr string, p *process, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	var last error
	for {
		if p.exited() {
			return fmt.Errorf("redis-server exited before answering PING (%v)", p.err)
		}
		reply, err := roundTrip(addr, pingTimeout, "PING")
		switch {
		case err != nil:
			last = err
		case reply == "PONG":
			return nil
		default:
			// -NOAUTH (requirepass via WithArgs) still proves the server
			// is up; -LOADING and the like do not.
			if e, ok := reply.(respError); ok && strings.HasPrefix(string(e), "NOAUTH") {
				return nil
			}
			last = fmt.Errorf("PING replied %#v", reply)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer to PING within %v: %v", timeout, last)
		}
		select {
		case <-p.done:
		case <-ticker.C:
		}
	}
}

// killLocked SIGKILLs the current process, if running, and waits for it to
// be reaped. s.mu must be held.
func (s *Server) killLocked() error {
	p := s.proc
	if p == nil {
		return nil
	}
	if p.exited() {
		return nil
	}
	if err := p.forceKill(); err != nil {
		return fmt.Errorf("kill redis-server %s (pid %d): %w", s.Addr(), p.cmd.Process.Pid, err)
	}
	if !p.wait(killTimeout) {
		return fmt.Errorf("redis-server %s (pid %d) still running %v after SIGKILL", s.Addr(), p.cmd.Process.Pid, killTimeout)
	}
	return nil
}

// cleanup is the t.Cleanup hook: it makes sure no process is left behind.
func (s *Server) cleanup(t testing.TB) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.killLocked(); err != nil {
		t.Errorf("redistest: cleanup: %v", err)
	}
}

// runningLocked returns the running process or fails the test. s.mu must be
// held.
func (s *Server) runningLocked(t testing.TB, op string) *process {
	t.Helper()
	if s.proc == nil || s.proc.exited() {
		t.Fatalf("redistest: %s %s: redis-server is not running", op, s.Addr())
	}
	return s.proc
}

// Addr returns the server's address, "127.0.0.1:port".
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Port returns the server's TCP port. It stays the same across Restart.
func (s *Server) Port() int { return s.port }

// Stop shuts the server down with SIGTERM and waits (at most 15 s) until the
// process has exited; if it has not by then, it is killed. A paused server
// is resumed so that it can act on the signal. Stop is a no-op if the server
// is not running.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil || p.exited() {
		return
	}
	if err := p.terminate(); err != nil {
		t.Fatalf("redistest: Stop %s: %v", s.Addr(), err)
	}
	if p.wait(stopTimeout) {
		return
	}
	t.Logf("redistest: Stop %s: redis-server did not exit within %v of SIGTERM, killing it", s.Addr(), stopTimeout)
	if err := s.killLocked(); err != nil {
		t.Fatalf("redistest: Stop: %v", err)
	}
}

// Kill kills the server with SIGKILL, simulating a crash, and waits until
// the process is gone. Kill is a no-op if the server is not running.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.killLocked(); err != nil {
		t.Fatalf("redistest: Kill: %v", err)
	}
}

// Pause freezes the server with SIGSTOP, simulating a hung server: the
// kernel still accepts connections, but nothing is answered until Resume.
// The test fails if the server is not running.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.runningLocked(t, "Pause")
	if err := p.pause(); err != nil {
		t.Fatalf("redistest: Pause %s: %v", s.Addr(), err)
	}
}

// Resume continues a paused server with SIGCONT and waits (at most 15 s)
// until it answers PING again. The test fails if the server is not running.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.runningLocked(t, "Resume")
	if err := p.resume(); err != nil {
		t.Fatalf("redistest: Resume %s: %v", s.Addr(), err)
	}
	if err := waitReady(s.Addr(), p, startTimeout); err != nil {
		t.Fatalf("redistest: Resume %s: %v%s", s.Addr(), err, s.logTail())
	}
}

// Restart starts the server again, after Stop or Kill (or a crash), on the
// same port, with the same arguments and directory, and waits (at most
// 15 s) until it answers PING with PONG; while it is still loading its data
// it answers -LOADING, which does not count. Data is not persisted across
// restarts (save and appendonly are off) unless the server was started with
// WithAOF, but a cluster node keeps its nodes.conf and so its identity and
// slots. The test fails if the server is still running or cannot be
// started.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && !s.proc.exited() {
		t.Fatalf("redistest: Restart %s: redis-server is still running; call Stop or Kill first", s.Addr())
	}
	var err error
	for range maxBindTries {
		if err = s.startLocked(); err == nil || !errors.Is(err, errAddrInUse) {
			break
		}
	}
	if err != nil {
		t.Fatalf("redistest: Restart %s: %v%s", s.Addr(), err, s.logTail())
	}
}

// Do sends one command over a fresh connection and returns the decoded
// reply: string (simple and bulk strings), int64, nil (null), []any (arrays,
// possibly nested) or, for an error reply such as -ERR, a value of type
// error. The round trip is bounded (15 s); I/O and protocol errors, including
// that timeout, fail the test with t.Fatalf.
func (s *Server) Do(t testing.TB, args ...string) any {
	t.Helper()
	if len(args) == 0 {
		t.Fatalf("redistest: Do %s: no command given", s.Addr())
	}
	reply, err := roundTrip(s.Addr(), doTimeout, args...)
	if err != nil {
		t.Fatalf("redistest: Do %s %q: %v", s.Addr(), args, err)
	}
	return reply
}

// mustDo is Do that also fails the test on an error reply.
func (s *Server) mustDo(t testing.TB, args ...string) any {
	t.Helper()
	reply := s.Do(t, args...)
	if err, ok := reply.(error); ok {
		t.Fatalf("redistest: %s %q: %v", s.Addr(), args, err)
	}
	return reply
}

// StartReplica starts a server (as Start, with opts) that replicates
// primary, and waits (at most 30 s) until its INFO replication reports
// master_link_status:up.
func StartReplica(t testing.TB, primary *Server, opts ...Option) *Server {
	t.Helper()
	all := append([]Option{WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(primary.Port()))}, opts...)
	r := Start(t, all...)
	var status string
	ok := poll(replicaTimeout, func() bool {
		status, _ = infoField(r.Do(t, "INFO", "replication"), "master_link_status")
		return status == "up"
	})
	if !ok {
		t.Fatalf("redistest: replica %s of %s: master_link_status is %q after %v%s%s",
			r.Addr(), primary.Addr(), status, replicaTimeout, r.logTail(), primary.logTail())
	}
	return r
}

// sentinelConf is the config file of a sentinel, in its directory.
const sentinelConf = "sentinel.conf"

// StartSentinel starts a Redis Sentinel (redis-server --sentinel) that
// monitors primary under masterName with quorum 1, and waits (at most
// 30 s) until it reports the primary's address for that name. Clients
// reach the primary through it, as in production sentinel setups.
func StartSentinel(t testing.TB, primary *Server, masterName string) *Server {
	t.Helper()
	line := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1", masterName, primary.Port())
	s := Start(t, func(c *config) { c.monitor = line })
	var got any
	ok := poll(replicaTimeout, func() bool {
		got = s.Do(t, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", masterName)
		addr, _ := got.([]any)
		return len(addr) == 2 && addr[0] == "127.0.0.1" && addr[1] == strconv.Itoa(primary.Port())
	})
	if !ok {
		t.Fatalf("redistest: sentinel %s does not report %s as %q (got %v)%s", s.Addr(), primary.Addr(), masterName, got, s.logTail())
	}
	return s
}

// Cluster is a Redis Cluster of primaries started by StartCluster.
type Cluster struct {
	nodes []*Server
}

// StartCluster starts n (at least 3) cluster-enabled primaries, assigns the
// 16384 hash slots evenly in ranges (node i gets the i-th range), joins the
// nodes with CLUSTER MEET and waits (at most 45 s) until every node reports
// cluster_state:ok and knows all n nodes. Cleanup is registered on t as for
// Start.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("redistest: StartCluster needs at least 3 nodes, got %d", n)
	}
	c := &Cluster{nodes: make([]*Server, 0, n)}
	for range n {
		c.nodes = append(c.nodes, Start(t, withCluster()))
	}
	for i, node := range c.nodes {
		// Distinct config epochs, as redis-cli --cluster create does, spare
		// the nodes the epoch-collision dance.
		node.mustDo(t, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1))
		lo, hi := i*clusterSlots/n, (i+1)*clusterSlots/n-1
		node.mustDo(t, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi))
	}
	for _, node := range c.nodes[1:] {
		c.nodes[0].mustDo(t, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(node.Port()))
	}
	var status string
	ok := poll(clusterTimeout, func() bool {
		for _, node := range c.nodes {
			info := node.Do(t, "CLUSTER", "INFO")
			state, _ := infoField(info, "cluster_state")
			slots, _ := infoField(info, "cluster_slots_ok")
			known, _ := infoField(info, "cluster_known_nodes")
			if state != "ok" || slots != strconv.Itoa(clusterSlots) || known != strconv.Itoa(n) {
				status = fmt.Sprintf("node %s: cluster_state:%s cluster_slots_ok:%s cluster_known_nodes:%s",
					node.Addr(), state, slots, known)
				return false
			}
		}
		return true
	})
	if !ok {
		var tails strings.Builder
		for _, node := range c.nodes {
			tails.WriteString(node.logTail())
		}
		t.Fatalf("redistest: cluster not ready after %v: %s%s", clusterTimeout, status, tails.String())
	}
	return c
}

// Addrs returns the nodes' addresses, in the order of Nodes.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, node := range c.nodes {
		addrs[i] = node.Addr()
	}
	return addrs
}

// Nodes returns the cluster's nodes; node i owns the i-th slot range.
func (c *Cluster) Nodes() []*Server {
	return append([]*Server(nil), c.nodes...)
}

// Eventually calls cond every EventuallyInterval until it returns true,
// and fails the test (t.Fatalf, so from the test's goroutine only), naming
// what it waited for, once timeout has passed first.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !pollEvery(EventuallyInterval, timeout, cond) {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// EventuallyInterval is how often Eventually calls its condition.
const EventuallyInterval = 5 * time.Millisecond

// poll calls cond every pollInterval until it returns true (poll returns
// true) or timeout elapses (poll returns false).
func poll(timeout time.Duration, cond func() bool) bool {
	return pollEvery(pollInterval, timeout, cond)
}

// pollEvery calls cond every interval until it returns true (pollEvery
// returns true) or timeout elapses (pollEvery returns false).
func pollEvery(interval, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		<-ticker.C
	}
}

func (s *Server) logPath() string   { return filepath.Join(s.dir, "redis.log") }
func (s *Server) stdioPath() string { return filepath.Join(s.dir, "stdio.log") }

// logTail formats the end of the server's log file and of its captured
// stdout/stderr for failure messages.
func (s *Server) logTail() string {
	var b strings.Builder
	for _, path := range []string{s.logPath(), s.stdioPath()} {
		data := readFrom(path, fileSize(path)-logTailBytes)
		if len(bytes.TrimSpace(data)) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n--- tail of %s ---\n%s", path, bytes.TrimRight(data, "\n"))
	}
	if b.Len() == 0 {
		return "\n(redis-server wrote no log output)"
	}
	return b.String()
}

// fileSize returns the size of path, or 0 if it cannot be determined.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// readFrom returns the contents of path from offset off on (nil on error).
func readFrom(path string, off int64) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(max(off, 0), io.SeekStart); err != nil {
		return nil
	}
	data, _ := io.ReadAll(f)
	return data
}
