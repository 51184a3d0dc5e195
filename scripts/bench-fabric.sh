#!/usr/bin/env bash
# The like-for-like ordering benchmark (docs/benchmarks.md "fabrx and the Go orderer under one
# client"): the same client — Arma's `armageddon load` and `armageddon receive`, through the
# Fabric Broadcast and Deliver APIs — against a fabrx network (`fabrx up`, ordering only) and
# against the Go Fabric-X orderer (`arma`), in turn, in one run: same parties and shards, same
# tx size, same offered rates, same client TLS. Each step prints one JSON line:
#   {"system","rate","tps","avg_delay_s","txs_sent","txs_received","node_cpu_s","cpu_us_per_tx",…}
# and the last line is a JSON array of every step.
#
# Usage: bash scripts/bench-fabric.sh
# Knobs (defaults in brackets):
#   PARTIES [4]  SHARDS [2]  RATES ["5000 10000"]  DURATION [20] s  TXSIZE [300] B
#   TLS [mTLS]   client links: mTLS (fabrx's default; the Go orderer generated with mTLS on its
#                router and assembler) or none (fabrx --insecure: then fabrx's node-to-node links
#                are plain TCP too, while the Go orderer's stay TLS — not like for like)
#   ROUNDS [1]   the systems alternate per rate, ROUNDS times
#   SYSTEMS ["fabrx go"]  DRAIN [60] s after the load for the last txs
#   FABRX [target/release/fabrx, built if missing]
#   FABRX_TOOLS [~/.cache/fabrx-tools]: armageddon, arma and fabric-sampleconfig
#                (bash scripts/fabric-tools.sh installs them)
#   WORK [/tmp/fabrx-bench-fabric]  BASEPORT [21000]
set -euo pipefail
cd "$(dirname "$0")/.."

PARTIES=${PARTIES:-4}
SHARDS=${SHARDS:-2}
RATES=${RATES:-"5000 10000"}
DURATION=${DURATION:-20}
TXSIZE=${TXSIZE:-300}
TLS=${TLS:-mTLS}
ROUNDS=${ROUNDS:-1}
SYSTEMS=${SYSTEMS:-"fabrx go"}
DRAIN=${DRAIN:-60}
TOOLS=${FABRX_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/fabrx-tools}
WORK=${WORK:-/tmp/fabrx-bench-fabric}
BASEPORT=${BASEPORT:-21000}
FABRX=${FABRX:-target/release/fabrx}
ARMAGEDDON=$TOOLS/armageddon
ARMA=$TOOLS/arma
SAMPLE=$TOOLS/fabric-sampleconfig

log() { echo "[bench-fabric $(date +%T)] $*" >&2; }
case "$TLS" in mTLS | none) ;; *) log "TLS must be mTLS or none"; exit 2 ;; esac
[ -x "$ARMAGEDDON" ] || { log "no $ARMAGEDDON: run scripts/fabric-tools.sh"; exit 1; }
if [[ " $SYSTEMS " == *" go "* ]]; then
  [ -x "$ARMA" ] && [ -d "$SAMPLE" ] || { log "no $ARMA or $SAMPLE: run scripts/fabric-tools.sh"; exit 1; }
fi
if [[ " $SYSTEMS " == *" fabrx "* ]] && [ ! -x "$FABRX" ]; then
  log "building $FABRX"
  cargo build --release -p fabrx >&2
fi
if [[ " $SYSTEMS " == *" fabrx "* ]]; then FABRX=$(realpath "$FABRX"); fi
TICK=$(getconf CLK_TCK)
mkdir -p "$WORK"
RESULTS=$WORK/results.jsonl
: >"$RESULTS"

GO_PIDS=()
FABRX_DIR=""
stop_all() {
  set +e
  if [ -n "$FABRX_DIR" ] && [ -e "$FABRX_DIR/network.json" ]; then "$FABRX" down --dir "$FABRX_DIR" >/dev/null 2>&1; fi
  FABRX_DIR=""
  for p in "${GO_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  sleep 1
  for p in "${GO_PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  GO_PIDS=()
  set -e
}
trap stop_all EXIT

cpu_ticks() { # pids…: user+system ticks of the processes
  local t=0 p f
  for p in "$@"; do
    if read -r -a f <"/proc/$p/stat" 2>/dev/null; then t=$((t + f[13] + f[14])); fi
  done
  echo "$t"
}

wait_port() { # host:port
  local hp=$1
  for _ in $(seq 1 240); do
    if (exec 3<>"/dev/tcp/${hp%:*}/${hp##*:}") 2>/dev/null; then return 0; fi
    sleep 0.5
  done
  log "nothing listens on $hp"; return 1
}

# --- fabrx: `fabrx up`, ordering only; prints the node pids and the user config path.
start_fabrx() {
  local dir=$WORK/fabrx-net
  rm -rf "$dir"
  local flags=(--parties "$PARTIES" --shards "$SHARDS" --committers 0 --no-token --base-port "$BASEPORT" --dir "$dir" --json)
  [ "$TLS" = none ] && flags+=(--insecure)
  "$FABRX" up "${flags[@]}" >"$WORK/fabrx-up.log" 2>&1 || { log "fabrx up failed"; tail -20 "$WORK/fabrx-up.log" >&2; return 1; }
  FABRX_DIR=$dir
  PIDS=$(python3 -c 'import json,sys; print(" ".join(str(n["pid"]) for n in json.load(open(sys.argv[1]))["nodes"]))' "$dir/network.json")
  USER_CONFIG=$dir/fabric/party1/user_config.yaml
}

# --- the Go orderer: `armageddon generate`, then every node of `arma`.
start_go() {
  local dir=$WORK/go-net
  rm -rf "$dir"; mkdir -p "$dir/logs"
  local conf=$dir/network.yaml
  echo "Parties:" >"$conf"
  local i j b
  for i in $(seq 1 "$PARTIES"); do
    b=$((BASEPORT + i * 10))
    {
      echo "  - ID: $i"
      echo "    AssemblerEndpoint: \"127.0.0.1:$((b + 1))\""
      echo "    ConsenterEndpoint: \"127.0.0.1:$((b + 2))\""
      echo "    RouterEndpoint: \"127.0.0.1:$((b + 3))\""
      echo "    BatchersEndpoints:"
      for j in $(seq 1 "$SHARDS"); do echo "      - \"127.0.0.1:$((b + 3 + j))\""; done
    } >>"$conf"
  done
  printf 'UseTLSRouter: "%s"\nUseTLSAssembler: "%s"\n' "$TLS" "$TLS" >>"$conf"
  (cd "$(dirname "$SAMPLE")" && "$ARMAGEDDON" generate --config="$conf" --output="$dir" \
    --sampleConfigPath="$(basename "$SAMPLE")") >"$dir/logs/generate.log" 2>&1
  local f comp party d
  for f in "$dir"/config/party*/local_config_*.yaml; do
    comp=$(basename "$f" .yaml); comp=${comp#local_config_}
    party=$(basename "$(dirname "$f")")
    d=$dir/data/${party}_$comp; mkdir -p "$d"
    sed -i "s|Location: /var/dec-trust.*|Location: $d|; s|WALDir: /var/dec-trust.*|WALDir: $d/wal|" "$f"
  done
  local pids=()
  start() { "$ARMA" "$1" --config="$2" >"$dir/logs/$3.log" 2>&1 & pids+=($!); GO_PIDS+=($!); }
  for i in $(seq 1 "$PARTIES"); do start consensus "$dir/config/party$i/local_config_consenter.yaml" "consenter$i"; done
  for i in $(seq 1 "$PARTIES"); do wait_port "127.0.0.1:$((BASEPORT + i * 10 + 2))"; done
  for i in $(seq 1 "$PARTIES"); do for j in $(seq 1 "$SHARDS"); do
    start batcher "$dir/config/party$i/local_config_batcher$j.yaml" "batcher$i-$j"
  done; done
  for i in $(seq 1 "$PARTIES"); do for j in $(seq 1 "$SHARDS"); do wait_port "127.0.0.1:$((BASEPORT + i * 10 + 3 + j))"; done; done
  for i in $(seq 1 "$PARTIES"); do start assembler "$dir/config/party$i/local_config_assembler.yaml" "assembler$i"; done
  for i in $(seq 1 "$PARTIES"); do wait_port "127.0.0.1:$((BASEPORT + i * 10 + 1))"; done
  for i in $(seq 1 "$PARTIES"); do start router "$dir/config/party$i/local_config_router.yaml" "router$i"; done
  for i in $(seq 1 "$PARTIES"); do wait_port "127.0.0.1:$((BASEPORT + i * 10 + 3))"; done
  sleep 3
  PIDS="${pids[*]}"
  USER_CONFIG=$dir/config/party1/user_config.yaml
}

# One step: load at RATE for DURATION s, receive from party 1's assembler, measure.
step() { # system rate
  local system=$1 rate=$2 txs=$(($2 * DURATION))
  log "$system: starting $PARTIES x $SHARDS, client TLS $TLS"
  if [ "$system" = fabrx ]; then start_fabrx; else start_go; fi
  local out=$WORK/$system-$rate
  rm -rf "$out"; mkdir -p "$out"
  # shellcheck disable=SC2086
  local cpu_idle0; cpu_idle0=$(cpu_ticks $PIDS)
  sleep 5
  # shellcheck disable=SC2086
  local idle_ticks=$(($(cpu_ticks $PIDS) - cpu_idle0))
  (cd "$out" && "$ARMAGEDDON" receive --config="$USER_CONFIG" --pullFromPartyId=1 \
    --expectedTxs="$txs" --output="$out") >"$out/receive.log" 2>&1 &
  local recv=$!
  sleep 2
  local t0 c0; t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  c0=$(cpu_ticks $PIDS)
  log "$system: load $txs txs at $rate tx/s, $TXSIZE B"
  "$ARMAGEDDON" load --config="$USER_CONFIG" --transactions="$txs" --rate="$rate" --txSize="$TXSIZE" \
    >"$out/load.log" 2>&1 || log "$system: load exited non-zero"
  local tl; tl=$(date +%s.%N)
  # Wait for the last txs, at most DRAIN s; the CPU window ends when the last tx arrived
  # (receive exits), or at the last progress when txs stop arriving for 10 s.
  local t1 c1 seen=-1 now count last_progress
  t1=$(date +%s.%N); c1=$(cpu_ticks $PIDS); last_progress=$(date +%s)
  for _ in $(seq 1 $((DRAIN * 5))); do
    now=$(date +%s)
    if ! kill -0 "$recv" 2>/dev/null; then
      t1=$(date +%s.%N); c1=$(cpu_ticks $PIDS); break
    fi
    count=$(awk -F, '$2 ~ /^[0-9]+$/ {s += $2} END {print s + 0}' "$out/statistics.csv" 2>/dev/null || echo 0)
    if [ "$count" != "$seen" ]; then
      seen=$count; last_progress=$now; t1=$(date +%s.%N)
      # shellcheck disable=SC2086
      c1=$(cpu_ticks $PIDS)
    elif [ $((now - last_progress)) -ge 10 ]; then
      break
    fi
    sleep 0.2
  done
  local done=true
  if kill -0 "$recv" 2>/dev/null; then done=false; kill "$recv" 2>/dev/null || true; fi
  wait "$recv" 2>/dev/null || true
  stop_all
  python3 - "$out/statistics.csv" "$out/receive.log" "$system" "$rate" "$txs" "$t0" "$tl" "$t1" \
    "$((c1 - c0))" "$TICK" "$done" "$idle_ticks" "$PARTIES" "$SHARDS" "$TXSIZE" "$TLS" <<'PY' | tee -a "$RESULTS"
import csv, json, re, sys
(path, rlog, system, rate, txs, t0, tl, t1, ticks, tick, done, idle, parties, shards, size, tls) = sys.argv[1:]
rate, txs, ticks, tick, idle = int(rate), int(txs), int(ticks), int(tick), int(idle)
t0, tl, t1 = float(t0), float(tl), float(t1)
rows = []
try:
    for r in csv.reader(open(path)):
        try: rows.append((int(r[1]), float(r[6])))   # txs in the second, sum of their delays
        except (ValueError, IndexError): pass
except FileNotFoundError:
    pass
received = sum(n for n, _ in rows)
text = re.sub(r"\x1b\[[0-9;]*m", "", open(rlog).read())
m = re.search(r"overall (\d+) were successfully received", text)
if m: received = max(received, int(m.group(1)))
# Throughput over the active seconds: from the first second with txs to the one in which 99 %
# of the sent txs had arrived (a finite run's last txs wait for a batch timeout).
active, cum = [], 0
for n, _ in rows:
    if n == 0 and not active: continue
    active.append(n); cum += n
    if cum >= 0.99 * txs: break
tps = sum(active) / len(active) if active else 0.0
delay = sum(d for _, d in rows) / received if received else None
cpu_s = ticks / tick
print(json.dumps({
    "system": system, "parties": int(parties), "shards": int(shards), "tx_size": int(size), "client_tls": tls,
    "rate": rate, "tps": round(tps, 1), "avg_delay_s": round(delay, 3) if delay is not None else None,
    "txs_sent": txs, "txs_received": received, "all_received": done == "true",
    "load_s": round(tl - t0, 1), "cpu_window_s": round(t1 - t0, 1),
    "node_cpu_s": round(cpu_s, 2), "cpu_us_per_tx": round(cpu_s * 1e6 / received, 1) if received else None,
    "idle_cpu_s_per_s": round(idle / tick / 5, 3),
}))
PY
}

for _ in $(seq 1 "$ROUNDS"); do
  for rate in $RATES; do
    for system in $SYSTEMS; do step "$system" "$rate"; done
  done
done
python3 -c 'import json,sys; print(json.dumps([json.loads(l) for l in open(sys.argv[1]) if l.strip()]))' "$RESULTS"
