# gpufleet agent for Mesa hosts, full: everything in gpufleet/agent-mesa (RADV, lavapipe, cpu) plus
# OpenCL: rusticl and Clover (Mesa's two OpenCL implementations, for the RX 580, RX 5600 XT and
# Ryzen APUs) and PoCL (OpenCL on the CPU). The agent binary comes from the slim image, so this build compiles
# nothing:
#   docker build -f docker/agent-mesa.Dockerfile -t gpufleet/agent-mesa .
#   docker build -f docker/agent-mesa-full.Dockerfile --build-arg AGENT_IMAGE=gpufleet/agent-mesa -t gpufleet/agent-mesa-full .
# Base images are build args (docker/base-images.sh makes local ones).
ARG AGENT_IMAGE=gpufleet/agent-mesa:latest
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${AGENT_IMAGE} AS agent

FROM ${RUNTIME_IMAGE} AS runtime
COPY docker/slim-runtime.sh /tmp/slim-runtime.sh
# Slimmed by what each stack is seen to need (docs/docker.md): PoCL links kernels with binutils'
# `ld` against libc6-dev and libgcc-12-dev, so those stay; Python (a Mesa overlay script), 32-bit and
# sanitizer libraries, the clang driver and lld, LLVM's static archives and other targets' headers,
# and Intel/NVIDIA/VMware/pre-GCN drivers and libclc targets are not used by these devices.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates libvulkan1 mesa-vulkan-drivers \
       ocl-icd-libopencl1 mesa-opencl-icd pocl-opencl-icd \
    && groupadd --force render && groupadd --force video \
    && useradd --system --uid 10001 --user-group --groups render,video \
       --home-dir /var/lib/gpufleet --create-home gpufleet \
    && sh /tmp/slim-runtime.sh \
       'python3.*|libpython3.*|media-types|libc6-i386|lib32.*|libasan[0-9]*|libtsan[0-9]*|liblsan[0-9]*|libubsan[0-9]*|libitm[0-9]*|libquadmath[0-9]*|libobjc.*|libstdc\+\+-[0-9]+-dev|libcc1-0|linux-libc-dev|libcrypt-dev|libnsl-dev|rpcsvc-proto|clang-[0-9]+|libclang1-[0-9]+|llvm-[0-9]+-linker-tools' \
       /usr/lib/llvm-*/lib/*.a /usr/lib/llvm-*/lib/clang/*/lib /usr/lib/llvm-*/lib/clang/*/include/arm_* \
       /usr/lib/llvm-*/lib/clang/*/include/riscv* /usr/lib/clc/nvptx* /usr/lib/clc/clspv* /usr/lib/clc/*r600* \
       /usr/lib/x86_64-linux-gnu/libvulkan_intel*.so /usr/share/vulkan/icd.d/intel* \
       /usr/lib/x86_64-linux-gnu/libVkLayer_INTEL* /usr/lib/x86_64-linux-gnu/libVkLayer_MESA_overlay.so \
       /usr/share/vulkan/explicit_layer.d/VkLayer_MESA_overlay.json /usr/bin/mesa-overlay-control.py \
       /usr/lib/x86_64-linux-gnu/gallium-pipe/pipe_iris.so /usr/lib/x86_64-linux-gnu/gallium-pipe/pipe_crocus.so \
       /usr/lib/x86_64-linux-gnu/gallium-pipe/pipe_nouveau.so /usr/lib/x86_64-linux-gnu/gallium-pipe/pipe_vmwgfx.so \
       /usr/lib/x86_64-linux-gnu/gallium-pipe/pipe_r300.so /usr/lib/x86_64-linux-gnu/gallium-pipe/pipe_r600.so \
       /usr/lib/x86_64-linux-gnu/gallium-pipe/pipe_i915.so

# One layer: the slimmed runtime, without the files the base's layers would still carry.
FROM scratch
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="gpufleet/agent-mesa-full" \
      org.opencontainers.image.description="gpufleet agent: Mesa RADV, Clover, rusticl, lavapipe, PoCL, cpu" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://example.invalid/gpufleet"
COPY --from=runtime / /
COPY --from=agent /usr/local/bin/gpufleet-agent /usr/local/bin/agent-entrypoint.sh /usr/local/bin/
USER gpufleet
# rusticl is opt-in per driver: radeonsi (the AMD cards; PoCL is the OpenCL on the CPU here, so
# llvmpipe is left out rather than counted twice).
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    RUSTICL_ENABLE=radeonsi \
    GPUFLEET_STATE_DIR=/var/lib/gpufleet/state \
    GPUFLEET_CACHE_DIR=/var/lib/gpufleet/cache \
    XDG_RUNTIME_DIR=/tmp
VOLUME /var/lib/gpufleet
ENTRYPOINT ["/usr/local/bin/agent-entrypoint.sh"]
