// Package faultsuite is fairlock's fault suite: tests only, against real
// redis-server processes on loopback. Each scenario injects one kind of
// fault - a holder killed or paused (a child process), the server killed
// and restarted with and without persistence, a TCP proxy that partitions,
// resets or delays connections, a storm of cancellations, bad input -
// states what must hold, checks it (recorded operations against a
// porcupine model of the lock, unknown outcomes modelled as such), and
// prints the figures it measured.
//
// Run it with
//
//	go test -race -v ./internal/faultsuite/
//
// and regenerate RELIABILITY.md's table from a run with
// scripts/reliability.sh.
package faultsuite
