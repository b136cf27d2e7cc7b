#!/usr/bin/env bash
# s3s-fs, a small S3-compatible server (crates.io), for the backup test
# scripts/tests.d/backup.sh: backups go to a real, signed S3 API. Built once
# into $SHARDHOUSE_CACHE/bin/s3s-fs-<version> (its own target dir, so the
# workspace's lock is not held); a present binary is not rebuilt.
# Why not MinIO: its Go module builds here too, but the proxy serves only a
# pseudo-version (MinIO's release tags are not semver) and the build is far
# larger. 0.14.1 is the newest release this toolchain (1.95) builds.
# Cost (2 cores, busy machine): about 6 minutes once.
set -euo pipefail

S3S_VERSION=0.14.1
CACHE=${SHARDHOUSE_CACHE:-$HOME/.cache/shardhouse}
BIN=$CACHE/bin/s3s-fs-$S3S_VERSION
[ -x "$BIN" ] && exit 0
echo "[deps/s3s-fs] building s3s-fs $S3S_VERSION into $BIN (once)" >&2
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
cargo install "s3s-fs@$S3S_VERSION" --features binary --locked --root "$root" \
  --target-dir "$CACHE/s3s-target" >&2
mkdir -p "$CACHE/bin"
mv "$root/bin/s3s-fs" "$BIN"
rm -rf "$CACHE/s3s-target"
