#!/usr/bin/env bash
# Keeps the shared build cache ($CARGO_TARGET_DIR, outside the clone) from
# filling the disk. Every clone at a new path rebuilds the workspace crates
# beside the old artifacts and grows `incremental/`, so a machine that runs CI
# and benchmarks for days runs out of space mid-test ("No space left on
# device" from chDB or RocksDB). When free space on the cache's filesystem is
# below SHARDHOUSE_MIN_FREE_GB (default 20), this drops the incremental state,
# then the workspace crates' own artifacts; both are rebuilt on demand, and
# third-party crates (the RocksDB build above all) are kept.
set -euo pipefail

target=${CARGO_TARGET_DIR:-}
min_free_gb=${SHARDHOUSE_MIN_FREE_GB:-20}
[ -n "$target" ] && [ -d "$target" ] || exit 0

free_gb() { df -Pk "$target" | awk 'NR==2 { print int($4 / 1048576) }'; }
log() { echo "[cache] $*" >&2; }

[ "$(free_gb)" -lt "$min_free_gb" ] || exit 0
log "$(free_gb) GB free (< $min_free_gb): dropping incremental build state under $target"
rm -rf "$target"/*/incremental

if [ "$(free_gb)" -lt "$min_free_gb" ]; then
  # The workspace's own artifacts are what multiply (one set per clone path
  # and per change); third-party crates and the RocksDB build are kept.
  names=$(cargo metadata --no-deps --format-version 1 2>/dev/null | python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    for t in p["targets"]:
        print(t["name"].replace("-", "_"))
' | sort -u)
  log "$(free_gb) GB free: dropping the workspace crates' build artifacts (rebuilt on demand)"
  for name in $names; do
    for profile in "$target"/*/; do
      rm -rf "$profile"deps/"$name"-* "$profile"deps/lib"$name"-* "$profile"examples/"$name"-*
    done
  done
fi
if [ "$(free_gb)" -lt 5 ]; then
  log "only $(free_gb) GB free on $(df -P "$target" | awk 'NR==2 { print $6 }'): tests write real chDB and RocksDB data and will fail; free space first"
fi
