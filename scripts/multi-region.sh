#!/usr/bin/env bash
# Multi-region on this machine (issue #15; docs/benchmarks.md "Multi-region (emulated on
# one machine)"): a 4-party × 2-shard network with one committing party, its parties
# placed in 3 emulated regions, cross-region links through `fabrx latency-proxy` with a
# one-way delay per region pair (this kernel has no netem), links inside a region direct.
# Loads at a few rates, then the same rates with every delay 0 through the same proxies
# (the proxies' own cost) and with no proxies at all; prints a table; stops everything.
#
#   bash scripts/multi-region.sh [--ab 20] [--ac 40] [--bc 30] [--rates "500 1000 2000"]
#        [--seconds 10] [--phases "wan zero direct"] [--regions "A B C A"]
#        [--base-port 7600] [--dir DIR] [--no-build]
#
# How: `fabrx up --no-token` then `fabrx down` give the network (config, keys, TLS, data
# directories) and every node's argv (network.json). For each region R it writes
# DIR/regions/R/config/network-config.json: the shared config with the ordering endpoints
# (router, consenter, assembler, batchers) of every party of another region Q replaced
# by 127.0.(10+Q').1:<same port> where Q' is R's index — an address that R's proxy
# process for the pair (R, Q) listens on and forwards, delayed, to the real node. Nothing
# else differs (checked). Each node runs its network.json argv with --network
# pointing to its own region's file; the load client runs in region A with region A's.
# The committer (party 1) and the client are in region A: the committer and token
# sections of the config are left as they are (no other region calls them).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${TMPDIR:-/tmp}/fabrx-multi-region"
BASE_PORT=7600
AB=20 AC=40 BC=30
RATES="500 1000 2000"
SECONDS_PER_RATE=10
PHASES="wan zero direct"
REGIONS="A B C A"          # region of party 1, 2, 3, 4
BUILD=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) DIR="$2"; shift 2 ;;
    --base-port) BASE_PORT="$2"; shift 2 ;;
    --ab) AB="$2"; shift 2 ;;
    --ac) AC="$2"; shift 2 ;;
    --bc) BC="$2"; shift 2 ;;
    --rates) RATES="$2"; shift 2 ;;
    --seconds) SECONDS_PER_RATE="$2"; shift 2 ;;
    --phases) PHASES="$2"; shift 2 ;;
    --regions) REGIONS="$2"; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "unknown flag $1 (see --help)" >&2; exit 2 ;;
  esac
done
for v in "$AB" "$AC" "$BC" "$BASE_PORT" "$SECONDS_PER_RATE" $RATES; do
  [[ "$v" =~ ^[0-9]+$ ]] || { echo "not a number: $v" >&2; exit 2; }
done
for p in $PHASES; do
  [[ "$p" =~ ^(wan|zero|direct)$ ]] || { echo "unknown phase $p (wan, zero, direct)" >&2; exit 2; }
done
read -r -a PARTY_REGION <<< "$REGIONS"
[[ ${#PARTY_REGION[@]} -eq 4 ]] || { echo "--regions needs 4 regions (parties 1..4)" >&2; exit 2; }
[[ "${PARTY_REGION[0]}" == A ]] || { echo "party 1 (the committing party) must be in region A" >&2; exit 2; }
for r in "${PARTY_REGION[@]}"; do
  [[ "$r" =~ ^[ABC]$ ]] || { echo "regions are A, B, C: $r" >&2; exit 2; }
done

need() { command -v "$1" >/dev/null || { echo "needs $1" >&2; exit 1; }; }
need jq; need python3; need setsid; need timeout
log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# --- build ------------------------------------------------------------------------------
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
FABRX="$TARGET/release/fabrx"
if [[ $BUILD == 1 ]]; then
  log "cargo build --release --bin fabrx"
  began=$(date +%s)
  (cd "$ROOT" && cargo build --release --bin fabrx)
  log "built in $(( $(date +%s) - began )) s"
fi
[[ -x "$FABRX" ]] || { echo "no $FABRX (build it, or drop --no-build)" >&2; exit 1; }

# --- processes: every one started here is stopped on exit --------------------------------
PIDS=()
stop_all() {
  local pid alive deadline
  [[ ${#PIDS[@]} -eq 0 ]] && return 0
  for pid in "${PIDS[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true; done
  deadline=$(( $(date +%s) + 10 ))
  while :; do
    alive=0
    for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [[ $alive == 0 || $(date +%s) -ge $deadline ]] && break
    sleep 0.1
  done
  for pid in "${PIDS[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true; done
  PIDS=()
}
trap stop_all EXIT
trap 'exit 130' INT TERM

# start NAME OUTFILE LOGFILE CWD ARGV...: its own session (process group), stdout to OUTFILE.
start() {
  local name="$1" out="$2" logf="$3" cwd="$4"; shift 4
  ( cd "$cwd" && exec setsid "$@" >"$out" 2>>"$logf" </dev/null ) &
  local pid=$!
  PIDS+=("$pid")
  STARTED["$name"]="$pid:$out:$logf"
}
declare -A STARTED

# wait_ready NAME...: each one's ready line on its stdout, 60 s at most.
wait_ready() {
  local name pid out logf deadline
  for name in "$@"; do
    IFS=: read -r pid out logf <<< "${STARTED[$name]}"
    deadline=$(( $(date +%s) + 60 ))
    until grep -q '"ready"' "$out" 2>/dev/null; do
      if ! kill -0 "$pid" 2>/dev/null || [[ $(date +%s) -ge $deadline ]]; then
        echo "$name did not become ready; the end of $logf:" >&2
        tail -n 15 "$logf" >&2 || true
        exit 1
      fi
      sleep 0.05
    done
  done
}

# --- the network ---------------------------------------------------------------------------
if [[ -e "$DIR" ]]; then
  [[ -e "$DIR/.fabrx-multi-region" ]] || { echo "$DIR exists and is not ours: give another --dir" >&2; exit 1; }
  [[ -e "$DIR/net/network.json" ]] && "$FABRX" down --dir "$DIR/net" >/dev/null 2>&1 || true
  rm -rf "$DIR"
fi
mkdir -p "$DIR/results" "$DIR/logs"
touch "$DIR/.fabrx-multi-region"
NET="$DIR/net"
log "fabrx up --dir $NET --seed 1 --base-port $BASE_PORT --no-token (then down: config, keys, argv)"
"$FABRX" up --dir "$NET" --seed 1 --base-port "$BASE_PORT" --no-token --json >"$DIR/logs/up.json"
"$FABRX" down --dir "$NET" --json >/dev/null
NET="$(cd "$NET" && pwd)"
BASE_CONFIG="$NET/config/network-config.json"
for f in "$NET"/data/vcservice-*/vcservice.toml; do cp "$f" "$DIR/$(basename "$(dirname "$f")").toml"; done

# Region configs, proxy routes and the checks (python: JSON in, files out).
python3 - "$NET" "$DIR" "$REGIONS" <<'PY'
import json, os, sys, copy
net, out, regions = sys.argv[1], sys.argv[2], sys.argv[3].split()
base = json.load(open(os.path.join(net, "config", "network-config.json")))
index = {"A": 1, "B": 2, "C": 3}
region_of = {p["id"]: regions[p["id"] - 1] for p in base["parties"]}

def endpoints(party):
    """(field path, endpoint) of a party's ordering nodes."""
    e = [(("router",), party["router"]), (("consenter", "endpoint"), party["consenter"]["endpoint"])]
    if party.get("assembler"):
        e.append((("assembler",), party["assembler"]))
    for i, b in enumerate(party["batchers"]):
        e.append((("batchers", i, "endpoint"), b["endpoint"]))
    return e

def put(obj, path, value):
    for k in path[:-1]:
        obj = obj[k]
    obj[path[-1]] = value

def proxy_addr(seen_from, endpoint):
    host, port = endpoint.rsplit(":", 1)
    assert host == "127.0.0.1", endpoint
    return f"127.0.{10 + index[seen_from]}.1:{port}"

used = sorted(set(regions))
routes = {}  # "AB" -> ["listen=target", ...]
for r in used:
    cfg = copy.deepcopy(base)
    for party in cfg["parties"]:
        q = region_of[party["id"]]
        if q == r:
            continue
        pair = "".join(sorted((r, q)))
        for path, ep in endpoints(party):
            put(party, path, proxy_addr(r, ep))
            routes.setdefault(pair, []).append(f"{proxy_addr(r, ep)}={ep}")
    # Checks: own parties unchanged; others' endpoints are proxies; nothing else differs.
    every = []
    for bp, rp in zip(base["parties"], cfg["parties"]):
        for (path, b_ep), (_, r_ep) in zip(endpoints(bp), endpoints(rp)):
            every.append(r_ep)
            if region_of[bp["id"]] == r:
                assert b_ep == r_ep, (r, bp["id"], path)
            else:
                assert r_ep == proxy_addr(r, b_ep) and r_ep != b_ep, (r, bp["id"], path)
    assert len(every) == len(set(every)), f"region {r}: duplicate endpoints"
    stripped = [copy.deepcopy(c) for c in (base, cfg)]
    for c in stripped:
        for party in c["parties"]:
            for path, _ in endpoints(party):
                put(party, path, None)
    assert stripped[0] == stripped[1], f"region {r}: the config differs beyond endpoints"
    d = os.path.join(out, "regions", r)
    os.makedirs(os.path.join(d, "config"))
    with open(os.path.join(d, "config", "network-config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    # The rest of the network directory is the shared one (keys, TLS, peer keys, listing).
    for name in ("keys", "tls", "network.json", "config/consenter-peer-keys.txt"):
        os.symlink(os.path.join(net, name), os.path.join(d, name))
for pair, rs in sorted(routes.items()):
    with open(os.path.join(out, f"routes-{pair}.txt"), "w") as f:
        f.write("\n".join(rs) + "\n")
    print(f"pair {pair}: {len(rs)} routes", file=sys.stderr)
print("region configs checked: own endpoints unchanged, others proxied, nothing else differs", file=sys.stderr)
PY

delay_of() {  # delay_of PAIR -> ms
  case "$1" in AB) echo "$AB" ;; AC) echo "$AC" ;; BC) echo "$BC" ;; *) echo 0 ;; esac
}

reset_data() {
  rm -rf "$NET/data"
  mkdir -p "$NET/data"
  local name
  for name in $(jq -r '.nodes[].name' "$NET/network.json"); do mkdir -p "$NET/data/$name"; done
  for f in "$DIR"/vcservice-*.toml; do cp "$f" "$NET/data/$(basename "$f" .toml)/vcservice.toml"; done
}

# start_nodes PHASE ROLES...: every node of those roles, with its region's config.
start_nodes() {
  local phase="$1"; shift
  local names=() name party region cfg argv_sh cwd i
  for name in $(jq -r --arg roles " $* " '.nodes[] | select(.role as $r | $roles | contains(" " + $r + " ")) | .name' "$NET/network.json"); do
    party=$(jq -r --arg n "$name" '.nodes[] | select(.name == $n) | .party' "$NET/network.json")
    cwd=$(jq -r --arg n "$name" '.nodes[] | select(.name == $n) | .cwd' "$NET/network.json")
    argv_sh=$(jq -r --arg n "$name" '.nodes[] | select(.name == $n) | .argv | @sh' "$NET/network.json")
    eval "argv=($argv_sh)"
    region="${PARTY_REGION[$((party - 1))]}"
    cfg="$BASE_CONFIG"
    [[ $phase != direct ]] && cfg="$DIR/regions/$region/config/network-config.json"
    for i in "${!argv[@]}"; do [[ "${argv[$i]}" == "$BASE_CONFIG" ]] && argv[$i]="$cfg"; done
    start "$name" "$NET/logs/$name.out" "$NET/logs/$name.log" "$cwd" "${argv[@]}"
    names+=("$name")
  done
  wait_ready "${names[@]}"
  # Each node listens where network.json (the shared config) says: its own endpoint.
  local want got
  for name in "${names[@]}"; do
    want=$(jq -r --arg n "$name" '.nodes[] | select(.name == $n) | .listen' "$NET/network.json")
    got=$(grep -m1 '"ready"' "$NET/logs/$name.out" | jq -r '.listen // empty')
    [[ -z "$got" || "$got" == "$want" ]] || { echo "$name listens on $got, not $want" >&2; exit 1; }
  done
}

start_proxies() {
  local delay_mode="$1" f pair delay args=()
  for f in "$DIR"/routes-*.txt; do
    pair=$(basename "$f" .txt); pair=${pair#routes-}
    delay=0
    [[ $delay_mode == wan ]] && delay=$(delay_of "$pair")
    args=()
    while read -r route; do args+=(--route "$route"); done < "$f"
    start "proxy-$pair" "$DIR/logs/proxy-$delay_mode-$pair.out" "$DIR/logs/proxy-$delay_mode-$pair.log" \
      "$DIR" "$FABRX" latency-proxy --delay-ms "$delay" "${args[@]}"
    wait_ready "proxy-$pair"
    log "proxy $pair: $(( ${#args[@]} / 2 )) routes, one-way delay $delay ms"
  done
}

run_phase() {
  local phase="$1" lgdir rate json
  log "phase $phase: fresh data, starting the network"
  reset_data
  [[ $phase != direct ]] && start_proxies "$phase"
  start_nodes "$phase" consenter batcher
  start_nodes "$phase" router assembler
  start_nodes "$phase" vcservice sigverifier
  start_nodes "$phase" sidecar
  log "phase $phase: ${#PIDS[@]} processes ready"
  lgdir="$NET"
  [[ $phase != direct ]] && lgdir="$DIR/regions/A"
  for rate in $RATES; do
    json="$DIR/results/$phase-$rate.json"
    log "phase $phase: $rate tx/s for $SECONDS_PER_RATE s"
    timeout 300 "$FABRX" loadgen --target network --network "$lgdir" \
      --txs $(( rate * SECONDS_PER_RATE )) --rate "$rate" --tx-size 300 --block-size 1000 \
      --max-in-flight $(( rate * 4 )) --drain 30 --json \
      >"$json" 2>"$DIR/results/$phase-$rate.log" \
      || { log "loadgen failed ($phase, $rate): $(tail -n 3 "$DIR/results/$phase-$rate.log")"; echo '{}' >"$json"; }
  done
  if [[ $phase != direct ]]; then
    log "phase $phase: $(ss -Htn state established '( dst 127.0.11.1 or dst 127.0.12.1 or dst 127.0.13.1 )' \
      | wc -l) connections open through the proxies"
  fi
  stop_all
  if [[ $phase != direct ]]; then
    for f in "$DIR"/logs/proxy-"$phase"-*.log; do
      log "$(basename "$f" .log): $(grep -o 'connections=[0-9]* bytes=[0-9]*' "$f" | tail -n 1)"
    done
  fi
}

BEGAN=$(date +%s)
for phase in $PHASES; do run_phase "$phase"; done

# --- the table -----------------------------------------------------------------------------
{
  echo "regions: party 1 ${PARTY_REGION[0]}, 2 ${PARTY_REGION[1]}, 3 ${PARTY_REGION[2]}, 4 ${PARTY_REGION[3]}; one-way A–B $AB ms, A–C $AC ms, B–C $BC ms; committer and client in A"
  echo
  echo "| phase | offered tx/s | committed tx/s | p50 ms | p90 ms | p99 ms | never confirmed | refused |"
  echo "|---|---|---|---|---|---|---|---|"
  for phase in $PHASES; do
    for rate in $RATES; do
      jq -r --arg phase "$phase" --arg rate "$rate" \
        '"| \($phase) | \($rate) | \(.goodput_tps // "-") | \(.p50_ms // "-") | \(.p90_ms // "-") | \(.p99_ms // "-") | \(.never_confirmed // "-") | \(.refused // "-") |"' \
        "$DIR/results/$phase-$rate.json"
    done
  done
} | tee "$DIR/results/table.md"
log "done in $(( $(date +%s) - BEGAN )) s after the build; results and logs under $DIR"
