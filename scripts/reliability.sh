#!/usr/bin/env bash
# Runs the fault suite (internal/faultsuite) against real redis-server
# processes and rewrites the table in RELIABILITY.md from its figures.
# Needs redis-server (scripts/test.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
FAIRLOCK_RELIABILITY="$PWD/RELIABILITY.md" go test -race -count=1 -v ./internal/faultsuite/ | grep -E '^(--- |ok|FAIL|PASS)|figures:'
