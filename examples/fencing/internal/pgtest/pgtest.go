// Package pgtest starts a throwaway PostgreSQL server for a test, as
// fairlock's redistest starts redis-server.
//
// The server's programs are taken from the directory in the
// FAIRLOCK_POSTGRES_BIN environment variable, else from the newest
// /usr/lib/postgresql/*/bin. When there are none, Start installs Debian's
// postgresql package (apt-get update, then apt-get install, through sudo
// when not root). PostgreSQL refuses to run as root, so a root test runs
// it as the postgres user the package creates.
//
// Each server gets a new cluster (initdb) in a temporary directory, listens
// on 127.0.0.1 on a free port and on a unix socket in that directory, and
// trusts every local connection. A t.Cleanup hook stops it and removes the
// directory. Start never skips: when PostgreSQL cannot be installed or
// started it fails the test, with the reason and the server's log.
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// installTimeout bounds apt-get update and install together: a few
	// seconds to a minute on a usual mirror.
	installTimeout = 10 * time.Minute
	// readyTimeout is how long a new server may take to accept a
	// connection (usually well under a second).
	readyTimeout = 30 * time.Second
	// stopTimeout is how long a fast shutdown may take before the server
	// is killed.
	stopTimeout = 10 * time.Second
	// startTries is how many free ports Start tries: another process can
	// take a port between the check and the server's bind.
	startTries = 3
	// runAs is the user a root test runs PostgreSQL as.
	runAs = "postgres"
)

// Server is a running PostgreSQL server.
type Server struct {
	dir  string // the temporary directory: data, socket and log
	port int
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has been reaped
}

// URL returns the connection URL of the server's postgres database, as
// the postgres superuser over TCP.
func (s *Server) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// Start installs PostgreSQL if it is missing, starts a server and waits
// until it accepts connections. See the package documentation.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := binDir(t)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	cred, err := credential()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	// Not t.TempDir: its parent is private to root, out of the postgres
	// user's reach.
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := command(cred, dir, filepath.Join(bin, "initdb"),
		"-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	s := &Server{dir: dir}
	t.Cleanup(func() { s.stop(t) })
	for try := 1; ; try++ {
		err := s.start(cred, bin, data)
		if err == nil {
			return s
		}
		log := s.logTail()
		if try < startTries && strings.Contains(log, "Address already in use") {
			t.Logf("pgtest: port %d was taken, trying another", s.port)
			continue
		}
		t.Fatalf("pgtest: cannot start PostgreSQL on 127.0.0.1:%d: %v\n%s", s.port, err, log)
	}
}

// start launches the server on a free port and waits until it accepts a
// connection. On failure the process is gone.
func (s *Server) start(cred *syscall.Credential, bin, data string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	s.port = port
	logFile, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close() // the child has its own copy
	s.cmd = command(cred, s.dir, filepath.Join(bin, "postgres"),
		"-D", data, "-p", strconv.Itoa(port), "-k", s.dir,
		"-c", "listen_addresses=127.0.0.1",
		// A test's data need not survive a crash of the machine.
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	if err := s.cmd.Start(); err != nil {
		return err
	}
	s.done = make(chan struct{})
	go func() {
		s.cmd.Wait()
		close(s.done)
	}()
	if err := s.waitReady(); err != nil {
		s.kill()
		return err
	}
	return nil
}

// waitReady connects until a connection succeeds, the server exits or
// readyTimeout passes.
func (s *Server) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		conn, err := pgx.Connect(ctx, s.URL())
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case <-s.done:
			return fmt.Errorf("postgres exited (%v)", s.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("no connection within %v: %w", readyTimeout, err)
		case <-tick.C:
		}
	}
}

// stop asks the server for a fast shutdown (SIGINT: sessions are ended,
// then a checkpoint) and kills it if it has not exited within stopTimeout.
func (s *Server) stop(t testing.TB) {
	if s.cmd == nil || s.done == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.done:
	case <-time.After(stopTimeout):
		t.Errorf("pgtest: PostgreSQL did not stop within %v; killing it\n%s", stopTimeout, s.logTail())
		s.kill()
	}
}

// kill kills the server's process group (the postmaster and its
// backends) and waits for the postmaster to be reaped.
func (s *Server) kill() {
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
}

func (s *Server) logPath() string { return filepath.Join(s.dir, "postgres.log") }

// logTail is the end of the server's log, for failure messages.
func (s *Server) logTail() string {
	b, _ := os.ReadFile(s.logPath())
	return "postgres.log:\n" + string(tail(b))
}

// command returns a command that runs in dir as the user cred names (nil:
// as this process), in its own process group, killed if the test binary
// dies without its cleanups (a go test -timeout panic).
func command(cred *syscall.Credential, dir, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd
}

// credential returns the user to run PostgreSQL as: nil for this
// process's own user, the postgres user when running as root.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(runAs)
	if err != nil {
		return nil, fmt.Errorf("running as root, PostgreSQL must run as the %s user: %w", runAs, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// binDir returns the directory of initdb and postgres, installing Debian's
// postgresql package when there is none.
func binDir(t testing.TB) (string, error) {
	t.Helper()
	if dir := os.Getenv("FAIRLOCK_POSTGRES_BIN"); dir != "" {
		return dir, nil
	}
	if dir := newestBinDir(); dir != "" {
		return dir, nil
	}
	t.Logf("pgtest: PostgreSQL not found: installing Debian's postgresql package")
	start := time.Now()
	if err := install(); err != nil {
		return "", fmt.Errorf("PostgreSQL is missing and could not be installed (install Debian's postgresql package, or set FAIRLOCK_POSTGRES_BIN to the directory of initdb and postgres): %w", err)
	}
	t.Logf("pgtest: installed PostgreSQL in %v", time.Since(start).Round(time.Second))
	if dir := newestBinDir(); dir != "" {
		return dir, nil
	}
	return "", errors.New("postgresql installed, but no /usr/lib/postgresql/*/bin/postgres")
}

// newestBinDir returns the bin directory of the newest PostgreSQL under
// /usr/lib/postgresql, or "".
func newestBinDir() string {
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	version := func(path string) int {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
		return v
	}
	slices.SortFunc(found, func(a, b string) int { return version(a) - version(b) })
	if len(found) == 0 {
		return ""
	}
	return filepath.Dir(found[len(found)-1])
}

// install runs apt-get update, then installs the postgresql package, with
// sudo when not root.
func install() error {
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	var sudo []string
	if os.Geteuid() != 0 {
		sudo = []string{"sudo"}
	}
	steps := [][]string{
		{"apt-get", "update"},
		{"env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "--no-install-recommends", "postgresql"},
	}
	for _, step := range steps {
		args := append(slices.Clone(sudo), step...)
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w\n%s", strings.Join(args, " "), errors.Join(err, ctx.Err()), tail(out.Bytes()))
		}
	}
	return nil
}

// tail is the end of a command's output or of a log, for error messages.
func tail(b []byte) []byte {
	const keep = 4000
	if len(b) > keep {
		return b[len(b)-keep:]
	}
	return b
}

// freePort returns a port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
