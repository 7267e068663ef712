#!/usr/bin/env bash
# make test-ui: the auditor's pages in a real browser. Debian's `chromium` driven by
# `chromium-driver` through selenium (PyPI, in the git-ignored .venv) — no browser download.
#
# Starts the real service on a scratch database with simulated Apple data (ledger-dev simulate),
# posts WeChat pushes (plaintext mode, a hostile order id among them), then scripts/ui_test.py
# signs in, searches, opens a timeline and a refund case, downloads the CSV and compares it with
# the API's, opens projection status and the drift report (an Apple-status disagreement seeded by
# simulate --disputed-statuses), signs out, checks that an app token gets
# a refusal page, that the CSP header is there and that the browser reported no console errors or
# CSP violations, opens the webhooks page (ui_test.py's own loopback receivers: one accepts, one
# answers 500 with a hostile body), opens the charts overview and one report page (each chart's points and table
# against the reports API's CSV, 1280 and 390 px wide). Screenshots: .build/ui/; the README's three
# (timeline, refund case, charts overview at 1280 px) are copied to docs/screenshots/.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
[ -d /opt/swift/usr/bin ] && export PATH="/opt/swift/usr/bin:$PATH"
started=$(date +%s)
STATE="$ROOT/.build/ui-test"
SHOTS="$ROOT/.build/ui"
PORT="${LEDGER_UI_TEST_PORT:-18090}"
BASE="http://127.0.0.1:$PORT"
mkdir -p "$STATE" "$SHOTS"

# The browser and its driver from Debian; selenium from PyPI.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    echo "ui-test: installing chromium and chromium-driver (Debian)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    echo "ui-test: chromium and chromium-driver are missing: sudo apt-get install chromium chromium-driver" >&2
    exit 2
  fi
fi
VENV="$ROOT/.venv"
if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV"; fi
if ! "$VENV/bin/python" -c 'import selenium' 2>/dev/null; then
  echo "ui-test: installing selenium into $VENV" >&2
  "$VENV/bin/pip" install --quiet "${SELENIUM_SPEC:-selenium>=4.20,<5}"
fi

scripts/db.sh start
eval "$(scripts/db.sh env)"
swift build --product ledger
swift build --product ledger-dev
LEDGER="$(swift build --show-bin-path)/ledger"
LEDGER_DEV="$(swift build --show-bin-path)/ledger-dev"

DBNAME=ledger_ui_test
PSQL="$LEDGER_PG_BIN/psql"
"$PSQL" "$LEDGER_TEST_DATABASE_URL" -Xq -c "DROP DATABASE IF EXISTS $DBNAME WITH (FORCE)" -c "CREATE DATABASE $DBNAME"
ADMIN_URL="${LEDGER_ADMIN_DATABASE_URL/dbname=ledger/dbname=$DBNAME}"
SERVICE_URL="${LEDGER_DATABASE_URL/dbname=ledger/dbname=$DBNAME}"
LEDGER_DATABASE_URL="$ADMIN_URL" "$LEDGER" migrate >/dev/null

# The simulated App Store's root and the simulated WeChat's push settings (appid, token, AES key:
# a test set-up's); plaintext pushes (scripts/ui_test.py's own) are signed with the same token.
ENV_LINE="$("$LEDGER_DEV" simulate --mint-root "$STATE/root.der" --seed 11 --wechat 1 2>/dev/null)"
read -r -a APPLE_ENV <<<"$ENV_LINE"
WECHAT_TOKEN="$(tr ' ' '\n' <<<"$ENV_LINE" | sed -n 's/^LEDGER_WECHAT_TOKEN=//p')"
env "${APPLE_ENV[@]}" LEDGER_DATABASE_URL="$SERVICE_URL" LEDGER_LISTEN="127.0.0.1:$PORT" \
  LEDGER_TOKENS="app:ui-app-token-0123456789abcdef0123456789abcdef,auditor:ui-auditor-token-0123456789abcdef0123456789abcdef,admin:ui-admin-token-0123456789abcdef0123456789abcdef" \
  LEDGER_WECHAT_ALLOW_PLAINTEXT=true LEDGER_DEVELOPMENT=true LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK=true \
  LEDGER_INSECURE_COOKIES=true LEDGER_SESSION_KEY=ui-test-session-key-0123456789abcdef0123 \
  "$LEDGER" serve >"$STATE/serve.log" 2>&1 </dev/null &
PID=$!
trap 'kill -TERM $PID 2>/dev/null; wait $PID 2>/dev/null || true' EXIT
for _ in $(seq 1 150); do
  curl -fs -o /dev/null --max-time 1 "$BASE/readyz" && break
  kill -0 $PID 2>/dev/null || { tail -n 20 "$STATE/serve.log"; exit 1; }
  sleep 0.2
done
# A year of App Store and WeChat subscribers from a fixed day (2025-04-04, a year before the pushes
# ui_test.py sends) with a fixed seed: the charts show the same figures on every run, so their
# screenshot changes only when the page does. One lifecycle ends with Apple stating a status the
# ledger disagrees with (the drift page lists it).
"$LEDGER_DEV" simulate --customers 80 --wechat 24 --days 365 --start 1743724800000 --seed 11 --disputed-statuses 1 \
  --url "$BASE" --root-file "$STATE/root.der" >/dev/null

SE_OFFLINE=true LEDGER_UI_BASE="$BASE" LEDGER_UI_SHOTS="$SHOTS" LEDGER_UI_WECHAT_TOKEN="$WECHAT_TOKEN" \
  LEDGER_UI_APP_TOKEN=ui-app-token-0123456789abcdef0123456789abcdef LEDGER_UI_AUDITOR_TOKEN=ui-auditor-token-0123456789abcdef0123456789abcdef \
  LEDGER_UI_ADMIN_TOKEN=ui-admin-token-0123456789abcdef0123456789abcdef \
  "$VENV/bin/python" scripts/ui_test.py
# The README shows these: taken by this run, so they always show the pages as they are. The charts
# overview is cropped to what depends on the data alone (no chain hash, no time of the run).
cp "$SHOTS/timeline-1280.png" docs/screenshots/audit-timeline.png
cp "$SHOTS/refund-case-1280.png" docs/screenshots/audit-refund-case.png
cp "$SHOTS/charts-overview-1280.png" docs/screenshots/charts-overview.png
# The chain the pages and exports rely on, recomputed by a tool that shares no code with the ledger.
"$PSQL" "$ADMIN_URL" -XAt -F ' ' -c "$(python3 scripts/recompute_chain.py --query)" | python3 scripts/recompute_chain.py
echo "ui-test: passed in $(( $(date +%s) - started )) s; screenshots in $SHOTS"
