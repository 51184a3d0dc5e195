#!/usr/bin/env bash
# Runs the whole fabrx test suite. Installs what the tests need when it is missing
# (see scripts/deps.sh); tests that need PostgreSQL start a throwaway cluster themselves
# (crates/testkit/src/pg.rs) and remove it when they exit.
# Extra arguments go to `cargo test`, e.g. `bash scripts/test.sh -p types`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
ensure_system_deps yes
if [ $# -gt 0 ]; then exec cargo test "$@"; fi
cargo test --workspace
# The multi-process Byzantine test needs the test-only Byzantine batcher, which only a
# build with the `testing` feature has (never a release build): docs/ordering-faults.md.
cargo test -p fabrx --features testing --test byzantine_ordering
