#!/usr/bin/env bash
# Creates ./secrets/ for docker-compose.yml: random database passwords, the two connection URLs
# and bearer tokens (printed once so you can keep them). Refuses to overwrite existing secrets.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -e secrets ]; then echo "secrets/ exists; remove it first to start over" >&2; exit 1; fi
umask 077
mkdir secrets
rand() { head -c 24 /dev/urandom | base64 | tr -d '/+=' ; }
pg="$(rand)"; svc="$(rand)"; owner="$(rand)"
# Bearer tokens: 32 random bytes in hex (the service refuses tokens under 32 bytes).
token() { head -c 32 /dev/urandom | od -An -tx1 | tr -d " \n" ; }
app="$(token)"; auditor="$(token)"; admin="$(token)"
printf '%s' "$pg" > secrets/postgres_password
printf '%s' "$svc" > secrets/service_db_password
printf '%s' "$owner" > secrets/owner_db_password
# Migrations run as the database's owner, not the superuser.
printf 'postgresql://ledger_owner:%s@db:5432/ledger' "$owner" > secrets/owner_database_url
printf 'postgresql://ledger_service:%s@db:5432/ledger' "$svc" > secrets/service_database_url
printf 'app:%s,auditor:%s,admin:%s' "$app" "$auditor" "$admin" > secrets/ledger_tokens
# The auditor's session cookies are signed with it (at least 32 bytes).
printf '%s' "$(token)" > secrets/session_key
# The directory keeps other host users out; the files must be readable by the containers' own
# non-root users (compose bind-mounts them with these modes).
chmod 644 secrets/*
echo "tokens (keep them; they are also in secrets/ledger_tokens):"
echo "  app:     $app"
echo "  auditor: $auditor"
echo "  admin:   $admin"
