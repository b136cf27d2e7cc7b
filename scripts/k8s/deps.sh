#!/usr/bin/env bash
# Installs what the single-machine Kubernetes of `make test-k8s`
# (scripts/k8s/) needs beyond kube.sh's control plane and helm:
#   - Debian: containerd, runc, buildah, CNI plugins, busybox-static (pause
#     image), iptables, conntrack, socat, etcd-server (the managed etcd
#     image is built from Debian's etcd binary);
#   - kubelet, kube-scheduler and kube-proxy from the same k8s.io/kubernetes
#     module and replace lines as kube.sh (separate module dir, shared Go
#     build cache), and CoreDNS.
# Binaries land in $SHARDHOUSE_CACHE/bin with version stamps; a current
# binary is not rebuilt. `deps.sh apt` installs the Debian packages only
# (what `make images` needs).
set -euo pipefail

K8S_VERSION=1.34.4
COREDNS_VERSION=1.12.4
CACHE=${SHARDHOUSE_CACHE:-$HOME/.cache/shardhouse}
BIN=$CACHE/bin
export PATH=$HOME/go/bin:/usr/local/go/bin:$PATH

log() { echo "[k8s/deps] $*" >&2; }
mkdir -p "$BIN"

need_apt=()
for pkg in containerd runc buildah containernetworking-plugins busybox-static iptables conntrack socat etcd-server libpython3.11 binutils curl openssl; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
  log "apt-get install ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

[ "${1:-}" = apt ] && exit 0
command -v go >/dev/null || { log "go not found: install Go >= 1.24 (https://go.dev/dl)"; exit 1; }

current() { [ -x "$BIN/$1" ] && [ "$(cat "$BIN/.$1.version" 2>/dev/null)" = "$2" ]; }

k8s_build() {
  local cmds=()
  for c in kubelet kube-scheduler kube-proxy; do
    current "$c" "$K8S_VERSION" || cmds+=("$c")
  done
  ((${#cmds[@]})) || return 0
  log "building ${cmds[*]} v$K8S_VERSION from the Go module proxy (kubelet ~4 min cold)"
  local mod=$CACHE/kube-node-build
  mkdir -p "$mod"
  cd "$mod"
  # Same module as kube.sh: k8s.io/kubernetes with every ./staging/...
  # replace pinned to the published v0.x release.
  cat >go.mod <<GOMOD
module shardhouse.dev/kube-node-build

go 1.24

require k8s.io/kubernetes v$K8S_VERSION
GOMOD
  GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" >/dev/null
  local kmod
  kmod=$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/v$K8S_VERSION.mod
  {
    echo
    echo "replace ("
    grep -E '=> ./staging/src/' "$kmod" | awk -v v="v0.${K8S_VERSION#1.}" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
  } >>go.mod
  cat >tools.go <<'GOSRC'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GOSRC
  GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || true
  local minor=${K8S_VERSION#1.}
  minor=${minor%%.*}
  local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  for c in "${cmds[@]}"; do
    local t0=$SECONDS
    GOFLAGS=-mod=mod nice go build -ldflags "$ldflags" -o "$BIN/$c.tmp" "k8s.io/kubernetes/cmd/$c"
    mv "$BIN/$c.tmp" "$BIN/$c"
    echo "$K8S_VERSION" >"$BIN/.$c.version"
    log "installed $BIN/$c ($((SECONDS - t0)) s)"
  done
}

coredns_build() {
  current coredns "$COREDNS_VERSION" && return 0
  log "building coredns v$COREDNS_VERSION (~4.5 min cold)"
  local t0=$SECONDS
  GOBIN=$BIN nice go install -ldflags "-s -w" "github.com/coredns/coredns@v$COREDNS_VERSION"
  echo "$COREDNS_VERSION" >"$BIN/.coredns.version"
  log "installed $BIN/coredns ($((SECONDS - t0)) s)"
}

(k8s_build)
coredns_build
