#!/usr/bin/env bash
# `make test-scale`: builds `ledger` and `ledger-dev`, starts the project-local PostgreSQL and its
# streaming replica, and runs `ledger-dev scale`: two `ledger serve` instances and one
# `ledger project` worker on one database, reads on the replica, 32 clients posting Apple and
# WeChat notifications (distinct and duplicated across the instances) while a rebuild runs.
#
#   scripts/test-scale.sh [--quick] [--debug]
#
#   --quick   5 s of load instead of 20 s (what CI runs)
#   --debug   use a debug build instead of release
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

scripts/db.sh start
scripts/db.sh replica-start
eval "$(scripts/db.sh env)"
"$BIN/ledger-dev" scale ${ARGS[@]+"${ARGS[@]}"} --ledger "$BIN/ledger"
