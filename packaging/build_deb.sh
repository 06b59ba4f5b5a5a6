#!/usr/bin/env bash
# Builds a .deb from a built binary with dpkg-deb (no cargo-deb needed), the package chosen by the
# binary's name:
#   gpufleet-agent -> gpufleet-agent_VERSION_ARCH.deb: the binary, its systemd unit,
#     /etc/gpufleet/agent.toml (a conffile: the example with every setting commented out, so an
#     installed agent starts in direct mode on loopback until its owner fills it in);
#   gpufleet -> gpufleet-coordinator_VERSION_ARCH.deb: the CLI and `gpufleet serve`, its unit, and
#     /etc/gpufleet/coordinator.env (a conffile, root only: the fleet listener on, the rest
#     commented out).
# Each has a postinst that creates the gpufleet system user (in the video and render groups for
# the agent) and enables its unit (started by `systemctl start gpufleet-agent` once configured; the
# coordinator's starts at once).
# Usage: packaging/build_deb.sh PATH/TO/BINARY OUT_DIR [VERSION]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
usage="usage: packaging/build_deb.sh PATH/TO/BINARY OUT_DIR [VERSION]
  BINARY   a built gpufleet-agent (-> gpufleet-agent_VERSION_ARCH.deb) or gpufleet
           (-> gpufleet-coordinator_VERSION_ARCH.deb), e.g. target/release/gpufleet-agent
  OUT_DIR  where the .deb is written (created if missing); its path is printed
  VERSION  default: the workspace's version in Cargo.toml
packaging/release_build.sh OUT_DIR builds both binaries on the glibc 2.31 baseline and both packages."
case "${1:-}" in -h | --help) echo "$usage"; exit 0 ;; esac
[ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
[ -f "$1" ] || { echo "build_deb.sh: $1: no such file (give a built gpufleet or gpufleet-agent)" >&2; exit 2; }
bin=$(realpath "$1")
out=$(realpath -m "$2")
version=${3:-$(sed -n 's/^version = "\(.*\)"/\1/p' "$here/../Cargo.toml" | head -1)}
arch=$(dpkg --print-architecture)
case "$(basename "$bin")" in
gpufleet-agent) package=gpufleet-agent unit=gpufleet-agent ;;
gpufleet) package=gpufleet-coordinator unit=gpufleet-coordinator ;;
*) echo "build_deb.sh: $bin is neither gpufleet-agent nor gpufleet" >&2; exit 2 ;;
esac
# The newest glibc symbol the binary needs is the package's libc6 requirement.
glibc=$(objdump -T "$bin" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -1)
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
chmod 755 "$root" # the package's ./ entry: dpkg gives / these permissions
install -D -m 755 "$bin" "$root/usr/bin/$(basename "$bin")"
strip "$root/usr/bin/$(basename "$bin")" 2>/dev/null || true
install -D -m 644 "$here/$unit.service" "$root/lib/systemd/system/$unit.service"
install -d -m 755 "$root/etc/gpufleet"
if [ "$package" = gpufleet-agent ]; then
    install -D -m 644 "$here/agent.toml.example" "$root/usr/share/doc/$package/agent.toml.example"
    # The conffile: the example, its settings commented out.
    sed -E 's/^([a-z][a-z0-9_]* = |\[[a-z_]+\])/# \1/' "$here/agent.toml.example" >"$root/etc/gpufleet/agent.toml"
    chmod 644 "$root/etc/gpufleet/agent.toml"
    # Every setting commented out, whatever its key: a live line here would be a setting the
    # owner never made (docs/install.md promises none).
    if live=$(grep -nvE '^[[:space:]]*(#|$)' "$root/etc/gpufleet/agent.toml"); then
        echo "build_deb.sh: the conffile agent.toml keeps a live setting: $live" >&2
        exit 1
    fi
    conffile=/etc/gpufleet/agent.toml
else
    install -D -m 644 "$here/coordinator.env.example" "$root/usr/share/doc/$package/coordinator.env.example"
    install -m 600 "$here/coordinator.env.example" "$root/etc/gpufleet/coordinator.env"
    conffile=/etc/gpufleet/coordinator.env
fi
install -d "$root/DEBIAN"
if [ "$package" = gpufleet-agent ]; then
    relations=$'Recommends: ocl-icd-libopencl1, libvulkan1, mesa-vulkan-drivers\nSuggests: pocl-opencl-icd\n'
    description="gpufleet agent: validated GPU benchmarks for a gpufleet coordinator
 Runs the gpufleet kernel catalog on this host's CPU, OpenCL, Vulkan (and, in the ROCm build, HIP)
 devices in isolated workers, validates every result against an f64 reference, and streams power
 samples. It dials in to a gpufleet coordinator (or listens for one) as configured in
 /etc/gpufleet/agent.toml, as the gpufleet system user, under systemd."
else
    relations=
    description="gpufleet coordinator: schedules, results and dashboards for a fleet of GPU agents
 The gpufleet CLI and its serve command: schedules comparable benchmark campaigns on gpufleet agents
 (which dial in over TLS or listen for it), stores every result and power trace in SQLite, flags
 regressions, and serves the dashboards, an HTTP API and Prometheus metrics. Runs as the gpufleet
 system user under systemd, configured in /etc/gpufleet/coordinator.env."
fi
cat >"$root/DEBIAN/control" <<CONTROL
Package: $package
Version: $version
Architecture: $arch
Maintainer: gpufleet developers <gpufleet@example.org>
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: libc6 (>= $glibc), libgcc-s1, adduser
${relations}Section: utils
Priority: optional
Homepage: https://github.com/gpufleet/gpufleet
Description: $description
CONTROL
echo "$conffile" >"$root/DEBIAN/conffiles"
if [ "$package" = gpufleet-agent ]; then
    groups=video,render dirs="/var/lib/gpufleet /var/cache/gpufleet" start="# (started by its owner once configured)"
    started="configure /etc/gpufleet/agent.toml (and the token file it names), then: systemctl start gpufleet-agent"
    no_systemd="configure /etc/gpufleet/agent.toml (and the token file it names); this system runs no systemd, so start it yourself as the unit does: runuser -u gpufleet -- /usr/bin/gpufleet-agent --config /etc/gpufleet/agent.toml"
else
    groups= dirs=/var/lib/gpufleet-coordinator start="systemctl restart $unit.service >/dev/null || true"
    started="started: gpufleet serve, its fleet listener on :7443 (see /etc/gpufleet/coordinator.env); the dashboard is on this host's loopback, http://127.0.0.1:8787 (from elsewhere: ssh -L 8787:127.0.0.1:8787 THIS_HOST); enrol an agent: sudo -u gpufleet gpufleet agents add NAME --dial-in"
    no_systemd="installed, not started: this system runs no systemd. Start it as the unit does (its Environment= and /etc/gpufleet/coordinator.env, as the gpufleet user): runuser -u gpufleet -- env GPUFLEET_DB=/var/lib/gpufleet-coordinator/gpufleet.db GPUFLEET_TLS_SELF_SIGNED=/var/lib/gpufleet-coordinator/tls GPUFLEET_FLEET_LISTEN=0.0.0.0:7443 /usr/bin/gpufleet serve"
fi
cat >"$root/DEBIAN/postinst" <<POSTINST
#!/bin/sh
set -e
if [ "\$1" = configure ]; then
    # The groups that open /dev/dri (video, render) and /dev/kfd (render); render is missing on
    # systems older than udev 239.
    for g in \$(echo "$groups" | tr , ' '); do
        getent group "\$g" >/dev/null || addgroup --system "\$g" >/dev/null
    done
    # Where the unit's StateDirectory= and CacheDirectory= put them, for a start without systemd;
    # the first is the user's home.
    install -d -m 750 $dirs
    if ! getent passwd gpufleet >/dev/null; then
        adduser --system --group --home ${dirs%% *} --no-create-home \\
            --shell /usr/sbin/nologin gpufleet >/dev/null
    fi
    for g in \$(echo "$groups" | tr , ' '); do adduser gpufleet "\$g" >/dev/null; done
    chown gpufleet:gpufleet $dirs
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload >/dev/null || true
        systemctl enable $unit.service >/dev/null || true
        $start
        echo "$package: $started"
    else
        echo "$package: $no_systemd"
    fi
fi
exit 0
POSTINST
cat >"$root/DEBIAN/prerm" <<PRERM
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "\$1" = remove ]; then
    systemctl disable --now $unit.service >/dev/null || true
fi
exit 0
PRERM
chmod 755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm"
mkdir -p "$out"
deb="$out/${package}_${version}_${arch}.deb"
dpkg-deb --root-owner-group --build "$root" "$deb" >/dev/null
echo "$deb"
