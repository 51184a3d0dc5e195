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
