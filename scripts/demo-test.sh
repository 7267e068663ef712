#!/usr/bin/env bash
# make test-demo: `make demo` as a newcomer runs it, then every command it prints, checked.
#
# Runs scripts/demo.sh on a scratch database and port (its own state directory, so a demo you
# left running is not touched), once in Production (the default) and once in Sandbox, then runs
# each printed command exactly as printed and checks its answer: JSON without an error, a
# subscription with a status, non-empty entitlements for the printed (entitled) customers, reports
# with figures, CSV with its provenance line, readiness, metrics, the verify commands' exit status.
# Stops each demo server by the PID the demo printed. About a minute and a half once built.
#
#   DEMO_TEST_ENVIRONMENTS ("Production Sandbox")   which demos to run
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
started=$(date +%s)
STATE="$ROOT/.build/demo-test"
mkdir -p "$STATE"
PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"

status=0
for environment in ${DEMO_TEST_ENVIRONMENTS:-Production Sandbox}; do
  out="$STATE/demo-$environment.txt"
  echo "== make demo (DEMO_ENVIRONMENT=$environment)"
  DEMO_ENVIRONMENT="$environment" DEMO_CUSTOMERS="${DEMO_TEST_CUSTOMERS:-60}" DEMO_WECHAT="${DEMO_TEST_WECHAT:-20}" \
    DEMO_DAYS=365 DEMO_DATABASE=ledger_demo_test DEMO_STATE="$STATE/state" LEDGER_LISTEN="127.0.0.1:$PORT" \
    scripts/demo.sh >"$out" 2>"$STATE/demo-$environment.err" || { tail -n 30 "$STATE/demo-$environment.err" >&2; exit 1; }
  pid="$(sed -nE 's/^ledger serve keeps running in the background: PID ([0-9]+).*/\1/p' "$out")"
  [ -n "$pid" ] || { echo "demo-test: the demo printed no server PID" >&2; exit 1; }
  receiver="$(sed -nE 's/^The webhook receiver too: PID ([0-9]+).*/\1/p' "$out")"
  [ -n "$receiver" ] || { echo "demo-test: the demo printed no webhook receiver PID" >&2; exit 1; }
  python3 scripts/demo_check.py "$out" "$environment" || status=1
  kill -TERM "$pid" "$receiver" 2>/dev/null || true
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  # SIGTERM must end the server (requests and webhook deliveries in flight finish or are cut).
  if kill -0 "$pid" 2>/dev/null; then
    echo "demo-test: ledger serve (PID $pid) still running 15 s after SIGTERM" >&2
    kill -KILL "$pid" 2>/dev/null || true
    status=1
  fi
done
echo "demo-test: $([ $status = 0 ] && echo passed || echo FAILED) in $(( $(date +%s) - started )) s"
exit $status
