#!/usr/bin/env bash
# Every test: formatting, lints, unit and integration tests (real chDB,
# RocksDB, etcd, node processes), then the extra suites in scripts/tests.d.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --release --workspace --all-targets -- -D warnings
echo "== cargo build (binaries used by integration tests)"
cargo build --release --workspace --bins
echo "== cargo test"
cargo test --release --workspace --no-fail-fast 2>&1 | tee "${TMPDIR:-/tmp}/shardhouse-cargo-test.log"
status=${PIPESTATUS[0]}
[ "$status" = 0 ] || { echo "cargo test failed"; exit "$status"; }

for suite in scripts/tests.d/*.sh; do
  [ -e "$suite" ] || continue
  echo "== $suite"
  bash "$suite"
done
echo "== all tests passed"
