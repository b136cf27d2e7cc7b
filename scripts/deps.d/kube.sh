#!/usr/bin/env bash
# Installs the Kubernetes control-plane binaries the operator tests run against
# (there is no cluster, no kind and no container runtime on these machines):
# kube-apiserver and kube-controller-manager built from the Go module proxy, and
# helm. Binaries land in $SHARDHOUSE_CACHE/bin; a cached binary is not rebuilt.
set -euo pipefail

K8S_VERSION=1.34.4
HELM_VERSION=3.19.0
CACHE=${SHARDHOUSE_CACHE:-$HOME/.cache/shardhouse}
BIN=$CACHE/bin
export PATH=$HOME/go/bin:/usr/local/go/bin:$PATH

log() { echo "[deps/kube] $*" >&2; }
mkdir -p "$BIN"

command -v go >/dev/null || { log "go not found: install Go >= 1.24 (https://go.dev/dl)"; exit 1; }
command -v etcd >/dev/null || { log "etcd not found: scripts/install-deps.sh installs etcd-server first"; exit 1; }
command -v openssl >/dev/null || { log "openssl not found: apt-get install -y openssl"; exit 1; }

# A binary is current when it exists and its version stamp matches.
current() { [ -x "$BIN/$1" ] && [ "$(cat "$BIN/.$1.version" 2>/dev/null)" = "$2" ]; }

k8s_build() {
  local cmds=()
  for c in kube-apiserver kube-controller-manager; do
    current "$c" "$K8S_VERSION" || cmds+=("$c")
  done
  ((${#cmds[@]})) || return 0
  log "building ${cmds[*]} v$K8S_VERSION from the Go module proxy (first time ~5 min)"
  local mod=$CACHE/kube-build
  mkdir -p "$mod"
  cd "$mod"
  # k8s.io/kubernetes is not meant to be a dependency: its go.mod replaces every
  # staging module with ./staging/..., which does not resolve from outside. Pin
  # each of those to the matching published v0.x release instead.
  cat >go.mod <<GOMOD
module shardhouse.dev/kube-build

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
  # a blank import keeps `go mod tidy` from dropping the requirement
  cat >tools.go <<'GOSRC'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
GOSRC
  GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || true
  local minor=${K8S_VERSION#1.}
  minor=${minor%%.*}
  # without these the server reports v0.0.0, which kubectl and helm reject
  local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  # One `go build` for every command: their shared packages compile once
  # and the links (single-threaded, ~20-40 s each) run side by side.
  local out=$mod/bin.tmp pkgs=() c
  for c in "${cmds[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  rm -rf "$out"
  GOFLAGS=-mod=mod nice go build -ldflags "$ldflags" -o "$out/" "${pkgs[@]}"
  for c in "${cmds[@]}"; do
    mv "$out/$c" "$BIN/$c"
    echo "$K8S_VERSION" >"$BIN/.$c.version"
    log "installed $BIN/$c"
  done
  rm -rf "$out"
}

helm_build() {
  current helm "$HELM_VERSION" && return 0
  log "building helm v$HELM_VERSION (~80 s)"
  GOBIN=$BIN nice go install -ldflags "-s -w" "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION"
  echo "$HELM_VERSION" >"$BIN/.helm.version"
  log "installed $BIN/helm"
}

(k8s_build)
helm_build
command -v kubectl >/dev/null || log "warning: kubectl not on PATH; the chart dry-run test needs kubectl >= 1.32"
