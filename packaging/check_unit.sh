#!/usr/bin/env bash
# Checks a packaged systemd unit, chosen by the binary given: packaging/gpufleet-agent.service for
# gpufleet-agent, packaging/gpufleet-coordinator.service for gpufleet. `systemd-analyze verify`
# must pass on it without a warning about the unit (with ExecStart pointed at the binary given,
# since the package's /usr/bin path is not installed here), ExecStart must be the packaged binary
# as the package runs it, a stop is bounded (TimeoutStopSec), and no token may travel on its command line or in its Environment= lines.
# Usage: packaging/check_unit.sh PATH/TO/gpufleet-agent|PATH/TO/gpufleet
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(realpath "${1:?usage: check_unit.sh PATH/TO/gpufleet-agent|PATH/TO/gpufleet}")
case "$(basename "$bin")" in
gpufleet-agent) name=gpufleet-agent exec_start='/usr/bin/gpufleet-agent --config /etc/gpufleet/agent.toml' ;;
gpufleet) name=gpufleet-coordinator exec_start='/usr/bin/gpufleet serve' ;;
*) echo "check_unit.sh: $bin is neither gpufleet-agent nor gpufleet" >&2; exit 2 ;;
esac
unit="$here/$name.service"
if grep -Eiq '^ExecStart=.*(--token|--read-token|--admin-token|_TOKEN=)' "$unit" || grep -Eq '^Environment=.*_TOKEN=' "$unit"; then
    echo "FAIL: $unit puts a token on a command line or in its environment" >&2
    exit 1
fi
grep -qx "ExecStart=$exec_start" "$unit" ||
    { echo "FAIL: $unit: ExecStart is not '$exec_start'" >&2; exit 1; }
# A stop must be bounded: systemd's default (90 s) would hold a restart that long.
grep -Eqx 'TimeoutStopSec=[0-9]+' "$unit" ||
    { echo "FAIL: $unit sets no TimeoutStopSec" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed "s|^ExecStart=/usr/bin/$(basename "$bin")|ExecStart=$bin|" "$unit" >"$work/$name.service"
out=$(systemd-analyze verify "$work/$name.service" 2>&1) || { echo "FAIL: systemd-analyze verify:" >&2; echo "$out" >&2; exit 1; }
# verify prints warnings without failing; any about this unit is a failure here.
if echo "$out" | grep -q "$name.service"; then
    echo "FAIL: systemd-analyze verify warns about the unit:" >&2
    echo "$out" >&2
    exit 1
fi
echo "ok: $unit passes systemd-analyze verify and keeps tokens off its command line"
