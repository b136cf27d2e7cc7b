#!/usr/bin/env bash
# VictoriaMetrics single-node, built from the Go module proxy, for the PromQL
# benchmark scripts/bench-promql.sh (`make bench-promql`): one of the peers
# it measures Shardhouse's PromQL against. Only the benchmark runs this (not
# `make deps` / `make test`, which run every scripts/deps.d/*.sh).
#
# Lands in $SHARDHOUSE_CACHE/bin/victoria-metrics-$VM_VERSION (outside the
# clone); a present binary is not rebuilt. The module's go.mod has no
# `replace` lines, so a plain `go install <pkg>@<version>` builds it with the
# dependencies its go.mod pins. When Go or the module is not available this
# prints why, records it in $SHARDHOUSE_CACHE/bin/.victoria-metrics.skipped
# and exits 0: the benchmark then runs without it and says so.
# Cost (2 cores, measured): 28 s with the modules already in Go's cache,
# nothing when the binary is present.
set -euo pipefail

VM_VERSION=${VM_VERSION:-1.151.0}
VM_MODULE=github.com/VictoriaMetrics/VictoriaMetrics
CACHE=${SHARDHOUSE_CACHE:-$HOME/.cache/shardhouse}
BIN=$CACHE/bin
OUT=$BIN/victoria-metrics-$VM_VERSION
export PATH=$HOME/go/bin:/usr/local/go/bin:$PATH
export GOFLAGS="-mod=mod -buildvcs=false"

log() { echo "[deps/victoriametrics] $*" >&2; }
skip() {
  log "skipped: $*"
  echo "$*" >"$BIN/.victoria-metrics.skipped"
  exit 0
}
mkdir -p "$BIN"

[ -x "$OUT" ] && exit 0
command -v go >/dev/null || skip "go not found: install Go >= 1.26 (https://go.dev/dl)"
rm -f "$BIN/.victoria-metrics.skipped"

log "building VictoriaMetrics v$VM_VERSION from the Go module proxy (first time: minutes)"
out=$(go mod download -json "$VM_MODULE@v$VM_VERSION" 2>&1) ||
  skip "the Go module proxy did not serve $VM_MODULE@v$VM_VERSION: $(echo "$out" | tr -s '\n ' ' ' | cut -c1-300)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# -s -w: no symbol table or DWARF; the benchmark only runs it.
GOBIN=$tmp nice go install -ldflags "-s -w" "$VM_MODULE/app/victoria-metrics@v$VM_VERSION" ||
  skip "go install $VM_MODULE/app/victoria-metrics@v$VM_VERSION failed (see the output above)"
mv "$tmp/victoria-metrics" "$OUT"
log "installed $OUT"
