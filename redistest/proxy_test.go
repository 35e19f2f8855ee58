package redistest_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairlock/fairlock/redistest"
)

// rawConn is a client connection that speaks just enough RESP for the proxy
// tests, so that what the test sees is what went over the wire.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rawConn{Conn: conn, r: bufio.NewReader(conn)}
}

// send writes one command.
func (c *rawConn) send(t *testing.T, args ...string) {
	t.Helper()
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if err := c.SetWriteDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(b.Bytes()); err != nil {
		t.Fatalf("send %q: %v", args[0], err)
	}
}

// line reads one reply line, waiting at most timeout.
func (c *rawConn) line(timeout time.Duration) (string, error) {
	if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	return c.r.ReadString('\n')
}

// ping sends PING and fails the test unless PONG comes back within 10 s.
func (c *rawConn) ping(t *testing.T) {
	t.Helper()
	c.send(t, "PING")
	if line, err := c.line(10 * time.Second); err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING = %q, %v; want +PONG", line, err)
	}
}

func isTimeout(err error) bool {
	var nerr net.Error
	return errors.As(err, &nerr) && nerr.Timeout()
}

// connectedClients returns the server's client count, not counting the
// connection used to ask.
func connectedClients(t *testing.T, s *redistest.Server) int {
	t.Helper()
	info, _ := s.Do(t, "INFO", "clients").(string)
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "connected_clients:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("connected_clients:%s", v)
			}
			return n - 1
		}
	}
	t.Fatalf("no connected_clients in INFO clients:\n%s", info)
	return 0
}

func TestProxyForwards(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	p := redistest.StartProxy(t, s.Addr())
	if !strings.HasPrefix(p.Addr(), "127.0.0.1:") || p.Addr() == s.Addr() {
		t.Fatalf("proxy Addr = %q (server %s)", p.Addr(), s.Addr())
	}
	c := dialRaw(t, p.Addr())
	c.ping(t)

	// Many chunks each way, delayed, arrive whole and in order.
	p.SetLatency(5 * time.Millisecond)
	value := strings.Repeat("0123456789abcdef", 256<<10) // 4 MiB
	c.send(t, "SET", "big", value)
	if line, err := c.line(30 * time.Second); err != nil || line != "+OK\r\n" {
		t.Fatalf("SET big = %q, %v", line, err)
	}
	c.send(t, "GET", "big")
	if line, err := c.line(30 * time.Second); err != nil || line != "$"+strconv.Itoa(len(value))+"\r\n" {
		t.Fatalf("GET big header = %q, %v", line, err)
	}
	got := make([]byte, len(value)+2)
	if _, err := io.ReadFull(c.r, got); err != nil {
		t.Fatalf("GET big body: %v", err)
	}
	if string(got) != value+"\r\n" {
		t.Fatal("GET big through the proxy returned other bytes than were SET")
	}
}

func TestProxyBlackholeHoldsTrafficBack(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	p := redistest.StartProxy(t, s.Addr())
	old := dialRaw(t, p.Addr())
	old.ping(t)
	if n := connectedClients(t, s); n != 1 {
		t.Fatalf("server sees %d clients, want 1", n)
	}

	p.Blackhole(true)
	p.Blackhole(true) // idempotent
	old.send(t, "PING")
	if line, err := old.line(300 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("PING under blackhole = %q, %v; want a timeout", line, err)
	}
	// A new connection is accepted but goes nowhere.
	fresh := dialRaw(t, p.Addr())
	fresh.send(t, "PING")
	if line, err := fresh.line(300 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("PING on a connection made under blackhole = %q, %v; want a timeout", line, err)
	}
	if n := p.Conns(); n != 2 {
		t.Fatalf("Conns under blackhole = %d, want 2", n)
	}
	if n := connectedClients(t, s); n != 1 {
		t.Fatalf("server sees %d clients under blackhole, want 1 (the new one is held back)", n)
	}

	// Lifted: nothing was dropped, so the PING sent under the blackhole
	// is delivered late and its reply arrives on the same connection,
	// after the client's own deadline had expired.
	p.Blackhole(false)
	for name, c := range map[string]*rawConn{"old": old, "fresh": fresh} {
		if line, err := c.line(10 * time.Second); err != nil || line != "+PONG\r\n" {
			t.Fatalf("%s connection: late reply = %q, %v; want +PONG", name, line, err)
		}
		c.ping(t)
	}
}

func TestProxyResetAll(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	p := redistest.StartProxy(t, s.Addr())
	c := dialRaw(t, p.Addr())
	c.ping(t)
	if n := connectedClients(t, s); n != 1 {
		t.Fatalf("server sees %d clients, want 1", n)
	}

	p.ResetAll()
	if n := p.Conns(); n != 0 {
		t.Fatalf("Conns after ResetAll = %d, want 0", n)
	}
	line, err := c.line(10 * time.Second)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after ResetAll = %q, %v; want ECONNRESET", line, err)
	}
	redistest.Eventually(t, 10*time.Second, "the server to drop the proxied client", func() bool {
		return connectedClients(t, s) == 0
	})

	dialRaw(t, p.Addr()).ping(t)
	if n := p.Conns(); n != 1 {
		t.Fatalf("Conns after a new connection = %d, want 1", n)
	}
}

func TestProxyLatency(t *testing.T) {
	t.Parallel()
	const d = 50 * time.Millisecond
	s := redistest.Start(t)
	p := redistest.StartProxy(t, s.Addr())
	c := dialRaw(t, p.Addr())
	c.ping(t) // connected before timing

	p.SetLatency(d)
	start := time.Now()
	c.ping(t)
	if rtt := time.Since(start); rtt < 2*d {
		t.Fatalf("PING round trip with latency %v = %v, want >= %v", d, rtt, 2*d)
	}

	// Chunks are delayed side by side, not one after another: 40 PINGs
	// sent 5 ms apart (so each is a chunk of its own) take about
	// 195 ms + 2*d, where delaying each chunk after the previous one would
	// take more than 40*d.
	const pings = 40
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	start = time.Now()
	for i := range pings {
		if i > 0 {
			<-tick.C
		}
		c.send(t, "PING")
	}
	for range pings {
		if line, err := c.line(10 * time.Second); err != nil || line != "+PONG\r\n" {
			t.Fatalf("pipelined PING = %q, %v", line, err)
		}
	}
	if took := time.Since(start); took >= pings*d/2 {
		t.Fatalf("%d PINGs with latency %v took %v, want < %v", pings, d, took, pings*d/2)
	}

	p.SetLatency(0)
	start = time.Now()
	c.ping(t)
	if rtt := time.Since(start); rtt >= d {
		t.Fatalf("PING round trip with latency off = %v, want < %v", rtt, d)
	}
}

func TestProxyConns(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	p := redistest.StartProxy(t, s.Addr())
	if n := p.Conns(); n != 0 {
		t.Fatalf("Conns of a new proxy = %d", n)
	}
	conns := []*rawConn{dialRaw(t, p.Addr()), dialRaw(t, p.Addr()), dialRaw(t, p.Addr())}
	for _, c := range conns {
		c.ping(t)
	}
	if n := p.Conns(); n != 3 {
		t.Fatalf("Conns = %d, want 3", n)
	}
	// A client that hangs up: the EOF reaches the server, which closes its
	// side, and the pair is gone.
	conns[0].Close()
	redistest.Eventually(t, 10*time.Second, "Conns to drop to 2", func() bool { return p.Conns() == 2 })
	redistest.Eventually(t, 10*time.Second, "the server to see 2 clients", func() bool { return connectedClients(t, s) == 2 })
	// A server that goes away: its FIN is passed on (the clients read
	// EOF), and once they hang up too the pairs are gone.
	s.Kill(t)
	for _, c := range conns[1:] {
		if line, err := c.line(10 * time.Second); err != io.EOF {
			t.Fatalf("read after the server was killed = %q, %v; want EOF", line, err)
		}
		c.Close()
	}
	redistest.Eventually(t, 10*time.Second, "Conns to drop to 0", func() bool { return p.Conns() == 0 })
}

// TestProxyStopsItsGoroutines leaves connections in every state (idle,
// bytes delayed by latency, waiting behind a blackhole, not yet dialled) and
// checks that the proxy's cleanup leaves no goroutine behind.
func TestProxyStopsItsGoroutines(t *testing.T) {
	s := redistest.Start(t)
	before := runtime.NumGoroutine()
	t.Run("work", func(t *testing.T) {
		p := redistest.StartProxy(t, s.Addr())
		idle := dialRaw(t, p.Addr())
		idle.ping(t)
		delayed := dialRaw(t, p.Addr())
		delayed.ping(t)
		held := dialRaw(t, p.Addr())
		held.ping(t)
		p.SetLatency(time.Hour)
		delayed.send(t, "PING")
		p.Blackhole(true)
		held.send(t, "PING")
		dialRaw(t, p.Addr()).send(t, "PING") // accepted under the blackhole
		redistest.Eventually(t, 10*time.Second, "4 connections", func() bool { return p.Conns() == 4 })
		if n := runtime.NumGoroutine(); n <= before {
			t.Fatalf("%d goroutines with the proxy busy, %d before: the check below proves nothing", n, before)
		}
	}) // the proxy's cleanup runs here
	redistest.Eventually(t, 10*time.Second, fmt.Sprintf("goroutines to return to %d", before), func() bool {
		return runtime.NumGoroutine() <= before
	})
}
