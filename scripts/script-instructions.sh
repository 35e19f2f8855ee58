#!/usr/bin/env bash
# Counts the instructions redis-server runs inside the lock's scripts per
# contended acquisition (16 owners taking turns: an Unlock handing the lock
# over and a Lock queuing again) and per uncontended Lock+Unlock pair, with
# callgrind. Unlike time, the count is the same at every run, so a change
# to the scripts can be weighed on this noisy machine; it counts only what
# runs inside EVALSHA (--toggle-collect=evalGenericCommand: the scripts,
# their commands and each redis.call's work around its command), not the
# reading, parsing and replying around it, nor the kernel's share.
#
#   scripts/script-instructions.sh            the working tree
#   scripts/script-instructions.sh --base REV the working tree and REV, side by side
#
# Each figure is the difference between a run of 600 turns and one of 200,
# divided by 400, so that setting up (loading the scripts, queuing the
# owners) is not in it. Needs valgrind and redis-server (FAIRLOCK_REDIS_SERVER
# overrides it; the count is exact with Debian's stripped binary, and a
# build with symbols lets callgrind_annotate say where the instructions go).
set -euo pipefail
cd "$(dirname "$0")/.."
base=""
if [ "${1:-}" = "--base" ]; then
  base=${2:?--base needs a revision}
fi
server=${FAIRLOCK_REDIS_SERVER:-redis-server}
command -v valgrind >/dev/null || { echo "script-instructions: valgrind is not installed" >&2; exit 1; }
command -v "$server" >/dev/null || { echo "script-instructions: $server not found" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"; [ -n "$base" ] && git worktree remove --force "$work/base" 2>/dev/null || true' EXIT

go test -c -o "$work/tree.test" ./lock/internal/wire/
if [ -n "$base" ]; then
  git worktree add --detach "$work/base" "$base" >/dev/null 2>&1
  # A revision from before the driver gets this tree's (it uses only the
  # wire package's calls and cost_test.go's defaults).
  [ -f "$work/base/lock/internal/wire/turns_test.go" ] || cp lock/internal/wire/turns_test.go "$work/base/lock/internal/wire/"
  (cd "$work/base" && go test -c -o "$work/base.test" ./lock/internal/wire/)
fi

# count BINARY OWNERS TURNS prints the instructions collected in one run.
count() {
  local bin=$1 owners=$2 turns=$3 port out
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  out="$work/cg.$owners.$turns.out"
  valgrind --tool=callgrind --callgrind-out-file="$out" --toggle-collect=evalGenericCommand \
    "$(command -v "$server")" --port "$port" --bind 127.0.0.1 --save '' --appendonly no >"$work/valgrind.log" 2>&1 &
  local vg=$!
  for _ in $(seq 1 150); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      break
    fi
    sleep 0.2
  done
  "$bin" -test.run '^TestScriptTurns$' -test.count=1 -wire.turns.addr "127.0.0.1:$port" \
    -wire.turns.owners "$owners" -wire.turns.n "$turns" >"$work/turns.log" 2>&1 || { cat "$work/turns.log" >&2; kill "$vg"; exit 1; }
  wait "$vg"
  local total
  total=$(awk '/^(summary|totals):/ {print $2; exit}' "$out")
  if [ -z "$total" ] || [ "$total" = 0 ]; then
    echo "script-instructions: callgrind counted nothing (does $server export evalGenericCommand?)" >&2
    exit 1
  fi
  echo "$total"
}

# per_turn BINARY OWNERS prints instructions per turn.
per_turn() {
  local a b
  a=$(count "$1" "$2" 200) || exit 1
  b=$(count "$1" "$2" 600) || exit 1
  echo $(((b - a) / 400))
}

printf '%-10s %28s %28s\n' "" "per contended acquisition" "per uncontended pair"
for which in tree base; do
  [ "$which" = base ] && [ -z "$base" ] && continue
  label=$which
  [ "$which" = base ] && label=$(git rev-parse --short "$base")
  contended=$(per_turn "$work/$which.test" 16)
  pair=$(per_turn "$work/$which.test" 1)
  printf '%-10s %28s %28s\n' "$label" "$contended" "$pair"
done
