# gpufleet coordinator: `gpufleet serve` with its HTTP API and the fleet listener dial-in agents attach
# to, SQLite on the /var/lib/gpufleet volume.
#   docker build -f docker/coordinator.Dockerfile -t gpufleet/coordinator .
#   docker run -v gpufleet:/var/lib/gpufleet -p 7443:7443 -p 8787:8787 --env-file fleet.env gpufleet/coordinator
# Beyond loopback serve needs TLS (made once in /var/lib/gpufleet/tls here) and GPUFLEET_READ_TOKEN /
# GPUFLEET_ADMIN_TOKEN (16+ characters each). Base images are build args (docker/base-images.sh).
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
# serve needs only libc (rustls for TLS, SQLite built in, UTC clocks) and a shell with sed and grep for
# the entry point; account, login, systemd and disk tooling go.
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/gpufleet --create-home gpufleet \
    && sh /tmp/slim-runtime.sh 'passwd|login|libsemanage.*|libsepol.*|libaudit.*|libcap-ng0|libpam.*|libgnutls30|libgcrypt20|libgpg-error0|libp11-kit0|libunistring2|libidn2-0|libtasn1-6|libnettle8|libhogweed6|libffi8|libdb5.3|libsqlite3-0|libsystemd0|libudev1|liblz4-1|libzstd1|libxxhash0|libseccomp2|util-linux.*|mount|libmount1|libblkid1|libsmartcols1|libuuid1|libfdisk1|bsdutils|tzdata|ncurses-bin|init-system-helpers|adduser|procps|libproc2-0|libkmod2' \
    && rm -rf /usr/lib/x86_64-linux-gnu/gconv /usr/share/common-licenses

# One layer: the slimmed runtime, without the files the base's layers would still carry.
FROM scratch
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="gpufleet/coordinator" \
      org.opencontainers.image.description="gpufleet serve: API, schedules, fleet listener, SQLite store" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://example.invalid/gpufleet"
COPY --from=runtime / /
COPY --from=build /out/gpufleet /usr/local/bin/gpufleet
COPY docker/coordinator-entrypoint.sh /usr/local/bin/coordinator-entrypoint.sh
USER gpufleet
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    GPUFLEET_DB=/var/lib/gpufleet/gpufleet.db \
    GPUFLEET_LISTEN=0.0.0.0:8787 \
    GPUFLEET_FLEET_LISTEN=0.0.0.0:7443 \
    GPUFLEET_TLS_SELF_SIGNED=/var/lib/gpufleet/tls
VOLUME /var/lib/gpufleet
EXPOSE 7443 8787
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s \
    CMD ["gpufleet", "healthz", "--tls-dir", "/var/lib/gpufleet/tls"]
ENTRYPOINT ["/usr/local/bin/coordinator-entrypoint.sh"]
CMD ["serve"]
