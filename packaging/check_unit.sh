#!/usr/bin/env bash
# Checks packaging/gpufleet-agent.service: `systemd-analyze verify` passes on it (with ExecStart
# pointed at the binary given, since the package's /usr/bin path is not installed here), and no
# token travels on its command line.
# Usage: packaging/check_unit.sh PATH/TO/gpufleet-agent
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
agent=$(realpath "${1:?usage: check_unit.sh PATH/TO/gpufleet-agent}")
unit="$here/gpufleet-agent.service"
if grep -Eiq '^ExecStart=.*(--token[= ]|GPUFLEET_TOKEN=)' "$unit" || grep -Eq '^Environment=.*GPUFLEET_TOKEN=' "$unit"; then
    echo "FAIL: $unit puts a token on a command line or in its environment" >&2
    exit 1
fi
grep -q '^ExecStart=/usr/bin/gpufleet-agent --config /etc/gpufleet/agent.toml$' "$unit" ||
    { echo "FAIL: $unit: ExecStart is not the packaged binary reading its configuration" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed "s|^ExecStart=/usr/bin/gpufleet-agent|ExecStart=$agent|" "$unit" >"$work/gpufleet-agent.service"
out=$(systemd-analyze verify "$work/gpufleet-agent.service" 2>&1) || { echo "FAIL: systemd-analyze verify:" >&2; echo "$out" >&2; exit 1; }
# verify prints warnings without failing; any about this unit is a failure here.
if echo "$out" | grep -q "gpufleet-agent.service"; then
    echo "FAIL: systemd-analyze verify warns about the unit:" >&2
    echo "$out" >&2
    exit 1
fi
echo "ok: $unit passes systemd-analyze verify and keeps the token off its command line"
