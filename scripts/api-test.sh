#!/usr/bin/env bash
# make test-api: the real service on a scratch database with simulated data, probed by
# schemathesis against docs/openapi.yaml (scripts/test-api.sh): no 5xx, every answer as documented.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
[ -d /opt/swift/usr/bin ] && export PATH="/opt/swift/usr/bin:$PATH"
STATE="$ROOT/.build/api-test"
PORT="${LEDGER_API_TEST_PORT:-18089}"
BASE="http://127.0.0.1:$PORT"
mkdir -p "$STATE"

scripts/db.sh start
eval "$(scripts/db.sh env)"
swift build --product ledger
swift build --product ledger-dev
LEDGER="$(swift build --show-bin-path)/ledger"
LEDGER_DEV="$(swift build --show-bin-path)/ledger-dev"

# A fresh database for each run, so the answers depend on nothing left over.
DBNAME=ledger_api_test
PSQL="$LEDGER_PG_BIN/psql"
"$PSQL" "$LEDGER_TEST_DATABASE_URL" -Xq -c "DROP DATABASE IF EXISTS $DBNAME" -c "CREATE DATABASE $DBNAME OWNER ledger_owner"
# Migrated as `make migrate` does: by the owner role, not the superuser.
OWNER_URL="${LEDGER_OWNER_DATABASE_URL/dbname=ledger/dbname=$DBNAME}"
SERVICE_URL="${LEDGER_DATABASE_URL/dbname=ledger/dbname=$DBNAME}"
LEDGER_DATABASE_URL="$OWNER_URL" "$LEDGER" migrate

ENV_LINE="$("$LEDGER_DEV" simulate --mint-root "$STATE/root.der" --seed 7)"
read -r -a APPLE_ENV <<<"$ENV_LINE"
echo '{"products": {"com.example.monthly": {"entitlements": ["pro"]}, "com.example.yearly": {"entitlements": ["pro"]}}}' > "$STATE/config.json"
env "${APPLE_ENV[@]}" LEDGER_CONFIG="$STATE/config.json" LEDGER_DATABASE_URL="$SERVICE_URL" LEDGER_LISTEN="127.0.0.1:$PORT" \
  LEDGER_TOKENS="app:api-app-0123456789abcdef0123456789abcdef,auditor:api-auditor-0123456789abcdef0123456789abcdef,admin:api-admin-0123456789abcdef0123456789abcdef" \
  LEDGER_WECHAT_APPID=wxba5fad812f8e6fb9 LEDGER_WECHAT_TOKEN=api-test-token \
  LEDGER_WECHAT_AES_KEY=kWxPEV2UEDyxWpmPdKC3F4dgPDmOvfKX1HGnEUDS1aR \
  "$LEDGER" serve >"$STATE/serve.log" 2>&1 </dev/null &
PID=$!
trap 'kill -TERM $PID 2>/dev/null; wait $PID 2>/dev/null || true' EXIT
for _ in $(seq 1 150); do
  curl -fs -o /dev/null --max-time 1 "$BASE/readyz" && break
  kill -0 $PID 2>/dev/null || { tail -n 20 "$STATE/serve.log"; exit 1; }
  sleep 0.2
done
"$LEDGER_DEV" simulate --customers 20 --days 60 --seed 7 --url "$BASE" --root-file "$STATE/root.der" >/dev/null
LEDGER_API_URL="$BASE" LEDGER_API_TOKENS="api-app-0123456789abcdef0123456789abcdef api-auditor-0123456789abcdef0123456789abcdef api-admin-0123456789abcdef0123456789abcdef" scripts/test-api.sh
