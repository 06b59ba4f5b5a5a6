#!/usr/bin/env bash
# Builds gpufleet-agent_VERSION_ARCH.deb from a built gpufleet-agent binary with dpkg-deb (no
# cargo-deb needed): the binary, the systemd unit, /etc/gpufleet/agent.toml (a conffile: the
# example with every setting commented out, so an installed agent starts in direct mode on
# loopback until its owner fills it in), and a postinst that creates the gpufleet system user in
# the video and render groups and enables the unit (started once configured:
# `systemctl start gpufleet-agent`).
# Usage: packaging/build_deb.sh PATH/TO/gpufleet-agent OUT_DIR [VERSION]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(realpath "${1:?usage: build_deb.sh PATH/TO/gpufleet-agent OUT_DIR [VERSION]}")
out=$(realpath -m "${2:?usage: build_deb.sh PATH/TO/gpufleet-agent OUT_DIR [VERSION]}")
version=${3:-$(sed -n 's/^version = "\(.*\)"/\1/p' "$here/../Cargo.toml" | head -1)}
arch=$(dpkg --print-architecture)
# The newest glibc symbol the binary needs is the package's libc6 requirement.
glibc=$(objdump -T "$bin" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -1)
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
chmod 755 "$root" # the package's ./ entry: dpkg gives / these permissions
install -D -m 755 "$bin" "$root/usr/bin/gpufleet-agent"
strip "$root/usr/bin/gpufleet-agent" 2>/dev/null || true
install -D -m 644 "$here/gpufleet-agent.service" "$root/lib/systemd/system/gpufleet-agent.service"
install -D -m 644 "$here/agent.toml.example" "$root/usr/share/doc/gpufleet-agent/agent.toml.example"
install -d -m 755 "$root/etc/gpufleet"
# The conffile: the example, its settings commented out.
sed -E 's/^([a-z_]+ = |\[loader\]|allow = )/# \1/' "$here/agent.toml.example" >"$root/etc/gpufleet/agent.toml"
chmod 644 "$root/etc/gpufleet/agent.toml"
install -d "$root/DEBIAN"
cat >"$root/DEBIAN/control" <<CONTROL
Package: gpufleet-agent
Version: $version
Architecture: $arch
Maintainer: gpufleet developers <gpufleet@example.org>
Depends: libc6 (>= $glibc), libgcc-s1, adduser
Recommends: ocl-icd-libopencl1, libvulkan1, mesa-vulkan-drivers
Suggests: pocl-opencl-icd
Section: utils
Priority: optional
Homepage: https://github.com/gpufleet/gpufleet
Description: gpufleet agent: validated GPU benchmarks for a gpufleet coordinator
 Runs the gpufleet kernel catalog on this host's CPU, OpenCL, Vulkan (and, in the ROCm build, HIP)
 devices in isolated workers, validates every result against an f64 reference, and streams power
 samples. It dials in to a gpufleet coordinator (or listens for one) as configured in
 /etc/gpufleet/agent.toml, as the gpufleet system user, under systemd.
CONTROL
echo /etc/gpufleet/agent.toml >"$root/DEBIAN/conffiles"
cat >"$root/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    # The groups that open /dev/dri (video, render) and /dev/kfd (render); render is missing on
    # systems older than udev 239.
    for g in video render; do
        getent group "$g" >/dev/null || addgroup --system "$g" >/dev/null
    done
    install -d -m 750 /var/lib/gpufleet /var/cache/gpufleet
    if ! getent passwd gpufleet >/dev/null; then
        adduser --system --group --home /var/lib/gpufleet --no-create-home \
            --shell /usr/sbin/nologin gpufleet >/dev/null
    fi
    adduser gpufleet video >/dev/null
    adduser gpufleet render >/dev/null
    chown gpufleet:gpufleet /var/lib/gpufleet /var/cache/gpufleet
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload >/dev/null || true
        systemctl enable gpufleet-agent.service >/dev/null || true
    fi
    echo "gpufleet-agent: configure /etc/gpufleet/agent.toml (and the token file it names), then: systemctl start gpufleet-agent"
fi
exit 0
POSTINST
cat >"$root/DEBIAN/prerm" <<'PRERM'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
    systemctl disable --now gpufleet-agent.service >/dev/null || true
fi
exit 0
PRERM
chmod 755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm"
mkdir -p "$out"
deb="$out/gpufleet-agent_${version}_${arch}.deb"
dpkg-deb --root-owner-group --build "$root" "$deb" >/dev/null
echo "$deb"
