#!/bin/sh
# Runs once when the db container initialises its cluster: creates the roles with the passwords
# from their secret files (grants come from the migrations):
#   ledger_service    what the service connects as (appends and reads; NOINHERIT: the projector's
#                     rights only where a transaction asks for them)
#   ledger_projector  owns the projections (NOLOGIN)
#   ledger_owner      what migrations run as: owns the database and its objects, not a superuser
set -eu
service_password="$(cat /run/secrets/service_db_password)"
owner_password="$(cat /run/secrets/owner_db_password)"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
     -v service_password="$service_password" -v owner_password="$owner_password" -v db="$POSTGRES_DB" <<'SQL'
CREATE ROLE ledger_service LOGIN NOINHERIT PASSWORD :'service_password';
CREATE ROLE ledger_projector NOLOGIN;
CREATE ROLE ledger_owner LOGIN CREATEROLE PASSWORD :'owner_password';
GRANT ledger_projector TO ledger_owner;
ALTER DATABASE :"db" OWNER TO ledger_owner;
SQL
