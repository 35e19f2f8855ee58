package main

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// These tests run the built binary: what only a process shows (signals,
// exit codes, a stdin that is not a terminal, build information).

var built struct {
	once sync.Once
	path string
	err  error
}

// binary builds the command once per test process and returns its path.
func binary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "fairlock-bin-")
		if err != nil {
			built.err = err
			return
		}
		built.path = filepath.Join(dir, "fairlock")
		out, err := exec.Command("go", "build", "-o", built.path, ".").CombinedOutput()
		if err != nil {
			built.err = errors.New(string(out))
		}
	})
	if built.err != nil {
		t.Fatalf("go build: %v", built.err)
	}
	return built.path
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.path != "" {
		_ = os.RemoveAll(filepath.Dir(built.path))
	}
	os.Exit(code)
}

// command returns the binary with args, its stdin from /dev/null (not a
// terminal), killed if the test outlives a minute.
func command(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Env = append(os.Environ(), "REDIS_URL=")
	return cmd
}

// SIGINT ends inspect --watch with 130, as the exit-code table says.
func TestBinary_InterruptedWatchExits130(t *testing.T) {
	s := startRedis(t)
	cmd := command(t, "inspect", "orders", "--addr", s.addr, "--watch", "--interval", "50ms")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Interrupt after the second snapshot: the watch loop is waiting.
	snapshots, eof := make(chan struct{}, 2), make(chan struct{})
	go func() {
		defer close(eof)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), `lock "orders"`) {
				select {
				case snapshots <- struct{}{}:
				default:
				}
			}
		}
	}()
	for range 2 {
		select {
		case <-snapshots:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("no snapshot printed within 30s; stderr: %s", stderr.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-eof: // the process is gone: Wait may close the pipe now
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("still running 30s after SIGINT")
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitInterrupted {
		t.Fatalf("after SIGINT: %v (stderr %q); want exit code %d", err, stderr.String(), exitInterrupted)
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr %q: a watch stopped by Ctrl-C has nothing to report", stderr.String())
	}
}

// An admin command run without a terminal and without --yes refuses, and
// says how to confirm.
func TestBinary_AdminWithoutTerminalNeedsYes(t *testing.T) {
	s := startRedis(t)
	m := mustMutex(t, lockClient(t, s.addr), "orders")
	if _, err := m.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"force-unlock", "delete"} {
		out, err := command(t, name, "orders", "--addr", s.addr).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitUsage ||
			!strings.Contains(string(out), name+" needs a confirmation and standard input is not a terminal: add --yes to confirm") {
			t.Errorf("%s: %v, output %q; want exit %d and the --yes hint", name, err, out, exitUsage)
		}
	}
	st, err := m.Inspect(context.Background(), 0)
	if err != nil || st.CountOf(m.Owner()) != 1 {
		t.Fatalf("%+v, %v: the lock changed hands without a confirmation", st, err)
	}
}

// The version comes from the build information.
func TestBinary_Version(t *testing.T) {
	out, err := command(t, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "fairlock ") || !strings.Contains(string(out), runtime.Version()) {
		t.Errorf("--version: %q, %v", out, err)
	}
	out, err = command(t, "version").Output()
	for _, want := range []string{"fairlock ", "go       " + runtime.Version(), "client   github.com/redis/rueidis v", "client   github.com/valkey-io/valkey-go v"} {
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("version: %q, %v; want %q", out, err, want)
		}
	}
}
