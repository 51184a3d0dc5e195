#!/usr/bin/env bash
# The chart on a real Kubernetes, end to end, on this machine (docs/deploy.md "The tested
# path"):
#
#   bash scripts/k8s-e2e.sh [--keep] [--txs N] [--binary PATH]
#
#  1. the Kubernetes pieces: scripts/k8s-tools.sh (cached per machine; ~20 min cold);
#  2. the image: a release `fabrx`, scripts/image.sh (podman, a debootstrap base when no
#     registry answers), and a pause image built from the kubernetes sources;
#  3. a single-node cluster (scripts/k8s-node.sh): etcd, kube-apiserver, controller
#     manager, scheduler, containerd, kubelet, kube-proxy (iptables) and CoreDNS, all in
#     private mount, network and PID namespaces (`unshare`), so that nothing it does
#     reaches the host: its mounts, bridge, veths and iptables rules live and die with the
#     namespaces, and the kernel settings the kubelet insists on are plain files
#     bind-mounted over /proc/sys inside them;
#  4. every example values file installed into its API server (objects admitted), then
#     uninstalled;
#  5. `fabrx network generate --k8s` for 4 parties, one Helm release per party in its own
#     namespace (docs/deploy.md section 2), every pod Ready;
#  6. `helm test` (a load Job: every tx committed); `helm upgrade` of party 1 to the same
#     values, `helm test` again; a consenter pod killed, back and deciding with the
#     others, `helm test`; a batcher pod killed, back and persisting batches, `helm test`;
#     party 4's router scaled to 0 and back (`replicas`), `helm test`;
#  7. the cluster stopped, and a check that it left no process, mount, cgroup, network
#     interface, iptables rule or changed kernel setting behind.
#
# It needs root. --keep leaves the cluster running, also after a failure (it prints how
# to reach and stop it).
# The work directory ($FABRX_E2E_DIR, default a new one under /var/tmp) is removed at
# the end unless the run failed (then its logs stay). Prints each phase with its time.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS=${FABRX_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/fabrx-tools}
SUBNET_PREFIX=10.244.0
NODE_IP=$SUBNET_PREFIX.1
SERVICE_CIDR=10.96.0.0/16
PARTIES=4
SHARDS=1
NODE_NAME=fabrx-e2e

KEEP=0
TXS=2000
BIN=""
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) KEEP=1; shift ;;
    --txs) TXS=$2; shift 2 ;;
    --binary) BIN=$2; shift 2 ;; # a release fabrx built already (else cargo builds one)
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "k8s-e2e: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "k8s-e2e: needs root (namespaces, mounts, cgroups)" >&2; exit 2; }

T0=$SECONDS
phase_start=$SECONDS
phases=()
phase() { # phase NAME: ends the previous phase (recording its time) and starts NAME
  local now=$SECONDS
  [ -n "${phase_name:-}" ] && phases+=("$(printf '%-48s %4d s' "$phase_name" $((now - phase_start)))")
  phase_name=$1
  phase_start=$now
  echo "== [$((now - T0)) s] $1"
}
fail() { echo "k8s-e2e: FAIL: $*" >&2; exit 1; }

phase "tools (scripts/k8s-tools.sh)"
bash scripts/k8s-tools.sh
export PATH=$TOOLS:$PATH

WORK=${FABRX_E2E_DIR:-$(mktemp -d /var/tmp/fabrx-k8s-e2e.XXXXXX)}
mkdir -p "$WORK"/{logs,pki/apiserver,containerd,kubelet/root,cni,cni-ipam,pv,helm}
WORK=$(cd "$WORK" && pwd)
SOCK=$WORK/containerd/containerd.sock
CGROUP_ROOT=fabrx-e2e-$$
INSIDE_PID=""
ok=0

# What the host looks like before: compared after the cluster is gone.
host_state() {
  echo "## interfaces"; ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort
  echo "## iptables"; for t in filter nat mangle raw; do iptables -t "$t" -S 2>/dev/null; done
  echo "## mounts"; awk '{print $5}' /proc/self/mountinfo | sort
  echo "## sysctls"
  for s in vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys \
    kernel/keys/root_maxbytes net/ipv4/ip_forward net/bridge/bridge-nf-call-iptables \
    net/netfilter/nf_conntrack_max net/ipv4/conf/all/route_localnet; do
    [ -e "/proc/sys/$s" ] && echo "$s=$(cat "/proc/sys/$s")"
  done
  echo "## cgroups"; ls -d /sys/fs/cgroup/*/fabrx-e2e-* 2>/dev/null || true
}
host_state >"$WORK/host-before.txt"

# The processes of our PID namespace, seen from the host.
ns_processes() {
  [ -n "${PIDNS:-}" ] || return 0
  local p
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/ns/pid" 2>/dev/null)" = "$PIDNS" ] && echo "${p#/proc/}"
  done
  return 0
}

stop_cluster() {
  [ -n "$INSIDE_PID" ] || return 0
  echo "== stopping the cluster"
  kill -TERM "$INSIDE_PID" 2>/dev/null || true
  local i
  for i in $(seq 60); do kill -0 "$INSIDE_PID" 2>/dev/null || break; sleep 1; done
  kill -KILL "$INSIDE_PID" 2>/dev/null || true
  # When the namespace's first process ends, the kernel ends every other one in it.
  for i in $(seq 60); do [ -z "$(ns_processes)" ] && break; sleep 1; done
  wait "$UNSHARE_PID" 2>/dev/null || true
  INSIDE_PID=""
  # The kubelet's cgroups (cgroupfs driver) are the host's: remove them, deepest first,
  # once their processes are gone.
  local c
  for c in /sys/fs/cgroup/*/"$CGROUP_ROOT"; do
    [ -d "$c" ] || continue
    for i in $(seq 30); do
      find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true
      [ -d "$c" ] || break
      sleep 1
    done
  done
}

finish() {
  local rc=$?
  trap - EXIT
  if [ $KEEP = 1 ] && [ -n "$INSIDE_PID" ]; then
    echo "== the cluster keeps running (--keep): kubectl with"
    echo "   nsenter -t $INSIDE_PID -n $TOOLS/kubectl --kubeconfig $WORK/kubeconfig get pods -A"
    echo "   stop it with: kill -TERM $INSIDE_PID; then remove /sys/fs/cgroup/*/$CGROUP_ROOT and $WORK"
    exit 0
  fi
  phase "stop the cluster and check the host"
  stop_cluster
  host_state >"$WORK/host-after.txt"
  left=""
  [ -n "$(ns_processes)" ] && left+=" processes:$(ns_processes | tr '\n' ' ')"
  if ! diff -u "$WORK/host-before.txt" "$WORK/host-after.txt" >"$WORK/host-diff.txt"; then
    left+=" host-state:$WORK/host-diff.txt"
    cat "$WORK/host-diff.txt" >&2
  fi
  phase "done"
  printf '%s\n' "${phases[@]}"
  if [ -n "$left" ]; then
    echo "k8s-e2e: FAIL: left behind:$left" >&2
    rc=1
  else
    echo "k8s-e2e: nothing left behind (processes, mounts, cgroups, interfaces, iptables, sysctls)"
  fi
  if [ $rc = 0 ] && [ $ok = 1 ]; then
    rm -rf "$WORK"
    echo "k8s-e2e: PASSED in $((SECONDS - T0)) s"
  else
    # Keep the logs, drop the bulk (images, volumes, etcd).
    rm -rf "$WORK/containerd/root" "$WORK/etcd" "$WORK/pv" "$WORK"/*.tar 2>/dev/null || true
    echo "k8s-e2e: FAILED after $((SECONDS - T0)) s; logs in $WORK/logs" >&2
    [ $rc = 0 ] && rc=1
  fi
  exit $rc
}
trap finish EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------------------
phase "fabrx release binary (cargo build --release)"
if [ -z "$BIN" ]; then
  cargo build --release --locked -p fabrx
  BIN=${CARGO_TARGET_DIR:-target}/release/fabrx
fi
[ -x "$BIN" ] || fail "no $BIN"

phase "image (scripts/image.sh) and pause image"
bash scripts/image.sh --binary "$BIN" --tag localhost/fabrx:e2e >"$WORK/logs/image.log" 2>&1 \
  || { tail -20 "$WORK/logs/image.log"; fail "scripts/image.sh"; }
tail -1 "$WORK/logs/image.log"
export CONTAINERS_CONF=${XDG_CACHE_HOME:-$HOME/.cache}/fabrx-podman/containers.conf
pm() { podman --storage-driver vfs "$@"; }
mkdir -p "$WORK/pause"
cp "$TOOLS/pause" "$WORK/pause/pause"
printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$WORK/pause/Dockerfile"
pm build -q --network host -t localhost/fabrx-pause:e2e "$WORK/pause" >/dev/null
pm save -q --format docker-archive -o "$WORK/fabrx-image.tar" localhost/fabrx:e2e
pm save -q --format docker-archive -o "$WORK/pause-image.tar" localhost/fabrx-pause:e2e
pm rmi -f localhost/fabrx-pause:e2e localhost/fabrx:e2e >/dev/null 2>&1 || true
pm image prune -f >/dev/null 2>&1 || true # the prebuilt stage's layer (the base stays cached)

phase "network config (fabrx network generate --k8s)"
"$BIN" network generate --parties $PARTIES --shards $SHARDS --dir "$WORK/net" --k8s 'fabrx-party{party}' \
  >"$WORK/logs/generate.log"

# ---------------------------------------------------------------------------------------
phase "cluster: configs"
TOKEN=$(openssl rand -hex 24)
echo "$TOKEN,admin,admin,\"system:masters\"" >"$WORK/pki/tokens.csv"
openssl genrsa -out "$WORK/pki/sa.key" 2048 2>/dev/null
openssl rsa -in "$WORK/pki/sa.key" -pubout -out "$WORK/pki/sa.pub" 2>/dev/null
cat >"$WORK/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: e2e
    cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}
users:
  - name: admin
    user: {token: "$TOKEN"}
contexts:
  - name: e2e
    context: {cluster: e2e, user: admin}
current-context: e2e
EOF
chmod 0600 "$WORK/kubeconfig"
cat >"$WORK/containerd/config.toml" <<EOF
version = 2
root = "$WORK/containerd/root"
state = "$WORK/containerd/state"
[grpc]
  address = "$SOCK"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/fabrx-pause:e2e"
  # root here cannot lower a process's oom_score_adj
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "${FABRX_E2E_SNAPSHOTTER:-overlayfs}"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$WORK/cni"
EOF
cat >"$WORK/cni/10-fabrx-e2e.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "fabrx-e2e", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$WORK/cni-ipam",
            "ranges": [[{"subnet": "$SUBNET_PREFIX.0/24", "gateway": "$NODE_IP"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}}]}
EOF
cat >"$WORK/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
readOnlyPort: 0
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP_ROOT
failSwapOn: false
protectKernelDefaults: true
resolvConf: ""
clusterDNS: [$NODE_IP]
clusterDomain: cluster.local
containerRuntimeEndpoint: unix://$SOCK
podLogsDir: $WORK/pod-logs
# This machine's disk is shared and mostly full: evict nothing and collect no images.
evictionHard: {memory.available: 100Mi, nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
EOF
cat >"$WORK/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $WORK/kubeconfig}
mode: iptables
clusterCIDR: $SUBNET_PREFIX.0/24
hostnameOverride: $NODE_NAME
bindAddress: 0.0.0.0
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# Leave the kernel's conntrack settings alone (some are global, not per namespace).
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
# Without the bridge netfilter hook, a reply from a pod on the same bridge would bypass
# the Service's NAT: masquerade every Service connection so it returns through the node.
iptables: {masqueradeAll: true}
EOF
cat >"$WORK/Corefile" <<EOF
cluster.local:53 in-addr.arpa:53 {
  bind $NODE_IP
  errors
  kubernetes cluster.local in-addr.arpa {
    kubeconfig $WORK/kubeconfig e2e
    pods insecure
  }
  cache 5
}
.:53 {
  bind $NODE_IP
  errors
}
EOF
# The kubelet's cgroup root, in every hierarchy (cpuset needs its CPUs and memory nodes).
for c in /sys/fs/cgroup/*/; do
  [ -d "$c" ] || continue
  mkdir -p "$c$CGROUP_ROOT"
  if [ -e "${c}cpuset.cpus" ]; then
    cat "${c}cpuset.cpus" >"$c$CGROUP_ROOT/cpuset.cpus"
    cat "${c}cpuset.mems" >"$c$CGROUP_ROOT/cpuset.mems"
  fi
done

phase "cluster: start (etcd, API server, controllers, containerd, kubelet, kube-proxy, CoreDNS)"
unshare --mount --net --pid --fork --mount-proc --propagation private \
  env FABRX_TOOLS="$TOOLS" NODE_IP="$NODE_IP" SERVICE_CIDR="$SERVICE_CIDR" NODE_NAME="$NODE_NAME" \
  bash scripts/k8s-node.sh "$WORK" >"$WORK/logs/inside.log" 2>&1 &
UNSHARE_PID=$!
for i in $(seq 50); do
  INSIDE_PID=$(pgrep -P "$UNSHARE_PID" | head -1 || true)
  [ -n "$INSIDE_PID" ] && break
  sleep 0.2
done
[ -n "$INSIDE_PID" ] || fail "the namespaces did not start (logs/inside.log)"
PIDNS=$(readlink "/proc/$INSIDE_PID/ns/pid")
k() { nsenter -t "$INSIDE_PID" -n -- "$TOOLS/kubectl" --kubeconfig "$WORK/kubeconfig" "$@"; }
helm_() {
  nsenter -t "$INSIDE_PID" -n -- env HELM_CACHE_HOME="$WORK/helm/cache" HELM_CONFIG_HOME="$WORK/helm/config" \
    HELM_DATA_HOME="$WORK/helm/data" "$TOOLS/helm" --kubeconfig "$WORK/kubeconfig" "$@"
}
wait_for() { # wait_for SECONDS WHAT COMMAND…
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || fail "timed out waiting for $what"
    kill -0 "$INSIDE_PID" 2>/dev/null || fail "the cluster stopped (logs in $WORK/logs)"
    sleep 2
  done
}
wait_for 180 "the cluster's processes" test -e "$WORK/inside.started"
node_ready() { [ "$(k get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]; }
wait_for 180 "node $NODE_NAME Ready" node_ready
k get nodes -o wide

phase "cluster: images into containerd"
ctr -a "$SOCK" -n k8s.io images import "$WORK/pause-image.tar" >/dev/null
ctr -a "$SOCK" -n k8s.io images import "$WORK/fabrx-image.tar" >/dev/null
rm -f "$WORK"/*.tar
ctr -a "$SOCK" -n k8s.io images ls -q | grep -E 'localhost/fabrx(-pause)?:e2e' || fail "images not imported"

# ---------------------------------------------------------------------------------------
phase "example values files installed into the API server"
# Every example values file with its public fixture, installed for real (the API server
# validates and admits every object), then uninstalled. Their keys were thrown away, so
# their pods cannot start: only the objects are checked here. The ServiceMonitor kind
# needs its CRD (a minimal one: prometheus-operator is not installed).
crd() { # crd KIND PLURAL: a minimal prometheus-operator CRD (any spec accepted)
  cat <<EOF
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: $2.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: $1, plural: $2, singular: $(echo "$1" | tr 'A-Z' 'a-z'), listKind: ${1}List}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
EOF
}
{ crd ServiceMonitor servicemonitors; crd PrometheusRule prometheusrules; } | k apply -f - >/dev/null
wait_for 60 "the ServiceMonitor and PrometheusRule CRDs" k get servicemonitors,prometheusrules -A
examples=("helm/fabrx/values-local.yaml examples/k8s-local/network-config.json fabrx")
for p in 1 2 3 4; do
  examples+=("examples/multi-region/party$p.yaml examples/multi-region/network-config.json fabrx-party$p")
done
for e in "${examples[@]}"; do
  read -r file config ns <<<"$e"
  # (A namespace of the same name may still be terminating: retried until created.)
  wait_for 180 "namespace $ns created" k create namespace "$ns"
  helm_ install example helm/fabrx -n "$ns" -f "$file" --set-file network.config="$config" \
    >"$WORK/logs/example-$ns.log" 2>&1 || { cat "$WORK/logs/example-$ns.log"; fail "helm install $file"; }
  n=$(k -n "$ns" get all,configmap,networkpolicy,pdb,servicemonitor -l app.kubernetes.io/instance=example --no-headers 2>/dev/null | wc -l)
  echo "k8s-e2e: $file: installed, $n objects admitted"
  helm_ uninstall example -n "$ns" >/dev/null
  k delete namespace "$ns" --wait=false >/dev/null
done
namespaces_gone() { # a failed listing is not "gone": the next install would race a deletion
  local listed
  listed=$(k get namespaces --no-headers) || return 1
  ! grep -q '^fabrx' <<<"$listed"
}
wait_for 180 "the examples' namespaces to go" namespaces_gone

# ---------------------------------------------------------------------------------------
phase "install: 4 parties, one release each (docs/deploy.md)"
# Storage: a StorageClass without a provisioner and one hostPath PersistentVolume per
# claim the StatefulSets will make, owned by the image's user.
k apply -f - >/dev/null <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: fabrx-e2e}
provisioner: kubernetes.io/no-provisioner
reclaimPolicy: Retain
volumeBindingMode: Immediate
EOF
pv() { # pv NAMESPACE CLAIM
  local dir=$WORK/pv/$1/$2
  mkdir -p "$dir"
  chown 10001:10001 "$dir"
  cat <<EOF
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: $1-$2}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: fabrx-e2e
  claimRef: {namespace: $1, name: $2}
  hostPath: {path: $dir, type: Directory}
EOF
}
values() { # values PARTY: this run's values for party p
  local p=$1
  cat <<EOF
party: $p
shards: $SHARDS
network: {parties: $PARTIES, namespacePattern: "fabrx-party{party}"}
image: {repository: localhost/fabrx, tag: e2e, pullPolicy: Never}
persistence: {storageClass: fabrx-e2e}
metrics: {enabled: true, serviceMonitor: {enabled: true}, prometheusRule: {enabled: $([ "$p" = 1 ] && echo true || echo false)}}
grafana: {dashboard: {enabled: $([ "$p" = 1 ] && echo true || echo false)}}
extraEnv: [{name: RUST_LOG, value: info}]
probes: {startup: {periodSeconds: 2, failureThreshold: 150}}
tests: {txs: $TXS, deadlineSeconds: 600}
roles:
  router: {resources: &small {requests: {cpu: 10m, memory: 32Mi}, limits: {cpu: "1", memory: 512Mi}}}
  batcher: {storage: 1Gi, resources: *small}
  consenter: {storage: 1Gi, resources: *small}
  assembler: {storage: 1Gi, resources: *small}
  sidecar: {storage: 1Gi, resources: *small, enabled: $([ "$p" = 1 ] && echo true || echo false)}
  sigverifier: {resources: *small, enabled: $([ "$p" = 1 ] && echo true || echo false)}
  vcservice: {storage: 1Gi, resources: *small, enabled: $([ "$p" = 1 ] && echo true || echo false)}
  query: {resources: *small, enabled: $([ "$p" = 1 ] && echo true || echo false)}
  endorser: {resources: *small, enabled: $([ "$p" = 1 ] && echo true || echo false), indices: [1, 5]}
loadgen: {resources: *small}
EOF
}
for p in $(seq $PARTIES); do
  ns=fabrx-party$p
  values "$p" >"$WORK/party$p.yaml"
  {
    for c in consenter assembler $(seq 0 $((SHARDS - 1)) | sed 's/^/batcher-/'); do pv "$ns" "data-$c-0"; done
    if [ "$p" = 1 ]; then pv "$ns" data-sidecar-0; pv "$ns" data-vcservice-0; fi
  } | k apply -f - >/dev/null
  wait_for 180 "namespace $ns created" k create namespace "$ns"
  k apply -f "$WORK/net/k8s/party$p/secret.yaml" >/dev/null
  helm_ install fabrx helm/fabrx -n "$ns" -f "$WORK/party$p.yaml" \
    --set-file network.config="$WORK/net/k8s/shared/network-config.json" >"$WORK/logs/helm-install-$p.log"
done
sed -n '/^NOTES/,$p' "$WORK/logs/helm-install-1.log" | head -20

all_ready() { # every fabrx pod of every party Running and Ready
  local out
  out=$(k get pods -A -l "$NODES" --no-headers \
    -o custom-columns=NS:.metadata.namespace,NAME:.metadata.name,READY:.status.containerStatuses[0].ready)
  [ -n "$out" ] && ! echo "$out" | awk '$3 != "true"' | grep -q .
}
# The nodes' pods (the load Jobs' pods carry no role label).
NODES=app.kubernetes.io/part-of=fabrx,fabrx.io/role
expected_pods=$((PARTIES * (3 + SHARDS) + 3 + 1 + 2))
count_pods() { [ "$(k get pods -A -l "$NODES" --no-headers | wc -l)" -ge $expected_pods ]; }
phase "install: every pod Ready"
wait_for 600 "$expected_pods pods" count_pods
wait_for 900 "every pod Ready" all_ready
k get pods -A -o wide | grep fabrx-party
restarts=$(k get pods -A -l "$NODES" -o jsonpath='{range .items[*]}{.status.containerStatuses[0].restartCount}{"\n"}{end}' | awk '{s += $1} END {print s + 0}')
echo "k8s-e2e: $expected_pods pods Ready ($restarts container restarts while the parties came up)"

helm_test() { # helm_test WHY: `helm test` on party 1 (the load Job), its summary shown
  echo "-- helm test ($1)"
  if ! helm_ test fabrx -n fabrx-party1 --timeout 10m >"$WORK/logs/helm-test.log" 2>&1; then
    cat "$WORK/logs/helm-test.log"
    k -n fabrx-party1 logs job/fabrx-test-load --tail 20 || true
    fail "helm test ($1)"
  fi
  k -n fabrx-party1 logs job/fabrx-test-load --tail 2
}

phase "helm test: a load, every tx committed"
helm_test "fresh network"

phase "helm upgrade party 1 to the same values, helm test"
helm_ upgrade fabrx helm/fabrx -n fabrx-party1 -f "$WORK/party1.yaml" \
  --set-file network.config="$WORK/net/k8s/shared/network-config.json" >"$WORK/logs/helm-upgrade.log"
sleep 5
wait_for 300 "every pod Ready after the upgrade" all_ready
helm_test "after helm upgrade"

kill_and_recover() { # kill_and_recover NAMESPACE POD
  local ns=$1 pod=$2 uid
  uid=$(k -n "$ns" get pod "$pod" -o jsonpath='{.metadata.uid}')
  k -n "$ns" delete pod "$pod" --grace-period=0 --force >/dev/null 2>&1
  new_pod() { [ "$(k -n "$ns" get pod "$pod" -o jsonpath='{.metadata.uid}')" != "$uid" ]; }
  wait_for 120 "a new $ns/$pod" new_pod
  pod_ready() { [ "$(k -n "$ns" get pod "$pod" -o jsonpath='{.status.containerStatuses[0].ready}')" = true ]; }
  wait_for 300 "$ns/$pod Ready again" pod_ready
}
metric() { # metric NAMESPACE POD NAME: the sum of NAME's series on the pod's /metrics
  local ip
  ip=$(k -n "$1" get pod "$2" -o jsonpath='{.status.podIP}')
  nsenter -t "$INSIDE_PID" -n -- curl -fsS --max-time 5 "http://$ip:9090/metrics" \
    | awk -v m="$3" '$1 == m || index($1, m "{") == 1 {s += $2} END {printf "%d\n", s}'
}
consenters_agree() { # every consenter's newest decision is the newest of them all
  local p d max=0 all=""
  for p in $(seq $PARTIES); do
    d=$(metric "fabrx-party$p" consenter-0 fabrx_consenter_last_decision) || return 1
    all+=" $d"
    [ "$d" -gt $max ] && max=$d
  done
  echo "consenters' last decisions:$all"
  for d in $all; do [ "$d" = $max ] || return 1; done
}

phase "kill party 2's consenter pod, recover, helm test"
before=$(metric fabrx-party2 consenter-0 fabrx_consenter_last_decision)
kill_and_recover fabrx-party2 consenter-0
helm_test "after a consenter was killed"
# Recovered, not only running: the restarted consenter decides with the others again.
wait_for 120 "the restarted consenter to reach the others' last decision" consenters_agree
consenters_agree
after=$(metric fabrx-party2 consenter-0 fabrx_consenter_last_decision)
[ "$after" -gt "$before" ] || fail "party 2's consenter is at decision $after, it was at $before before it was killed"
echo "k8s-e2e: party 2's consenter: decision $before before it was killed, $after after"

phase "kill party 1's batcher pod, recover, helm test"
kill_and_recover fabrx-party1 batcher-0-0
helm_test "after a batcher was killed"
# Recovered: the restarted batcher persisted batches of the load (cut or accepted).
persisted=$(metric fabrx-party1 batcher-0-0 fabrx_batcher_batches_persisted_total)
[ "$persisted" -gt 0 ] || fail "party 1's restarted batcher persisted no batch during the load"
echo "k8s-e2e: party 1's restarted batcher persisted $persisted batches of the load"

phase "replicas 0 stops party 4's router, replicas 1 brings it back, helm test"
router_pods() { [ "$(k -n fabrx-party4 get pods -l app.kubernetes.io/component=router --no-headers 2>/dev/null | wc -l)" = "$1" ]; }
helm_ upgrade fabrx helm/fabrx -n fabrx-party4 -f "$WORK/party4.yaml" --set roles.router.replicas=0 \
  --set-file network.config="$WORK/net/k8s/shared/network-config.json" >/dev/null
wait_for 120 "party 4's router pods to go" router_pods 0
[ "$(k -n fabrx-party4 get deployment router -o jsonpath='{.spec.replicas}')" = 0 ] || fail "router replicas not 0"
helm_ upgrade fabrx helm/fabrx -n fabrx-party4 -f "$WORK/party4.yaml" \
  --set-file network.config="$WORK/net/k8s/shared/network-config.json" >/dev/null
wait_for 120 "party 4's router pod" router_pods 1
wait_for 300 "every pod Ready" all_ready
helm_test "after party 4's router was stopped and started"
k -n fabrx-party1 get prometheusrule,servicemonitor --no-headers | awk '{print "k8s-e2e: admitted " $1}'
ok=1
