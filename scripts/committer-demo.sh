#!/usr/bin/env bash
# The committer alone, without an orderer (bash scripts/demo.sh runs the whole network).
# Runs examples/blocks.jsonl (a CBDC token: namespace creation with a 3-of-5 threshold BLS
# policy, issuance, transfers, a double spend, a forged issuance, every malformed case)
# through the committer pipeline and prints each tx's status and the final state.
# Installs the build dependencies when missing (scripts/deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
ensure_system_deps no
if [ $# -eq 0 ]; then set -- --blocks examples/blocks.jsonl --print-state; fi
# Build only the fabrx binary (scripts/test.sh builds the test binaries on top; a few
# crates whose features differ with dev-dependencies are compiled again then). Cargo shows
# its progress (a bar on a terminal, one line per crate otherwise).
if [ ! -x "${CARGO_TARGET_DIR:-$PWD/target}/debug/fabrx" ]; then
  echo "fabrx: first build (about 7-8 minutes on 2 idle cores; later builds take seconds)" >&2
fi
cargo build --bin fabrx
exec "${CARGO_TARGET_DIR:-$PWD/target}/debug/fabrx" committer apply "$@"
