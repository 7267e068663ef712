#!/usr/bin/env bash
# The project-local PostgreSQL cluster used by `make run` and `make test`.
#
#   scripts/db.sh deps       install missing Debian packages (when root or sudo is available)
#   scripts/db.sh start      initialise (once) and start the cluster; create roles and the database
#   scripts/db.sh stop       stop it (fast shutdown)
#   scripts/db.sh restart    restart it (used by the reconnect tests)
#   scripts/db.sh crash      immediate shutdown: no checkpoint, crash recovery on the next start
#   scripts/db.sh kill-postmaster   kill -9 of the postmaster; its backends notice and exit
#   scripts/db.sh env        print the LEDGER_* variables that point at it (for `eval`)
#   scripts/db.sh replica-start   a streaming replica of it (pg_basebackup -R) on the next port
#   scripts/db.sh replica-stop    stop the replica
#
# The cluster lives in .pg/ under the project (git-ignored) with its own unix socket and a port
# derived from the project path, so several clones on one machine never clash. PostgreSQL
# refuses to run as root, so when invoked as root every server command runs as `postgres`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PG_BIN="${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}"
# Port: LEDGER_PG_PORT, else 55000 + (hash of the project path mod 1000).
PORT="${LEDGER_PG_PORT:-$((55000 + $(printf '%s' "$ROOT" | cksum | cut -d' ' -f1) % 1000))}"
BASE="$ROOT/.pg"
DB=ledger
SERVICE_ROLE=ledger_service
OWNER_ROLE=ledger_owner

as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# When root runs this from a directory `postgres` cannot enter (e.g. under /root), keep the
# cluster in /var/tmp under a name derived from the project path instead.
pick_base() {
  if [ "$(id -u)" = 0 ]; then
    mkdir -p "$BASE"
    chown postgres:postgres "$BASE" 2>/dev/null || true
    if ! runuser -u postgres -- test -w "$BASE" 2>/dev/null; then
      BASE="/var/tmp/ledger-pg-$(printf '%s' "$ROOT" | cksum | cut -d' ' -f1)"
      mkdir -p "$BASE"; chown postgres:postgres "$BASE"
    fi
  else
    mkdir -p "$BASE"
  fi
  DATA="$BASE/data"; SOCK="$BASE/sock"; LOG="$BASE/server.log"
  RDATA="$BASE/replica"; RLOG="$BASE/replica.log"
}

# The replica listens on the same socket directory, on a port 1000 above the primary's (the
# primaries of other clones use 55000–55999).
RPORT=$((PORT + 1000))

deps() {
  local need=()
  for p in libpq-dev libssl-dev libmicrohttpd-dev pkg-config postgresql curl; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
  done
  [ ${#need[@]} -eq 0 ] && return 0
  local SUDO=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO=sudo
    else echo "missing packages: ${need[*]} (install them: apt-get install ${need[*]})" >&2; exit 1; fi
  fi
  echo "installing ${need[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
  # Debian's postgresql package starts a system cluster on 5432; ours uses its own port, so
  # the two never meet.
}

psql_su() { as_pg "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$SOCK" -p "$PORT" -U postgres "$@"; }

start() {
  pick_base
  [ -x "$PG_BIN/initdb" ] || { echo "PostgreSQL server binaries not found (apt-get install postgresql)" >&2; exit 1; }
  if [ ! -s "$DATA/PG_VERSION" ]; then
    mkdir -p "$DATA" "$SOCK"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$DATA" "$SOCK"
    as_pg "$PG_BIN/initdb" -D "$DATA" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >/dev/null
    cat >> "$DATA/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$SOCK'
port = $PORT
max_connections = 200
shared_buffers = 256MB
fsync = on
synchronous_commit = on
CONF
  fi
  mkdir -p "$SOCK"; [ "$(id -u)" = 0 ] && chown postgres:postgres "$SOCK"
  if ! as_pg "$PG_BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    # After a crash the old backends may hold the shared memory a moment longer: retry briefly.
    local tries=0
    until as_pg "$PG_BIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 -o "-p $PORT -k $SOCK" start >/dev/null; do
      tries=$((tries + 1))
      [ "$tries" -ge 10 ] && { echo "PostgreSQL did not start; see $LOG" >&2; exit 1; }
      sleep 1
    done
  fi
  # Roles: the service (appends and reads), the projector (owns the projections; NOLOGIN), and
  # the owner that migrations run as — not a superuser: it owns the database and its objects
  # (so the SECURITY DEFINER functions run with an owner's rights, not a superuser's), may create
  # and alter the ledger's roles (CREATEROLE) and acts as the projector where a migration does.
  psql_su -d postgres <<SQL
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$SERVICE_ROLE') THEN
    CREATE ROLE $SERVICE_ROLE LOGIN NOINHERIT;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ledger_projector') THEN
    CREATE ROLE ledger_projector NOLOGIN;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$OWNER_ROLE') THEN
    CREATE ROLE $OWNER_ROLE LOGIN CREATEROLE;
  END IF;
END \$\$;
GRANT ledger_projector TO $OWNER_ROLE;
SELECT 'CREATE DATABASE $DB OWNER $OWNER_ROLE' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '$DB')\gexec
SQL
  adopt_database
  # The default database of `ledger serve` when LEDGER_DATABASE_URL is not set.
  mkdir -p "$ROOT/.pg"
  printf 'host=%s port=%s user=%s dbname=%s\n' "$SOCK" "$PORT" "$SERVICE_ROLE" "$DB" > "$ROOT/.pg/database.url"
}

# A database made before the owner role existed was migrated by the superuser: hand it and
# everything the superuser created in it to the owner once, so `make migrate` (as the owner) can
# go on from there. Objects of the projector stay the projector's.
adopt_database() {
  psql_su -d "$DB" <<SQL
DO \$\$
DECLARE r record;
BEGIN
  IF (SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()) <> 'postgres' THEN
    RETURN;
  END IF;
  EXECUTE format('ALTER DATABASE %I OWNER TO $OWNER_ROLE', current_database());
  FOR r IN SELECT nspname FROM pg_namespace
           WHERE pg_get_userbyid(nspowner) = 'postgres' AND nspname NOT LIKE 'pg\\_%' AND nspname NOT IN ('information_schema', 'public') LOOP
    EXECUTE format('ALTER SCHEMA %I OWNER TO $OWNER_ROLE', r.nspname);
  END LOOP;
  FOR r IN SELECT c.oid::regclass AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE pg_get_userbyid(c.relowner) = 'postgres' AND n.nspname NOT LIKE 'pg\\_%' AND n.nspname <> 'information_schema'
             AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
             OR (c.relkind = 'S' AND pg_get_userbyid(c.relowner) = 'postgres' AND n.nspname NOT LIKE 'pg\\_%'
                 AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.objid = c.oid AND d.deptype IN ('a', 'i'))) LOOP
    EXECUTE format('ALTER TABLE %s OWNER TO $OWNER_ROLE', r.name);
  END LOOP;
  FOR r IN SELECT p.oid::regprocedure AS name FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
           WHERE pg_get_userbyid(p.proowner) = 'postgres' AND n.nspname NOT LIKE 'pg\\_%' AND n.nspname <> 'information_schema' LOOP
    EXECUTE format('ALTER FUNCTION %s OWNER TO $OWNER_ROLE', r.name);
  END LOOP;
END
\$\$;
SQL
}

stop() {
  pick_base
  if [ -s "$DATA/PG_VERSION" ] && as_pg "$PG_BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    as_pg "$PG_BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
  fi
}

crash() {
  pick_base
  as_pg "$PG_BIN/pg_ctl" -D "$DATA" -m immediate -w stop >/dev/null
}

kill_postmaster() {
  pick_base
  local pid children
  pid="$(head -n 1 "$DATA/postmaster.pid")"
  children="$(pgrep -P "$pid" || true)"
  kill -9 "$pid"
  # Orphaned backends notice the postmaster's death and exit by themselves; a new postmaster
  # cannot start while they still hold the shared memory, so wait for them (bounded).
  for _ in $(seq 1 100); do
    local alive=0
    for c in $children; do kill -0 "$c" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
}

restart() {
  pick_base
  as_pg "$PG_BIN/pg_ctl" -D "$DATA" -l "$LOG" -m fast -w -t 60 -o "-p $PORT -k $SOCK" restart >/dev/null
}

# A hot standby streaming from the primary: the read replica of `make test` and `make test-scale`.
# It streams through a replication slot, so the primary keeps the WAL it has not received yet
# (bounded by max_slot_wal_keep_size: a replica left stopped cannot fill the disk; it is then
# re-cloned here).
replica_start() {
  start
  psql_su -d postgres -c "ALTER SYSTEM SET max_slot_wal_keep_size = '2GB'" -c "SELECT pg_reload_conf()" >/dev/null
  if [ -s "$RDATA/PG_VERSION" ] && ! replica_streams; then
    echo "the replica lost its stream (WAL gone or slot invalidated): re-cloning it" >&2
    replica_stop
    rm -rf "$RDATA"
    psql_su -d postgres -c "SELECT pg_drop_replication_slot('ledger_replica') FROM pg_replication_slots WHERE slot_name = 'ledger_replica'" >/dev/null
  fi
  if [ ! -s "$RDATA/PG_VERSION" ]; then
    rm -rf "$RDATA"; mkdir -p "$RDATA"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$RDATA"
    chmod 700 "$RDATA"
    psql_su -d postgres -c "SELECT pg_drop_replication_slot('ledger_replica') FROM pg_replication_slots WHERE slot_name = 'ledger_replica'" >/dev/null
    # -R writes standby.signal and primary_conninfo; -C -S creates and names the slot.
    as_pg "$PG_BIN/pg_basebackup" -h "$SOCK" -p "$PORT" -U postgres -D "$RDATA" -R -C -S ledger_replica -X stream -c fast >/dev/null
    cat >> "$RDATA/postgresql.conf" <<CONF
port = $RPORT
hot_standby = on
# Reads on the replica may be cancelled by replay (recovery conflicts); the ledger retries them on
# the primary, and this gives them a moment first.
max_standby_streaming_delay = 5s
CONF
  fi
  if ! as_pg "$PG_BIN/pg_ctl" -D "$RDATA" status >/dev/null 2>&1; then
    as_pg "$PG_BIN/pg_ctl" -D "$RDATA" -l "$RLOG" -w -t 60 -o "-p $RPORT -k $SOCK" start >/dev/null
  fi
  replica_streams || { echo "the replica does not stream from the primary; see $RLOG" >&2; exit 1; }
}

# Whether the replica catches up with the primary's current WAL position within 15 s (starting it
# if needed): a replica whose WAL was removed on the primary never does.
replica_streams() {
  if ! as_pg "$PG_BIN/pg_ctl" -D "$RDATA" status >/dev/null 2>&1; then
    as_pg "$PG_BIN/pg_ctl" -D "$RDATA" -l "$RLOG" -w -t 60 -o "-p $RPORT -k $SOCK" start >/dev/null 2>&1 || return 1
  fi
  local target
  target="$(as_pg "$PG_BIN/psql" -X -qAt -h "$SOCK" -p "$PORT" -U postgres -d postgres -c "SELECT pg_current_wal_lsn()")"
  for _ in $(seq 1 150); do
    [ "$(as_pg "$PG_BIN/psql" -X -qAt -h "$SOCK" -p "$RPORT" -U postgres -d postgres \
        -c "SELECT COALESCE(pg_last_wal_replay_lsn() >= '$target'::pg_lsn, false)" 2>/dev/null)" = t ] && return 0
    sleep 0.1
  done
  return 1
}

replica_stop() {
  pick_base
  if [ -s "$RDATA/PG_VERSION" ] && as_pg "$PG_BIN/pg_ctl" -D "$RDATA" status >/dev/null 2>&1; then
    as_pg "$PG_BIN/pg_ctl" -D "$RDATA" -m fast -w stop >/dev/null
  fi
}

env_vars() {
  pick_base
  # Superuser URL (tests), the owner's (migrations: `make migrate`), and the restricted service
  # role (what `serve` uses).
  echo "export LEDGER_ADMIN_DATABASE_URL='host=$SOCK port=$PORT user=postgres dbname=$DB'"
  echo "export LEDGER_OWNER_DATABASE_URL='host=$SOCK port=$PORT user=$OWNER_ROLE dbname=$DB'"
  echo "export LEDGER_DATABASE_URL='host=$SOCK port=$PORT user=$SERVICE_ROLE dbname=$DB'"
  echo "export LEDGER_TEST_DATABASE_URL='host=$SOCK port=$PORT user=postgres dbname=postgres'"
  echo "export LEDGER_TEST_DB_SCRIPT='$ROOT/scripts/db.sh'"
  echo "export LEDGER_PG_BIN='$PG_BIN'"
  # The replica (scripts/db.sh replica-start): tests append the database name.
  echo "export LEDGER_TEST_REPLICA_URL='host=$SOCK port=$RPORT user=postgres dbname=postgres'"
}

case "${1:-}" in
  deps) deps ;;
  start) start ;;
  stop) stop ;;
  restart) restart ;;
  crash) crash ;;
  kill-postmaster) kill_postmaster ;;
  env) env_vars ;;
  replica-start) replica_start ;;
  replica-stop) replica_stop ;;
  *) sed -n '2,10p' "$0"; exit 2 ;;
esac
