#!/usr/bin/env bash
# The main job of fabrx: a local network of 4 parties x 2 shards with one committing
# party, its query service and five token endorsers, every node its own process (fabrx
# up). Then the token application as people use it: the central bank's issuer wallet
# issues 1000 to alice, alice pays bob 300, both balances are shown (each payment
# endorsed by 3 of 5 endorsers, ordered, committed). Then a short paced load pushed
# through the network end to end (10,000 transfers at 2,000 per second): transfers sent
# to every party's router, ordered by the BFT consenters, assembled into verified blocks,
# validated and committed by the committer. The demo runs a debug build, the quickest to
# build; a release build carries about six times the rate (docs/benchmarks.md).
# Prints the load's summary and the blocks, then stops the network (--keep leaves it
# running: `fabrx status|down --dir ./fabrx-net`).
# Installs the build dependencies when missing (scripts/deps.sh).
#
#   bash scripts/demo.sh [--keep] [--txs N] [--rate R] [--dir DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
ensure_system_deps no
keep=no; txs=10000; rate=2000; dir=./fabrx-net
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=yes ;;
    --txs) txs="$2"; shift ;;
    --rate) rate="$2"; shift ;;
    --dir) dir="$2"; shift ;;
    *) echo "usage: bash scripts/demo.sh [--keep] [--txs N] [--rate R] [--dir DIR]" >&2; exit 2 ;;
  esac
  shift
done
# Build only the fabrx binary (scripts/test.sh builds the test binaries on top). Cargo
# shows its progress (a bar on a terminal, one line per crate otherwise).
fabrx="${CARGO_TARGET_DIR:-$PWD/target}/debug/fabrx"
if [ ! -x "$fabrx" ]; then
  echo "fabrx: first build (about 7-8 minutes on 2 idle cores; later builds take seconds)" >&2
fi
cargo build --bin fabrx
if [ -f "$dir/network.json" ] && [ "$keep" = no ]; then
  "$fabrx" down --dir "$dir" >/dev/null 2>&1 || true
fi
echo "== fabrx up --dir $dir (4 parties x 2 shards, 1 committing party, embedded store)"
"$fabrx" up --dir "$dir"
stop() { if [ "$keep" = no ]; then echo "== fabrx down"; "$fabrx" down --dir "$dir" >/dev/null; fi; }
trap stop EXIT
wallets="$dir/wallets"
rm -f "$wallets/alice" "$wallets/alice.lock" "$wallets/bob" "$wallets/bob.lock"
alice=$("$fabrx" wallet --network "$dir" --wallet "$wallets/alice" init --name alice)
bob=$("$fabrx" wallet --network "$dir" --wallet "$wallets/bob" init --name bob)
echo "== fabrx wallet: alice is $alice, bob is $bob"
echo "== the issuer issues 1000 CBDC to alice"
"$fabrx" wallet --network "$dir" --wallet "$wallets/issuer" issue --to "$alice" --amount 1000
echo "== alice pays bob 300"
"$fabrx" wallet --network "$dir" --wallet "$wallets/alice" transfer --to "$bob" --amount 300
echo "== balances"
echo "alice: $("$fabrx" wallet --network "$dir" --wallet "$wallets/alice" balance)"
echo "bob:   $("$fabrx" wallet --network "$dir" --wallet "$wallets/bob" balance)"
echo "== alice's history"
"$fabrx" wallet --network "$dir" --wallet "$wallets/alice" history
echo "== fabrx loadgen --target network --txs $txs --rate $rate (token transfers, committed end to end)"
"$fabrx" loadgen --target network --network "$dir" --txs "$txs" --rate "$rate" --block-size 500
echo "== the ordered blocks (party 1's assembler, each verified; the last 3 shown)"
"$fabrx" blocks --network "$dir" --party 1 > "$dir/blocks.jsonl"
tail -n 3 "$dir/blocks.jsonl"
echo "$(wc -l < "$dir/blocks.jsonl") blocks, $(grep -c '"verified":true' "$dir/blocks.jsonl") verified (fabrx blocks exits non-zero if one does not verify)"
