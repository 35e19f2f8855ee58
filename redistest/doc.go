// Package redistest starts real redis-server (or valkey-server) processes
// for the tests of fairlock backends, this repository's and outside ones: a
// backend's author runs the conformance suite against a server from Start
// (see package github.com/fairlock/fairlock/conformance), and fault tests
// crash, pause and restart it.
//
// Every server runs on a free 127.0.0.1 port in a directory obtained from
// testing.TB.TempDir, without persistence unless WithAOF is given, and is
// killed (and its process reaped) by a testing.TB.Cleanup hook, so no process
// outlives the test even when the test fails. Start, StartReplica,
// StartSentinel and StartCluster never skip: if redis-server is missing or
// cannot start they fail the test with the reason and the tail of the
// server's log.
//
// The package starts Redis or Valkey (Kind): the FAIRLOCK_SERVER environment
// variable picks the default ("redis" unless it says "valkey"; see
// DefaultKind), WithServer picks one for a server, and replicas and
// sentinels run their primary's. The redis-server binary is taken from the
// FAIRLOCK_REDIS_SERVER environment variable, else from PATH, else
// /usr/bin/redis-server; valkey-server's likewise from FAIRLOCK_VALKEY_SERVER
// (see BinaryOf). Sentinels run the same binary with --sentinel.
//
// The package talks to the servers with a minimal built-in RESP client
// (standard library only); Server.Do exposes it so tests can inspect keys
// without a Redis client library.
//
// Typical use:
//
//	srv := redistest.Start(t, redistest.WithArgs("--notify-keyspace-events", "Kx"))
//	// connect the code under test to srv.Addr() ...
//	if got := srv.Do(t, "GET", "key"); got != "value" {
//		t.Fatalf("GET key = %#v", got)
//	}
//
// Lifecycle helpers (Server.Stop, Server.Kill, Server.Pause, Server.Resume,
// Server.Restart) simulate crashes, hangs and restarts on the same address.
// On a cluster (StartCluster, with WithReplicas and WithNodeTimeout),
// Cluster.BeginMigration moves a slot step by step as resharding does,
// Cluster.WaitFailover kills a primary and waits for its replica's
// promotion, and Cluster.Rejoin brings the killed node back as a replica.
package redistest
