#!/usr/bin/env bash
# Runs the soak (internal/soak): random workloads of Go owners on every
# adapter and Redisson-model owners, under random faults, on a real
# redis-server, with every history checked against the lock's promises.
#
#   bash scripts/soak.sh [--cluster] [--seconds N] [--seed S] [--adapters A,B] [--without K,L] [--out DIR] [--report FILE]
#   bash scripts/soak.sh --simulate [--seconds N] [--seed S] [--out DIR] [--report FILE]
#
# --cluster runs it on a Redis Cluster (3 primaries, a replica each; every
# other client with replica acks) under cluster faults - a shared lock's
# slot migrated, a primary failed over, a primary paused - with faults on
# single messages between them, and counts what a failover without
# replica acks may do (RULES.md X9) as documented exceptions, apart from
# the violations;
# --adapters runs only the named adapters (rueidis, rueidis-nocache,
# valkey-go, go-redis, go-redis-new; the Java owners and the rueidis
# client made of two stay);
# --without leaves fault kinds out of the nemesis: eviction and long-pause
# (standalone), and the faults on single messages - reply-lost, held-back,
# notice-burst - standalone and --cluster;
# --out keeps the history and the violation reports (text, porcupine's
# HTML) in DIR; --report rewrites FILE's generated soak section
# (RELIABILITY.md).
# Defaults: 120 seconds, a fresh seed (printed). Ends with one line
#   soak: H histories, O operations, F faults, V violations
# and exits non-zero on any violation, after printing each violation, the
# seed, the command that replays it and the shrunk history of the first.
# Needs redis-server as scripts/test.sh does (it installs it when missing).
#
# --simulate runs the simulation instead (internal/sim: the
# real lock and rueidis adapter against an in-process server, a seeded
# switch faulting messages, virtual time): histories of 10 virtual minutes,
# seeds S, S+1, ..., in one process per core (each on one processor), for
# N seconds of wall time (histories still running then end early), each
# judged by the soak's checker and the server-side invariants. It needs no
# redis-server and ends with the same line (the processes' sum); on a
# violation it prints the history's seed and the command that simulates it
# alone (on one processor: the same history for a stretch, often to its
# end, not always - Go's select and map order and the lock's retry jitter
# follow no seed). --out keeps each history there (history-<seed>.json.gz,
# which TestRecheck reads); --report rewrites FILE's generated simulation
# section (RELIABILITY.md) from the run.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=120 seed=0 out="" report="" cluster="" adapters="" without="" simulate=""
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --report) report="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"; shift 2 ;;
    --cluster) cluster=1; shift ;;
    --adapters) adapters="$2"; shift 2 ;;
    --without) without="$2"; shift 2 ;;
    --simulate) simulate=1; shift ;;
    *) echo "usage: bash scripts/soak.sh [--cluster] [--seconds N] [--seed S] [--adapters A,B] [--without K,L] [--out DIR] [--report FILE]" >&2
       echo "       bash scripts/soak.sh --simulate [--seconds N] [--seed S] [--out DIR]" >&2; exit 2 ;;
  esac
done
[ "$seed" != 0 ] || seed=$(od -An -N6 -tu8 /dev/urandom | tr -d ' ')
# finish prints the run's output but the test runner's own lines, then the
# soak line, and exits with the run's status.
finish() {
  local log=$1 rc=$2 line
  grep -v '^soak: ' "$log" | grep -vE '^ *(=== (RUN|PAUSE|CONT|NAME)|--- PASS|PASS$|ok )' || true
  line=$(grep -E '^soak: [0-9]+ histories' "$log" | tail -1 || true)
  rm -f "$log"
  if [ -z "$line" ]; then
    echo "soak.sh: the soak did not finish (exit $rc); its output is above" >&2
    exit 1
  fi
  echo "$line"
  exit "$rc"
}
# simulate_run runs the simulation as one process per core, each on one
# processor (GOMAXPROCS=1: a history runs twice as fast there as on two,
# and its goroutines' order then follows mostly from its seed), process k
# simulating seeds S+k, S+k+P, ...; it prints their output and the sum of
# their soak lines, and exits non-zero if any failed.
simulate_run() {
  local procs dir bin k rc=0 pids=() opts=()
  procs=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
  dir=$(mktemp -d)
  bin="$dir/sim.test"
  go test -c -o "$bin" ./internal/sim/
  if [ -n "$out" ]; then mkdir -p "$out"; opts+=(-sim.out="$(cd "$out" && pwd)"); fi
  echo "soak.sh: simulating from seed $seed for ${seconds}s, $procs processes"
  for ((k = 0; k < procs; k++)); do
    (cd internal/sim && GOMAXPROCS=1 exec "$bin" -test.run '^TestSimulate$' -test.count=1 -test.v \
      -test.timeout "$((seconds + 600))s" -sim.seconds="$seconds" -sim.seed="$((seed + k))" \
      -sim.stride="$procs" -sim.parallel=1 -sim.summary="$dir/summary.$k.json" "${opts[@]}") >"$dir/log.$k" 2>&1 &
    pids+=($!)
  done
  for k in "${!pids[@]}"; do wait "${pids[$k]}" || rc=1; done
  cat "$dir"/log.* | grep -v '^soak: ' | grep -vE '^ *(=== (RUN|PAUSE|CONT|NAME)|--- PASS|PASS$|ok )' || true
  if [ "$(cat "$dir"/log.* | grep -cE '^soak: [0-9]+ histories')" != "$procs" ]; then
    rm -rf "$dir"
    echo "soak.sh: a simulation did not finish; its output is above" >&2
    exit 1
  fi
  cat "$dir"/log.* | grep -E '^soak: [0-9]+ histories' | awk -v s="$seconds" -v p="$procs" '{h += $2; o += $4; f += $6; v += $8}
    END {printf "soak.sh: %d processes, %.0f operations/s\n", p, o / s
      printf "soak: %d histories, %d operations, %d faults, %d violations\n", h, o, f, v}'
  if [ -n "$report" ] && ! go run ./internal/sim/simreport -report "$report" "$dir"/summary.*.json; then
    rc=1
  fi
  rm -rf "$dir"
  exit "$rc"
}
if [ -n "$simulate" ]; then
  if [ -n "$cluster$adapters$without" ]; then
    echo "soak.sh: --simulate takes only --seconds, --seed, --out and --report" >&2; exit 2
  fi
  simulate_run
fi
if ! command -v redis-server >/dev/null 2>&1 && [ -z "${FAIRLOCK_REDIS_SERVER:-}" ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends redis-server >/dev/null
fi
log=$(mktemp)
args=(-soak.seconds="$seconds" -soak.seed="$seed")
[ -z "$out" ] || args+=(-soak.out="$out")
[ -z "$report" ] || args+=(-soak.report="$report")
[ -z "$cluster" ] || args+=(-soak.cluster)
[ -z "$adapters" ] || args+=(-soak.adapters="$adapters")
[ -z "$without" ] || args+=(-soak.without="$without")
set +e
# The checks and the saved history take minutes after a long run under the
# race detector: 300 s was too little after 30 minutes.
go test -race -count=1 -timeout "$((seconds + 300 + seconds / 2))s" -run '^TestSoak$' -v ./internal/soak/ -args "${args[@]}" >"$log" 2>&1
rc=$?
set -e
finish "$log" "$rc"
