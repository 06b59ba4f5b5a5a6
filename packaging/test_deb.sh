#!/usr/bin/env bash
# The agent's .deb in a clean Debian container: builds it from BIN_DIR/gpufleet-agent, installs it
# with dpkg in the local bookworm base image (docker/base-images.sh makes it), checks the user and
# its groups, the unit and the conffile, then configures the agent the way its owner would (a
# token file readable only by gpufleet) and runs the unit's ExecStart line as the gpufleet user
# (the container has no systemd): the agent dials in to a `gpufleet serve` started here.
# Usage: packaging/test_deb.sh BIN_DIR   (BIN_DIR holds gpufleet and gpufleet-agent)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:?usage: test_deb.sh BIN_DIR}")
image=${DEB_TEST_IMAGE:-gpufleet-base/bookworm:local}
docker image inspect "$image" >/dev/null 2>&1 || bash docker/base-images.sh >/dev/null
work=$(mktemp -d)
serve_pid=
cleanup() {
    [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null || true
    docker rm -f gf-deb-test >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; docker logs --tail 40 gf-deb-test >&2 2>/dev/null || true; exit 1; }

deb=$(bash packaging/build_deb.sh "$bin/gpufleet-agent" "$work")
echo "built $deb ($(du -h "$deb" | cut -f1))"
db="$work/fleet.db"
token=$("$bin/gpufleet" --db "$db" agents add debian-pkg --dial-in --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
"$bin/gpufleet" --db "$db" serve --listen 127.0.0.1:0 --fleet-listen 127.0.0.1:0 >"$work/serve.out" 2>"$work/serve.err" &
serve_pid=$!
for _ in $(seq 100); do grep -q '^fleet listening on ' "$work/serve.out" && break; sleep 0.1; done
fleet=$(sed -n 's/^fleet listening on //p' "$work/serve.out")
[ -n "$fleet" ] || fail "gpufleet serve did not start: $(cat "$work/serve.err")"
printf '%s\n' "$token" >"$work/token"

docker run -d --name gf-deb-test --network host -v "$work:/pkg:ro" "$image" sleep 600 >/dev/null
run() { docker exec gf-deb-test sh -c "$1"; }
run "dpkg -i /pkg/$(basename "$deb")" || fail "dpkg -i"
run "id gpufleet" | tee "$work/id" | grep -q '(video)' || fail "the gpufleet user is not in video: $(cat "$work/id")"
grep -q '(render)' "$work/id" || fail "the gpufleet user is not in render: $(cat "$work/id")"
run "test -f /lib/systemd/system/gpufleet-agent.service && grep -q /etc/gpufleet/agent.toml /var/lib/dpkg/info/gpufleet-agent.conffiles" ||
    fail "the unit or the conffile is missing"
# The installed, unconfigured agent reads its conffile (all commented out) and describes itself.
run "su -s /bin/sh gpufleet -c '/usr/bin/gpufleet-agent --config /etc/gpufleet/agent.toml describe'" >/dev/null ||
    fail "the packaged agent does not describe itself as gpufleet"
# Its owner configures it: the coordinator, the name, a token file only gpufleet reads.
run "cat >/etc/gpufleet/agent.toml <<TOML
connect = \"http://$fleet\"
name = \"debian-pkg\"
token_file = \"/etc/gpufleet/token\"
TOML
install -m 600 -o gpufleet -g gpufleet /pkg/token /etc/gpufleet/token"
exec_start=$(run "sed -n 's/^ExecStart=//p' /lib/systemd/system/gpufleet-agent.service")
env=$(run "sed -n 's/^Environment=//p' /lib/systemd/system/gpufleet-agent.service")
docker exec -d gf-deb-test sh -c "su -s /bin/sh gpufleet -c 'env $env $exec_start' >/tmp/agent.log 2>&1"
for _ in $(seq 150); do
    "$bin/gpufleet" --db "$db" agents list --json | python3 -c 'import json,sys; sys.exit(0 if any(a["name"] == "debian-pkg" and a["attached"] for a in json.load(sys.stdin)) else 1)' && break
    sleep 0.2
done
"$bin/gpufleet" --db "$db" agents list --json | python3 -c 'import json,sys; sys.exit(0 if any(a["name"] == "debian-pkg" and a["attached"] for a in json.load(sys.stdin)) else 1)' ||
    fail "the packaged agent did not dial in: $(run 'cat /tmp/agent.log')"
# Who runs it (from /proc: a minimal image has no ps).
owners=$(run 'for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = gpufleet-agent ] && stat -c %U $p; done | sort -u')
[ "$owners" = gpufleet ] || fail "the agent runs as '$owners', not gpufleet"
echo "ok: the .deb installs in a clean Debian container, creates gpufleet (video, render), and its agent, run as the unit runs it, dialed in"
