#!/usr/bin/env bash
# make bench-wal: committed points/s through the node Write API (no router),
# RF=1 and RF=3 on loopback. Expects `cargo build --release --workspace --bins`
# to have run (the Makefile does it). Last line: wal_rf3_points_per_sec=<N>.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${SHARDHOUSE_BIN:-${CARGO_TARGET_DIR:-$HOME/.cache/shardhouse/target}/release}
export SHARDHOUSE_CHDB_DIR=${SHARDHOUSE_CHDB_DIR:-$PWD/.deps/chdb}
for b in bench-wal shardhouse-node; do
  [ -x "$BIN/$b" ] || { echo "missing $BIN/$b: run cargo build --release --workspace --bins" >&2; exit 1; }
done
command -v etcd >/dev/null || { echo "etcd not installed: run make deps" >&2; exit 1; }
exec "$BIN/bench-wal"
