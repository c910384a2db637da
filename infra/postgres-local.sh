#!/usr/bin/env bash
# A throwaway PostgreSQL 15 cluster on 127.0.0.1 for a Dagster instance (infra/dagster-postgres.yaml).
#   infra/postgres-local.sh start   # initdb (once) + start; database $DAGSTER_PG_DB
#   infra/postgres-local.sh env     # the DAGSTER_PG_* variables to export for Dagster
#   infra/postgres-local.sh stop    # stop it (its files stay; `rm -rf $WMBT_PG_DIR` drops them)
# Settings (environment): DAGSTER_PG_PORT (5432), DAGSTER_PG_USERNAME (dagster),
# DAGSTER_PG_PASSWORD (dagster), DAGSTER_PG_DB (dagster), WMBT_PG_DIR (/tmp/wmbt-postgres-PORT).
# Needs Debian's postgresql-15 (/usr/lib/postgresql/15/bin). initdb refuses to run as root: as
# root, the server runs as the `postgres` user (or `nobody`), owning WMBT_PG_DIR.
set -euo pipefail
BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
PORT=${DAGSTER_PG_PORT:-5432}
USER_NAME=${DAGSTER_PG_USERNAME:-dagster}
PASSWORD=${DAGSTER_PG_PASSWORD:-dagster}
DB=${DAGSTER_PG_DB:-dagster}
DIR=${WMBT_PG_DIR:-/tmp/wmbt-postgres-$PORT}
[ -x "$BIN/initdb" ] || { echo "postgres-local: $BIN/initdb not found (apt-get install postgresql-15)" >&2; exit 2; }
as_owner() {  # run a command as the cluster's owner: not root
  if [ "$(id -u)" = 0 ]; then
    local owner=postgres
    id -u "$owner" >/dev/null 2>&1 || owner=nobody
    runuser -u "$owner" -- "$@"
  else
    "$@"
  fi
}
owner_of_dir() {
  if [ "$(id -u)" = 0 ]; then
    if id -u postgres >/dev/null 2>&1; then chown -R postgres: "$@"; else chown -R nobody: "$@"; fi
  fi
}
case "${1:-}" in
  start)
    if [ ! -f "$DIR/data/PG_VERSION" ]; then
      mkdir -p "$DIR"
      chmod 700 "$DIR"
      printf '%s\n' "$PASSWORD" > "$DIR/pwfile"
      owner_of_dir "$DIR"
      as_owner "$BIN/initdb" -D "$DIR/data" -U "$USER_NAME" --pwfile="$DIR/pwfile" \
        --auth=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >"$DIR/initdb.log" 2>&1 \
        || { cat "$DIR/initdb.log" >&2; exit 1; }
      rm -f "$DIR/pwfile"
    fi
    if ! as_owner "$BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1; then
      as_owner "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 start \
        -o "-h 127.0.0.1 -p $PORT -k $DIR" >/dev/null \
        || { tail -20 "$DIR/server.log" >&2; exit 1; }
    fi
    export PGPASSWORD=$PASSWORD
    if ! "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U "$USER_NAME" -d postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname = '$DB'" | grep -q 1; then
      "$BIN/createdb" -h 127.0.0.1 -p "$PORT" -U "$USER_NAME" "$DB"
    fi
    echo "postgres-local: PostgreSQL on 127.0.0.1:$PORT, database $DB, user $USER_NAME ($DIR)"
    ;;
  env)
    echo "export DAGSTER_PG_HOST=127.0.0.1 DAGSTER_PG_PORT=$PORT DAGSTER_PG_DB=$DB"
    echo "export DAGSTER_PG_USERNAME=$USER_NAME DAGSTER_PG_PASSWORD=$PASSWORD"
    ;;
  stop)
    if [ -f "$DIR/data/postmaster.pid" ]; then
      as_owner "$BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null
      echo "postgres-local: stopped ($DIR)"
    else
      echo "postgres-local: not running ($DIR)"
    fi
    ;;
  *) sed -n '2,9p' "$0"; exit 2 ;;
esac
