#!/usr/bin/env bash
# `make bench-backup`: backup and restore throughput (issue 30) next to the
# disk's own sequential write and read rate, measured in the same run on the
# same filesystem (the physical limit).
#
#  1. Cluster A: 1 node, RF=1, $SHARDS shards; `shardhouse-loadtest ack-load`
#     writes POINTS points (requests of BATCH points at RATE requests/s; the
#     acknowledged ones are counted from its ack log).
#  2. The disk: `dd` writes and reads a DD_MB file with O_DIRECT (no page
#     cache) in $OUT, the filesystem of the data and of the backup.
#  3. `shardhouse-ctl backup create` to a local directory ($OUT/backups),
#     timed up to a `sync` afterwards (the bytes are on the disk).
#  4. Cluster A stopped and deleted; cluster B (1 node, same shards) started;
#     `shardhouse-ctl restore`, timed up to a `sync`; the restored rows are
#     counted (must be >= the acknowledged points).
#
# MB are 10^6 bytes of the backup (one copy of the shards' parts). The
# backup reads the data and writes it to the same disk, so a copy at the
# disk's rate is the bound, and pct_of_disk compares each rate with the
# slower of the disk's write and read rates. The data read by the backup
# was just written and may still be in the page cache (DROP_CACHES=1 drops
# it before each phase; root only, affects the whole machine).
#
# Last line:
#   backup_mb_s=.. backup_points_s=.. restore_mb_s=.. restore_points_s=..
#   disk_write_mb_s=.. disk_read_mb_s=.. backup_pct_of_disk=..
#   restore_pct_of_disk=..
#
# Knobs: POINTS (100000000), BATCH (100000), RATE (requests/s, 10), SHARDS
# (2), JOBS (files per node at once, ctl default), PARALLEL_SHARDS (ctl
# default), MAX_MB_S (the backup's --max-mb-s: its rate limit per node),
# DD_MB (2048), DROP_CACHES=1, OUT (a directory that keeps the
# outputs and logs; default a temporary one, deleted at the end),
# KEEP_DATA=1 (keep the clusters' data and the backup too; they are kept
# anyway when the run fails).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh

POINTS=${POINTS:-100000000}
BATCH=${BATCH:-100000}
RATE=${RATE:-10}
SHARDS=${SHARDS:-2}
DD_MB=${DD_MB:-2048}
KEEP_DATA=${KEEP_DATA:-0}
OWN_OUT=0
if [ -z "${OUT:-}" ]; then
  OUT=$(mktemp -d "${TMPDIR:-/tmp}/shardhouse-bench-backup.XXXXXX")
  OWN_OUT=1
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
sh_require_bins shardhouse-node shardhouse-router shardhouse-loadtest shardhouse-ctl
LT="$SH_BIN/shardhouse-loadtest"
CTL="$SH_BIN/shardhouse-ctl"
log() { echo "[bench-backup] $*" >&2; }
fail() {
  echo "FAIL bench-backup: $*" >&2
  exit 1
}

knobs=()
[ -n "${JOBS:-}" ] && knobs+=(--jobs "$JOBS")
[ -n "${PARALLEL_SHARDS:-}" ] && knobs+=(--parallel-shards "$PARALLEL_SHARDS")
backup_knobs=("${knobs[@]}")
[ -n "${MAX_MB_S:-}" ] && backup_knobs+=(--max-mb-s "$MAX_MB_S")

cleanup() {
  local rc=$?
  set +e
  [ -n "${SH_DATA:-}" ] && sh_stop_all
  rm -f "$OUT/dd.test"
  if [ "$KEEP_DATA" = 1 ] || [ "$rc" != 0 ]; then
    log "data kept in $OUT"
  elif [ "$OWN_OUT" = 1 ]; then
    rm -rf "$OUT"
  else
    [ -d "$OUT/b/logs" ] && mv "$OUT/b/logs" "$OUT/b-logs"
    rm -rf "$OUT/a" "$OUT/b" "$OUT/backups"
    log "outputs and logs in $OUT (data deleted)"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

drop_caches() {
  [ "${DROP_CACHES:-0}" = 1 ] || return 0
  sync
  echo 3 >/proc/sys/vm/drop_caches || log "cannot drop the page cache (not root?)"
}

now() { date +%s.%N; }
# rate BYTES SECS -> MB/s with one decimal.
rate() { python3 -c "print(f'{$1 / 1e6 / max($2, 1e-3):.1f}')"; }

start_cluster() { # DIR
  sh_cluster_init "$1" 1
  sh_cluster_credential
  sh_start_etcd
  sh_start_nodes "$SHARDS" 1
  # shellcheck disable=SC2119 # the router takes no extra flags here
  sh_start_router
  sh_wait_writable "$SH_READY_TIMEOUT" || fail "cluster in $1 never became writable"
}

# Space: the data, its backup and its restored copy, plus the dd file.
free_mb=$(df -Pm "$OUT" | awk 'NR == 2 { print $4 }')
log "$free_mb MB free in $OUT; POINTS=$POINTS DD_MB=$DD_MB"
((free_mb > DD_MB + 1024)) || fail "only $free_mb MB free in $OUT: lower DD_MB or free space"

# --- 1. the data -----------------------------------------------------------------
start_cluster "$OUT/a"
secs=$(((POINTS + BATCH * RATE - 1) / (BATCH * RATE)))
log "loading $POINTS points: ${secs}s of $RATE req/s x $BATCH points"
t=$(now)
"$LT" ack-load --url "http://$SH_ROUTER_HTTP" --ack-log "$OUT/load.acks" --measurement bench \
  --rate "$RATE" --batch "$BATCH" --secs "$secs" --max-inflight 8 --retries 10 --timeout-ms 60000 \
  >"$OUT/load.out" 2>"$OUT/load.err" || fail "the load failed: $(tail -n 3 "$OUT/load.err")"
load_secs=$(python3 -c "print(f'{$(now) - $t:.1f}')")
points=$(awk '!/^#/ && NF >= 2 { n += $2 } END { print n + 0 }' "$OUT/load.acks")
((points > 0)) || fail "no point was acknowledged"
log "load: $(tail -n 1 "$OUT/load.out") in ${load_secs}s"

# --- 2. the disk -----------------------------------------------------------------
sync
log "disk: dd $DD_MB MB with O_DIRECT in $OUT"
dd_secs() { sed -n 's/.* copied, \([0-9.]*\) s,.*/\1/p' | tail -n 1; }
w=$(dd if=/dev/zero of="$OUT/dd.test" bs=4M count=$((DD_MB / 4)) oflag=direct conv=fsync 2>&1 | dd_secs)
r=$(dd if="$OUT/dd.test" of=/dev/null bs=4M iflag=direct 2>&1 | dd_secs)
rm -f "$OUT/dd.test"
if [ -z "$w" ] || [ -z "$r" ]; then fail "dd printed no time"; fi
dd_bytes=$((DD_MB / 4 * 4 * 1048576))
disk_w=$(rate "$dd_bytes" "$w") disk_r=$(rate "$dd_bytes" "$r")
log "disk: write $disk_w MB/s, read $disk_r MB/s"

# --- 3. backup ---------------------------------------------------------------------
drop_caches
t=$(now)
"$CTL" --etcd "$SH_ETCD_ENDPOINT" backup create --to "$OUT/backups" --id bench "${backup_knobs[@]}" \
  >"$OUT/backup.out" 2>&1 || {
  cat "$OUT/backup.out" >&2
  fail "backup failed"
}
sync
backup_secs=$(python3 -c "print($(now) - $t)")
cat "$OUT/backup.out" >&2
bytes=$(sed -n 's/^backup bench bytes=\([0-9]*\) .*/\1/p' "$OUT/backup.out")
if [ -z "$bytes" ] || ((bytes == 0)); then fail "the backup stored no bytes"; fi

log "stopping and deleting cluster A (its logs kept in $OUT/a-logs)"
sh_stop_all
mv "$OUT/a/logs" "$OUT/a-logs"
rm -rf "$OUT/a"

# --- 4. restore --------------------------------------------------------------------
start_cluster "$OUT/b"
drop_caches
t=$(now)
"$CTL" --etcd "$SH_ETCD_ENDPOINT" restore --from "$OUT/backups" --backup bench "${knobs[@]}" \
  >"$OUT/restore.out" 2>&1 || {
  cat "$OUT/restore.out" >&2
  fail "restore failed"
}
sync
restore_secs=$(python3 -c "print($(now) - $t)")
cat "$OUT/restore.out" >&2
rows=$(curl -s -G "http://$SH_ROUTER_HTTP/api/v1/sql?db=shardhouse" \
  --data-urlencode 'q=SELECT count() AS n FROM bench' |
  python3 -c 'import json, sys; print(sum(int(r["n"]) for r in json.load(sys.stdin)))' || echo 0)
log "restored rows: $rows (acknowledged points: $points)"
((rows >= points)) || fail "the restored cluster holds $rows rows of bench, fewer than the $points acknowledged"

python3 - "$bytes" "$points" "$backup_secs" "$restore_secs" "$disk_w" "$disk_r" "$load_secs" <<'EOF'
import sys
b, p, bs, rs, dw, dr, ls = map(float, sys.argv[1:])
disk = min(dw, dr)
bm, rm = b / 1e6 / bs, b / 1e6 / rs
print(f"[bench-backup] {int(p):,} points ({ls:.0f} s to load), backup {b / 1e6:.1f} MB "
      f"in {bs:.1f} s, restore in {rs:.1f} s", file=sys.stderr)
print(f"backup_mb_s={bm:.1f} backup_points_s={p / bs:.0f} restore_mb_s={rm:.1f} "
      f"restore_points_s={p / rs:.0f} disk_write_mb_s={dw:.1f} disk_read_mb_s={dr:.1f} "
      f"backup_pct_of_disk={100 * bm / disk:.0f} restore_pct_of_disk={100 * rm / disk:.0f}")
EOF
