# syntax=docker/dockerfile:1
# The fabrx image: one binary, `fabrx`, that runs every node (`fabrx node <role> …`),
# the load generator and the wallet (docs/deploy.md).
#
#   docker build -t fabrx:0.1.0 .
#
# Build stage: the pinned toolchain (rust-toolchain.toml) on Debian 12, with Debian's
# RocksDB 7.8 and libclang as scripts/deps.sh installs them (ADR 0005: the embedded store
# links the system RocksDB instead of compiling it). protoc comes vendored (wire/build.rs).
ARG RUST_VERSION=1.95.0
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS build
# Debian's point releases replace package versions; the release itself pins them.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends librocksdb-dev libclang-dev g++ pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# .cargo/config.toml sets ROCKSDB_LIB_DIR; the caches keep dependencies across builds.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p fabrx \
 && install -m 0755 target/release/fabrx /usr/local/bin/fabrx

# Runtime: Debian slim with only what `fabrx` links at run time (librocksdb7.8 and what
# it pulls in: snappy, lz4, zstd, bz2, gflags) and CA certificates.
FROM debian:${DEBIAN_RELEASE}-slim AS runtime
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends librocksdb7.8 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 fabrx \
 && useradd --system --uid 10001 --gid fabrx --home-dir /var/lib/fabrx --shell /usr/sbin/nologin fabrx \
 && mkdir -p /etc/fabrx /var/lib/fabrx \
 && chown fabrx:fabrx /etc/fabrx /var/lib/fabrx
COPY --from=build /usr/local/bin/fabrx /usr/local/bin/fabrx
USER 10001:10001
WORKDIR /var/lib/fabrx
# gRPC ports of the roles as `fabrx network generate --k8s` lays them out: router,
# consenter, assembler, batcher, sidecar, sigverifier, vcservice, query, endorser; and
# Prometheus /metrics (sidecar, sigverifier, vcservice, endorser with --metrics). The
# nodes have no HTTP health endpoint yet: probe the gRPC port (tcpSocket).
EXPOSE 7050 7051 7052 7053 7070 7071 7072 7080 7090 9090
VOLUME ["/var/lib/fabrx"]
ENTRYPOINT ["fabrx"]
CMD ["--help"]
