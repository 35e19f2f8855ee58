#!/usr/bin/env bash
# Runs the soak (internal/soak): random workloads of Go owners on every
# adapter and Redisson-model owners, under random faults, on a real
# redis-server, with every history checked against the lock's promises.
#
#   bash scripts/soak.sh [--cluster] [--seconds N] [--seed S] [--adapters A,B] [--without K,L] [--out DIR] [--report FILE]
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
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=120 seed=0 out="" report="" cluster="" adapters="" without=""
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --report) report="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"; shift 2 ;;
    --cluster) cluster=1; shift ;;
    --adapters) adapters="$2"; shift 2 ;;
    --without) without="$2"; shift 2 ;;
    *) echo "usage: bash scripts/soak.sh [--cluster] [--seconds N] [--seed S] [--adapters A,B] [--without K,L] [--out DIR] [--report FILE]" >&2; exit 2 ;;
  esac
done
if ! command -v redis-server >/dev/null 2>&1 && [ -z "${FAIRLOCK_REDIS_SERVER:-}" ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends redis-server >/dev/null
fi
[ "$seed" != 0 ] || seed=$(od -An -N6 -tu8 /dev/urandom | tr -d ' ')
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
grep -v '^soak: ' "$log" | grep -vE '^(=== RUN|--- PASS|PASS$|ok )' || true
line=$(grep -E '^soak: [0-9]+ histories' "$log" | tail -1)
rm -f "$log"
if [ -z "$line" ]; then
  echo "soak.sh: the soak did not finish (exit $rc); its output is above" >&2
  exit 1
fi
echo "$line"
exit "$rc"
