#!/usr/bin/env bash
# s3s_start ROOT LOG: starts s3s-fs (built by scripts/deps.d/s3s-fs.sh) on a
# free loopback port over directory ROOT, with the credentials in
# AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, and waits until it answers.
# Sets S3_PORT and S3_PID. Needs sh_free_port (scripts/lib/cluster.sh).
s3s_start() {
  local root=$1 log=$2
  S3_PORT=$(sh_free_port)
  "${SHARDHOUSE_CACHE:-$HOME/.cache/shardhouse}/bin/s3s-fs-0.14.1" --host 127.0.0.1 --port "$S3_PORT" \
    --access-key "$AWS_ACCESS_KEY_ID" --secret-key "$AWS_SECRET_ACCESS_KEY" "$root" >"$log" 2>&1 &
  # shellcheck disable=SC2034 # used by the caller (cleanup, CPU seconds)
  S3_PID=$!
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$S3_PORT/" && return 0
    sleep 0.1
  done
  echo "s3s-fs did not answer on 127.0.0.1:$S3_PORT within 10 s (log: $log)" >&2
  return 1
}
