# gpufleet agent for NVIDIA hosts: OpenCL and Vulkan through the NVIDIA driver the container toolkit
# mounts, power from NVML.
#   docker build -f docker/agent-nvidia.Dockerfile -t gpufleet/agent-nvidia .
#   docker run --gpus all -e GPUFLEET_CONNECT=… -e GPUFLEET_TOKEN=… -e GPUFLEET_PIN_SHA256=… gpufleet/agent-nvidia
# `graphics` in NVIDIA_DRIVER_CAPABILITIES is what brings the Vulkan driver (libGLX_nvidia and its ICD
# file) into the container; the Vulkan loader then needs GLVND (libGLdispatch), installed here.
# Base images are build args (docker/base-images.sh makes local ones).
ARG RUST_IMAGE=rust:1-bullseye
ARG RUNTIME_IMAGE=ubuntu:24.04

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

FROM ${RUNTIME_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="gpufleet/agent-nvidia" \
      org.opencontainers.image.description="gpufleet agent: NVIDIA OpenCL and Vulkan, NVML power" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://example.invalid/gpufleet"
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates ocl-icd-libopencl1 libvulkan1 \
       libglvnd0 libglx0 libegl1 libopengl0 libgl1 libgles2 \
    && apt-get clean && rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/* /usr/share/locale/* \
    && mkdir -p /etc/OpenCL/vendors /etc/vulkan/icd.d \
    && echo libnvidia-opencl.so.1 >/etc/OpenCL/vendors/nvidia.icd \
    && printf '{"file_format_version":"1.0.0","ICD":{"library_path":"libGLX_nvidia.so.0","api_version":"1.3"}}\n' \
       >/etc/vulkan/icd.d/nvidia_icd.json \
    && useradd --system --uid 10001 --user-group --groups video \
       --home-dir /var/lib/gpufleet --create-home gpufleet
COPY --from=build /out/gpufleet-agent /usr/local/bin/gpufleet-agent
COPY docker/agent-entrypoint.sh /usr/local/bin/agent-entrypoint.sh
USER gpufleet
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics \
    GPUFLEET_STATE_DIR=/var/lib/gpufleet/state \
    GPUFLEET_CACHE_DIR=/var/lib/gpufleet/cache \
    XDG_RUNTIME_DIR=/tmp
VOLUME /var/lib/gpufleet
ENTRYPOINT ["/usr/local/bin/agent-entrypoint.sh"]
