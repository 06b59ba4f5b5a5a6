# gpufleet agent for ROCm hosts and Runpod MI300X pods: the `hip` backend (our own code objects for
# gfx942 and the cards ROCm dropped), OpenCL and Vulkan where the base has them, and rocm-smi/amd-smi
# for power (on MI300X virtual functions there is no energy counter; the agent says so in describe).
#   docker build -f docker/agent-rocm.Dockerfile -t gpufleet/agent-rocm .
#   docker run --device /dev/kfd --device /dev/dri --group-add video --group-add render \
#       -e GPUFLEET_CONNECT=https://COORDINATOR:7443 -e GPUFLEET_TOKEN=… -e GPUFLEET_PIN_SHA256=… gpufleet/agent-rocm
# (--group-add takes the host's numeric ids where the names differ: getent group render video.)
# Base images are build args: a slim ROCm developer image by default (Runpod's own ROCm images are
# 30-50 GB and slow to start); docker/test.sh passes a Debian bookworm with Debian's ROCm 5.2 packages.
ARG ROCM_IMAGE=rocm/dev-ubuntu-24.04:6.2.4
ARG RUST_IMAGE=rust:1-bookworm
ARG RUNTIME_IMAGE=${ROCM_IMAGE}

FROM ${RUST_IMAGE} AS rust

# The build runs in the ROCm image (HIP headers, libamdhip64 to link, a clang for the code objects)
# with the Rust toolchain of the rust image copied in.
FROM ${ROCM_IMAGE} AS build
COPY --from=rust /usr/local/cargo /usr/local/cargo
COPY --from=rust /usr/local/rustup /usr/local/rustup
ENV CARGO_HOME=/usr/local/cargo RUSTUP_HOME=/usr/local/rustup PATH=/usr/local/cargo/bin:${PATH}
# Where the HIP headers and libamdhip64 are (/opt/rocm in AMD's images, /usr with Debian's packages),
# which clang builds the code objects, and for which GPUs.
ARG HIP_PATH=/opt/rocm
ARG GPUFLEET_HIP_CLANG=/opt/rocm/llvm/bin/clang
ARG GPUFLEET_HIP_TARGETS=gfx803,gfx900,gfx906,gfx908,gfx90a,gfx1010,gfx1030,gfx1100,gfx942
WORKDIR /src
# The dependencies first, from the manifests alone (docker/stub-workspace.sh; as in the other
# images), then the sources, with the target dir gone in the same step.
COPY Cargo.toml Cargo.lock ./
COPY proto/Cargo.toml proto/
COPY kernels/Cargo.toml kernels/
COPY agent/Cargo.toml agent/
COPY coordinator/Cargo.toml coordinator/
COPY docker/stub-workspace.sh /usr/local/bin/
RUN sh /usr/local/bin/stub-workspace.sh \
    && HIP_PATH=${HIP_PATH} cargo build --release --locked -p gpufleet-agent --features hip
COPY proto proto
COPY kernels kernels
COPY agent agent
COPY coordinator coordinator
COPY dashboards dashboards
RUN sh /usr/local/bin/stub-workspace.sh touch \
    && HIP_PATH=${HIP_PATH} GPUFLEET_HIP_CLANG=${GPUFLEET_HIP_CLANG} GPUFLEET_HIP_TARGETS=${GPUFLEET_HIP_TARGETS} \
       cargo build --release --locked -p gpufleet-agent --features hip \
    && install -D -s target/release/gpufleet-agent /out/gpufleet-agent \
    && rm -rf target

FROM ${RUNTIME_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="gpufleet/agent-rocm" \
      org.opencontainers.image.description="gpufleet agent: HIP (ROCm, MI300X, gfx803/gfx1010), rocm-smi/amd-smi power" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://example.invalid/gpufleet"
COPY --from=build /out/gpufleet-agent /usr/local/bin/gpufleet-agent
COPY docker/agent-entrypoint.sh /usr/local/bin/agent-entrypoint.sh
# /dev/kfd and /dev/dri belong to the host's video and render groups, whose ids differ between hosts:
# the agent runs as root here so it reaches them whatever the ids (run it with --group-add and
# --user to drop root where the ids are known).
ENV GPUFLEET_STATE_DIR=/var/lib/gpufleet/state \
    GPUFLEET_CACHE_DIR=/var/lib/gpufleet/cache \
    PATH=/opt/rocm/bin:${PATH}
VOLUME /var/lib/gpufleet
ENTRYPOINT ["/usr/local/bin/agent-entrypoint.sh"]
