package securitytest

import (
	"strings"
	"testing"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/conformance"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
)

// TestAuthPassword runs the scenario on every adapter against a server
// with requirepass, as the default user with the password, and checks that
// a wrong password is refused when the client connects.
func TestAuthPassword(t *testing.T) {
	const password = "lock-secret"
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, redistest.WithPassword(password))
			scenario(t, a, conn{addr: srv.Addr(), password: password}, srv, "orders", lock.WithKeyPrefix("app:"))
			if _, err := a.open(t, conn{addr: srv.Addr(), password: "wrong"}); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
				t.Fatalf("connect with a wrong password: %v, want WRONGPASS", err)
			}
			if _, err := a.open(t, conn{addr: srv.Addr()}); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
				t.Fatalf("connect without a password: %v, want NOAUTH", err)
			}
		})
	}
}

// TestTLSOnly runs the scenario on every adapter against a server that
// accepts TLS only (certificates from redistest.WithTLS, client
// certificate required), once as the default user and once as the
// recipe's ACL user, and checks that a client without TLS cannot connect.
func TestTLSOnly(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, redistest.WithTLS())
			scenario(t, a, conn{addr: srv.Addr(), tls: srv.TLSConfig()}, srv, "orders")
			applyRecipe(t, srv, nil, "commands", "prefix")
			c := lockerConn(srv.Addr())
			c.tls = srv.TLSConfig()
			scenario(t, a, c, srv, "orders", lock.WithKeyPrefix("app:"))
			if refused := aclLog(t, srv); len(refused) > 0 {
				t.Fatalf("ACL LOG after the scenario over TLS:\n%s", strings.Join(refused, "\n"))
			}
			if _, err := a.open(t, conn{addr: srv.Addr()}); err == nil {
				t.Fatal("a client without TLS connected to a TLS-only server")
			}
		})
	}
}

// conformanceSubset is the part of the conformance suite run over TLS and
// with a password: every B-rule (acquire, reentrancy, release, hand-over,
// watchdog, the Redisson wire format) and the loss notices (X16), which
// use every script and the subscription connection.
var conformanceSubset = []string{"B", "X16_"}

// TestConformanceSubset runs conformanceSubset on every adapter against a
// TLS-only server and against a server with a password.
func TestConformanceSubset(t *testing.T) {
	for _, a := range adapters {
		t.Run("TLS/"+a.name, func(t *testing.T) {
			srv := redistest.Start(t, redistest.WithTLS())
			c := conn{addr: srv.Addr(), tls: srv.TLSConfig()}
			conformance.Run(t, factory(a, c), conformance.WithCases(conformanceSubset...))
		})
		t.Run("password/"+a.name, func(t *testing.T) {
			const password = "lock-secret"
			srv := redistest.Start(t, redistest.WithPassword(password))
			conformance.Run(t, factory(a, conn{addr: srv.Addr(), password: password}), conformance.WithCases(conformanceSubset...))
		})
	}
}

// factory is a conformance.Factory of adapter a on connection c.
func factory(a adapter, c conn) conformance.Factory {
	return func(tb testing.TB) backend.Backend {
		b, err := a.open(tb, c)
		if err != nil {
			tb.Fatalf("%s: connect to %s: %v", a.name, c.addr, err)
		}
		return b
	}
}
