#!/usr/bin/env bash
# make bench-wal: committed points/s through the node Write API (no router),
# RF=1 and RF=3 on loopback. Expects `cargo build --release --workspace --bins`
# to have run (the Makefile does it) for shardhouse-node; the benchmark itself
# is node/server/benches/bench_wal.rs. Last line: wal_rf3_points_per_sec=<N>.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/shardhouse/target}
BIN=${SHARDHOUSE_BIN:-$CARGO_TARGET_DIR/release}
export SHARDHOUSE_BIN=$BIN
export SHARDHOUSE_CHDB_DIR=${SHARDHOUSE_CHDB_DIR:-$PWD/.deps/chdb}
[ -x "$BIN/shardhouse-node" ] || { echo "missing $BIN/shardhouse-node: run cargo build --release --workspace --bins" >&2; exit 1; }
command -v etcd >/dev/null || { echo "etcd not installed: run make deps" >&2; exit 1; }
exec "${CARGO:-cargo}" bench -p shardhouse-node --bench bench-wal
