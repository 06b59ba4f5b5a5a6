# gpufleet agent for Mesa hosts: RADV (Vulkan) and Clover (OpenCL) for the RX 580 (gfx803), RX 5600 XT
# (gfx1010) and Ryzen APUs through /dev/dri, plus lavapipe and PoCL on the CPU, so it also serves
# CPU-only hosts. Needs only /dev/dri (docker run --device /dev/dri --group-add $(getent group render | cut -d: -f3)).
#   docker build -f docker/agent-mesa.Dockerfile -t gpufleet/agent-mesa .
# Base images are build args, so a machine without a registry passes locally made ones
# (docker/base-images.sh).
ARG RUST_IMAGE=rust:1-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
# One build stage, word for word the same in agent-mesa, agent-nvidia and coordinator, so the image
# builder compiles once for all three (the coordinator without the embedded agent of `gpufleet demo`).
RUN cargo build --release --locked -p gpufleet-agent -p gpufleet-coordinator --no-default-features \
    && install -D -s target/release/gpufleet-agent /out/gpufleet-agent \
    && install -D -s target/release/gpufleet /out/gpufleet

FROM ${RUNTIME_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="gpufleet/agent-mesa" \
      org.opencontainers.image.description="gpufleet agent: Mesa RADV, Clover, lavapipe, PoCL, cpu" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://example.invalid/gpufleet"
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates libvulkan1 mesa-vulkan-drivers \
       ocl-icd-libopencl1 mesa-opencl-icd pocl-opencl-icd \
    && apt-get clean && rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/* /usr/share/locale/* \
    && groupadd --force render && groupadd --force video \
    && useradd --system --uid 10001 --user-group --groups render,video \
       --home-dir /var/lib/gpufleet --create-home gpufleet
COPY --from=build /out/gpufleet-agent /usr/local/bin/gpufleet-agent
COPY docker/agent-entrypoint.sh /usr/local/bin/agent-entrypoint.sh
USER gpufleet
ENV GPUFLEET_STATE_DIR=/var/lib/gpufleet/state \
    GPUFLEET_CACHE_DIR=/var/lib/gpufleet/cache \
    XDG_RUNTIME_DIR=/tmp
VOLUME /var/lib/gpufleet
ENTRYPOINT ["/usr/local/bin/agent-entrypoint.sh"]
