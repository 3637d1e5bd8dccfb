#!/bin/sh
# Entry point of docker/postgres.Dockerfile: on an empty data folder, initdb (UTF8, C.UTF-8) with
# the POSTGRES_* variables, password authentication (scram-sha-256) for every TCP connection,
# then run the server in the foreground. The password is read from the environment at run time
# and never written to the image; initdb gets it through a file that is removed at once.
set -eu
: "${PGDATA:=/var/lib/postgresql/data}"
user="${POSTGRES_USER:-postgres}"
db="${POSTGRES_DB:-$user}"

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -z "${POSTGRES_PASSWORD:-}" ]; then
        echo "postgres-entrypoint: POSTGRES_PASSWORD is not set; refusing to create a database" \
            "without a password" >&2
        exit 1
    fi
    umask 077
    pwfile="$(mktemp)"
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" --auth-local=trust \
        --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >/dev/null
    rm -f "$pwfile"
    {
        echo "listen_addresses = '*'"
        echo "password_encryption = 'scram-sha-256'"
    } >> "$PGDATA/postgresql.auto.conf"
    echo "host all all 0.0.0.0/0 scram-sha-256" >> "$PGDATA/pg_hba.conf"
    echo "host all all ::/0 scram-sha-256" >> "$PGDATA/pg_hba.conf"
    if [ "$db" != "postgres" ]; then
        # a private start, on a socket in a folder of its own and no TCP, to create the database
        sockets="$(mktemp -d)"
        pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -k $sockets" -w start >/dev/null
        # the socket trusts local users (as the official image does); TCP needs the password
        if ! psql -v ON_ERROR_STOP=1 -q -h "$sockets" -U "$user" -d postgres \
            -c "CREATE DATABASE \"$db\" OWNER \"$user\" ENCODING 'UTF8'"; then
            pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
            exit 1
        fi
        pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
        rmdir "$sockets"
    fi
    echo "postgres-entrypoint: created database $db owned by $user (UTF8)" >&2
fi

if [ "${1:-postgres}" = "postgres" ]; then
    [ "$#" -gt 0 ] && shift
    exec postgres -D "$PGDATA" "$@"
fi
exec "$@"
