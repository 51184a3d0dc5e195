#!/usr/bin/env bash
# Installs the system packages fabrx needs when they are missing, on Debian/Ubuntu:
#   librocksdb-dev  RocksDB 7.8, linked by the embedded store (ADR 0005); no C++ build
#   libclang-dev    bindgen reads RocksDB's C headers when building the embedded store
#   g++             the C parts of a few dependencies (blst)
#   postgresql      server binaries (initdb, postgres) for the throwaway test clusters
# Sourced by scripts/test.sh and scripts/demo.sh; does nothing when all are present.
ensure_system_deps() {
  local want_pg=${1:-no} missing=()
  # bindgen needs libclang itself (libclang.so / libclang-N.so), not libclang-cpp.
  if ! compgen -G "/usr/lib/llvm-*/lib/libclang.so*" >/dev/null &&
     ! compgen -G "/usr/lib/llvm-*/lib/libclang-[0-9]*.so*" >/dev/null &&
     ! compgen -G "/usr/lib/*-linux-gnu/libclang-[0-9]*.so*" >/dev/null &&
     ! compgen -G "/usr/lib/*-linux-gnu/libclang.so*" >/dev/null; then
    missing+=(libclang-dev)
  fi
  # .cargo/config.toml points ROCKSDB_LIB_DIR here.
  [ -e /usr/lib/x86_64-linux-gnu/librocksdb.so ] && [ -e /usr/include/rocksdb/c.h ] ||
    missing+=(librocksdb-dev)
  command -v c++ >/dev/null 2>&1 || missing+=(g++)
  command -v cc >/dev/null 2>&1 || missing+=(gcc)
  if [ "$want_pg" = yes ] && ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null &&
     ! command -v initdb >/dev/null 2>&1; then
    missing+=(postgresql)
  fi
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "fabrx: installing missing system packages: ${missing[*]}" >&2
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "fabrx: please install ${missing[*]} (no apt-get on this system)" >&2
    return 1
  fi
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  # Do not let the postgresql package start a system-wide cluster: tests start their own.
  $sudo env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# Installs Debian's `prometheus` package (prometheus and promtool) when missing, for the
# test that runs a real Prometheus against a local network (crates/fabrx/tests/
# prometheus_rules.rs). The package's system service is not started: while apt runs, a
# policy-rc.d refuses every service start (and is removed afterwards); the test runs its
# own Prometheus on a loopback port. Returns non-zero when it cannot install.
ensure_prometheus() {
  if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
    return 0
  fi
  command -v apt-get >/dev/null 2>&1 || return 1
  local sudo="" policy=/usr/sbin/policy-rc.d made_policy=no rc=0
  [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "fabrx: installing prometheus (its service is not started)" >&2
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null && $sudo chmod 755 "$policy" &&
      made_policy=yes
  fi
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    $sudo env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -qq \
      --no-install-recommends prometheus || rc=$?
  [ "$made_policy" = yes ] && $sudo rm -f "$policy"
  return $rc
}
