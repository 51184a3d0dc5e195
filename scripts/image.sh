#!/usr/bin/env bash
# Builds the fabrx image from the repository's Dockerfile with a release binary built on
# this host, without needing a container registry (docs/deploy.md "The image").
#
#   bash scripts/image.sh [--tag localhost/fabrx:0.1.0] [--engine podman|docker]
#                         [--binary PATH] [--base IMAGE] [--oci-archive FILE]
#
# 1. the binary: `cargo build --release --locked -p fabrx` (unless --binary names one),
#    stripped into dist/fabrx;
# 2. the runtime's base, Debian 12 with librocksdb7.8 and ca-certificates: --base, or
#    `localhost/fabrx-base:bookworm` if the engine has it, or debian:bookworm-slim pulled
#    from a registry, or — when no registry answers — made from Debian packages with
#    debootstrap (about 1.5 min) and imported into the engine;
# 3. `<engine> build --build-arg FABRX_BINARY=prebuilt --build-arg RUNTIME_IMAGE=<base>`;
# 4. with --oci-archive, the image saved as an OCI archive (for `ctr images import`).
#
# podman here runs with the runc runtime, cgroupfs, file events, the vfs storage driver
# and lower default ulimits (a containers.conf of its own, CONTAINERS_CONF): a machine
# without systemd-managed cgroups, overlay mounts or CAP_SYS_RESOURCE. docker needs a
# running daemon (with `--storage-driver vfs` on such a machine) and uses BuildKit; $DOCKER
# names the client (a client without the buildx plugin needs to be 20.10, whose BuildKit is
# built in), $DOCKER_HOST the daemon.
set -euo pipefail
cd "$(dirname "$0")/.."

TAG=localhost/fabrx:0.1.0
ENGINE=podman
BINARY=""
BASE=""
ARCHIVE=""
BASE_TAG=localhost/fabrx-base:bookworm
MIRROR=${DEBIAN_MIRROR:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) TAG=$2; shift 2 ;;
    --engine) ENGINE=$2; shift 2 ;;
    --binary) BINARY=$2; shift 2 ;;
    --base) BASE=$2; shift 2 ;;
    --oci-archive) ARCHIVE=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "image.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

log() { echo "image.sh: $*" >&2; }
start=$SECONDS

case "$ENGINE" in
  podman)
    conf_dir=${XDG_CACHE_HOME:-$HOME/.cache}/fabrx-podman
    mkdir -p "$conf_dir"
    cat >"$conf_dir/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
EOF
    export CONTAINERS_CONF=$conf_dir/containers.conf
    engine() { podman --storage-driver vfs "$@"; }
    pull=(podman --storage-driver vfs pull -q)
    ;;
  docker)
    export DOCKER_BUILDKIT=1
    docker=${DOCKER:-docker}
    engine() { "$docker" "$@"; }
    pull=("$docker" pull -q)
    ;;
  *) echo "image.sh: --engine podman or docker" >&2; exit 2 ;;
esac

# 1. The binary.
if [ -z "$BINARY" ]; then
  log "cargo build --release --locked -p fabrx"
  cargo build --release --locked -p fabrx
  BINARY=${CARGO_TARGET_DIR:-target}/release/fabrx
fi
mkdir -p dist
strip -o dist/fabrx.tmp "$BINARY"
mv dist/fabrx.tmp dist/fabrx
log "dist/fabrx: $(du -h dist/fabrx | cut -f1) stripped, from $BINARY"

# 2. The base.
image_exists() { engine image inspect "$1" >/dev/null 2>&1; }
if [ -z "$BASE" ]; then
  if image_exists "$BASE_TAG"; then
    BASE=$BASE_TAG
  elif timeout 60 "${pull[@]}" docker.io/library/debian:bookworm-slim >/dev/null 2>&1; then
    BASE=docker.io/library/debian:bookworm-slim
  else
    log "no registry answers: making $BASE_TAG with debootstrap"
    if [ -z "$MIRROR" ]; then
      # The mirror apt already uses on this host.
      MIRROR=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null \
        | grep -oE 'https?://[^ ]+/debian/?( |$)' | head -1 | tr -d ' ' || true)
      MIRROR=${MIRROR:-http://deb.debian.org/debian}
    fi
    rootfs=$(mktemp -d "${TMPDIR:-/tmp}/fabrx-rootfs.XXXXXX")
    trap 'rm -rf "$rootfs"' EXIT
    debootstrap --variant=minbase --include=librocksdb7.8,ca-certificates bookworm "$rootfs" "$MIRROR" >&2
    # What a slim image leaves out: package lists, caches, documentation.
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
      "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/*
    chmod 0755 "$rootfs" # mktemp made it 0700; it becomes the image's /
    tar --numeric-owner -C "$rootfs" -c . | engine import \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'CMD ["/bin/bash"]' - "$BASE_TAG" >/dev/null
    rm -rf "$rootfs"
    trap - EXIT
    BASE=$BASE_TAG
  fi
fi
log "runtime base: $BASE"

# 3. The image.
build_args=(--build-arg FABRX_BINARY=prebuilt --build-arg "RUNTIME_IMAGE=$BASE")
if [ "$ENGINE" = podman ]; then
  # --pull=never: the base is local (podman otherwise asks a registry about it).
  # --network host: RUN steps need no network of their own, and podman's default one
  # would leave a bridge, firewall chains and CNI state on the host.
  engine build --pull=never --network host "${build_args[@]}" -t "$TAG" . >&2
else
  # Host network: a daemon started without a bridge (--bridge=none) has no other.
  engine build --network host "${build_args[@]}" -t "$TAG" . >&2
fi
log "built $TAG in $((SECONDS - start)) s"

# 4. The archive.
if [ -n "$ARCHIVE" ]; then
  rm -f "$ARCHIVE"
  if [ "$ENGINE" = podman ]; then
    engine save --format oci-archive -o "$ARCHIVE" "$TAG"
  else
    engine save -o "$ARCHIVE" "$TAG"
  fi
  log "saved $ARCHIVE ($(du -h "$ARCHIVE" | cut -f1))"
fi
