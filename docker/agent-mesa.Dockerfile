# gpufleet agent for Mesa hosts, slim (< 300 MB): RADV (Vulkan) for the RX 580 (gfx803), RX 5600 XT
# (gfx1010) and Ryzen APUs through /dev/dri, plus lavapipe (Vulkan on the CPU) and the cpu backend,
# so it also serves CPU-only hosts. Needs only /dev/dri
# (docker run --device /dev/dri --group-add $(getent group render | cut -d: -f3)).
#   docker build -f docker/agent-mesa.Dockerfile -t gpufleet/agent-mesa .
# OpenCL (rusticl and Clover on the AMD cards, PoCL on the CPU) is in gpufleet/agent-mesa-full
# (docker/agent-mesa-full.Dockerfile, built on this one's binary): on Debian bookworm rusticl alone
# brings 90 MB (libclang-cpp, its gallium drivers, the SPIR-V translator, libclc), which does not
# fit beside LLVM in 300 MB (docs/docker.md).
# Base images are build args, so a machine without a registry passes locally made ones
# (docker/base-images.sh).
ARG RUST_IMAGE=rust:1-bullseye
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${RUST_IMAGE} AS build
WORKDIR /src
# One build stage, word for word the same in agent-mesa, agent-nvidia and coordinator, so the image
# builder compiles once for all three. It is also the release build: packaging/release_build.sh
# builds this stage (on a bullseye root, glibc 2.31) and packs its two binaries, so the images and
# the tarball and .debs carry the same binaries, compiled once.
# First the dependencies, from the manifests alone: this layer is kept until Cargo.toml or
# Cargo.lock change, so a source change recompiles only the workspace's own crates.
COPY Cargo.toml Cargo.lock ./
COPY proto/Cargo.toml proto/
COPY kernels/Cargo.toml kernels/
COPY agent/Cargo.toml agent/
COPY coordinator/Cargo.toml coordinator/
COPY docker/stub-workspace.sh /usr/local/bin/
RUN sh /usr/local/bin/stub-workspace.sh \
    && cargo build --release --locked --bin gpufleet --bin gpufleet-agent
# Then the sources (only they, so editing docs or the image scripts keeps the compiled layer); the
# target dir goes in the same step, so this layer holds the two binaries and nothing else.
COPY proto proto
COPY kernels kernels
COPY agent agent
COPY coordinator coordinator
COPY dashboards dashboards
RUN sh /usr/local/bin/stub-workspace.sh touch \
    && cargo build --release --locked --bin gpufleet --bin gpufleet-agent \
    && install -D -s target/release/gpufleet-agent /out/gpufleet-agent \
    && install -D -s target/release/gpufleet /out/gpufleet \
    && rm -rf target

FROM ${RUNTIME_IMAGE} AS runtime
COPY docker/slim-runtime.sh /tmp/slim-runtime.sh
# Slimmed to what RADV and lavapipe load (docs/docker.md has the sizes): besides the package tooling,
# Python (a Mesa overlay script), Intel's Vulkan drivers, and what a container that runs one program
# as one user does not use (logins, PAM, util-linux, TLS libraries, time zones, gconv). The ldd
# check fails the build if anything the Vulkan drivers link went with them. The OpenCL loader stays
# (the agent links it; with no ICD here its OpenCL backend says so).
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates libvulkan1 mesa-vulkan-drivers \
       ocl-icd-libopencl1 \
    && groupadd --force render && groupadd --force video \
    && useradd --system --uid 10001 --user-group --groups render,video \
       --home-dir /var/lib/gpufleet --create-home gpufleet \
    && sh /tmp/slim-runtime.sh \
       'python3.*|libpython3.*|media-types|passwd|login|libsemanage.*|libsepol.*|libaudit.*|libcap-ng0|libpam.*|libgnutls30|libgcrypt20|libgpg-error0|libp11-kit0|libunistring2|libidn2-0|libtasn1-6|libnettle8|libhogweed6|libdb5.3|libsqlite3-0|libsystemd0|liblz4-1|libxxhash0|libseccomp2|util-linux.*|mount|libmount1|libblkid1|libsmartcols1|libuuid1|libfdisk1|bsdutils|tzdata|ncurses-bin|init-system-helpers|procps|libproc2-0|libkmod2|libssl3' \
       /usr/lib/x86_64-linux-gnu/libvulkan_intel*.so /usr/share/vulkan/icd.d/intel* \
       /usr/lib/x86_64-linux-gnu/libVkLayer_INTEL* /usr/lib/x86_64-linux-gnu/libVkLayer_MESA_overlay.so \
       /usr/share/vulkan/explicit_layer.d/VkLayer_MESA_overlay.json /usr/bin/mesa-overlay-control.py \
       /usr/lib/x86_64-linux-gnu/gconv /usr/share/common-licenses \
    && ! ldd /usr/lib/x86_64-linux-gnu/libvulkan.so.1 /usr/lib/x86_64-linux-gnu/libvulkan_radeon.so \
         /usr/lib/x86_64-linux-gnu/libvulkan_lvp.so | grep 'not found'

# One layer: the slimmed runtime, without the files the base's layers would still carry.
FROM scratch
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="gpufleet/agent-mesa" \
      org.opencontainers.image.description="gpufleet agent (slim): Mesa RADV, lavapipe, cpu" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://example.invalid/gpufleet"
COPY --from=runtime / /
COPY --from=build /out/gpufleet-agent /usr/local/bin/gpufleet-agent
COPY docker/agent-entrypoint.sh /usr/local/bin/agent-entrypoint.sh
USER gpufleet
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    GPUFLEET_STATE_DIR=/var/lib/gpufleet/state \
    GPUFLEET_CACHE_DIR=/var/lib/gpufleet/cache \
    XDG_RUNTIME_DIR=/tmp
VOLUME /var/lib/gpufleet
ENTRYPOINT ["/usr/local/bin/agent-entrypoint.sh"]
