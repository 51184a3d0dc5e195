#!/usr/bin/env bash
# The main job of fabrx as far as it exists today: the committer without an orderer.
# Runs examples/blocks.jsonl (a CBDC token: namespace creation with a 3-of-5 threshold BLS
# policy, issuance, transfers, a double spend, a forged issuance, every malformed case)
# through the committer pipeline and prints each tx's status and the final state.
# Installs the build dependencies when missing (scripts/deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
ensure_system_deps no
if [ $# -eq 0 ]; then set -- --blocks examples/blocks.jsonl --print-state; fi
# Build exactly what `scripts/test.sh` builds (dev-dependencies change the feature
# resolution, so `cargo build` or `cargo run -p fabrx` would compile RocksDB, the slow part
# of a first build, a second time); the fabrx binary is part of that build.
cargo test -q --workspace --no-run
exec "${CARGO_TARGET_DIR:-$PWD/target}/debug/fabrx" committer apply "$@"
