#!/usr/bin/env bash
# The single-node cluster of scripts/k8s-e2e.sh, run by it inside private mount, network
# and PID namespaces (`unshare --mount --net --pid --fork --mount-proc`): etcd, the API
# server, controller manager, scheduler, containerd, kubelet, kube-proxy and CoreDNS, with
# the configs k8s-e2e.sh wrote into WORK. Stops them all on SIGTERM.
#
#   bash scripts/k8s-node.sh WORK      (NODE_IP, SERVICE_CIDR, NODE_NAME, FABRX_TOOLS from the caller)
set -euo pipefail
TOOLS=${FABRX_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/fabrx-tools}
: "${NODE_IP:?}" "${SERVICE_CIDR:?}" "${NODE_NAME:?}"
WORK=$1
export PATH=$TOOLS:$PATH
LOGS=$WORK/logs
pids=()
start() { # start NAME COMMAND…: in the background, output to logs/NAME.log
  local name=$1
  shift
  "$@" >"$LOGS/$name.log" 2>&1 &
  pids+=($!)
  echo "$name $!" >>"$WORK/inside.pids"
}
stopping=0
shutdown() {
  [ $stopping = 1 ] && return
  stopping=1
  echo "inside: stopping" >&2
  # The kubelet first (it would restart what is stopped next), then every pod with its
  # containers (their shims exit), then the control plane.
  pkill -TERM -x kubelet 2>/dev/null || true
  sleep 2
  crictl --runtime-endpoint "unix://$WORK/containerd/containerd.sock" --timeout 30s rmp -fa >/dev/null 2>&1 || true
  local p
  for p in $(tac "$WORK/inside.pids" | awk '{print $2}'); do kill -TERM "$p" 2>/dev/null || true; done
  sleep 3
  exit 0
}
trap shutdown TERM INT

# Private views of the directories the components write outside their own (CNI state,
# logs, runtime sockets and locks): tmpfs inside this mount namespace only.
for d in /run /var/lib /var/log; do mount -t tmpfs -o mode=0755 tmpfs "$d"; done
mkdir -p /var/log/pods /var/log/containers /run/netns
# The kernel settings the kubelet requires (protectKernelDefaults): files with the
# values it expects, bind-mounted over /proc/sys in this mount namespace. The host's
# settings are neither read by it nor changed.
mkdir -p "$WORK/sysctl"
for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 \
  kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
  f=$WORK/sysctl/$(echo "${kv%%=*}" | tr / .)
  echo "${kv#*=}" >"$f"
  mount --bind "$f" "/proc/sys/${kv%%=*}"
done
# The network namespace's own settings.
ip link set lo up
echo 1 >/proc/sys/net/ipv4/ip_forward
# The pods' bridge, made before the first pod so that the node's address (the
# kubelet's, the API server's advertised one and CoreDNS's) exists from the start.
ip link add cni0 type bridge
ip addr add "$NODE_IP/24" dev cni0
ip link set cni0 up

start etcd etcd --name e2e --data-dir "$WORK/etcd" \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster e2e=http://127.0.0.1:2380 --log-level warn
until curl -fsS http://127.0.0.1:2379/health >/dev/null 2>&1; do sleep 0.5; done

PKI=$WORK/pki
start kube-apiserver kube-apiserver --etcd-servers=http://127.0.0.1:2379 \
  --bind-address=0.0.0.0 --advertise-address="$NODE_IP" --secure-port=6443 \
  --cert-dir="$PKI/apiserver" --token-auth-file="$PKI/tokens.csv" \
  --authorization-mode=Node,RBAC --service-cluster-ip-range="$SERVICE_CIDR" \
  --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --api-audiences=https://kubernetes.default.svc.cluster.local \
  --enable-admission-plugins=NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultStorageClass,ResourceQuota,PodSecurity \
  --kubelet-preferred-address-types=InternalIP --profiling=false --v=1
until curl -fsSk -H "Authorization: Bearer $(cut -d, -f1 "$PKI/tokens.csv")" \
  https://127.0.0.1:6443/readyz >/dev/null 2>&1; do sleep 1; done
cp "$PKI/apiserver/apiserver.crt" "$PKI/ca.crt"

start kube-controller-manager kube-controller-manager --kubeconfig="$WORK/kubeconfig" \
  --authentication-kubeconfig="$WORK/kubeconfig" --authorization-kubeconfig="$WORK/kubeconfig" \
  --bind-address=127.0.0.1 --secure-port=10257 --leader-elect=false \
  --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
  --use-service-account-credentials=false --controllers='*,-nodeipam,-bootstrapsigner,-tokencleaner' \
  --profiling=false --v=1
start kube-scheduler kube-scheduler --kubeconfig="$WORK/kubeconfig" \
  --authentication-kubeconfig="$WORK/kubeconfig" --authorization-kubeconfig="$WORK/kubeconfig" \
  --bind-address=127.0.0.1 --secure-port=10259 --leader-elect=false --profiling=false --v=1
start containerd containerd --config "$WORK/containerd/config.toml"
until crictl --runtime-endpoint "unix://$WORK/containerd/containerd.sock" version >/dev/null 2>&1; do sleep 0.5; done
start kubelet kubelet --config="$WORK/kubelet/config.yaml" --kubeconfig="$WORK/kubeconfig" \
  --root-dir="$WORK/kubelet/root" --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --v=1
start kube-proxy kube-proxy --config="$WORK/kube-proxy.yaml" --v=1
start coredns coredns -conf "$WORK/Corefile"
echo "inside: started" >&2
touch "$WORK/inside.started"
# Wait for a signal; a component that exits is reported (the kubelet and the control
# plane are not restarted: the run fails on what they stop doing).
declare -A reported=()
while true; do
  for p in "${pids[@]}"; do
    if [ -z "${reported[$p]:-}" ] && ! kill -0 "$p" 2>/dev/null; then
      reported[$p]=1
      echo "inside: $(awk -v p="$p" '$2 == p {print $1}' "$WORK/inside.pids") exited" >&2
    fi
  done
  sleep 2 &
  wait $! || true
done
