package redistest_test

import (
	"bufio"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/redistest"
)

// rawCommand sends one inline command over conn and returns the first
// reply line, without its CRLF.
func rawCommand(t *testing.T, conn net.Conn, cmd string) string {
	t.Helper()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte(cmd + "\r\n")); err != nil {
		t.Fatalf("write %q: %v", cmd, err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatalf("read reply to %q: %v", cmd, err)
	}
	return strings.TrimSuffix(line, "\r\n")
}

// TestWithTLS checks a TLS-only server: Do works over TLS, TLSConfig's
// configuration is accepted (client certificate and all), a plain TCP
// client gets nothing useful, a client without a certificate is refused,
// and Restart serves TLS again on the same port.
func TestWithTLS(t *testing.T) {
	s := redistest.Start(t, redistest.WithTLS())
	if s.TLSConfig() == nil {
		t.Fatal("TLSConfig() = nil for a WithTLS server")
	}
	if got := s.Do(t, "SET", "k", "v"); got != "OK" {
		t.Fatalf("SET over TLS = %#v", got)
	}
	if got := s.Do(t, "CONFIG", "GET", "port"); got == nil || got.([]any)[1] != "0" {
		t.Fatalf("CONFIG GET port = %#v, want the plain port off (0)", got)
	}

	conn, err := tls.Dial("tcp", s.Addr(), s.TLSConfig())
	if err != nil {
		t.Fatalf("tls.Dial with TLSConfig: %v", err)
	}
	if got := rawCommand(t, conn, "GET k"); got != "$1" {
		t.Fatalf("GET k over tls.Dial: first line %q, want $1", got)
	}
	conn.Close()

	// Plain TCP: the server reads the command as a broken TLS record and
	// closes the connection; no reply comes.
	plain, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatalf("dial %s: %v", s.Addr(), err)
	}
	defer plain.Close()
	plain.SetDeadline(time.Now().Add(5 * time.Second))
	plain.Write([]byte("PING\r\n"))
	if line, err := bufio.NewReader(plain).ReadString('\n'); err == nil {
		t.Fatalf("plain TCP PING to a TLS-only server answered %q", line)
	}

	// Without a client certificate the server refuses (tls-auth-clients yes).
	noCert := s.TLSConfig()
	noCert.Certificates = nil
	if c, err := tls.Dial("tcp", s.Addr(), noCert); err == nil {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write([]byte("PING\r\n"))
		if line, err := bufio.NewReader(c).ReadString('\n'); err == nil {
			t.Fatalf("TLS client without a certificate got %q", line)
		}
		c.Close()
	}

	// A client trusting another CA does not trust this server.
	other := redistest.Start(t, redistest.WithTLS())
	if c, err := tls.Dial("tcp", s.Addr(), other.TLSConfig()); err == nil {
		c.Close()
		t.Fatal("a client trusting another CA completed the handshake")
	}

	s.Kill(t)
	s.Restart(t)
	if got := s.Do(t, "PING"); got != "PONG" {
		t.Fatalf("PING over TLS after Restart = %#v", got)
	}
}

// TestWithPassword checks a server with requirepass: Do AUTHs first, an
// unauthenticated client is refused with NOAUTH, and StartReplica passes
// the password on (masterauth).
func TestWithPassword(t *testing.T) {
	s := redistest.Start(t, redistest.WithPassword("s3cret"))
	if s.TLSConfig() != nil {
		t.Fatal("TLSConfig() != nil for a server without TLS")
	}
	if got := s.Do(t, "SET", "k", "v"); got != "OK" {
		t.Fatalf("SET with password = %#v", got)
	}
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got := rawCommand(t, conn, "GET k"); !strings.HasPrefix(got, "-NOAUTH") {
		t.Fatalf("GET without AUTH = %q, want -NOAUTH", got)
	}
	r := redistest.StartReplica(t, s)
	redistest.Eventually(t, 10*time.Second, "the replica to copy k", func() bool {
		return r.Do(t, "GET", "k") == "v"
	})
}
