package redistest_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/redistest"
)

func TestBinary(t *testing.T) {
	for kind, env := range map[redistest.Kind]string{redistest.Redis: "FAIRLOCK_REDIS_SERVER", redistest.Valkey: "FAIRLOCK_VALKEY_SERVER"} {
		path, err := redistest.BinaryOf(kind)
		if err != nil {
			t.Fatalf("BinaryOf(%s): %v", kind, err)
		}
		t.Setenv(env, path)
		if got, err := redistest.BinaryOf(kind); err != nil || got != path {
			t.Fatalf("BinaryOf(%s) with %s = %q, %v; want %q", kind, env, got, err, path)
		}
		t.Setenv(env, "/nonexistent/server")
		if got, err := redistest.BinaryOf(kind); err == nil {
			t.Fatalf("BinaryOf(%s) with a bad %s = %q, want error", kind, env, got)
		}
	}
}

func TestStartDo(t *testing.T) {
	s := redistest.Start(t)
	if want := "127.0.0.1:" + strconv.Itoa(s.Port()); s.Addr() != want {
		t.Fatalf("Addr = %q, want %q", s.Addr(), want)
	}
	checks := []struct {
		args []string
		want any
	}{
		{[]string{"PING"}, "PONG"},
		{[]string{"SET", "k", "v"}, "OK"},
		{[]string{"GET", "k"}, "v"},
		{[]string{"GET", "missing"}, nil},
		{[]string{"SET", "empty", ""}, "OK"},
		{[]string{"GET", "empty"}, ""},
		{[]string{"INCRBY", "n", "-42"}, int64(-42)},
		{[]string{"RPUSH", "l", "a", "b\r\nc"}, int64(2)},
		{[]string{"EXISTS", "k", "l", "missing"}, int64(2)},
	}
	for _, c := range checks {
		if got := s.Do(t, c.args...); got != c.want {
			t.Errorf("Do(%q) = %#v, want %#v", c.args, got, c.want)
		}
	}
	got := s.Do(t, "LRANGE", "l", "0", "-1")
	if fmt.Sprintf("%q", got) != `["a" "b\r\nc"]` {
		t.Errorf("LRANGE = %#v", got)
	}
	got = s.Do(t, "ZADD", "z", "1", "x")
	if got != int64(1) {
		t.Errorf("ZADD = %#v", got)
	}
	got = s.Do(t, "ZRANGE", "z", "0", "-1", "WITHSCORES")
	if fmt.Sprintf("%q", got) != `["x" "1"]` {
		t.Errorf("ZRANGE = %#v", got)
	}
	// A nested array.
	got = s.Do(t, "EVAL", "return {1, {'a', 2}, false}", "0")
	if fmt.Sprintf("%v", got) != "[1 [a 2] <nil>]" {
		t.Errorf("EVAL = %#v", got)
	}
	for _, args := range [][]string{{"NOSUCHCOMMAND"}, {"LPUSH", "k", "x"}} {
		err, ok := s.Do(t, args...).(error)
		if !ok {
			t.Errorf("Do(%q) did not return an error value", args)
			continue
		}
		if !strings.HasPrefix(err.Error(), "ERR ") && !strings.HasPrefix(err.Error(), "WRONGTYPE ") {
			t.Errorf("Do(%q) error = %q", args, err)
		}
	}
}

func TestWithArgs(t *testing.T) {
	s := redistest.Start(t, redistest.WithArgs("--notify-keyspace-events", "Kx"))
	got, ok := s.Do(t, "CONFIG", "GET", "notify-keyspace-events").([]any)
	if !ok || len(got) != 2 {
		t.Fatalf("CONFIG GET = %#v", got)
	}
	flags, _ := got[1].(string)
	if !strings.ContainsRune(flags, 'K') || !strings.ContainsRune(flags, 'x') || len(flags) != 2 {
		t.Fatalf("notify-keyspace-events = %q, want K and x", flags)
	}
	if got := s.Do(t, "CONFIG", "SET", "notify-keyspace-events", "KEA"); got != "OK" {
		t.Fatalf("CONFIG SET = %#v", got)
	}
}

// fakeTB records Fatalf instead of failing the real test.
type fakeTB struct {
	testing.TB
	mu    sync.Mutex
	fatal string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeTB) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }
func (f *fakeTB) FailNow()          { f.Fatalf("FailNow") }
func (f *fakeTB) Skip(args ...any)  { f.Fatalf("Skip called: %s", fmt.Sprint(args...)) }
func (f *fakeTB) SkipNow()          { f.Fatalf("SkipNow called") }

func (f *fakeTB) Skipf(format string, args ...any) {
	f.Fatalf("Skipf called: "+format, args...)
}

func TestStartFailureReportsLog(t *testing.T) {
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		redistest.Start(f, redistest.WithArgs("--no-such-directive", "1"))
	}()
	<-done
	f.mu.Lock()
	msg := f.fatal
	f.mu.Unlock()
	bin, err := redistest.Binary()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg, "cannot start "+filepath.Base(bin)) || !strings.Contains(msg, "no-such-directive") {
		t.Fatalf("Start with a bad argument: Fatalf message %q lacks the reason or the log tail", msg)
	}
	t.Logf("failure message:\n%s", msg)
}

// refused reports whether nothing accepts connections on addr.
func refused(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return true
	}
	defer conn.Close()
	return conn.LocalAddr().String() == conn.RemoteAddr().String()
}

func TestStopRestart(t *testing.T) {
	s := redistest.Start(t)
	port := s.Port()
	s.Do(t, "SET", "k", "v")

	s.Stop(t)
	if !refused(s.Addr()) {
		t.Fatalf("%s still accepts connections after Stop", s.Addr())
	}
	s.Stop(t) // no-op
	s.Restart(t)
	if s.Port() != port {
		t.Fatalf("port changed across Restart: %d -> %d", port, s.Port())
	}
	if got := s.Do(t, "PING"); got != "PONG" {
		t.Fatalf("PING after Restart = %#v", got)
	}
	if got := s.Do(t, "SET", "k2", "v2"); got != "OK" {
		t.Fatalf("SET after Restart = %#v", got)
	}

	s.Kill(t)
	if !refused(s.Addr()) {
		t.Fatalf("%s still accepts connections after Kill", s.Addr())
	}
	s.Kill(t) // no-op
	s.Restart(t)
	if got := s.Do(t, "PING"); got != "PONG" {
		t.Fatalf("PING after Kill+Restart = %#v", got)
	}
}

func TestPauseResume(t *testing.T) {
	s := redistest.Start(t)
	s.Pause(t)

	conn, err := net.DialTimeout("tcp", s.Addr(), 5*time.Second)
	if err != nil {
		t.Fatalf("dial paused server: %v", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		t.Fatalf("write PING: %v", err)
	}
	if err := conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	var nerr net.Error
	if !errors.As(err, &nerr) || !nerr.Timeout() {
		t.Fatalf("PING to paused server: got %q, %v; want a timeout", line, err)
	}

	s.Resume(t)
	if got := s.Do(t, "PING"); got != "PONG" {
		t.Fatalf("PING after Resume = %#v", got)
	}
	// The PING sent while paused is answered now.
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "+PONG\r\n" {
		t.Fatalf("reply to PING sent while paused = %q, %v", line, err)
	}

	// Stop works on a paused server too.
	s.Pause(t)
	s.Stop(t)
	if !refused(s.Addr()) {
		t.Fatalf("%s still accepts connections after Pause+Stop", s.Addr())
	}
}

func TestStartReplica(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.StartReplica(t, primary)
	if replica.Port() == primary.Port() {
		t.Fatalf("replica and primary share port %d", primary.Port())
	}
	primary.Do(t, "SET", "k", "v")
	redistest.Eventually(t, 15*time.Second, "key k on the replica", func() bool {
		return replica.Do(t, "GET", "k") == "v"
	})
	info, _ := replica.Do(t, "INFO", "replication").(string)
	if !strings.Contains(info, "role:slave") {
		t.Fatalf("replica INFO replication:\n%s", info)
	}
	if _, ok := replica.Do(t, "SET", "x", "y").(error); !ok {
		t.Fatalf("write to read-only replica succeeded")
	}
}

// asInt converts an integer reply element (int64 or numeric string).
func asInt(t *testing.T, v any) int {
	t.Helper()
	switch v := v.(type) {
	case int64:
		return int(v)
	case string:
		n, err := strconv.Atoi(v)
		if err == nil {
			return n
		}
	}
	t.Fatalf("not an integer: %#v", v)
	return 0
}

// coverage checks that ranges (start, end pairs) cover every slot once.
func coverage(t *testing.T, what string, ranges [][2]int) {
	t.Helper()
	var seen [16384]int
	for _, r := range ranges {
		if r[0] < 0 || r[1] >= len(seen) || r[0] > r[1] {
			t.Fatalf("%s: bad slot range %v", what, r)
		}
		for i := r[0]; i <= r[1]; i++ {
			seen[i]++
		}
	}
	for i, n := range seen {
		if n != 1 {
			t.Fatalf("%s: slot %d covered %d times (ranges %v)", what, i, n, ranges)
		}
	}
}

func TestStartCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	addrs, nodes := c.Addrs(), c.Nodes()
	if len(addrs) != 3 || len(nodes) != 3 {
		t.Fatalf("Addrs = %v, %d nodes", addrs, len(nodes))
	}
	for i, node := range nodes {
		if node.Addr() != addrs[i] {
			t.Fatalf("Addrs()[%d] = %s, node address %s", i, addrs[i], node.Addr())
		}
		info, _ := node.Do(t, "CLUSTER", "INFO").(string)
		if !strings.Contains(info, "cluster_state:ok") {
			t.Fatalf("node %s CLUSTER INFO:\n%s", node.Addr(), info)
		}
	}

	// CLUSTER SLOTS: [start, end, [ip, port, id, ...], ...] per range.
	slots, ok := nodes[1].Do(t, "CLUSTER", "SLOTS").([]any)
	if !ok {
		t.Fatalf("CLUSTER SLOTS = %#v", slots)
	}
	var ranges [][2]int
	owner := map[[2]int]string{}
	for _, e := range slots {
		entry, ok := e.([]any)
		if !ok || len(entry) < 3 {
			t.Fatalf("CLUSTER SLOTS entry = %#v", e)
		}
		r := [2]int{asInt(t, entry[0]), asInt(t, entry[1])}
		master, ok := entry[2].([]any)
		if !ok || len(master) < 2 {
			t.Fatalf("CLUSTER SLOTS master = %#v", entry[2])
		}
		ip, _ := master[0].(string)
		ranges = append(ranges, r)
		owner[r] = net.JoinHostPort(ip, strconv.Itoa(asInt(t, master[1])))
	}
	coverage(t, "CLUSTER SLOTS", ranges)

	// CLUSTER SHARDS: ["slots", [start, end, ...], "nodes", [...]] per shard.
	shards, ok := nodes[2].Do(t, "CLUSTER", "SHARDS").([]any)
	if !ok || len(shards) != 3 {
		t.Fatalf("CLUSTER SHARDS = %#v", shards)
	}
	ranges = nil
	for _, s := range shards {
		fields, ok := s.([]any)
		if !ok {
			t.Fatalf("CLUSTER SHARDS shard = %#v", s)
		}
		for i := 0; i+1 < len(fields); i += 2 {
			if fields[i] != "slots" {
				continue
			}
			list, _ := fields[i+1].([]any)
			for j := 0; j+1 < len(list); j += 2 {
				ranges = append(ranges, [2]int{asInt(t, list[j]), asInt(t, list[j+1])})
			}
		}
	}
	coverage(t, "CLUSTER SHARDS", ranges)

	// Keys are served by their slot owner and redirected elsewhere.
	slot := asInt(t, nodes[0].Do(t, "CLUSTER", "KEYSLOT", "fairlock"))
	var ownerAddr string
	for r, addr := range owner {
		if r[0] <= slot && slot <= r[1] {
			ownerAddr = addr
		}
	}
	for _, node := range nodes {
		got := node.Do(t, "SET", "fairlock", "1")
		if node.Addr() == ownerAddr {
			if got != "OK" {
				t.Fatalf("SET on slot owner %s = %#v", node.Addr(), got)
			}
		} else if err, ok := got.(error); !ok || !strings.HasPrefix(err.Error(), "MOVED ") {
			t.Fatalf("SET on %s (owner %s) = %#v, want MOVED", node.Addr(), ownerAddr, got)
		}
	}
}

func TestStartClusterTooSmall(t *testing.T) {
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		redistest.StartCluster(f, 2)
	}()
	<-done
	if !strings.Contains(f.fatal, "at least 3") {
		t.Fatalf("StartCluster(2): Fatalf message %q", f.fatal)
	}
}

func TestParallelStarts(t *testing.T) {
	ports := make(chan int, 4)
	t.Run("group", func(t *testing.T) {
		for i := range 4 {
			t.Run(strconv.Itoa(i), func(t *testing.T) {
				t.Parallel()
				s := redistest.Start(t)
				key := "k" + strconv.Itoa(i)
				s.Do(t, "SET", key, "v")
				if got := s.Do(t, "DBSIZE"); got != int64(1) {
					t.Errorf("DBSIZE on %s = %#v; servers are not separate", s.Addr(), got)
				}
				ports <- s.Port()
			})
		}
	})
	close(ports)
	seen := map[int]bool{}
	for p := range ports {
		if seen[p] {
			t.Fatalf("port %d used twice", p)
		}
		seen[p] = true
	}
}

func TestStartSentinel(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.StartReplica(t, primary)
	s := redistest.StartSentinel(t, primary, "fairlock")
	got, ok := s.Do(t, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "fairlock").([]any)
	if !ok || len(got) != 2 || got[1] != strconv.Itoa(primary.Port()) {
		t.Fatalf("sentinel reports %v for the primary %s", got, primary.Addr())
	}
	if replica.Port() == primary.Port() {
		t.Fatal("replica shares the primary's port")
	}
}
