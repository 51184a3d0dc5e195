#!/usr/bin/env bash
# The main job of fabrx as far as it exists today: see `fabrx demo --help`.
# Installs the build dependencies when missing (scripts/deps.sh), builds and runs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
ensure_system_deps no
exec cargo run -q -p fabrx -- demo "$@"
