#!/usr/bin/env bash
# Runs every test of the module against real servers: Redis, and Valkey for
# the conformance suite and a short soak; then a minute of the simulation.
#
# The tests start their own server processes on free loopback ports, so
# they need the binaries: when redis-server is missing this script installs
# Debian's redis-server package, and when valkey-server is missing it
# installs valkey-server and valkey-sentinel from the release's backports
# suite (added to the machine's own Debian source first), and stops with an
# error if it cannot. FAIRLOCK_REDIS_SERVER and FAIRLOCK_VALKEY_SERVER name
# other binaries. Tests fail, never skip, when a server cannot start.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'test.sh: %s\n' "$*" >&2; }

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

# apt_install [apt-get install options...] package...: quietly, without the
# recommended extras.
apt_install() {
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# backports_entry prints a deb822 entry for the release's backports suite:
# a copy of the first .sources entry apt already uses for the release itself
# (its URIs, components and keyring), with the backports suite instead.
# It prints nothing when there is none.
backports_entry() {
  local release=$1
  cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk -v release="$release" '
    BEGIN { RS = ""; FS = "\n" }
    {
      entry = ""; ours = 0
      for (i = 1; i <= NF; i++) {
        if ($i ~ /^[ \t]*#/) continue
        if ($i ~ /^Suites:/) {
          n = split(substr($i, 8), suites, /[ \t]+/)
          for (j = 1; j <= n; j++) if (suites[j] == release) ours = 1
          $i = "Suites: " release "-backports"
        }
        entry = entry $i "\n"
      }
      if (ours && entry ~ /(^|\n)Types:[^\n]*deb([ \t]|\n)/) { printf "%s", entry; exit }
    }'
}

# backports_line prints the same for a one-line source (sources.list
# format): the first "deb" line naming the release, with the backports
# suite instead.
backports_line() {
  local release=$1
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk -v release="$release" '
    $1 == "deb" { for (i = 2; i <= NF; i++) if ($i == release) { $i = release "-backports"; print; exit } }'
}

# add_backports makes apt see the release's backports suite, unless a
# source names it already, and updates apt's lists.
add_backports() {
  local release suite
  release=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  [ -n "$release" ] || { say "cannot tell the Debian release from /etc/os-release"; return 1; }
  suite="$release-backports"
  if ! grep -Eqs "(^|[[:space:]])$suite([[:space:]]|$)" /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; then
    local entry file=/etc/apt/sources.list.d/$suite.sources
    entry=$(backports_entry "$release")
    if [ -z "$entry" ]; then
      entry=$(backports_line "$release") file=/etc/apt/sources.list.d/$suite.list
    fi
    if [ -z "$entry" ]; then
      say "no apt source for $release to copy for $suite"
      return 1
    fi
    say "adding $suite to apt's sources ($file):"
    printf '%s\n' "$entry" | sed 's/^/  /' >&2
    printf '%s\n' "$entry" | $sudo tee "$file" >/dev/null
  fi
  $sudo apt-get update -qq >&2 && echo "$suite"
}

if [ -n "${FAIRLOCK_REDIS_SERVER:-}" ]; then
  [ -x "$FAIRLOCK_REDIS_SERVER" ] || { say "FAIRLOCK_REDIS_SERVER=$FAIRLOCK_REDIS_SERVER is not executable"; exit 1; }
elif ! command -v redis-server >/dev/null 2>&1 && [ ! -x /usr/bin/redis-server ]; then
  say "redis-server not found: installing Debian's redis-server package"
  if ! { $sudo apt-get update -qq && apt_install redis-server; }; then
    say "could not install redis-server. The tests need a real Redis 7: install redis-server, or set FAIRLOCK_REDIS_SERVER to its path."
    exit 1
  fi
fi
redis=${FAIRLOCK_REDIS_SERVER:-$(command -v redis-server || echo /usr/bin/redis-server)}

if [ -n "${FAIRLOCK_VALKEY_SERVER:-}" ]; then
  [ -x "$FAIRLOCK_VALKEY_SERVER" ] || { say "FAIRLOCK_VALKEY_SERVER=$FAIRLOCK_VALKEY_SERVER is not executable"; exit 1; }
elif ! command -v valkey-server >/dev/null 2>&1 && [ ! -x /usr/bin/valkey-server ]; then
  say "valkey-server not found: installing valkey-server and valkey-sentinel from Debian's backports"
  # Where systemd runs, the package starts a service on port 6379; the
  # tests start their own servers on other ports.
  if ! { suite=$(add_backports) && apt_install -t "$suite" valkey-server valkey-sentinel; }; then
    say "could not install valkey-server. The tests need a real Valkey 8: install valkey-server, or set FAIRLOCK_VALKEY_SERVER to its path."
    exit 1
  fi
fi
valkey=${FAIRLOCK_VALKEY_SERVER:-$(command -v valkey-server || echo /usr/bin/valkey-server)}
"$redis" --version
"$valkey" --version
# redistest starts Redis unless FAIRLOCK_SERVER=valkey, and finds each
# binary through these.
export FAIRLOCK_REDIS_SERVER="$redis" FAIRLOCK_VALKEY_SERVER="$valkey" FAIRLOCK_SERVER=redis
go version
go vet ./...
# Everything but the fault suite, on Redis, then the fault suite on its
# own: its scenarios measure timings (RELIABILITY.md) and should not share
# the two cores with the conformance runs. The conformance suite's rule
# cases run three at a time here (-parallel 3; Go's default is one per
# core): they mostly wait on leases and timeouts (at two a rueidis run took
# 84 s, at eight 27 s), but under the race detector, with every package at
# once, four at a time stretched a cluster case past its bound once.
go test -race -count=1 -parallel 3 -timeout 20m $(go list ./... | grep -v /internal/faultsuite)
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
# The conformance suite on Valkey: every adapter, every server mode
# (standalone with a replica and the fault cases, Sentinel, cluster). The
# adapters' code is the same as on Redis, where it ran under the race
# detector above; here it runs without, the three packages at once (the
# suite mostly waits on leases and timeouts), in Go's FIPS 140-only mode,
# which forbids SHA-1: fairlock and the adapters must compute none (script
# digests are generated at build time). The client-side variants
# (rueidis without cache, go-redis on RESP2) ran on Redis only.
FAIRLOCK_SERVER=valkey GODEBUG=fips140=only go test -count=1 -p 3 -parallel 4 -timeout 15m -run '^TestConformance(Cluster|Sentinel)?$' ./rueidisbackend/ ./valkeybackend/ ./goredisbackend/
# The fault suite's bad input and the demo in FIPS-only mode too.
GODEBUG=fips140=only go test -count=1 -run '^TestBadInput$' ./internal/faultsuite/
GODEBUG=fips140=only go run ./cmd/fairlock demo >/dev/null
# An outside module runs the conformance suite against its own backend with
# exported packages only; the benchmarks module (its own go.mod) must build.
(cd examples/outsidebackend && go vet ./... && go test -race -count=1 -parallel 4 ./...)
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
# The soak (RULES.md X20): random workloads and faults for 120 s on Redis,
# then 30 s on Valkey (FAIRLOCK_SERVER reaches redistest through
# scripts/soak.sh), with a fresh seed each (printed), every history
# checked. A violation fails the run; its seed, the replay command, the
# history around it and the saved history (for TestRecheck) are printed
# and kept in the directory named.
for run in redis:120 valkey:30; do
  soakout=$(mktemp -d)
  if ! FAIRLOCK_SERVER=${run%%:*} bash scripts/soak.sh --seconds "${run##*:}" --out "$soakout"; then
    say "the soak on ${run%%:*} found a violation: reports and the saved history are in $soakout"
    exit 1
  fi
  rm -rf "$soakout"
done
# The simulation (RULES.md X21): histories of 10 virtual minutes for 60 s
# on both cores, from a fresh seed (printed), each checked as the soak's
# are. A violation fails the run, with its seed and the command that
# simulates it again; the histories are kept in the directory named.
simout=$(mktemp -d)
if ! bash scripts/soak.sh --simulate --seconds 60 --out "$simout"; then
  say "the simulation found a violation: the saved histories are in $simout"
  exit 1
fi
rm -rf "$simout"
