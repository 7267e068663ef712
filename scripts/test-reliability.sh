#!/usr/bin/env bash
# `make test-reliability`: builds the ledger binary (the product) and ledger-dev (the tools),
# starts the project-local PostgreSQL, and runs every reliability scenario against the real service
# binary (`ledger-dev reliability all --ledger .build/…/ledger`), which prints one loss table (sent,
# acknowledged, stored, duplicates, lost) and exits non-zero on any loss or failed check.
#
#   scripts/test-reliability.sh [--quick] [--debug] [scenario…]
#
#   --quick   a few seconds per scenario (what CI runs); default: the full durations of issue 6
#   --debug   use a debug build instead of release (faster to build, much slower to serve)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SWIFT_BIN="${SWIFT_BIN:-/opt/swift/usr/bin}"
[ -d "$SWIFT_BIN" ] && export PATH="$SWIFT_BIN:$PATH"

CONFIG=release
ARGS=()
for a in "$@"; do
  case "$a" in
    --debug) CONFIG=debug ;;
    *) ARGS+=("$a") ;;
  esac
done

scripts/db.sh deps
echo "building ledger and ledger-dev ($CONFIG)…" >&2
swift build -c "$CONFIG" --product ledger
swift build -c "$CONFIG" --product ledger-dev
BIN="$(swift build -c "$CONFIG" --show-bin-path)"
LEDGER="$BIN/ledger"
LEDGER_DEV="$BIN/ledger-dev"

scripts/db.sh start
eval "$(scripts/db.sh env)"

# The outage scenario stops and starts this cluster; whatever happens, leave it running.
trap 'scripts/db.sh start >/dev/null 2>&1 || true' EXIT

# No scenario named: all of them. The service under test is the product binary itself.
"$LEDGER_DEV" reliability ${ARGS[@]+"${ARGS[@]}"} --ledger "$LEDGER"
