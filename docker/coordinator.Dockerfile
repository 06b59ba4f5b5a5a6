# gpufleet coordinator: `gpufleet serve` with its HTTP API and the fleet listener dial-in agents attach
# to, SQLite on the /var/lib/gpufleet volume.
#   docker build -f docker/coordinator.Dockerfile -t gpufleet/coordinator .
#   docker run -v gpufleet:/var/lib/gpufleet -p 7443:7443 -p 8787:8787 --env-file fleet.env gpufleet/coordinator
# Beyond loopback serve needs TLS (made once in /var/lib/gpufleet/tls here) and GPUFLEET_READ_TOKEN /
# GPUFLEET_ADMIN_TOKEN (16+ characters each). Base images are build args (docker/base-images.sh).
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
LABEL org.opencontainers.image.title="gpufleet/coordinator" \
      org.opencontainers.image.description="gpufleet serve: API, schedules, fleet listener, SQLite store" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://example.invalid/gpufleet"
RUN rm -rf /usr/share/doc/* /usr/share/man/* /var/cache/debconf/*-old \
    && useradd --system --uid 10001 --user-group --home-dir /var/lib/gpufleet --create-home gpufleet
COPY --from=build /out/gpufleet /usr/local/bin/gpufleet
COPY docker/coordinator-entrypoint.sh /usr/local/bin/coordinator-entrypoint.sh
USER gpufleet
ENV GPUFLEET_DB=/var/lib/gpufleet/gpufleet.db \
    GPUFLEET_LISTEN=0.0.0.0:8787 \
    GPUFLEET_FLEET_LISTEN=0.0.0.0:7443 \
    GPUFLEET_TLS_SELF_SIGNED=/var/lib/gpufleet/tls
VOLUME /var/lib/gpufleet
EXPOSE 7443 8787
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s \
    CMD ["gpufleet", "healthz", "--tls-dir", "/var/lib/gpufleet/tls"]
ENTRYPOINT ["/usr/local/bin/coordinator-entrypoint.sh"]
CMD ["serve"]
