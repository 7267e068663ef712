#!/usr/bin/env bash
# `make bench-smoke`: a regression guard for the hot paths, not a measurement. A release build,
# then one small run each of the ingest (1 and 100 prior events), webhook-delivery and
# entitlement-read benchmarks, each against its same-run baseline, checked against floors far
# below the targets (scripts/bench_floors.py). A change that makes the append, the projections or
# delivery several times slower fails it; the README's figures come from `make bench` alone.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
scripts/db.sh start >/dev/null
# The read replica (started by `make test`) replays every write: its CPU is not the service's.
scripts/db.sh replica-stop >/dev/null 2>&1 || true
swift build -c release --product ledger
swift build -c release --product ledger-dev
eval "$(scripts/db.sh env)"
export LEDGER_BENCH_JSON=.build/bench-smoke.json
rm -f "$LEDGER_BENCH_JSON"
echo "bench-smoke: load average $(cut -d' ' -f1-3 /proc/loadavg)"
.build/release/ledger-dev bench ingest --runs 1 --priors 1,100 --notifications 800
.build/release/ledger-dev bench webhooks --runs 1 --notifications 400
.build/release/ledger-dev bench read --runs 1 --subscriptions 5000 --seconds 2
python3 scripts/bench_floors.py "$LEDGER_BENCH_JSON"
