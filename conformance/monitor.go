package conformance

// The MONITOR client the sequential cases use to see, at the server, the
// commands clients send and the commands scripts run.

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"
)

// monitor is a raw MONITOR connection to the server under test.
type monitor struct {
	conn net.Conn
	r    *bufio.Reader
}

func startMonitor(t *testing.T, srv Server) *monitor {
	t.Helper()
	conn, err := net.DialTimeout("tcp", srv.Addr(), eventually)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(eventually))
	mon := &monitor{conn: conn, r: bufio.NewReader(conn)}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := mon.r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		t.Fatalf("MONITOR: %q, %v", line, err)
	}
	return mon
}

// collect returns the commands seen until a marker ECHO sent after the
// work: clients' commands (without connection handshakes) and commands
// run inside scripts ("[0 lua]").
func (mon *monitor) collect(t *testing.T, srv Server) (sent, inScripts []string) {
	t.Helper()
	marker := "conformance-end-" + lockName(t)
	srv.Do(t, "ECHO", marker)
	for {
		line, err := mon.r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading MONITOR: %v (so far %q)", err, sent)
		}
		switch {
		case strings.Contains(line, marker):
			return sent, inScripts
		case strings.Contains(line, " [0 lua] "):
			inScripts = append(inScripts, strings.TrimSpace(line))
		case !isHandshake(line):
			sent = append(sent, strings.TrimSpace(line))
		}
	}
}

// isHandshake reports a MONITOR line of a client setting up a new
// connection (HELLO, CLIENT ..., AUTH, SELECT): not a lock round trip.
func isHandshake(line string) bool {
	for _, cmd := range []string{`"HELLO"`, `"CLIENT"`, `"AUTH"`, `"SELECT"`} {
		if strings.Contains(strings.ToUpper(line), "] "+cmd) {
			return true
		}
	}
	return false
}
