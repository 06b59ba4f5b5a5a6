#!/usr/bin/env bash
# The .debs in clean Debian containers: builds gpufleet-coordinator and gpufleet-agent from
# BIN_DIR's binaries and installs each with dpkg in its own container of the local bookworm base
# image (docker/base-images.sh makes it), on a private network. Checks the gpufleet user (in video
# and render for the agent), the units and the conffiles, then starts each the way its unit does
# (the containers have no systemd): the unit's Environment= and EnvironmentFile=, its ExecStart as
# the gpufleet user. The coordinator serves its fleet listener over self-signed TLS; the agent's
# owner writes agent.toml (the coordinator, the pin it printed, a token file only gpufleet reads)
# and the agent dials in to the coordinator container.
# Usage: packaging/test_deb.sh BIN_DIR   (BIN_DIR holds gpufleet and gpufleet-agent)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:?usage: test_deb.sh BIN_DIR}")
image=${DEB_TEST_IMAGE:-gpufleet-base/bookworm:local}
docker image inspect "$image" >/dev/null 2>&1 || bash docker/base-images.sh >/dev/null
work=
cleanup() {
    docker rm -f gf-deb-coord gf-deb-agent >/dev/null 2>&1 || true
    docker network rm gf-deb-net >/dev/null 2>&1 || true
    [ -z "$work" ] || rm -rf "$work"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*" >&2
    for c in gf-deb-coord gf-deb-agent; do docker exec "$c" sh -c 'cat /tmp/*.log' 2>/dev/null | tail -20 | sed "s/^/$c: /" >&2 || true; done
    exit 1
}
cleanup
work=$(mktemp -d)
coord_deb=$(bash packaging/build_deb.sh "$bin/gpufleet" "$work")
agent_deb=$(bash packaging/build_deb.sh "$bin/gpufleet-agent" "$work")
echo "built $(basename "$coord_deb") ($(du -h "$coord_deb" | cut -f1)), $(basename "$agent_deb") ($(du -h "$agent_deb" | cut -f1))"
docker network create gf-deb-net >/dev/null
for c in gf-deb-coord gf-deb-agent; do
    docker run -d --name "$c" --hostname "$c" --network gf-deb-net -v "$work:/pkg:ro" "$image" sleep 900 >/dev/null
done
on() { docker exec "$1" sh -c "$2"; }
# What the unit starts, as the unit starts it: Environment=, then EnvironmentFile= (whose values
# win, as in systemd; read as root), then ExecStart as User=, in the background, logging to LOG.
start_unit() { # CONTAINER UNIT LOG
    local unit=/lib/systemd/system/$2.service
    local env exec_start env_file
    env=$(on "$1" "sed -n 's/^Environment=//p' $unit")
    exec_start=$(on "$1" "sed -n 's/^ExecStart=//p' $unit")
    env_file=$(on "$1" "sed -n 's/^EnvironmentFile=-\{0,1\}//p' $unit")
    docker exec -d "$1" sh -c "export $env; if [ -n '$env_file' ] && [ -f '$env_file' ]; then set -a; . '$env_file'; set +a; fi;
        exec su -p -s /bin/sh gpufleet -c '$exec_start' >$3 2>&1"
}
# Who runs a program (from /proc: a minimal image has no ps).
owner() { on "$1" "for p in /proc/[0-9]*; do [ \"\$(cat \$p/comm 2>/dev/null)\" = $2 ] && stat -c %U \$p; done | sort -u"; }

# The coordinator, then the path of docs/install.md ("From the packages, end to end") as written,
# with `runuser -u gpufleet --` for `sudo -u gpufleet` and the units' commands started by hand.
postinst=$(on gf-deb-coord "dpkg -i /pkg/$(basename "$coord_deb")") || fail "dpkg -i gpufleet-coordinator"
case "$postinst" in *"runs no systemd"*) ;; *) fail "without systemd the coordinator's postinst did not say it started nothing: $postinst" ;; esac
on gf-deb-coord "id gpufleet" >/dev/null || fail "the coordinator's package made no gpufleet user"
on gf-deb-coord "test -f /lib/systemd/system/gpufleet-coordinator.service && grep -qx /etc/gpufleet/coordinator.env /var/lib/dpkg/info/gpufleet-coordinator.conffiles" ||
    fail "the coordinator's unit or conffile is missing"
on gf-deb-coord "dpkg-query -W -f='\${Installed-Size}' gpufleet-coordinator" | grep -qE '^[1-9][0-9]*$' ||
    fail "the coordinator's package declares no Installed-Size"
perms=$(on gf-deb-coord "stat -c '%a %U' /etc/gpufleet/coordinator.env")
[ "$perms" = "600 root" ] || fail "/etc/gpufleet/coordinator.env is '$perms', not 600 root (it holds the API's tokens)"
# As the docs say: `sudo -u gpufleet gpufleet ...`, no GPUFLEET_DB (the packaged database is the default).
gf() { on gf-deb-coord "cd / && runuser -u gpufleet -- gpufleet $1"; }
start_unit gf-deb-coord gpufleet-coordinator /tmp/serve.log
for _ in $(seq 100); do on gf-deb-coord "grep -q '^tls sha256 ' /tmp/serve.log" 2>/dev/null && break; sleep 0.2; done
pin=$(on gf-deb-coord "sed -n 's/^tls sha256 //p' /tmp/serve.log")
[ -n "$pin" ] || fail "the packaged coordinator printed no certificate fingerprint"
[ "$(owner gf-deb-coord gpufleet)" = gpufleet ] || fail "the coordinator runs as '$(owner gf-deb-coord gpufleet)', not gpufleet"
echo "ok: gpufleet-coordinator installs, and serves as gpufleet with its fleet listener on TLS (sha256 ${pin:0:16}…)"
# Another user is told whose database it is.
denied=$(on gf-deb-coord "cd / && runuser -u nobody -- gpufleet agents list 2>&1") && fail "a user other than gpufleet opened the packaged database"
case "$denied" in *"sudo -u gpufleet gpufleet"*) ;; *) fail "the packaged database refused another user without saying how: $denied" ;; esac
advice=$(gf "agents add debian-pkg --dial-in") || fail "enrolling an agent with the packaged gpufleet"
token=$(sed -n 's/^token (shown once; only its hash is stored): //p' <<<"$advice")
[ -n "$token" ] || fail "agents add --dial-in printed no token: $advice"
# The token is shown once, on its own line; no command printed carries it.
[ "$(grep -c -- "$token" <<<"$advice")" = 1 ] || fail "the token appears in a printed command: $advice"
toml=$(sed -n '/^then in \/etc\/gpufleet\/agent.toml:$/,/^and: /p' <<<"$advice" | sed '1d;$d' | sed 's/^  //')
[ "$(wc -l <<<"$toml")" = 4 ] && grep -qx "pin_sha256 = \"$pin\"" <<<"$toml" ||
    fail "agents add --dial-in did not print agent.toml's four lines with the serve's pin: $advice"

# The agent.
on gf-deb-agent "dpkg -i /pkg/$(basename "$agent_deb")" >/dev/null || fail "dpkg -i gpufleet-agent"
ids=$(on gf-deb-agent "id gpufleet")
case "$ids" in *'(video)'*'(render)'* | *'(render)'*'(video)'*) ;; *) fail "the gpufleet user is not in video and render: $ids" ;; esac
on gf-deb-agent "test -f /lib/systemd/system/gpufleet-agent.service && grep -qx /etc/gpufleet/agent.toml /var/lib/dpkg/info/gpufleet-agent.conffiles" ||
    fail "the agent's unit or conffile is missing"
# The shipped conffile as installed: every setting commented out (docs/install.md says so).
live=$(on gf-deb-agent "grep -nvE '^[[:space:]]*(#|\$)' /etc/gpufleet/agent.toml" || true)
[ -z "$live" ] || fail "the installed /etc/gpufleet/agent.toml has live settings: $live"
# The installed, unconfigured agent reads its conffile and describes itself.
on gf-deb-agent "runuser -u gpufleet -- /usr/bin/gpufleet-agent --config /etc/gpufleet/agent.toml describe" >/dev/null ||
    fail "the packaged agent does not describe itself as gpufleet"
# Its owner follows the advice: the token pasted into a file only gpufleet reads (stdin, never a
# command line), the four lines added to agent.toml.
on gf-deb-agent "install -m 600 -o gpufleet -g gpufleet /dev/null /etc/gpufleet/token"
printf '%s\n' "$token" | docker exec -i gf-deb-agent sh -c 'tee /etc/gpufleet/token >/dev/null'
printf '%s\n' "$toml" | docker exec -i gf-deb-agent sh -c 'cat >>/etc/gpufleet/agent.toml'
start_unit gf-deb-agent gpufleet-agent /tmp/agent.log
attached() { gf "agents list --json" | python3 -c 'import json,sys; sys.exit(0 if any(a["name"] == "debian-pkg" and a["attached"] for a in json.load(sys.stdin)) else 1)'; }
for _ in $(seq 150); do attached && break; sleep 0.2; done
attached || fail "the packaged agent did not dial in to the packaged coordinator"
[ "$(owner gf-deb-agent gpufleet-agent)" = gpufleet ] || fail "the agent runs as '$(owner gf-deb-agent gpufleet-agent)', not gpufleet"
echo "ok: both .debs install in clean Debian containers; their units' commands run as gpufleet, and the agent dialed in to the coordinator container over pinned TLS"
# The first run, from the coordinator's host through the packaged serve.
gf "run --suite smoke --agent debian-pkg" >"$work/run.log" 2>&1 || { tail -30 "$work/run.log" >&2; fail "the smoke suite through the packaged serve"; }
stored=$(gf "results --agent debian-pkg --status ok --all --format json" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
[ "$stored" -gt 0 ] || fail "the smoke run stored no ok result"
echo "ok: the path of docs/install.md: enrolled by the printed advice, a smoke run through the packaged serve ($stored ok results)"
