package main

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// When a client library cannot connect, its error often names a symptom,
// not the cause: "received unknown message type: 72" from an HTTP server,
// EOF or a bare deadline when TLS is on at one end only. diagnose dials the
// server again, without a client library, and says what answers there.

// probeTimeout bounds each probe connection of diagnose.
const probeTimeout = 2 * time.Second

// diagnose returns what is wrong with the server in words, or nil when the
// probes find nothing to add to the client library's error.
func (s *server) diagnose() error {
	network, addr := "tcp", s.addrs[0]
	if strings.HasPrefix(s.url, "unix://") {
		network = "unix"
	}
	useTLS := strings.HasPrefix(s.url, "rediss://") || strings.HasPrefix(s.url, "valkeys://")
	timeout := min(s.dialTimeout, probeTimeout)

	answer, err := probeRESP(network, addr, timeout)
	if err != nil {
		return nil // cannot connect at all: the library's error says why
	}
	if len(answer) == 0 {
		// No answer to a plain PING: closed or silent. A TLS server does that.
		switch {
		case useTLS:
			return nil
		case speaksTLS(network, addr, timeout):
			return fmt.Errorf("the server at %s speaks TLS: use a rediss:// URL", addr)
		}
		return fmt.Errorf("the server at %s accepts connections but does not answer a PING in RESP, the Redis protocol: is this the Redis port?", addr)
	}
	switch {
	case strings.IndexByte("+-:$*%_,#!=(|~>", answer[0]) >= 0:
		if useTLS {
			return fmt.Errorf("the server at %s speaks plain RESP, not TLS: use a redis:// URL, not rediss://", addr)
		}
		return nil // a Redis server: the library's error is the story
	case bytes.HasPrefix(answer, []byte("HTTP/")):
		return fmt.Errorf("the server at %s answers in HTTP (%q), not RESP, the Redis protocol: is this the Redis port?", addr, firstLine(answer))
	case answer[0] == '<':
		// An HTTP server that took the PING for an HTTP/0.9 request.
		return fmt.Errorf("the server at %s answers with HTML (%q), as an HTTP server does, not RESP, the Redis protocol: is this the Redis port?", addr, firstLine(answer))
	case answer[0] == 0x15 || answer[0] == 0x16:
		// A TLS alert or handshake record in answer to plain text.
		if !useTLS {
			return fmt.Errorf("the server at %s speaks TLS: use a rediss:// URL", addr)
		}
		return nil
	default:
		return fmt.Errorf("the server at %s answers with something other than RESP, the Redis protocol (first bytes %q): is this the Redis port?", addr, truncate(string(answer), 16))
	}
}

// probeRESP sends a PING in RESP on a new connection and returns the first
// bytes of the answer (none when the server closed the connection or said
// nothing within timeout). err is set only when the dial failed.
func probeRESP(network, addr string, timeout time.Duration) ([]byte, error) {
	conn, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(conn, "*1\r\n$4\r\nPING\r\n"); err != nil {
		return nil, nil
	}
	buf := make([]byte, 64)
	n, _ := io.ReadAtLeast(conn, buf, 1) // EOF or the deadline: no answer
	return buf[:n], nil
}

// speaksTLS reports whether a TLS handshake with the server succeeds (the
// certificate is not checked: only the protocol matters here).
func speaksTLS(network, addr string, timeout time.Duration) bool {
	host, _, _ := net.SplitHostPort(addr)
	d := &net.Dialer{Timeout: timeout, Deadline: time.Now().Add(timeout)}
	conn, err := tls.DialWithDialer(d, network, addr, &tls.Config{ServerName: host, InsecureSkipVerify: true}) //nolint:gosec // a probe: no data is sent
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// firstLine returns the first line of b, for a message.
func firstLine(b []byte) string {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	return truncate(strings.TrimSpace(string(line)), 40)
}
