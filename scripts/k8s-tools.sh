#!/usr/bin/env bash
# Builds, or finds already built, every piece a single-node Kubernetes on this machine needs,
# for scripts/k8s-e2e.sh (docs/deploy.md, "The tested path").
#
# Usage: bash scripts/k8s-tools.sh            build what is missing (cold: ~20 min on 2 busy cores)
#        bash scripts/k8s-tools.sh --check    exit 0 when everything is cached, 1 otherwise
#
# Go binaries are built from the Go module proxy (no container registry is needed) into a
# per-machine cache, $FABRX_TOOLS (default ~/.cache/fabrx-tools, as scripts/helm-check.sh), one stamp file per
# pinned version, so a second run costs nothing. The Go builds run under `nice -n 19`: they
# take most of an hour on two cores and should not starve anything else.
# Debian packages (etcd, containerd, runc, CNI plugins, iptables, podman, debootstrap) come
# from apt.
set -euo pipefail

TOOLS=${FABRX_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/fabrx-tools}
# Pinned versions. Kubernetes' own commands come from k8s.io/kubernetes; its staging
# modules are published as k8s.io/<name> v0.<minor>.<patch>.
K8S_VERSION=v1.33.13
K8S_STAGING_VERSION=v0.33.13
COREDNS_VERSION=v1.14.7
# (cri-tools is published as sigs.k8s.io/cri-tools from v1.34.0 on; crictl speaks CRI v1
# to any recent runtime.)
CRICTL_VERSION=v1.34.0
HELM_VERSION=v3.22.0
APT_PACKAGES=(etcd-server containerd runc containernetworking-plugins iptables podman debootstrap
  conntrack)

K8S_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

log() { echo "k8s-tools: $*" >&2; }

# A stamp names the version a binary was built from; a binary without its stamp is rebuilt.
cached() { [ -x "$TOOLS/$1" ] && [ -e "$TOOLS/.$1-$2" ]; }
stamp() { rm -f "$TOOLS/.$1-"*; touch "$TOOLS/.$1-$2"; }

missing_apt() {
  local p
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
  done
}

all_cached() {
  local b
  for b in "${K8S_BINARIES[@]}"; do cached "$b" "$K8S_VERSION" || return 1; done
  cached pause "$K8S_VERSION" && cached coredns "$COREDNS_VERSION" \
    && cached crictl "$CRICTL_VERSION" && cached helm "$HELM_VERSION" \
    && [ -z "$(missing_apt)" ]
}

if [ "${1:-}" = --check ]; then
  all_cached
  exit
fi

mkdir -p "$TOOLS"
export GOFLAGS=-buildvcs=false GOTOOLCHAIN=local
# A build cache of its own inside the tools directory: an interrupted cold build resumes
# where it stopped, and it is removed once every binary is cached (it grows to gigabytes
# that no later run reads).
export GOCACHE=$TOOLS/go-build-cache
BUILD=$(mktemp -d "${TMPDIR:-/tmp}/fabrx-k8s-tools.XXXXXX")
trap 'rm -rf "$BUILD"' EXIT

missing=$(missing_apt)
if [ -n "$missing" ]; then
  log "apt-get install $missing"
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing >&2
  # Installing containerd, etcd or prometheus on a systemd host starts their services; the
  # e2e script runs its own instances on its own ports and sockets.
  systemctl disable --now containerd etcd 2>/dev/null || true
fi

# k8s.io/kubernetes cannot be `go install`ed (its go.mod replaces the staging modules with
# local paths), so a small wrapper module requires it and points each staging module at
# its published version.
build_kubernetes() {
  local b need=0
  for b in "${K8S_BINARIES[@]}"; do cached "$b" "$K8S_VERSION" || need=1; done
  [ $need = 1 ] || return 0
  local mod="$BUILD/kubernetes" start=$SECONDS
  mkdir -p "$mod"
  log "Kubernetes $K8S_VERSION: resolving modules"
  (cd "$mod" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" >/dev/null)
  local gomod
  gomod=$(cd "$mod" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
    | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  {
    echo "module fabrx.local/k8s-tools"
    echo "go 1.24.0"
    echo "require k8s.io/kubernetes $K8S_VERSION"
    grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$gomod" \
      | awk -v v="$K8S_STAGING_VERSION" '{ print "replace " $1 " => " $1 " " v }'
  } >"$mod/go.mod"
  {
    echo "//go:build tools"
    echo "package tools"
    echo "import ("
    for b in "${K8S_BINARIES[@]}"; do echo "	_ \"k8s.io/kubernetes/cmd/$b\""; done
    echo ")"
  } >"$mod/tools.go"
  (cd "$mod" && go mod tidy >&2)
  # kubectl refuses a server whose version it cannot parse, so stamp the real one in.
  local v=k8s.io/component-base/version minor
  minor=$(echo "$K8S_VERSION" | cut -d. -f2)
  local ldflags="-s -w -X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor"
  ldflags+=" -X $v.gitTreeState=clean -X $v.buildDate=1970-01-01T00:00:00Z"
  local pkgs=()
  for b in "${K8S_BINARIES[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  log "Kubernetes $K8S_VERSION: building ${K8S_BINARIES[*]} (cold: ~15 min)"
  (cd "$mod" && CGO_ENABLED=0 nice -n 19 go build -trimpath -ldflags "$ldflags" -o "$BUILD/bin/" "${pkgs[@]}")
  for b in "${K8S_BINARIES[@]}"; do
    install -m 0755 "$BUILD/bin/$b" "$TOOLS/$b"
    stamp "$b" "$K8S_VERSION"
  done
  log "Kubernetes $K8S_VERSION: built in $((SECONDS - start)) s"
}

# The pod sandbox ("pause") image's only program, compiled from the source shipped in the
# kubernetes module; the e2e script wraps it in an image because no registry has one.
build_pause() {
  cached pause "$K8S_VERSION" && return 0
  local dir
  dir=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  log "pause from $dir/build/pause/linux/pause.c"
  gcc -Os -static -o "$BUILD/pause" -DVERSION="$K8S_VERSION" "$dir/build/pause/linux/pause.c"
  strip "$BUILD/pause"
  install -m 0755 "$BUILD/pause" "$TOOLS/pause"
  stamp pause "$K8S_VERSION"
}

# One Go command from its module at a pinned version, through a wrapper module so that it
# builds the same way whether or not the module's go.mod has replace directives.
build_go_command() { # name module version package [ldflags]
  local name=$1 module=$2 version=$3 pkg=$4 ldflags="-s -w ${5:-}"
  cached "$name" "$version" && return 0
  local mod="$BUILD/$name" start=$SECONDS
  mkdir -p "$mod"
  log "$name $version: building $pkg"
  if ! (cd "$mod" && CGO_ENABLED=0 GOBIN="$BUILD/bin" nice -n 19 \
    go install -trimpath -ldflags "$ldflags" "$pkg@$version" >&2); then
    log "$name: go install refused the module; building through a wrapper module"
    printf 'module fabrx.local/%s\ngo 1.24.0\n' "$name" >"$mod/go.mod"
    printf '//go:build tools\npackage tools\nimport _ "%s"\n' "$pkg" >"$mod/tools.go"
    (cd "$mod" && go get "$module@$version" >&2 && go mod tidy -e >&2 \
      && CGO_ENABLED=0 nice -n 19 go build -trimpath -ldflags "$ldflags" -o "$BUILD/bin/$name" "$pkg")
  fi
  [ -x "$BUILD/bin/$name" ] || mv "$BUILD/bin/$(basename "$pkg")" "$BUILD/bin/$name"
  install -m 0755 "$BUILD/bin/$name" "$TOOLS/$name"
  stamp "$name" "$version"
  log "$name $version: built in $((SECONDS - start)) s"
}

build_kubernetes
build_pause
build_go_command coredns github.com/coredns/coredns "$COREDNS_VERSION" github.com/coredns/coredns
build_go_command crictl sigs.k8s.io/cri-tools "$CRICTL_VERSION" \
  sigs.k8s.io/cri-tools/cmd/crictl \
  "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION"
build_go_command helm helm.sh/helm/v3 "$HELM_VERSION" helm.sh/helm/v3/cmd/helm \
  "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"

if ! all_cached; then
  log "some tools are still missing in $TOOLS"
  exit 1
fi
[ "${FABRX_TOOLS_KEEP_GO_CACHE:-0}" = 1 ] || { go clean -cache; rm -rf "$GOCACHE"; }
log "all tools cached in $TOOLS"
