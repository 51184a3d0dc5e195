#!/usr/bin/env bash
# Runs the whole fabrx test suite. Installs what the tests need when it is missing
# (see scripts/deps.sh); tests that need PostgreSQL start a throwaway cluster themselves
# (crates/testkit/src/pg.rs) and remove it when they exit.
# Extra arguments go to `cargo test`, e.g. `bash scripts/test.sh -p types`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
ensure_system_deps yes
# The Prometheus test (crates/fabrx/tests/prometheus_rules.rs) must run, not skip, when
# Prometheus could be installed; when it cannot, the test says SKIPPED in its output.
if ensure_prometheus; then
  export FABRX_REQUIRE_PROMETHEUS=1
else
  echo "" >&2
  echo "*** fabrx: prometheus could not be installed: the Prometheus test is SKIPPED ***" >&2
  echo "" >&2
fi
# The Fabric interop test (crates/fabrx/tests/fabric_interop.rs) drives fabrx with Arma's own
# `armageddon` tool, when scripts/fabric-tools.sh has cached it; otherwise it says SKIPPED.
if ! bash scripts/fabric-tools.sh --check; then
  echo "" >&2
  echo "*** fabrx: armageddon is not cached (bash scripts/fabric-tools.sh): the Fabric interop test is SKIPPED ***" >&2
  echo "" >&2
fi
if [ $# -gt 0 ]; then exec cargo test "$@"; fi
cargo test --workspace
# The multi-process Byzantine tests need the test-only Byzantine batcher, which only a
# build with the `testing` feature has (never a release build): docs/ordering-faults.md.
cargo test -p fabrx --features testing --test byzantine_ordering
