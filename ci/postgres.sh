#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests: `initdb` and `pg_ctl` in a temporary directory as
# an unprivileged user (`postgres` when run as root, else the caller), on a loopback port, with
# fsync off (nothing in it outlives the run).
#
#   ci/postgres.sh start DIR [PORT]   prints the URL of its admin database (user gpufleet, no
#                                     password, trust on loopback); waits until it accepts
#   ci/postgres.sh stop DIR
#
# Debian's `postgresql` package puts the server under /usr/lib/postgresql/N/bin; PG_BIN overrides.
set -euo pipefail

cmd="${1:?usage: ci/postgres.sh start|stop DIR [PORT]}"
dir="${2:?usage: ci/postgres.sh start|stop DIR [PORT]}"
port="${3:-55432}"
bin="${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}"
if [ ! -x "$bin/initdb" ]; then
    echo "no PostgreSQL server found (install Debian's postgresql, or set PG_BIN)" >&2
    exit 1
fi

as_owner() {
    if [ "$(id -u)" = 0 ]; then
        su postgres -s /bin/sh -c "$1"
    else
        sh -c "$1"
    fi
}

case "$cmd" in
start)
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres: "$dir"
    if [ ! -f "$dir/data/PG_VERSION" ]; then
        as_owner "'$bin/initdb' -D '$dir/data' -A trust -U gpufleet --locale=C.UTF-8 -E UTF8" >"$dir/initdb.log" 2>&1 \
            || { cat "$dir/initdb.log" >&2; exit 1; }
        # gpufleet (the tests' admin) logs in without a password; every other role must give
        # its password, so the tests can check what a wrong one does.
        as_owner "printf '%s\\n' 'local all gpufleet trust' 'host all gpufleet 127.0.0.1/32 trust' \
            'local all all scram-sha-256' 'host all all 127.0.0.1/32 scram-sha-256' > '$dir/data/pg_hba.conf'"
    fi
    as_owner "'$bin/pg_ctl' -D '$dir/data' -l '$dir/server.log' -w -t 60 \
        -o \"-k '$dir' -c listen_addresses=127.0.0.1 -p $port -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300\" start" >/dev/null \
        || { cat "$dir/server.log" >&2; exit 1; }
    echo "postgres://gpufleet@127.0.0.1:$port/postgres"
    ;;
stop)
    as_owner "'$bin/pg_ctl' -D '$dir/data' -m fast -w stop" >/dev/null
    ;;
*)
    echo "usage: ci/postgres.sh start|stop DIR [PORT]" >&2
    exit 2
    ;;
esac
