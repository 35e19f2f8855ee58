#!/usr/bin/env bash
# Runs every test of the module against real Redis servers.
#
# The tests start their own redis-server processes on free loopback ports,
# so they need the redis-server binary: when it is missing this script
# installs Debian's redis-server package (apt-get update first), and stops
# with an error if it cannot. Set FAIRLOCK_REDIS_SERVER to use another
# binary. Tests that need Redis fail, never skip, when it cannot start.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'test.sh: %s\n' "$*" >&2; }

if [ -n "${FAIRLOCK_REDIS_SERVER:-}" ]; then
  [ -x "$FAIRLOCK_REDIS_SERVER" ] || { say "FAIRLOCK_REDIS_SERVER=$FAIRLOCK_REDIS_SERVER is not executable"; exit 1; }
elif ! command -v redis-server >/dev/null 2>&1 && [ ! -x /usr/bin/redis-server ]; then
  say "redis-server not found: installing Debian's redis-server package"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends redis-server >/dev/null; }; then
    say "could not install redis-server. The tests need a real Redis 7: install redis-server, or set FAIRLOCK_REDIS_SERVER to its path."
    exit 1
  fi
fi
"${FAIRLOCK_REDIS_SERVER:-$(command -v redis-server || echo /usr/bin/redis-server)}" --version

go version
go vet ./...
# Everything but the fault suite, then the fault suite on its own: its
# scenarios measure timings (RELIABILITY.md) and should not share the two
# cores with the conformance runs.
go test -race -count=1 -timeout 20m $(go list ./... | grep -v /internal/faultsuite)
# The fault suite's figures, and on a failure everything it printed: a
# race report or a helper's message outside the test files would not pass
# the filter.
faultlog=$(mktemp)
if go test -race -count=1 -timeout 8m -v ./internal/faultsuite/ >"$faultlog" 2>&1; then
  grep -E '^(--- |ok|FAIL|PASS)|figures:|_test\.go:[0-9]+:' "$faultlog"
  rm -f "$faultlog"
else
  cat "$faultlog"
  rm -f "$faultlog"
  say "the fault suite failed (its whole output above)"
  exit 1
fi
# An outside module runs the conformance suite against its own backend with
# exported packages only; the benchmarks module (its own go.mod) must build.
# Go's FIPS 140-only mode forbids SHA-1: fairlock and the adapters must
# compute none (script digests are generated at build time).
GODEBUG=fips140=only go test -count=1 -run 'TestConformance$/rules/(B1|B2|B4|X7|X10)_' ./rueidisbackend/ ./valkeybackend/ ./goredisbackend/
GODEBUG=fips140=only go test -count=1 -run '^TestBadInput$' ./internal/faultsuite/
GODEBUG=fips140=only go run ./cmd/fairlock demo >/dev/null
(cd examples/outsidebackend && go vet ./... && go test -race -count=1 ./...)
(cd examples/fencing && go vet ./... && go test -race -count=1 ./...)
(cd benchmarks && go vet ./...)
# A short run of each fuzz target (names and durations, X10 in RULES.md).
# The budgets are counts of inputs, not durations: with a duration, Go
# 1.26's fuzzing coordinator can fail a target with a bare "context
# deadline exceeded" when the time runs out while a worker is busy (no
# failing input; golang/go#75804, fixed in Go 1.27). About 10 s and 5 s
# of fuzzing on this 2-core machine.
go test -run '^$' -fuzz '^FuzzLockName$' -fuzztime 150000x ./lock/
go test -run '^$' -fuzz '^FuzzDuration$' -fuzztime 90000x ./lock/
# The soak (RULES.md X20): random workloads and faults for 150 s, with a
# fresh seed (printed), every history checked. A violation fails the run;
# its seed, the replay command, the history around it and the saved
# history (for TestRecheck) are printed and kept in the directory named.
soakout=$(mktemp -d)
if ! bash scripts/soak.sh --seconds 150 --out "$soakout"; then
  say "the soak found a violation: reports and the saved history are in $soakout"
  exit 1
fi
rm -rf "$soakout"
