package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/redistest"
)

// startTLSRedis starts a redis-server that listens with TLS only, with a
// self-signed certificate, and returns its address.
func startTLSRedis(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := refusedAddr(t) // a free port for TLS; the plain port is redistest's
	_, port, _ := net.SplitHostPort(addr)
	redistest.Start(t, redistest.WithArgs("--tls-port", port, "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", certFile, "--tls-auth-clients", "no"))
	return addr
}

// startHTML09 starts a server that answers anything with an HTML error
// page and closes, as an HTTP server does to a request it takes for
// HTTP/0.9 (Python's http.server does), and returns its address.
func startHTML09(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = c.Read(make([]byte, 512))
			_, _ = c.Write([]byte("<!DOCTYPE HTML>\n<html><body><h1>Error response</h1></body></html>\n"))
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = l.Close(); <-done })
	return l.Addr().String()
}

// A port that answers with something other than RESP, or with TLS when the
// client does not use it (and the other way round), gets a message that
// says so, with every client library; the exit code is 3.
func TestConnect_WrongProtocolIsNamed(t *testing.T) {
	checkNoLeaks(t)
	web := httptest.NewServer(http.NotFoundHandler()) // on 127.0.0.1
	defer web.Close()
	webAddr := strings.TrimPrefix(web.URL, "http://")
	html := startHTML09(t)
	tlsAddr := startTLSRedis(t)
	plain := startRedis(t)
	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	for _, tc := range []struct {
		name string
		addr string
		want string
	}{
		{"HTTP server", webAddr, `the server at ` + webAddr + ` answers in HTTP ("HTTP/1.1 400 Bad Request"), not RESP, the Redis protocol: is this the Redis port?`},
		{"HTTP server with TLS", "rediss://" + webAddr, "answers in HTTP"},
		// Where the libraries say "received unknown message type: 60".
		{"HTML answer", html, `the server at ` + html + ` answers with HTML ("<!DOCTYPE HTML>"), as an HTTP server does, not RESP, the Redis protocol: is this the Redis port?`},
		{"TLS server, client without TLS", tlsAddr, "the server at " + tlsAddr + " speaks TLS: use a rediss:// URL"},
		{"plain server, client with TLS", "rediss://" + plain.addr, "the server at " + plain.addr + " speaks plain RESP, not TLS: use a redis:// URL, not rediss://"},
		{"silent server", silent.Addr().String(), "accepts connections but does not answer a PING in RESP"},
	} {
		for _, b := range backendNames {
			t.Run(tc.name+"/"+b, func(t *testing.T) {
				r := runCLI(t, nil, "inspect", "orders", "--addr", tc.addr, "--backend", b, "--dial-timeout", "1s")
				if r.code != exitUnreachable || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "cannot connect to") {
					t.Errorf("exit %d, stderr:\n%s\nwant %d and %q", r.code, r.stderr, exitUnreachable, tc.want)
				}
			})
		}
	}
	// The right URL for each works, and a refused port keeps the
	// library's own message.
	if r := runCLI(t, nil, "inspect", "orders", "--addr", "redis://"+plain.addr); r.code != exitOK {
		t.Errorf("plain redis://: exit %d, stderr %s", r.code, r.stderr)
	}
	r := runCLI(t, nil, "inspect", "orders", "--addr", refusedAddr(t))
	if r.code != exitUnreachable || !strings.Contains(r.stderr, "refused") || strings.Contains(r.stderr, "the server at") {
		t.Errorf("refused: exit %d, stderr %s", r.code, r.stderr)
	}
}
