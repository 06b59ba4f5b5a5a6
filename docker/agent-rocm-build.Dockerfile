# The hip agent's build for docker/agent-rocm.Dockerfile: `gpufleet-agent --features hip`, compiled in a
# ROCm image (HIP headers, libamdhip64 to link, a clang for the code objects) with a Rust toolchain
# copied in, left stripped at /out/gpufleet-agent in an image of its own. A release builds this
# (docker/build_images.sh, then passes it to agent-rocm as AGENT_BUILD_IMAGE); CI does not: it gives
# agent-rocm the hip agent it has already built and tested on the host (HIP_AGENT_BIN), so the image
# costs no compile of its own.
#   docker build -f docker/agent-rocm-build.Dockerfile -t gpufleet/agent-rocm-build .
ARG ROCM_IMAGE=rocm/dev-ubuntu-24.04:6.2.4
ARG RUST_IMAGE=rust:1-bookworm

FROM ${RUST_IMAGE} AS rust

FROM ${ROCM_IMAGE}
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
