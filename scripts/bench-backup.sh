#!/usr/bin/env bash
# `make bench-backup`: backup and restore throughput (issue 30), to a local
# directory and to S3, next to the disk's own sequential write and read
# rate, measured in the same run on the same filesystem (the physical
# limit).
#
#  1. Cluster A: 1 node, RF=1, $SHARDS shards; `shardhouse-loadtest ack-load`
#     writes POINTS points (requests of BATCH points at RATE requests/s; the
#     acknowledged ones are counted from its ack log).
#  2. The disk: `dd` writes and reads a DD_MB file with O_DIRECT (no page
#     cache) in $OUT, the filesystem of the data and of the backup.
#  3. `shardhouse-ctl backup create` to a local directory, timed up to a
#     `sync` afterwards (the bytes are on the disk): once right after the
#     load (busy: the engine still merges what it wrote), then, once the
#     node is idle, to a fresh directory ($OUT/backups); then the
#     same to S3 (S3=1, the default): S3_SERVER=minio (the default; MinIO
#     built from its Go module, scripts/lib/minio.sh) or s3s-fs (the
#     backup suite's server, scripts/deps.d/s3s-fs.sh), on 127.0.0.1 over
#     $OUT/s3, a fresh bucket, so every object is uploaded through the S3
#     API (signed requests, unsigned bodies: the destination's default).
#  4. Cluster A stopped and deleted; cluster B (1 node, same shards) started;
#     `shardhouse-ctl restore` from the directory, timed up to a `sync`; the
#     restored rows are counted (must be >= the acknowledged points). With
#     S3=1, B is deleted and cluster C restores the S3 backup the same way.
#
# MB are 10^6 bytes of the backup (one copy of the shards' parts). The
# backup reads the data and writes it to the same disk, so a copy at the
# disk's rate is the bound, and pct_of_disk compares each rate with the
# slower of the disk's write and read rates. The data read by the backup
# was just written and may still be in the page cache (DROP_CACHES=1 drops
# it before each phase; root only, affects the whole machine).
#
# Before the last line, a table (destination, phase, MB, s, MB/s,
# points/s, % of disk). Last line (the directory's figures, then S3's):
#   backup_mb_s=.. backup_points_s=.. restore_mb_s=.. restore_points_s=..
#   disk_write_mb_s=.. disk_read_mb_s=.. backup_pct_of_disk=..
#   restore_pct_of_disk=.. s3_backup_mb_s=.. s3_backup_points_s=..
#   s3_restore_mb_s=.. s3_restore_points_s=.. s3_backup_pct_of_disk=..
#   s3_restore_pct_of_disk=.. busy_backup_mb_s=.. busy_backup_pct_of_disk=..
#
# Knobs: POINTS (100000000), BATCH (100000), RATE (requests/s, 10), SHARDS
# (2), JOBS (files per node at once, ctl default), PARALLEL_SHARDS (ctl
# default), MAX_MB_S (the backup's --max-mb-s: its rate limit per node),
# DD_MB (2048), S3 (1; 0 skips the S3 backup and restore), S3_SERVER
# (minio or s3s-fs), DROP_CACHES=1, OUT (a directory that keeps the
# outputs and logs; default a temporary one, deleted at the end),
# KEEP_DATA=1 (keep the clusters' data and the backup too; they are kept
# anyway when the run fails), SETTLE_SECS (300: the longest wait for the
# node to go idle before the timed backups).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh
# shellcheck source=scripts/lib/s3s.sh
source scripts/lib/s3s.sh
# shellcheck source=scripts/lib/minio.sh
source scripts/lib/minio.sh

POINTS=${POINTS:-100000000}
BATCH=${BATCH:-100000}
RATE=${RATE:-10}
SHARDS=${SHARDS:-2}
DD_MB=${DD_MB:-2048}
S3=${S3:-1}
S3_SERVER=${S3_SERVER:-minio}
KEEP_DATA=${KEEP_DATA:-0}
SETTLE_SECS=${SETTLE_SECS:-300}
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

S3_PID=""
cleanup() {
  local rc=$?
  set +e
  [ -n "${SH_DATA:-}" ] && sh_stop_all
  [ -n "$S3_PID" ] && kill "$S3_PID" 2>/dev/null && wait "$S3_PID" 2>/dev/null
  rm -f "$OUT/dd.test"
  if [ "$KEEP_DATA" = 1 ] || [ "$rc" != 0 ]; then
    log "data kept in $OUT"
  elif [ "$OWN_OUT" = 1 ]; then
    rm -rf "$OUT"
  else
    for c in b c; do
      [ -d "$OUT/$c/logs" ] && mv "$OUT/$c/logs" "$OUT/$c-logs"
    done
    rm -rf "$OUT/a" "$OUT/b" "$OUT/c" "$OUT/backups" "$OUT/s3"
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
# CPU seconds (user + system) a process used so far; since A B -> B - A.
cpu_secs() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"; }
since() { python3 -c "print(f'{$2 - $1:.2f}')"; }
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

# Space: the data, its backups (two with S3) and a restored copy, plus the
# dd file.
free_mb=$(df -Pm "$OUT" | awk 'NR == 2 { print $4 }')
log "$free_mb MB free in $OUT; POINTS=$POINTS DD_MB=$DD_MB S3=$S3"
((free_mb > DD_MB + 1024)) || fail "only $free_mb MB free in $OUT: lower DD_MB or free space"

# --- the S3 server -----------------------------------------------------------------
LOCAL_DEST="$OUT/backups"
S3_DEST=""
if [ "$S3" = 1 ]; then
  # The nodes upload and download themselves: they inherit these.
  export AWS_ACCESS_KEY_ID=shardhouse AWS_SECRET_ACCESS_KEY=shardhouse-bench AWS_REGION=us-east-1
  case "$S3_SERVER" in
  minio)
    minio_install || fail "cannot build MinIO (scripts/lib/minio.sh; S3_SERVER=s3s-fs uses the suite's server)"
    minio_start "$OUT/s3" "$OUT/s3.log" || fail "the S3 server did not start"
    minio_bucket bench || fail "MinIO refused to create the bucket"
    ;;
  s3s-fs)
    scripts/deps.d/s3s-fs.sh || fail "cannot build s3s-fs (scripts/deps.d/s3s-fs.sh)"
    mkdir -p "$OUT/s3/bench"
    s3s_start "$OUT/s3" "$OUT/s3.log" || fail "the S3 server did not start"
    ;;
  *) fail "S3_SERVER=$S3_SERVER: use minio or s3s-fs" ;;
  esac
  s3_port=$S3_PORT
  S3_DEST="s3://bench/backups?endpoint=http://127.0.0.1:$s3_port&path_style=true"
  log "$S3_SERVER on 127.0.0.1:$s3_port over $OUT/s3"
fi

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

# --- 3. backups ----------------------------------------------------------------------
# backup_to NAME DEST: a backup with id NAME, timed up to a sync; sets
# BYTES and SECS.
backup_to() {
  drop_caches
  local t0
  t0=$(now)
  "$CTL" --etcd "$SH_ETCD_ENDPOINT" backup create --to "$2" --id "$1" "${backup_knobs[@]}" \
    >"$OUT/backup-$1.out" 2>&1 || {
    cat "$OUT/backup-$1.out" >&2
    fail "backup $1 to $2 failed"
  }
  sync
  SECS=$(python3 -c "print($(now) - $t0)")
  cat "$OUT/backup-$1.out" >&2
  BYTES=$(sed -n "s/^backup $1 bytes=\([0-9]*\) .*/\1/p" "$OUT/backup-$1.out")
  if [ -z "$BYTES" ] || ((BYTES == 0)); then fail "backup $1 stored no bytes"; fi
}
# Right after the load the engine is still merging what it wrote (CPU and
# disk): a backup then shares the machine with those merges. It is timed
# too (busy), then the node is left to settle (its CPU under 5% of a core
# for 3 s in a row, at most SETTLE_SECS) and the backups are timed again,
# to fresh destinations (after a sync): the backup's own rate.
backup_to bench-busy "$OUT/backups-busy"
busy_bytes=$BYTES busy_secs=$SECS
rm -rf "$OUT/backups-busy"
node_pid=$(sh_pid_of node-1)
settle_t0=$(now) quiet=0
while ((quiet < 3)); do
  c0=$(cpu_secs "$node_pid")
  sleep 1
  c1=$(cpu_secs "$node_pid")
  if python3 -c "import sys; sys.exit(0 if $c1 - $c0 < 0.05 else 1)"; then
    quiet=$((quiet + 1))
  else
    quiet=0
  fi
  if python3 -c "import sys; sys.exit(0 if $(now) - $settle_t0 > $SETTLE_SECS else 1)"; then
    log "the node did not settle in ${SETTLE_SECS}s: timing it busy"
    break
  fi
done
# The merges' pages still dirty would be written by the timed backup's
# fsyncs and final sync: written now, as before the dd.
sync
settle_secs=$(since "$settle_t0" "$(now)")
log "node settled after ${settle_secs}s (last second: $(since "$c0" "$c1") CPU-s)"
backup_to bench "$LOCAL_DEST"
bytes=$BYTES backup_secs=$SECS
s3_bytes=0 s3_backup_secs=0
if [ "$S3" = 1 ]; then
  s3_cpu0=$(cpu_secs "$S3_PID")
  backup_to bench-s3 "$S3_DEST"
  s3_bytes=$BYTES s3_backup_secs=$SECS
  # The S3 server shares the machine's cores: its CPU seconds per phase.
  log "$S3_SERVER CPU during the backup: $(since "$s3_cpu0" "$(cpu_secs "$S3_PID")") s (wall $(since 0 "$SECS") s)"
fi

log "stopping and deleting cluster A (its logs kept in $OUT/a-logs)"
sh_stop_all
mv "$OUT/a/logs" "$OUT/a-logs"
rm -rf "$OUT/a"

# --- 4. restores ---------------------------------------------------------------------
# restore_from NAME DEST DIR: restores backup NAME into a new cluster in DIR,
# timed up to a sync, counts its rows; sets SECS.
restore_from() {
  start_cluster "$3"
  drop_caches
  local t0 rows
  t0=$(now)
  "$CTL" --etcd "$SH_ETCD_ENDPOINT" restore --from "$2" --backup "$1" "${knobs[@]}" \
    >"$OUT/restore-$1.out" 2>&1 || {
    cat "$OUT/restore-$1.out" >&2
    fail "restore of $1 from $2 failed"
  }
  sync
  SECS=$(python3 -c "print($(now) - $t0)")
  cat "$OUT/restore-$1.out" >&2
  rows=$(curl -s -G "http://$SH_ROUTER_HTTP/api/v1/sql?db=shardhouse" \
    --data-urlencode 'q=SELECT count() AS n FROM bench' |
    python3 -c 'import json, sys; print(sum(int(r["n"]) for r in json.load(sys.stdin)))' || echo 0)
  log "restored rows of $1: $rows (acknowledged points: $points)"
  ((rows >= points)) || fail "the cluster restored from $1 holds $rows rows of bench, fewer than the $points acknowledged"
}
restore_from bench "$LOCAL_DEST" "$OUT/b"
restore_secs=$SECS s3_restore_secs=0
if [ "$S3" = 1 ]; then
  sh_stop_all
  mv "$OUT/b/logs" "$OUT/b-logs"
  rm -rf "$OUT/b"
  s3_cpu0=$(cpu_secs "$S3_PID")
  restore_from bench-s3 "$S3_DEST" "$OUT/c"
  s3_restore_secs=$SECS
  log "$S3_SERVER CPU during the restore: $(since "$s3_cpu0" "$(cpu_secs "$S3_PID")") s (wall $(since 0 "$SECS") s)"
fi

python3 - "$bytes" "$points" "$backup_secs" "$restore_secs" "$disk_w" "$disk_r" "$load_secs" \
  "$s3_bytes" "$s3_backup_secs" "$s3_restore_secs" "$S3_SERVER" "$busy_bytes" "$busy_secs" <<'EOF'
import sys
b, p, bs, rs, dw, dr, ls, sb, sbs, srs = map(float, sys.argv[1:11])
server = sys.argv[11]
bb, bbs = map(float, sys.argv[12:14])
disk = min(dw, dr)
err = lambda *a: print(*a, file=sys.stderr)
err(f"[bench-backup] {int(p):,} points ({ls:.0f} s to load); disk (dd, O_DIRECT): "
    f"write {dw:.1f} MB/s, read {dr:.1f} MB/s")
err(f"{'destination':<14} {'phase':<8} {'MB':>8} {'s':>7} {'MB/s':>8} {'points/s':>12} {'% of disk':>9}")
rows, keys = [("directory", "", b, bs, rs)], []
if sb > 0:
    rows.append((f"s3 ({server})", "s3_", sb, sbs, srs))
for name, prefix, mb_bytes, backup_s, restore_s in rows:
    for phase, secs in (("backup", backup_s), ("restore", restore_s)):
        mbs = mb_bytes / 1e6 / secs
        pct = 100 * mbs / disk
        err(f"{name:<14} {phase:<8} {mb_bytes / 1e6:>8.1f} {secs:>7.1f} {mbs:>8.1f} {p / secs:>12,.0f} {pct:>8.0f}%")
        keys.append((f"{prefix}{phase}", mbs, p / secs, pct))
busy_mbs = bb / 1e6 / bbs
err(f"{'directory':<14} {'busy':<8} {bb / 1e6:>8.1f} {bbs:>7.1f} {busy_mbs:>8.1f} {p / bbs:>12,.0f} "
    f"{100 * busy_mbs / disk:>8.0f}%  (right after the load, merges running)")
line = [f"{k}_mb_s={m:.1f} {k}_points_s={ps:.0f}" for k, m, ps, _ in keys[:2]]
line.append(f"disk_write_mb_s={dw:.1f} disk_read_mb_s={dr:.1f}")
line += [f"{k}_pct_of_disk={pct:.0f}" for k, _, _, pct in keys[:2]]
line += [f"{k}_mb_s={m:.1f} {k}_points_s={ps:.0f}" for k, m, ps, _ in keys[2:]]
line += [f"{k}_pct_of_disk={pct:.0f}" for k, _, _, pct in keys[2:]]
line.append(f"busy_backup_mb_s={busy_mbs:.1f} busy_backup_pct_of_disk={100 * busy_mbs / disk:.0f}")
print(" ".join(line))
EOF
