// Package securitytest runs fairlock as it runs in production, where the
// server is access-controlled: as a least-privilege ACL user (the recipe
// in docs/security.md, read from that file), as a user lacking one of its
// permissions, with a password (AUTH), and over TLS only. Every adapter -
// rueidis, valkey-go, go-redis - runs the same compact scenario, which
// takes every lock script and the subscription path through one pass.
// The package has tests only.
package securitytest
