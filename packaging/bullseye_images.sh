#!/usr/bin/env bash
# The bullseye images of the release build, without a registry: `gpufleet-base/bullseye:local`
# (a debootstrap of Debian bullseye, glibc 2.31: where release binaries are checked to run) and
# `gpufleet-base/rust-bullseye:local` (it with a C toolchain and this machine's Rust toolchain,
# whose own binaries need only glibc 2.17: where release binaries are built). Idempotent.
# Needs root, debootstrap and a Debian mirror (DEBIAN_MIRROR).
set -euo pipefail
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
work="$(mktemp -d /tmp/gpufleet-bullseye.XXXXXX)"
trap 'rm -rf "$work"' EXIT
have() { docker image inspect "$1" >/dev/null 2>&1; }
if ! have gpufleet-base/bullseye:local; then
    debootstrap --variant=minbase --include=ca-certificates bullseye "$work/rootfs" "$MIRROR" >"$work/debootstrap.log" 2>&1 \
        || { tail -20 "$work/debootstrap.log"; exit 1; }
    rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"* "$work/rootfs/usr/share/doc" "$work/rootfs/usr/share/man"
    tar -C "$work/rootfs" -c . | docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' - gpufleet-base/bullseye:local >/dev/null
    rm -rf "$work/rootfs"
fi
if ! have gpufleet-base/rust-bullseye:local; then
    mkdir -p "$work/rust"
    tar -C "$(rustc --print sysroot)" --exclude=./share/doc -cf "$work/rust/toolchain.tar" .
    cp /etc/ssl/certs/ca-certificates.crt "$work/rust/host-ca.crt"
    cat >"$work/rust/Dockerfile" <<'DOCKERFILE'
FROM gpufleet-base/bullseye:local
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev pkg-config make binutils \
    && rm -rf /var/lib/apt/lists/*
ADD toolchain.tar /usr/local/cargo/
COPY host-ca.crt /etc/ssl/certs/ca-certificates.crt
ENV PATH=/usr/local/cargo/bin:$PATH CARGO_HTTP_CAINFO=/etc/ssl/certs/ca-certificates.crt \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
RUN cargo --version && rustc --version && ldd --version | head -1
DOCKERFILE
    docker build -q -t gpufleet-base/rust-bullseye:local "$work/rust" >/dev/null
fi
docker image ls 'gpufleet-base/*bullseye*'
