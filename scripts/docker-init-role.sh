#!/bin/sh
# Runs once when the db container initialises its cluster: creates the restricted role the
# service connects as, with the password from its secret file (grants come from the migrations).
set -eu
password="$(cat /run/secrets/service_db_password)"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
     -v password="$password" <<'SQL'
CREATE ROLE ledger_service LOGIN PASSWORD :'password';
SQL
