#!/usr/bin/env bash
# `make test-soak`: builds the ledger binary (the product) and ledger-dev (the tools), starts the
# project-local PostgreSQL, and runs `ledger-dev soak` against the real service binary; prints the
# soak report and exits non-zero on any failed check.
#
#   scripts/test-soak.sh [--quick] [--debug] [soak options…]
#
#   --quick   1,500 subscribers, two service kills and two PostgreSQL crashes (about a minute)
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

scripts/db.sh start
eval "$(scripts/db.sh env)"
"$BIN/ledger-dev" soak ${ARGS[@]+"${ARGS[@]}"} --ledger "$BIN/ledger"
