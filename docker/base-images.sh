#!/usr/bin/env bash
# Makes the base images the Dockerfiles start from, without a registry. For bookworm (the default):
# a `debootstrap` of Debian bookworm imported as `gpufleet-base/bookworm:local` (the runtime base of
# every image here) and `gpufleet-base/rocm:local` (bookworm with Debian's ROCm 5.2 packages and
# clang-19, standing in for AMD's ROCm image). For bullseye (glibc 2.31, the release baseline):
# `gpufleet-base/bullseye:local`, where release binaries are checked to run, and
# `gpufleet-base/rust-bullseye:local` (bullseye with a C toolchain and this machine's Rust toolchain,
# which needs only glibc 2.17), the build stage's base for the images and the release alike.
# Pass them to `docker build` as build args (docker/build_images.sh does, with LOCAL_BASES=1):
#   --build-arg RUNTIME_IMAGE=gpufleet-base/bookworm:local --build-arg RUST_IMAGE=gpufleet-base/rust-bullseye:local
# Usage: docker/base-images.sh [bookworm|bullseye]
# Idempotent: an image that exists is kept. Needs root, debootstrap and a Debian mirror.
set -euo pipefail
suite=${1:-bookworm}
case "$suite" in
bookworm | bullseye) ;;
*) echo "base-images.sh: SUITE is bookworm or bullseye, not '$suite'" >&2; exit 2 ;;
esac
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
work="$(mktemp -d /tmp/gpufleet-base.XXXXXX)"
trap 'rm -rf "$work"' EXIT

have() { docker image inspect "$1" >/dev/null 2>&1; }

if ! have "gpufleet-base/$suite:local"; then
    echo "== debootstrap $suite (minbase)"
    debootstrap --variant=minbase --include=ca-certificates "$suite" "$work/rootfs" "$MIRROR" >"$work/debootstrap.log" 2>&1 \
        || { tail -20 "$work/debootstrap.log"; exit 1; }
    # Slim like debian:bookworm-slim: no documentation, manuals or translations, now or from any
    # package installed later (copyright files stay).
    cat >"$work/rootfs/etc/dpkg/dpkg.cfg.d/gpufleet-slim" <<'DPKG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
DPKG
    find "$work/rootfs/usr/share/doc" -mindepth 2 ! -name copyright -delete 2>/dev/null || true
    rm -rf "$work/rootfs/usr/share/man/"* "$work/rootfs/usr/share/info/"* \
        "$work/rootfs/usr/share/lintian" "$work/rootfs/var/cache/apt/"*.bin
    find "$work/rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
    rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
    tar -C "$work/rootfs" -c . | docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' - "gpufleet-base/$suite:local"
    rm -rf "$work/rootfs"
fi

rust=gpufleet-base/rust-bullseye:local
if [ "$suite" = bullseye ] && ! have "$rust"; then
    echo "== rust builder: $suite + build tools + this machine's Rust toolchain"
    toolchain="$(rustc --print sysroot)"
    mkdir -p "$work/rust"
    # The toolchain (without its documentation) where the official rust images keep cargo, so a
    # Dockerfile can copy /usr/local/cargo and /usr/local/rustup from either.
    tar -C "$toolchain" --exclude=./share/doc -cf "$work/rust/toolchain.tar" .
    # This machine's CA bundle, so cargo reaches crates.io where the network re-signs TLS.
    cp /etc/ssl/certs/ca-certificates.crt "$work/rust/host-ca.crt"
    cat >"$work/rust/Dockerfile" <<DOCKERFILE
FROM gpufleet-base/$suite:local
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev pkg-config make binutils \
    && rm -rf /var/lib/apt/lists/* && mkdir -p /usr/local/rustup
ADD toolchain.tar /usr/local/cargo/
COPY host-ca.crt /etc/ssl/certs/ca-certificates.crt
ENV PATH=/usr/local/cargo/bin:\$PATH CARGO_HOME=/usr/local/cargo RUSTUP_HOME=/usr/local/rustup \
    CARGO_HTTP_CAINFO=/etc/ssl/certs/ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
RUN cargo --version && rustc --version && ldd --version | head -1
DOCKERFILE
    docker build -q -t "$rust" "$work/rust"
fi

if [ "$suite" = bookworm ] && ! have gpufleet-base/rocm:local; then
    echo "== ROCm stand-in: bookworm + Debian's ROCm 5.2 (HIP runtime and headers, rocm-smi) + clang-19"
    mkdir -p "$work/rocm"
    cp /etc/ssl/certs/ca-certificates.crt "$work/rocm/host-ca.crt"
    cat >"$work/rocm/Dockerfile" <<'DOCKERFILE'
FROM gpufleet-base/bookworm:local
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev pkg-config make \
       libamdhip64-dev libhsa-runtime-dev rocm-device-libs rocm-smi clang-19 lld-19 \
    && rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/*
COPY host-ca.crt /etc/ssl/certs/ca-certificates.crt
ENV CARGO_HTTP_CAINFO=/etc/ssl/certs/ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
DOCKERFILE
    docker build -q -t gpufleet-base/rocm:local "$work/rocm"
fi
docker image ls "gpufleet-base/*"
