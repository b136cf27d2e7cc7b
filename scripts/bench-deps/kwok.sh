#!/usr/bin/env bash
# kwok (Kubernetes WithOut Kubelet), built from the Go module proxy, for the
# control-plane benchmark scripts/bench-operator-scale.sh: it fakes 100 Nodes
# and moves their Pods to Running/Ready, so the operator reconciles a
# 100-node ShardhouseCluster on a real kube-apiserver without running it.
#
# Lands in $SHARDHOUSE_CACHE/bin/kwok (outside the clone); a current binary is
# not rebuilt. When Go or the module is not available (the proxy answers 403
# for versions it does not serve) this prints why, records it in
# $SHARDHOUSE_CACHE/bin/.kwok.skipped and exits 0: the benchmark then stops
# with the same reason.
# Cost (2 cores, measured): ~2 min cold, seconds when current.
set -euo pipefail

KWOK_VERSION=v0.7.0
CACHE=${SHARDHOUSE_CACHE:-$HOME/.cache/shardhouse}
BIN=$CACHE/bin
export PATH=$HOME/go/bin:/usr/local/go/bin:$PATH
export GOFLAGS="-mod=mod -buildvcs=false"

log() { echo "[deps/kwok] $*" >&2; }
skip() {
  log "skipped: $*"
  echo "$*" >"$BIN/.kwok.skipped"
  exit 0
}
mkdir -p "$BIN"

if [ -x "$BIN/kwok" ] && [ "$(cat "$BIN/.kwok.version" 2>/dev/null)" = "$KWOK_VERSION" ]; then
  exit 0
fi
command -v go >/dev/null || skip "go not found: install Go >= 1.24 (https://go.dev/dl)"
rm -f "$BIN/.kwok.skipped"

log "building kwok $KWOK_VERSION from the Go module proxy (first time ~2 min)"
out=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" 2>&1) ||
  skip "the Go module proxy did not serve sigs.k8s.io/kwok@$KWOK_VERSION: $(echo "$out" | tr -s '\n ' ' ' | cut -c1-300)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
GOBIN=$tmp nice go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" ||
  skip "go install sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION failed (see the output above)"
mv "$tmp/kwok" "$BIN/kwok"
echo "$KWOK_VERSION" >"$BIN/.kwok.version"
log "installed $BIN/kwok"
