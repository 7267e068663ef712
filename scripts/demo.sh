#!/usr/bin/env bash
# make demo: real data in the API within a minute of the build.
#
# Builds `ledger` and `ledger-dev`, starts the project-local PostgreSQL (scripts/db.sh), migrates,
# starts `ledger serve` in the background trusting the simulator's seeded test root and the
# simulated WeChat's push settings, posts a simulated population with `ledger-dev simulate`
# (App Store customers and WeChat mini-program xpay subscribers), prints commands to look at it,
# and leaves the server running (its PID and how to stop it are printed at the end).
#
#   DEMO_CUSTOMERS (120), DEMO_WECHAT (40), DEMO_DAYS (365), DEMO_SEED (42)
#       the simulated population: a year, so the charts at /audit/reports have twelve months
#   DEMO_ENVIRONMENT (Production)
#       where the App Store notifications are signed for. Production needs the service to trust
#       a test root, which it does only with LEDGER_APPLE_ALLOW_TEST_ROOTS=true (set here, for
#       the demo only: never in a real deployment). With Sandbox every printed command names
#       ?environment=Sandbox, because without it the API answers for Production. WeChat's Apple
#       subscriptions are Production either way (WeChat has no sandbox for them).
#   LEDGER_LISTEN (127.0.0.1:8080)   where the demo server listens
#
# Every command printed at the end is run and checked by scripts/demo-test.sh (make test-demo).
# The demo tokens below are for this local demo only; never use them for a real deployment.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
[ -d /opt/swift/usr/bin ] && export PATH="/opt/swift/usr/bin:$PATH"

CUSTOMERS="${DEMO_CUSTOMERS:-120}"
WECHAT="${DEMO_WECHAT:-40}"
DAYS="${DEMO_DAYS:-365}"
ENVIRONMENT="${DEMO_ENVIRONMENT:-Production}"
case "$ENVIRONMENT" in
  Production) ENVQ="" ;;
  Sandbox) ENVQ="environment=Sandbox" ;;
  *) echo "demo: DEMO_ENVIRONMENT must be Production or Sandbox, not '$ENVIRONMENT'" >&2; exit 2 ;;
esac
SEED="${DEMO_SEED:-42}"
LISTEN="${LEDGER_LISTEN:-127.0.0.1:8080}"
BASE="http://$LISTEN"
STATE="${DEMO_STATE:-$ROOT/.build/demo}"   # git-ignored, survives between demos
PIDFILE="$STATE/serve.pid"
LOG="$STATE/serve.log"
RECEIVER_PIDFILE="$STATE/webhook-receiver.pid"
RECEIVER_LOG="$STATE/webhooks.log"
APP_TOKEN=demo-app-token-0123456789abcdef0123456789abcdef
AUDITOR_TOKEN=demo-auditor-token-0123456789abcdef0123456789abcdef
ADMIN_TOKEN=demo-admin-token-0123456789abcdef0123456789abcdef

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
fail() { printf 'demo: %s\n' "$*" >&2; exit 1; }
command -v curl >/dev/null || fail "curl is needed to talk to the demo server (apt-get install curl)"
mkdir -p "$STATE"

say "building ledger and ledger-dev"
scripts/db.sh deps
swift build --product ledger
swift build --product ledger-dev
LEDGER="$(swift build --show-bin-path)/ledger"
LEDGER_DEV="$(swift build --show-bin-path)/ledger-dev"

# A previous demo's server is ours to replace (by its recorded PID, and only if it is `ledger`).
if [ -s "$PIDFILE" ]; then
  old="$(cat "$PIDFILE")"
  if kill -0 "$old" 2>/dev/null && grep -q ledger "/proc/$old/cmdline" 2>/dev/null; then
    say "stopping the previous demo server (PID $old)"
    kill -TERM "$old"
    for _ in $(seq 1 100); do kill -0 "$old" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$PIDFILE"
fi
# …and its webhook receiver (by its recorded PID, and only if it is `ledger-dev`).
if [ -s "$RECEIVER_PIDFILE" ]; then
  old="$(cat "$RECEIVER_PIDFILE")"
  if kill -0 "$old" 2>/dev/null && grep -q ledger-dev "/proc/$old/cmdline" 2>/dev/null; then kill -TERM "$old"; fi
  rm -f "$RECEIVER_PIDFILE"
fi
if curl -s -o /dev/null --max-time 1 "$BASE/healthz"; then
  fail "something already answers on $LISTEN; stop it or pick another address: LEDGER_LISTEN=127.0.0.1:8181 make demo"
fi

say "starting PostgreSQL and migrating"
scripts/db.sh start
eval "$(scripts/db.sh env)"
if [ -n "${DEMO_DATABASE:-}" ]; then
  # A fresh database of its own (scripts/demo-test.sh), beside the demo's `ledger`, owned by the
  # migrations' owner role as `ledger` is.
  [[ "$DEMO_DATABASE" =~ ^[a-z_][a-z0-9_]*$ ]] || fail "DEMO_DATABASE must be a plain lower-case name"
  "$LEDGER_PG_BIN/psql" "$LEDGER_TEST_DATABASE_URL" -Xq -c "DROP DATABASE IF EXISTS $DEMO_DATABASE WITH (FORCE)" \
    -c "CREATE DATABASE $DEMO_DATABASE OWNER ledger_owner"
  LEDGER_ADMIN_DATABASE_URL="${LEDGER_ADMIN_DATABASE_URL/dbname=ledger/dbname=$DEMO_DATABASE}"
  LEDGER_OWNER_DATABASE_URL="${LEDGER_OWNER_DATABASE_URL/dbname=ledger/dbname=$DEMO_DATABASE}"
  LEDGER_DATABASE_URL="${LEDGER_DATABASE_URL/dbname=ledger/dbname=$DEMO_DATABASE}"
  export LEDGER_DATABASE_URL
fi
LEDGER_DATABASE_URL="$LEDGER_OWNER_DATABASE_URL" "$LEDGER" migrate

# Which entitlement each simulated product grants (the service's product catalog).
cat > "$STATE/config.json" <<'JSON'
{
  "products": {
    "com.example.monthly": {"entitlements": ["pro"]},
    "com.example.yearly": {"entitlements": ["pro"]},
    "com.example.premium.monthly": {"entitlements": ["pro", "premium"]},
    "com.example.premium.yearly": {"entitlements": ["pro", "premium"]},
    "wx_vip_monthly": {"entitlements": ["pro"]},
    "wx_vip_weekly": {"entitlements": ["pro"]}
  }
}
JSON

say "minting the simulator's test root (seed $SEED)"
# One line of NAME=value words (paths and ids without spaces): the service's Apple settings.
ENV_LINE="$("$LEDGER_DEV" simulate --mint-root "$STATE/simulator-root.der" --seed "$SEED" --environment "$ENVIRONMENT" --wechat "$WECHAT")"
read -r -a APPLE_ENV <<<"$ENV_LINE"

# A webhook endpoint for the demo: ledger-dev's receiver on a free loopback port, verifying every
# request's Standard Webhooks signature with the endpoint's secret and printing each event.
RECEIVER_LISTEN="${DEMO_WEBHOOK_LISTEN:-127.0.0.1:$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
WEBHOOK_SECRET="whsec_$(python3 -c 'import base64, os; print(base64.b64encode(os.urandom(32)).decode())')"
say "starting the demo's webhook receiver on $RECEIVER_LISTEN (log: $RECEIVER_LOG)"
nohup "$LEDGER_DEV" webhook-receiver --secret "$WEBHOOK_SECRET" --listen "$RECEIVER_LISTEN" >"$RECEIVER_LOG" 2>&1 </dev/null &
RECEIVER_PID=$!
echo "$RECEIVER_PID" >"$RECEIVER_PIDFILE"

say "starting ledger serve on $LISTEN (log: $LOG)"
env "${APPLE_ENV[@]}" \
  LEDGER_WEBHOOK_NAME=demo \
  LEDGER_WEBHOOK_URL="http://$RECEIVER_LISTEN/hooks" \
  LEDGER_WEBHOOK_SECRET="$WEBHOOK_SECRET" \
  LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK=true \
  LEDGER_CONFIG="$STATE/config.json" \
  LEDGER_LISTEN="$LISTEN" \
  LEDGER_TOKENS="app:$APP_TOKEN,auditor:$AUDITOR_TOKEN,admin:$ADMIN_TOKEN" \
  LEDGER_INSECURE_COOKIES=true \
  nohup "$LEDGER" serve >"$LOG" 2>&1 </dev/null &
PID=$!
echo "$PID" >"$PIDFILE"
for _ in $(seq 1 150); do
  kill -0 "$PID" 2>/dev/null || { tail -n 20 "$LOG" >&2; fail "ledger serve exited during start-up (log above)"; }
  curl -fs -o /dev/null --max-time 1 "$BASE/readyz" && break
  sleep 0.2
done
curl -fs -o /dev/null --max-time 1 "$BASE/readyz" || { tail -n 20 "$LOG" >&2; fail "ledger serve is not ready after 30 s (log above)"; }

say "posting $CUSTOMERS App Store customers and $WECHAT WeChat subscribers over $DAYS days ($ENVIRONMENT)"
OUT="$STATE/simulate.txt"
"$LEDGER_DEV" simulate --customers "$CUSTOMERS" --wechat "$WECHAT" --days "$DAYS" --seed "$SEED" --url "$BASE" \
  --environment "$ENVIRONMENT" --root-file "$STATE/simulator-root.der" | tee "$OUT"

# The reports are kept by the projection worker after each commit: wait until it has caught up,
# so the printed reports show the whole year.
HEAD_POSITION="$("$LEDGER_PG_BIN/psql" "$LEDGER_ADMIN_DATABASE_URL" -XAtc "SELECT position FROM event_head")"
for _ in $(seq 1 300); do
  at="$("$LEDGER_PG_BIN/psql" "$LEDGER_ADMIN_DATABASE_URL" -XAtc "SELECT position FROM projection_checkpoints WHERE projection = 'reports'")"
  [ "${at:-0}" -ge "$HEAD_POSITION" ] && break
  sleep 0.2
done
# The first webhooks reach the receiver within seconds (each subscription's in order; the rest
# keep arriving while you read this).
for _ in $(seq 1 150); do grep -q ' verified ' "$RECEIVER_LOG" 2>/dev/null && break; sleep 0.2; done

# The sample tables' rows: appAccountToken (or openid) and originalTransactionId.
mapfile -t SAMPLE < <(awk '/^  [0-9a-f]+-[0-9a-f]+-[0-9a-f]+-/ {print $1 " " $2}' "$OUT" | head -n 3)
[ "${#SAMPLE[@]}" -gt 0 ] || fail "the simulator printed no sample customers"
read -r TOKEN OTID <<<"${SAMPLE[0]}"
mapfile -t WX_SAMPLE < <(awk '/^  oSim/ {print $1 " " $2}' "$OUT" | head -n 1)

# A URL with the demo's environment parameter (if any) and the given ones.
q() {
  local path="$1"; shift
  local params=()
  [ -n "$ENVQ" ] && params+=("$ENVQ")
  params+=("$@")
  if [ "${#params[@]}" -gt 0 ]; then local IFS='&'; echo "$BASE$path?${params[*]}"; else echo "$BASE$path"; fi
}
SIXTY_DAYS_AGO=$(( ($(date +%s) - 60 * 86400) * 1000 ))

cat <<EOF

The ledger is running with real (simulated, signed) data in $ENVIRONMENT$([ -n "$ENVQ" ] && echo " (every command names ?$ENVQ)"). Try:

  # a subscription's state (role app)
  curl -s -H "Authorization: Bearer $APP_TOKEN" "$(q "/v1/subscriptions/$OTID")"
  # its history with the raw signed evidence (role auditor)
  curl -s -H "Authorization: Bearer $AUDITOR_TOKEN" "$(q "/v1/subscriptions/$OTID/events")"
  # the customer's active entitlements, now and 60 days ago (?at= is business time in ms)
  curl -s -H "Authorization: Bearer $APP_TOKEN" "$(q "/v1/customers/$TOKEN/entitlements")"
  curl -s -H "Authorization: Bearer $APP_TOKEN" "$(q "/v1/customers/$TOKEN/entitlements" "at=$SIXTY_DAYS_AGO")"
EOF
for row in "${SAMPLE[@]:1}"; do
  read -r t o <<<"$row"
  echo "  curl -s -H \"Authorization: Bearer $APP_TOKEN\" \"$(q "/v1/customers/$t/entitlements")\"   # subscription $o"
done
if [ "${#WX_SAMPLE[@]}" -gt 0 ]; then
  read -r WX_OPENID WX_OTID <<<"${WX_SAMPLE[0]}"
  cat <<EOF
  # a WeChat xpay subscriber: its subscription and the entitlements of its openid (WeChat's are Production)
  curl -s -H "Authorization: Bearer $APP_TOKEN" "$BASE/v1/subscriptions/$WX_OTID"
  curl -s -H "Authorization: Bearer $APP_TOKEN" "$BASE/v1/customers/$WX_OPENID/entitlements"
EOF
fi
cat <<EOF
  # the business, App Store and WeChat together (role auditor): active subscriptions per month,
  # revenue recognised vs deferred as CSV, and cohort retention
  curl -s -H "Authorization: Bearer $AUDITOR_TOKEN" "$BASE/v1/reports/subscriptions?interval=month"
  curl -s -H "Authorization: Bearer $AUDITOR_TOKEN" "$BASE/v1/reports/revenue?interval=month&format=csv"
  curl -s -H "Authorization: Bearer $AUDITOR_TOKEN" "$BASE/v1/reports/retention"
  # readiness (status for anyone; the detail and /metrics need the admin token, or LEDGER_ADMIN_LISTEN)
  curl -s $BASE/readyz
  curl -s -H "Authorization: Bearer $ADMIN_TOKEN" $BASE/readyz
  curl -s -H "Authorization: Bearer $ADMIN_TOKEN" $BASE/metrics | grep ^ledger_

  # webhooks: what the ledger told the demo's endpoint (ledger-dev webhook-receiver, every
  # signature verified; make demo keeps it running), and the admin view of events and attempts
  grep -c ' verified ' $RECEIVER_LOG
  grep ' verified ' $RECEIVER_LOG | tail -n 3
  curl -s -H "Authorization: Bearer $ADMIN_TOKEN" "$BASE/v1/admin/webhooks/events?limit=3"

The auditor's pages (plain HTTP here, so the session cookie is not Secure: LEDGER_INSECURE_COOKIES=true):
  open $BASE/audit and sign in with $AUDITOR_TOKEN; the charts are at $BASE/audit/reports

Check the whole log (hash chain and every signature) and keep an anchor:
  LEDGER_DATABASE_URL="$LEDGER_DATABASE_URL" $ENV_LINE $LEDGER verify --anchor

Re-verify a stored notification's raw evidence offline, as an auditor would:
  $LEDGER_PG_BIN/psql "$LEDGER_DATABASE_URL" -XAtc "SELECT convert_from(raw, 'UTF8') FROM events WHERE stream_id = '$OTID' ORDER BY position LIMIT 1" \\
    | $LEDGER verify-payload --root $STATE/simulator-root.der -

ledger serve keeps running in the background: PID $PID (log: $LOG).
The webhook receiver too: PID $RECEIVER_PID (log: $RECEIVER_LOG).
Stop both with:  kill $PID $RECEIVER_PID
EOF
