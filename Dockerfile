# The fabrx image: one binary, `fabrx`, that runs every node (`fabrx node <role> …`),
# the load generator and the wallet (docs/deploy.md "The image").
#
#   docker build -t fabrx:0.1.0 .                        compile inside the build stage
#   bash scripts/image.sh                                offline: a binary built on the host
#   podman build --build-arg FABRX_BINARY=prebuilt \
#     --build-arg RUNTIME_IMAGE=localhost/fabrx-base:bookworm -t fabrx:0.1.0 .
#
# No `# syntax` line: the builder's own Dockerfile frontend is used, so nothing is pulled
# for it, and no `RUN --mount`, so BuildKit, Buildah (podman) and the legacy builder all
# read this file.
#
# Build arguments:
#   RUST_IMAGE     the build stage's base: a Rust toolchain on Debian 12 (the version of
#                  rust-toolchain.toml).
#   RUNTIME_IMAGE  the runtime's base: Debian 12. An image that already holds
#                  librocksdb7.8 and ca-certificates (scripts/image.sh makes one with
#                  debootstrap) needs no package mirror during the build.
#   FABRX_BINARY   `build` (default): compile in the build stage; `prebuilt`: take
#                  `dist/fabrx` from the build context (a release binary built on a
#                  Debian 12 host, stripped; scripts/image.sh puts it there). With podman
#                  4.3 (Buildah) give it explicitly, `--build-arg FABRX_BINARY=build`:
#                  Buildah finds the stage a `FROM ${ARG}` needs only from given build
#                  arguments, not from defaults, and skips the build stage otherwise.
#   CARGO_CA_BUNDLE  a CA bundle inside the build context (e.g. `dist/ca-certificates.crt`,
#                  a copy of the host's /etc/ssl/certs/ca-certificates.crt) that cargo
#                  trusts for crates.io, for a network whose outbound TLS is intercepted
#                  by a proxy with its own CA. Certificates are public: no secret is
#                  needed. Empty (default): the base image's CA store.
ARG RUST_IMAGE=docker.io/library/rust:1.95.0-slim-bookworm
ARG RUNTIME_IMAGE=docker.io/library/debian:bookworm-slim
ARG FABRX_BINARY=build

# Build stage: the pinned toolchain with Debian's RocksDB 7.8 and libclang as
# scripts/deps.sh installs them (ADR 0005: the embedded store links the system RocksDB
# instead of compiling it). protoc comes vendored (wire/build.rs).
FROM ${RUST_IMAGE} AS build
ARG CARGO_CA_BUNDLE=""
# Debian's point releases replace package versions; the release itself pins them.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends librocksdb-dev libclang-dev g++ pkg-config binutils \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# .cargo/config.toml sets ROCKSDB_LIB_DIR. The binary is stripped: its line tables
# (profile.release) serve backtraces on a developer's machine, not in an image.
RUN if [ -n "$CARGO_CA_BUNDLE" ]; then export CARGO_HTTP_CAINFO="/src/$CARGO_CA_BUNDLE" SSL_CERT_FILE="/src/$CARGO_CA_BUNDLE"; fi \
 && cargo build --release --locked -p fabrx \
 && mkdir -p /out \
 && strip -o /out/fabrx target/release/fabrx \
 && rm -rf target

# Or the binary built outside: `dist/fabrx` (the only file of dist/ that .dockerignore
# lets through). Stripped by whoever put it there.
FROM scratch AS prebuilt
COPY dist/fabrx /out/fabrx

# The stage FABRX_BINARY names; builders that skip unused stages (BuildKit, Buildah)
# then never run the other one.
# hadolint ignore=DL3006
FROM ${FABRX_BINARY} AS binary

# Runtime: Debian slim with only what `fabrx` links at run time (librocksdb7.8 and what
# it pulls in: snappy, lz4, zstd, bz2, gflags) and CA certificates.
FROM ${RUNTIME_IMAGE} AS runtime
# The packages are installed only when the base lacks them (a debootstrap base has them,
# and then no mirror is needed); the pipe only counts dpkg's lines (DL4006).
# hadolint ignore=DL3008,DL4006
RUN if [ "$(dpkg-query -W -f='${Status}\n' librocksdb7.8 ca-certificates 2>/dev/null | grep -c '^install ok installed$')" != 2 ]; then \
      apt-get update \
      && apt-get install -y --no-install-recommends librocksdb7.8 ca-certificates \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && groupadd --system --gid 10001 fabrx \
 && useradd --system --uid 10001 --gid fabrx --home-dir /var/lib/fabrx --shell /usr/sbin/nologin fabrx \
 && mkdir -p /etc/fabrx /var/lib/fabrx \
 && chown fabrx:fabrx /etc/fabrx /var/lib/fabrx
COPY --from=binary /out/fabrx /usr/local/bin/fabrx
# Set here, not inherited: a base imported from a root file system has no environment.
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
USER 10001:10001
WORKDIR /var/lib/fabrx
# gRPC ports of the roles as `fabrx network generate --k8s` lays them out: router,
# consenter, assembler, batcher, sidecar, sigverifier, vcservice, query, endorser; and
# Prometheus /metrics (every node with --metrics). The nodes have no HTTP health
# endpoint yet: probe the gRPC port (tcpSocket).
EXPOSE 7050 7051 7052 7053 7070 7071 7072 7080 7090 9090
VOLUME ["/var/lib/fabrx"]
ENTRYPOINT ["fabrx"]
CMD ["--help"]
