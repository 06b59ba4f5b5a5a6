# gpufleet agent for ROCm hosts and Runpod MI300X pods: the `hip` backend (our own code objects for
# gfx942 and the cards ROCm dropped), OpenCL and Vulkan where the base has them, and rocm-smi/amd-smi
# for power (on MI300X virtual functions there is no energy counter; the agent says so in describe).
#   docker build -f docker/agent-rocm-build.Dockerfile -t gpufleet/agent-rocm-build .
#   docker build -f docker/agent-rocm.Dockerfile -t gpufleet/agent-rocm .
#   docker run --device /dev/kfd --device /dev/dri --group-add video --group-add render \
#       -e GPUFLEET_CONNECT=https://COORDINATOR:7443 -e GPUFLEET_TOKEN=… -e GPUFLEET_PIN_SHA256=… gpufleet/agent-rocm
# (--group-add takes the host's numeric ids where the names differ: getent group render video.)
# Base images are build args: a slim ROCm developer image by default (Runpod's own ROCm images are
# 30-50 GB and slow to start); docker/test.sh passes a Debian bookworm with Debian's ROCm 5.2 packages.
ARG ROCM_IMAGE=rocm/dev-ubuntu-24.04:6.2.4
ARG RUNTIME_IMAGE=${ROCM_IMAGE}
# The image holding the hip agent at /out/gpufleet-agent: docker/agent-rocm-build.Dockerfile's (a
# release), or one made from the binary CI built and tested on the host (docker/build_images.sh
# with HIP_AGENT_BIN). This image compiles nothing itself.
ARG AGENT_BUILD_IMAGE=gpufleet/agent-rocm-build

FROM ${AGENT_BUILD_IMAGE} AS build

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
