#!/usr/bin/env bash
# End-to-end payment latency of the token application (docs/benchmarks.md "Token
# payments"): a fresh `fabrx up` network (4 parties x 2 shards, one committing party,
# 3-of-5 endorsers, mutual TLS), the issuer funds alice, then alice pays bob N times,
# one payment after the other, each a `fabrx wallet transfer` process as a person runs
# it (sync, endorse by 3 of 5, submit to every router, wait for COMMITTED). Prints each
# latency and the p50/p90/p99/max in ms, then stops the network.
#
#   bash scripts/bench-payments.sh [--payments N] [--dir DIR] [--release]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
ensure_system_deps no
n=50; dir=./fabrx-bench-payments; profile=debug
while [ $# -gt 0 ]; do
  case "$1" in
    --payments) n="$2"; shift ;;
    --dir) dir="$2"; shift ;;
    --release) profile=release ;;
    *) echo "usage: bash scripts/bench-payments.sh [--payments N] [--dir DIR] [--release]" >&2; exit 2 ;;
  esac
  shift
done
if [ "$profile" = release ]; then cargo build --release --bin fabrx; else cargo build --bin fabrx; fi
fabrx="${CARGO_TARGET_DIR:-$PWD/target}/$profile/fabrx"
"$fabrx" down --dir "$dir" >/dev/null 2>&1 || true
rm -rf "$dir"
"$fabrx" up --dir "$dir" --base-port 17050 >/dev/null
trap '"$fabrx" down --dir "$dir" >/dev/null' EXIT
w() { "$fabrx" wallet --network "$dir" --wallet "$dir/wallets/$1" "${@:2}"; }
alice=$(w alice init --name alice)
bob=$(w bob init --name bob)
w issuer issue --to "$alice" --amount 1000000 >/dev/null
lat=()
for i in $(seq 1 "$n"); do
  t0=$(date +%s%N)
  w alice transfer --to "$bob" --amount 1 >/dev/null
  t1=$(date +%s%N)
  ms=$(( (t1 - t0) / 1000000 ))
  lat+=("$ms")
  echo "payment $i: $ms ms"
done
printf '%s\n' "${lat[@]}" | sort -n | awk -v n="$n" '
  { v[NR] = $1 }
  END {
    i50 = int(0.50 * (n - 1)) + 1; i90 = int(0.90 * (n - 1)) + 1; i99 = int(0.99 * (n - 1)) + 1
    printf "payments %d  p50 %d ms  p90 %d ms  p99 %d ms  max %d ms\n", n, v[i50], v[i90], v[i99], v[n]
  }'
echo "bob: $(w bob balance)"
