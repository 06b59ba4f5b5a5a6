#!/bin/sh
# Entry point of the gpufleet agent images. Dial-in is the default: set GPUFLEET_CONNECT (the
# coordinator's fleet listener, https://HOST:PORT), GPUFLEET_TOKEN or GPUFLEET_TOKEN_FILE (from
# `gpufleet agents add NAME --dial-in`) and GPUFLEET_PIN_SHA256 or GPUFLEET_CA_CERT; GPUFLEET_NAME
# defaults to $RUNPOD_POD_ID, else the container's host name. Direct mode instead: GPUFLEET_LISTEN
# (beyond loopback also GPUFLEET_TOKEN, GPUFLEET_TLS_CERT and GPUFLEET_TLS_KEY). Any other command
# (`gpufleet-agent describe`, a shell) runs as given.
set -e
if [ "$#" -gt 0 ] && [ "${1#-}" = "$1" ]; then
    exec "$@"
fi
if [ -z "${GPUFLEET_CONNECT:-}" ] && [ -z "${GPUFLEET_LISTEN:-}" ]; then
    echo "gpufleet agent image: set GPUFLEET_CONNECT=https://COORDINATOR:PORT (dial-in, with GPUFLEET_TOKEN and GPUFLEET_PIN_SHA256 or GPUFLEET_CA_CERT) or GPUFLEET_LISTEN=ADDR (direct); or run \`gpufleet-agent describe\`" >&2
    exit 2
fi
exec gpufleet-agent "$@"
