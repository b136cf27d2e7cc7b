# shellcheck shell=bash
# MinIO, the S3 server of `make bench-backup` (S3_SERVER=minio, its
# default): a real object store on its own process, as users run it, built
# from its Go module once into $SHARDHOUSE_CACHE/bin. The module proxy
# serves MinIO only as a pseudo-version (its release tags are not semver);
# this is the newest it served on 2026-12-06. Single node, single drive,
# on loopback. Not used by `make test` (the backup suite runs s3s-fs,
# scripts/lib/s3s.sh, a far smaller build).
#
#   minio_install           the binary is there, or build it (~4 min on 2
#                           idle cores); fails when it cannot be had
#   minio_start ROOT LOG    serves directory ROOT on a free loopback port
#                           with AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
#                           as its root credentials, waits until it is live;
#                           sets S3_PORT and S3_PID
#   minio_bucket NAME       creates bucket NAME (a signed PUT with curl)
# Needs sh_free_port (scripts/lib/cluster.sh).

MINIO_VERSION=${MINIO_VERSION:-v0.0.0-20260212201848-7aac2a2c5b7c}
MINIO=${MINIO:-${SHARDHOUSE_CACHE:-$HOME/.cache/shardhouse}/bin/minio-$MINIO_VERSION}

minio_install() {
  [ -x "$MINIO" ] && return 0
  command -v go >/dev/null || { echo "[minio] no Go toolchain to build $MINIO" >&2; return 1; }
  echo "[minio] building github.com/minio/minio@$MINIO_VERSION into $MINIO (once)" >&2
  local gobin
  gobin=$(mktemp -d)
  GOBIN=$gobin GOFLAGS=-mod=mod go install "github.com/minio/minio@$MINIO_VERSION" >&2 || {
    rm -rf "$gobin"
    echo "[minio] go install failed (status $?)" >&2
    return 1
  }
  mkdir -p "$(dirname "$MINIO")"
  mv "$gobin/minio" "$MINIO"
  rm -rf "$gobin"
}

minio_start() {
  local root=$1 log=$2 console
  S3_PORT=$(sh_free_port)
  console=$(sh_free_port)
  mkdir -p "$root"
  MINIO_ROOT_USER=$AWS_ACCESS_KEY_ID MINIO_ROOT_PASSWORD=$AWS_SECRET_ACCESS_KEY \
    MINIO_BROWSER=off MINIO_UPDATE=off \
    "$MINIO" server "$root" --address "127.0.0.1:$S3_PORT" \
    --console-address "127.0.0.1:$console" >"$log" 2>&1 &
  # shellcheck disable=SC2034 # used by the caller (cleanup, CPU seconds)
  S3_PID=$!
  for _ in $(seq 300); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$S3_PORT/minio/health/live")" = 200 ] && return 0
    sleep 0.1
  done
  echo "MinIO did not answer on 127.0.0.1:$S3_PORT within 30 s (log: $log)" >&2
  return 1
}

minio_bucket() {
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT \
    --aws-sigv4 "aws:amz:${AWS_REGION:-us-east-1}:s3" \
    --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" "http://127.0.0.1:$S3_PORT/$1")
  [ "$code" = 200 ] || { echo "[minio] creating bucket $1 answered HTTP $code" >&2; return 1; }
}
