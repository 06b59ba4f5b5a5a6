#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests: `initdb` and `pg_ctl` in a temporary directory as
# an unprivileged user (`postgres` when run as root, else the caller), on a loopback port, with
# fsync off (nothing in it outlives the run). It offers TLS with a certificate for `localhost`
# signed by a CA of its own, DIR/tls/ca.crt (the tests' GPUFLEET_TEST_POSTGRES_CA); the role
# `gpufleet_tls` may log in over TLS only.
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
        # gpufleet (the tests' admin) logs in without a password; gpufleet_tls too, but over TLS
        # only; every other role must give its password, so the tests can check what a wrong one
        # does.
        as_owner "printf '%s\\n' 'local all gpufleet trust' 'host all gpufleet 127.0.0.1/32 trust' \
            'hostssl all gpufleet_tls 127.0.0.1/32 trust' 'hostnossl all gpufleet_tls 127.0.0.1/32 reject' \
            'local all all scram-sha-256' 'host all all 127.0.0.1/32 scram-sha-256' > '$dir/data/pg_hba.conf'"
        # A CA of the cluster's own and the server's certificate for localhost (not 127.0.0.1,
        # so that verify-full to the address fails on the name while verify-ca passes).
        tls="$dir/tls"
        mkdir -p "$tls"
        openssl req -x509 -newkey rsa:2048 -nodes -days 7 -subj "/CN=gpufleet test CA" \
            -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
            -keyout "$tls/ca.key" -out "$tls/ca.crt" 2>/dev/null
        openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
            -keyout "$tls/server.key" -out "$tls/server.csr" 2>/dev/null
        printf '%s\n' "subjectAltName=DNS:localhost" "extendedKeyUsage=serverAuth" \
            "basicConstraints=CA:FALSE" >"$tls/server.ext"
        openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.crt" -CAkey "$tls/ca.key" \
            -CAcreateserial -days 7 -extfile "$tls/server.ext" -out "$tls/server.crt" 2>/dev/null
        chmod 600 "$tls/server.key" "$tls/ca.key"
        chmod 644 "$tls/ca.crt" "$tls/server.crt"
        [ "$(id -u)" = 0 ] && chown -R postgres: "$tls"
    fi
    as_owner "'$bin/pg_ctl' -D '$dir/data' -l '$dir/server.log' -w -t 60 \
        -o \"-k '$dir' -c listen_addresses=127.0.0.1 -p $port -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 -c ssl=on -c ssl_cert_file='$dir/tls/server.crt' -c ssl_key_file='$dir/tls/server.key'\" start" >/dev/null \
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
