#!/usr/bin/env bash
# Compares fairlock (on each adapter) with rueidislock, redsync and
# redislock in one run against a redis-server it starts on a free loopback
# port, and writes BENCHMARKS.md, benchmarks/contention.svg (the chart) and
# benchmarks/results.json (the raw figures). Takes about 5 minutes on 2
# cores and stops by itself within 9 (every scenario is bounded in count
# and time).
#
# Needs redis-server: FAIRLOCK_REDIS_SERVER, else redis-server on PATH,
# else /usr/bin/redis-server; when none is there it installs Debian's
# redis-server package (apt-get update first), as scripts/test.sh does.
# Pass --quick for a smoke test of the whole run (about 30 s; its figures
# mean nothing), written to a temporary directory unless --out is given.
#
# --cluster runs the cluster benchmark instead: a fresh Redis Cluster of 3
# primaries with a replica each and a standalone server, on free loopback
# ports (cluster bus messages and pub/sub commands per acquisition by node,
# broadcast against sharded wake-ups; throughput and hand-over on one
# server against the cluster; memory per lock name, hold and waiter; a
# model of larger deployments). It writes its section of BENCHMARKS.md
# (keeping the rest), benchmarks/cluster.svg and benchmarks/cluster.json,
# in about 4 minutes on 2 cores; the main run keeps that section from
# benchmarks/cluster.json. --cluster --quick: about 40 s.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

say() { printf 'benchmarks.sh: %s\n' "$*" >&2; }

bin="${FAIRLOCK_REDIS_SERVER:-}"
if [ -z "$bin" ]; then
  bin=$(command -v redis-server || true)
  [ -n "$bin" ] || bin=/usr/bin/redis-server
fi
if [ ! -x "$bin" ]; then
  if [ -n "${FAIRLOCK_REDIS_SERVER:-}" ]; then
    say "FAIRLOCK_REDIS_SERVER=$FAIRLOCK_REDIS_SERVER is not executable"
    exit 1
  fi
  say "redis-server not found: installing Debian's redis-server package"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends redis-server >/dev/null; }; then
    say "could not install redis-server: install it, or set FAIRLOCK_REDIS_SERVER to its path"
    exit 1
  fi
  bin=/usr/bin/redis-server
fi

out="$root/BENCHMARKS.md"
chart="$root/benchmarks/contention.svg"
json="$root/benchmarks/results.json"
cchart="$root/benchmarks/cluster.svg"
cjson="$root/benchmarks/cluster.json"
cluster=""
quick=""
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick)
      args+=(-quick)
      quick=1
      dir=$(mktemp -d)
      out="$dir/BENCHMARKS.md" chart="$dir/contention.svg" json="$dir/results.json"
      cchart="$dir/cluster.svg" cjson="$dir/cluster.json"
      ;;
    --cluster) cluster=1 ;;
    --out)
      shift
      mkdir -p "$1"
      out="$1/BENCHMARKS.md" chart="$1/contention.svg" json="$1/results.json"
      cchart="$1/cluster.svg" cjson="$1/cluster.json"
      ;;
    *) say "unknown argument $1 (want --quick, --cluster, --out DIR)"; exit 2 ;;
  esac
  shift
done

start=$(date +%s)
# Built first, so that compiling does not run during the measurements.
go -C benchmarks build -o "${TMPDIR:-/tmp}/fairlock-benchmarks" .
if [ -n "$cluster" ]; then
  # A quick run writes its section into a copy of the report.
  [ -z "$quick" ] || [ -e "$out" ] || cp "$root/BENCHMARKS.md" "$out"
  "${TMPDIR:-/tmp}/fairlock-benchmarks" -cluster -redis-server "$bin" -out "$out" -cluster-chart "$cchart" -cluster-json "$cjson" "${args[@]}"
else
  "${TMPDIR:-/tmp}/fairlock-benchmarks" -redis-server "$bin" -out "$out" -chart "$chart" -json "$json" -cluster-chart "$cchart" -cluster-json "$cjson" "${args[@]}"
fi
say "done in $(( $(date +%s) - start ))s: $out"
