package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certValidity is how long the generated certificates are valid: long
// enough for any test run, counted from an hour ago so that a clock a little
// behind does not reject them.
const certValidity = 24 * time.Hour

// certs are the files a WithTLS server is started with, and the matching
// client configuration.
type certs struct {
	caCert, serverCert, serverKey string      // PEM files
	client                        *tls.Config // trusts the CA, carries a client certificate
}

// generateCerts writes a new CA, and a server certificate for 127.0.0.1 and
// localhost signed by it, to dir, and returns them with a client
// configuration that trusts the CA and presents a client certificate it
// signed. Keys are ECDSA P-256.
func generateCerts(dir string) (*certs, error) {
	now := time.Now().Add(-time.Hour)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redistest CA"},
		NotBefore:             now,
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	leaf := func(serial int64, name string, usage ...x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    now,
			NotAfter:     now.Add(certValidity),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  usage,
		}
		if name == "localhost" {
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		return der, key, err
	}
	// The server's certificate is also its client certificate towards
	// other servers (replication), as redis-server uses it so by default.
	serverDER, serverKey, err := leaf(2, "localhost", x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, err
	}
	clientDER, clientKey, err := leaf(3, "redistest client", x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, err
	}
	c := &certs{
		caCert:     filepath.Join(dir, "ca.crt"),
		serverCert: filepath.Join(dir, "server.crt"),
		serverKey:  filepath.Join(dir, "server.key"),
	}
	serverKeyDER, err := x509.MarshalPKCS8PrivateKey(serverKey)
	if err != nil {
		return nil, err
	}
	for path, block := range map[string]*pem.Block{
		c.caCert:     {Type: "CERTIFICATE", Bytes: caDER},
		c.serverCert: {Type: "CERTIFICATE", Bytes: serverDER},
		c.serverKey:  {Type: "PRIVATE KEY", Bytes: serverKeyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", path, err)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	c.client = &tls.Config{
		RootCAs:      pool,
		ServerName:   "127.0.0.1",
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{clientDER}, PrivateKey: clientKey, Leaf: mustParse(clientDER)}},
	}
	return c, nil
}

// mustParse parses a certificate this file has just created.
func mustParse(der []byte) *x509.Certificate {
	c, err := x509.ParseCertificate(der)
	if err != nil {
		panic(err)
	}
	return c
}
