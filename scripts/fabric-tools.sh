#!/usr/bin/env bash
# Installs Arma's `armageddon` tool (the Fabric-X orderer's load and receive client) into the
# tools cache, for the Fabric interop test and the like-for-like ordering benchmark
# (docs/fabric.md, docs/benchmarks.md).
#
# Usage: bash scripts/fabric-tools.sh --check   exit 0 when armageddon is cached, 1 otherwise
#        ARMAGEDDON=/path/to/armageddon bash scripts/fabric-tools.sh
#                                               install a prebuilt binary
#        FABRIC_X_ORDERER_SRC=/path/to/fabric-x-orderer bash scripts/fabric-tools.sh
#                                               build it from a source checkout of the Fabric-X
#                                               orderer: `go build -mod=vendor ./cmd/armageddon`
#                                               (its dependencies are vendored: no network needed)
#        Beside armageddon: the Go orderer `arma` and the sample Fabric config its generator
#        reads (`fabric-sampleconfig`), for scripts/bench-fabric.sh; SAMPLECONFIG=DIR names it
#        when it is not in ../sampleconfig next to a prebuilt armageddon.
#
# The cache is $FABRX_TOOLS (default ~/.cache/fabrx-tools, as scripts/k8s-tools.sh).
set -euo pipefail

TOOLS=${FABRX_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/fabrx-tools}
log() { echo "fabric-tools: $*" >&2; }

if [ "${1:-}" = "--check" ]; then
  [ -x "$TOOLS/armageddon" ]
  exit
fi

mkdir -p "$TOOLS"
if [ -n "${ARMAGEDDON:-}" ]; then
  [ -x "$ARMAGEDDON" ] || { log "$ARMAGEDDON is not an executable"; exit 1; }
  install -m 0755 "$ARMAGEDDON" "$TOOLS/armageddon"
  # The Go orderer itself and the sample Fabric config its generator needs, when they sit
  # beside the tool (for the benchmark).
  if [ -x "$(dirname "$ARMAGEDDON")/arma" ]; then
    install -m 0755 "$(dirname "$ARMAGEDDON")/arma" "$TOOLS/arma"
  fi
  sample=${SAMPLECONFIG:-$(dirname "$ARMAGEDDON")/../sampleconfig}
  if [ -d "$sample" ]; then
    rm -rf "$TOOLS/fabric-sampleconfig"; cp -r "$sample" "$TOOLS/fabric-sampleconfig"
  fi
elif [ -n "${FABRIC_X_ORDERER_SRC:-}" ]; then
  command -v go >/dev/null || { log "go is needed to build from source"; exit 1; }
  (cd "$FABRIC_X_ORDERER_SRC" && nice -n 19 go build -mod=vendor -o "$TOOLS/armageddon" ./cmd/armageddon \
    && nice -n 19 go build -mod=vendor -o "$TOOLS/arma" ./cmd/arma)
  rm -rf "$TOOLS/fabric-sampleconfig"
  cp -r "$FABRIC_X_ORDERER_SRC/testutil/fabric/sampleconfig" "$TOOLS/fabric-sampleconfig"
else
  log "set ARMAGEDDON (a prebuilt binary) or FABRIC_X_ORDERER_SRC (a source checkout)"
  exit 1
fi
"$TOOLS/armageddon" version >/dev/null 2>&1 || true
log "installed $TOOLS/armageddon"
