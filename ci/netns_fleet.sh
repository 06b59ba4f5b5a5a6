#!/usr/bin/env bash
# Dial-in across hosts (issue "agents that dial in", acceptance): three network namespaces joined by
# veth links, the coordinator in one and an agent in each of the others, inbound connections to the
# agents dropped. The agents dial in over TLS pinned to the serve's self-signed certificate. A
# campaign across both agents runs while one agent's link is cut for CUT_S seconds and restored and
# the other agent is SIGKILLed and restarted; then every planned job must have exactly one result,
# none stored twice, and every non-ok row must say why.
#
# Needs root (ip netns, veth, iptables). Usage: ci/netns_fleet.sh [BIN_DIR]  (default target/debug)
# Env: SUITE (standard), BACKEND (cpu), CUT_S (30).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN_DIR="${1:-target/debug}"
GPUFLEET="$(realpath "$BIN_DIR/gpufleet")"
AGENT="$(realpath "$BIN_DIR/gpufleet-agent")"
SUITE="${SUITE:-standard}"
BACKEND="${BACKEND:-cpu}"
CUT_S="${CUT_S:-30}"
NS=(gf-coord gf-pod1 gf-pod2)
work="$(mktemp -d /tmp/gpufleet-netns.XXXXXX)"
pids=()

log() { echo "[netns $(date +%T)] $*"; }
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    for ns in "${NS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*" >&2
    for f in "$work"/*.log "$work"/*.err; do
        [ -f "$f" ] && { echo "--- $f"; tail -n 30 "$f"; } >&2
    done
    exit 1
}

log "namespaces and links"
for ns in "${NS[@]}"; do
    ip netns del "$ns" 2>/dev/null || true
    ip netns add "$ns"
    ip -n "$ns" link set lo up
done
for i in 1 2; do
    ip link add "c-pod$i" type veth peer name "pod$i-c"
    ip link set "c-pod$i" netns gf-coord
    ip link set "pod$i-c" netns "gf-pod$i"
    ip -n gf-coord addr add "10.77.$i.1/24" dev "c-pod$i"
    ip -n "gf-pod$i" addr add "10.77.$i.2/24" dev "pod$i-c"
    ip -n gf-coord link set "c-pod$i" up
    ip -n "gf-pod$i" link set "pod$i-c" up
    # Nothing may connect to an agent: only the connections it opened come back in.
    if ! ip netns exec "gf-pod$i" iptables -A INPUT -m conntrack --ctstate NEW -j DROP 2>/dev/null; then
        ip netns exec "gf-pod$i" iptables -A INPUT -p tcp --syn -j DROP
    fi
done

in_coord() { ip netns exec gf-coord "$@"; }
G() { in_coord "$GPUFLEET" --db "$work/fleet.db" "$@"; }
token() { G agents add "$1" --dial-in --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])'; }
T1="$(token pod1)"
T2="$(token pod2)"

log "serve: fleet listener beyond loopback, TLS self-signed"
in_coord "$GPUFLEET" --db "$work/fleet.db" serve --listen 127.0.0.1:8787 --fleet-listen 0.0.0.0:7443 \
    --tls-self-signed "$work/tls" --tick-s 1 --grace-s 120 >"$work/serve.log" 2>"$work/serve.err" &
pids+=($!)
for _ in $(seq 100); do grep -q "^tls sha256" "$work/serve.log" 2>/dev/null && break; sleep 0.1; done
PIN="$(sed -n 's/^tls sha256 //p' "$work/serve.log")"
[ -n "$PIN" ] || fail "serve printed no certificate fingerprint"

start_agent() { # N TOKEN
    ip netns exec "gf-pod$1" env GPUFLEET_TOKEN="$2" GPUFLEET_CACHE_DIR="$work/cache$1" \
        "$AGENT" --connect "https://10.77.$1.1:7443" --name "pod$1" --pin-sha256 "$PIN" \
        --state-dir "$work/state$1" --max-backoff-s 2 >>"$work/pod$1.log" 2>&1 &
    echo $!
}
A1="$(start_agent 1 "$T1")"; pids+=("$A1")
A2="$(start_agent 2 "$T2")"; pids+=("$A2")

attached() { G agents list --json | python3 -c 'import json,sys; print(sum(a["attached"] for a in json.load(sys.stdin)))'; }
for _ in $(seq 120); do [ "$(attached)" = 2 ] && break; sleep 0.5; done
[ "$(attached)" = 2 ] || fail "the agents did not attach"
G agents list

# The agents are unreachable from the coordinator's namespace (nothing listens, inbound dropped).
if in_coord timeout 3 bash -c "exec 3<>/dev/tcp/10.77.1.2/50051" 2>/dev/null; then
    fail "an inbound connection to pod1 succeeded"
fi

stored() { python3 - "$work/fleet.db" <<'EOF'
import sqlite3, sys
print(sqlite3.connect(sys.argv[1]).execute("SELECT count(*) FROM results").fetchone()[0])
EOF
}

log "campaign: suite $SUITE, backend $BACKEND, on pod1 and pod2"
start=$(date +%s)
G run --agent pod1 --agent pod2 --suite "$SUITE" --backend "$BACKEND" >"$work/run.log" 2>"$work/run.err" &
RUN=$!
pids+=("$RUN")
for _ in $(seq 600); do [ "$(stored)" -ge 3 ] && break; sleep 0.5; done
[ "$(stored)" -ge 3 ] || fail "no results"

log "cutting pod1's link for $CUT_S s; SIGKILL of pod2 and a restart"
ip -n gf-pod1 link set pod1-c down
kill -9 "$A2"
sleep 2
A2="$(start_agent 2 "$T2")"; pids+=("$A2")
sleep "$CUT_S"
ip -n gf-pod1 link set pod1-c up
log "link restored"

set +e
wait "$RUN"
rc=$?
set -e
log "campaign ended with exit $rc after $(( $(date +%s) - start )) s"
[ "$rc" -le 1 ] || fail "gpufleet run failed (exit $rc)"

python3 - "$work/fleet.db" <<'EOF' || fail "accounting"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
jobs = db.execute("SELECT count(*) FROM jobs").fetchone()[0]
results = db.execute("SELECT count(*) FROM results").fetchone()[0]
distinct = db.execute("SELECT count(DISTINCT run_id) FROM results").fetchone()[0]
per_job = db.execute(
    "SELECT count(*) FROM jobs j WHERE (SELECT count(*) FROM results r WHERE r.job_id = j.id) != 1"
).fetchone()[0]
silent = db.execute("SELECT count(*) FROM results WHERE status != 'ok' AND message = ''").fetchone()[0]
statuses = db.execute("SELECT status, count(*) FROM results GROUP BY status").fetchall()
print(f"jobs {jobs}, results {results}, distinct run ids {distinct}, statuses {statuses}")
for row in db.execute("SELECT status, message FROM results WHERE status != 'ok' LIMIT 5"):
    print("  not ok:", row)
assert jobs > 0, "nothing planned"
assert results == jobs, f"{results} results for {jobs} planned jobs"
assert distinct == results, "a result stored twice"
assert per_job == 0, f"{per_job} jobs without exactly one result"
assert silent == 0, f"{silent} non-ok rows without a reason"
EOF
for i in 1 2; do
    left=$(find "$work/state$i/outbox" -type f | wc -l)
    [ "$left" = 0 ] || fail "pod$i outbox still holds $left results"
done
log "ok: every planned job has exactly one result"
rm -rf "$work"
