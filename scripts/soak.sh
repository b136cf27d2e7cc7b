#!/usr/bin/env bash
# `make soak` (not part of `make test`): a local RF=3 cluster under steady
# load at 70% of the sustainable RF=3 rate for SOAK_MINUTES (30), with a
# fault every SOAK_FAULT_SECS (120), in turn:
#   kill -9 a node (restarted after 5 s); rebalance (node 4 joins and
#   shards move onto it; the next time it is drained); WAL disk full (a
#   node's WAL moved onto a size-limited tmpfs, filled to below the node's
#   64 MiB reserve for 20 s, freed, moved back; root only, skipped
#   otherwise); kill -9 the router; partition a node for 20 s (root +
#   iptables + cgroup v2; skipped otherwise); slow WAL disk (a node
#   restarted with SHARDHOUSE_TEST_FAULT_DISK wal_write_delay_ms=200 for
#   20 s, then restarted healthy); stop and start every node; a slow node
#   (SIGSTOP/SIGCONT bursts, 20 s). Disk faults from scripts/lib/faults.sh
#   (shared with scripts/chaos-disk.sh).
# Every acknowledged write is recorded (shardhouse-loadtest ack-load) and
# found afterwards (`verify`: per-request counts and sums through
# /api/v1/sql, then FINAL on the requests not found whole); the RSS of
# every process is sampled every SOAK_SAMPLE_SECS (10) from /proc and its
# least-squares slope printed (`shardhouse-loadtest analyze rss-slope`;
# restarts are separate incarnations, the first SOAK_WARMUP_SECS (300) of
# each left out: a node's RSS climbs for its first ~5-8 minutes at 140k
# points/s while its memtables, parts and glibc arenas reach their steady
# state, then stays level; docs/benchmarks.md "Soak", "Session 14").
#
# Last lines:
#   rss_slope_mb_per_hour node-1=<x> ... (and stderr, mean, flat verdict)
#   soak_minutes=<N> acked=<points> lost=<L> duplicated=<D>
# Exits non-zero when L or D != 0, nothing was acknowledged or the read-back
# failed.
#
# Knobs: SOAK_MINUTES, SOAK_FAULT_SECS, RATE (req/s), BATCH (points per
# request; default 14 x 10,000 = 140k points/s: 70% of the 199,875 points/s
# RF=3 sustained on this 2-core machine in the last same-session bench-e2e,
# docs/benchmarks.md "Storage layout 2: same-session e2e"), SHARDS (6),
# SOAK_SAMPLE_SECS, SOAK_WARMUP_SECS, SOAK_FAULTS (the rotation, space
# separated), VERIFY_WAIT_SECS (180), KEEP_DATA=1, SHARDHOUSE_DATA.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh
# shellcheck source=scripts/lib/faults.sh
source scripts/lib/faults.sh

log() { echo "[soak $(date -u +%T)] $*" >&2; }

MINUTES=${SOAK_MINUTES:-30}
FAULT_SECS=${SOAK_FAULT_SECS:-120}
RATE=${RATE:-14}
BATCH=${BATCH:-10000}
SHARDS=${SHARDS:-6}
SAMPLE_SECS=${SOAK_SAMPLE_SECS:-10}
WARMUP_SECS=${SOAK_WARMUP_SECS:-300}
DOWN=5
PARTITION_SECS=20
SLOW_SECS=20
FULL_SECS=20
VERIFY_WAIT_SECS=${VERIFY_WAIT_SECS:-180}
LT="$SH_BIN/shardhouse-loadtest"
sh_require_bins shardhouse-node shardhouse-router shardhouse-loadtest shardhouse-ctl
CTL=("$SH_BIN/shardhouse-ctl")

DATA=${SHARDHOUSE_DATA:-$(mktemp -d "${TMPDIR:-/tmp}/shardhouse-soak.XXXXXX")}
# Every point is kept to be checked at the end: ~37 bytes per point over
# the three replicas (engine parts, measured in a 4-minute trial) plus the
# WAL and 2 GB to spare. Refuse to fill the disk rather than fail late.
need_gb=$(((RATE * BATCH * MINUTES * 60 * 40 / 1000000000) + 2))
free_gb=$(df -P -B1G "$DATA" | awk 'NR == 2 { print $4 }')
if ((free_gb < need_gb)); then
  echo "[soak] needs ~${need_gb} GB free under $DATA for $MINUTES min at $((RATE * BATCH)) points/s, has ${free_gb} GB: free space, point SHARDHOUSE_DATA elsewhere, or lower SOAK_MINUTES / RATE" >&2
  [ -z "${SHARDHOUSE_DATA:-}" ] && rmdir "$DATA"
  echo "soak_minutes=0 acked=0 lost=unknown duplicated=unknown"
  exit 1
fi
faults_partition_setup
faults_disk_setup

LOAD_PID=""
SAMPLER_PID=""
cleanup() {
  local rc=$? p
  [ -n "$SAMPLER_PID" ] && kill "$SAMPLER_PID" 2>/dev/null
  for p in "$LOAD_PID" "$SAMPLER_PID"; do
    if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then
      kill -TERM "$p" 2>/dev/null || true
    fi
    [ -n "$p" ] && { wait "$p" 2>/dev/null || true; }
  done
  faults_heal
  if [ -n "${SH_DATA:-}" ]; then
    SH_NODES=4
    sh_stop_all
  fi
  faults_cleanup
  if [ "${KEEP_DATA:-0}" != 1 ] && [ -z "${SHARDHOUSE_DATA:-}" ] && [ "$rc" = 0 ]; then
    rm -rf "$DATA"
  else
    log "data and logs kept in $DATA"
  fi
  printf '%s\n' "${FINAL_LINES[@]}"
  exit "$rc"
}
FINAL_LINES=("soak_minutes=0 acked=0 lost=unknown duplicated=unknown")
trap cleanup EXIT
trap 'exit 130' INT TERM

# Ports for 4 nodes; node 4 joins and leaves with the rebalance fault.
sh_cluster_init "$DATA" 4
SH_NODES=3
sh_check_not_running
CTL+=(--etcd "$SH_ETCD_ENDPOINT" --cluster "$SH_CLUSTER_NAME")
log "cluster in $SH_DATA: etcd, 3 nodes (RF=3, $SHARDS shards), router; $MINUTES min at $RATE x $BATCH points/s, a fault every ${FAULT_SECS}s"
sh_start_etcd
sh_start_nodes "$SHARDS" 3
sh_start_router
sh_wait_writable || { log "cluster never became writable"; exit 1; }

RSS="$SH_DATA/rss.log"
faults_rss_sampler "$RSS" "$SAMPLE_SECS" &
SAMPLER_PID=$!

ACKS="$SH_DATA/acks.log"
"$LT" ack-load --url "http://$SH_ROUTER_HTTP" --ack-log "$ACKS" --measurement "soak_$(date +%s)" \
  --rate "$RATE" --batch "$BATCH" --secs $((MINUTES * 60)) --stop-file "$SH_DATA/stop-load" \
  --timeout-ms 10000 --retries 8 >"$SH_DATA/logs/ack-load.log" 2>&1 &
LOAD_PID=$!

members=(1 2 3)   # nodes holding replicas
node4_in=0
victim=0          # rotates the node a fault hits
# Sets k (the caller's local) to the next member node.
pick_victim() {
  victim=$(((victim % ${#members[@]}) + 1))
  k=${members[$((victim - 1))]}
}
FAULT_LOG="$SH_DATA/faults.log"
: >"$FAULT_LOG"
WINDOWS=()

# wal_to_disk K: node K (stopped) gets its WAL back from the tmpfs of the
# wal-full fault onto the data disk.
wal_to_disk() {
  local dir
  dir=$(faults_disk_dir "$1" wal)
  mountpoint -q "$dir" || return 0
  rm -rf "$dir.disk"
  mkdir "$dir.disk"
  cp -a "$dir/." "$dir.disk/"
  rm -f "$dir.disk/ballast" "$dir.disk/ballast.tail"
  umount "$dir" || umount -l "$dir"
  rmdir "$dir"
  mv "$dir.disk" "$dir"
}

fault() {
  local kind=$1 k t0 rc=0
  t0=$(date +%s%3N)
  case $kind in
    kill-node)
      pick_victim
      log "fault: kill -9 node $k, restart after ${DOWN}s"
      sh_kill9 "node-$k"
      sleep "$DOWN"
      sh_start_node "$k"
      sh_wait_node "$k"
      ;;
    kill-router)
      log "fault: kill -9 the router, restart after ${DOWN}s"
      sh_kill9 router
      sleep "$DOWN"
      sh_start_router
      ;;
    partition)
      if [ "$FAULTS_PARTITION_OK" != 1 ]; then
        log "fault: partition SKIPPED ($FAULTS_PARTITION_WHY)"
        return 0
      fi
      pick_victim
      local peers=()
      for p in "${members[@]}"; do [ "$p" != "$k" ] && peers+=("$p"); done
      log "fault: partition node $k from ${peers[*]} and the router for ${PARTITION_SECS}s"
      faults_partition "$k" "${peers[@]}"
      sleep "$PARTITION_SECS"
      faults_heal
      ;;
    restart-all)
      log "fault: stop every node, start them again"
      for ((k = SH_NODES; k >= 1; k--)); do sh_stop "node-$k"; done
      sleep "$DOWN"
      sh_start_nodes "$SHARDS" 3
      ;;
    rebalance)
      if [ "$node4_in" = 0 ]; then
        log "fault: node 4 joins, shardhouse-ctl rebalance moves shards onto it"
        sh_start_node 4
        sh_wait_node 4
        SH_NODES=4
        "${CTL[@]}" rebalance >>"$SH_DATA/logs/rebalance.out" 2>&1 || rc=$?
        members=(1 2 3 4)
        node4_in=1
      else
        log "fault: shardhouse-ctl rebalance --nodes 1,2,3 drains node 4"
        "${CTL[@]}" rebalance --nodes 1,2,3 >>"$SH_DATA/logs/rebalance.out" 2>&1 || rc=$?
        if [ "$rc" = 0 ]; then
          sh_stop node-4
          SH_NODES=3
          members=(1 2 3)
          node4_in=0
        fi
      fi
      grep -E '^rebalance moves=' "$SH_DATA/logs/rebalance.out" | tail -n 1 >&2 || true
      ;;
    slow-node)
      pick_victim
      log "fault: node $k slow (SIGSTOP/SIGCONT bursts) for ${SLOW_SECS}s"
      faults_slow "node-$k" "$SLOW_SECS"
      ;;
    wal-full)
      if [ "$FAULTS_DISK_OK" != 1 ]; then
        log "fault: WAL disk full SKIPPED ($FAULTS_DISK_WHY)"
        return 0
      fi
      pick_victim
      local dir mib
      dir=$(faults_disk_dir "$k" wal)
      sh_stop "node-$k"
      # Room for what the WAL holds now and ~2 minutes of log at this rate.
      mib=$(($(du -sm "$dir" | cut -f1) + RATE * BATCH * 120 * 100 / 1048576 + 256))
      log "fault: node $k's WAL on a ${mib} MiB tmpfs, full (32 MiB left, reserve 64) for ${FULL_SECS}s, then freed and moved back"
      faults_tmpfs "$k" wal "$mib" || rc=$?
      sh_start_node "$k"
      sh_wait_node "$k"
      if [ "$rc" = 0 ]; then
        faults_disk_fill "$k" wal 32
        sleep "$FULL_SECS"
        echo "$(date -u +%FT%TZ) wal-full node-$k wal_disk_full=$(faults_node_metric "$k" shardhouse_wal_disk_full)" >>"$FAULT_LOG"
        faults_disk_free "$k" wal
        sleep 10
        sh_stop "node-$k"
        wal_to_disk "$k" || rc=$?
        sh_start_node "$k"
        sh_wait_node "$k"
      fi
      ;;
    slow-disk)
      pick_victim
      log "fault: node $k's WAL disk slow (wal_write_delay_ms=200) for ${SLOW_SECS}s"
      faults_restart_node "$k" "node=$k,wal_write_delay_ms=200"
      sleep "$SLOW_SECS"
      faults_restart_node "$k"
      ;;
  esac
  WINDOWS+=(--window "$t0-$(date +%s%3N)")
  echo "$(date -u +%FT%TZ) $kind rc=$rc" >>"$FAULT_LOG"
  if [ "$rc" != 0 ]; then
    log "fault $kind failed (exit $rc); see $SH_DATA/logs"
    FAULT_FAILURES=$((FAULT_FAILURES + 1))
  fi
}

# Rebalance second and ninth: node 4 joins, and is drained 8 faults later.
read -r -a KINDS <<<"${SOAK_FAULTS:-kill-node rebalance wal-full kill-router partition slow-disk restart-all slow-node}"
FAULT_FAILURES=0
start=$SECONDS
end=$((start + MINUTES * 60))
n=0
last_end=$start
while true; do
  due=$((start + (n + 1) * FAULT_SECS))
  # After a fault that overran (a rebalance under load ran 8 minutes), the
  # next waits half a period rather than the missed ones firing back to back.
  ((due >= last_end + FAULT_SECS / 2)) || due=$((last_end + FAULT_SECS / 2))
  # No fault that could not settle before the load ends.
  ((due + 30 <= end)) || break
  while ((SECONDS < due)); do
    kill -0 "$LOAD_PID" 2>/dev/null || { log "the load generator exited early"; exit 1; }
    if name=$(sh_first_dead); then
      log "$name died outside a fault; last lines:"
      tail -n 30 "$SH_DATA/logs/$name.log" >&2
      exit 1
    fi
    sleep 1
  done
  # A fault that overran (a rebalance under load) may leave too little.
  ((SECONDS + 30 <= end)) || break
  fault "${KINDS[$((n % ${#KINDS[@]}))]}"
  last_end=$SECONDS
  n=$((n + 1))
done
log "$n faults done; load runs to the end"
wait "$LOAD_PID" || true
LOAD_PID=""
kill "$SAMPLER_PID" 2>/dev/null || true
wait "$SAMPLER_PID" 2>/dev/null || true
SAMPLER_PID=""
load_line=$(grep -E '^ack_load ' "$SH_DATA/logs/ack-load.log" | tail -n 1) || true
log "$load_line"

log "verifying every acknowledged point (per request, through /api/v1/sql; progress in $SH_DATA/logs/verify.log)"
set +e
# The router answers /api/v1/sql within its 10 s request timeout; verify
# sizes its slices to stay inside it and waits longer than that itself.
"$LT" verify --url "http://$SH_ROUTER_HTTP" --ack-log "$ACKS" --wait-secs "$VERIFY_WAIT_SECS" \
  --timeout-ms 20000 >"$SH_DATA/verify.out" 2>"$SH_DATA/logs/verify.log"
vrc=$?
set -e
cat "$SH_DATA/verify.out" >&2
acked=$(sed -n 's/^verify acked_points=\([0-9,]*\).*/\1/p' "$SH_DATA/verify.out" | tr -d ,)
lost=$(sed -n 's/^acked_points_lost=//p' "$SH_DATA/verify.out" | tail -n 1)
dup=$(sed -n 's/^verify .* duplicated=\([0-9]*\).*/\1/p' "$SH_DATA/verify.out")
[ -n "$lost" ] || tail -n 20 "$SH_DATA/logs/verify.log" >&2

mapfile -t rss_lines < <("$LT" analyze rss-slope --samples "$RSS" --warmup-secs "$WARMUP_SECS" || true)
p95=$("$LT" analyze latency --ack-log "$ACKS" "${WINDOWS[@]}" 2>/dev/null | sed -n 's/.* p95_ms=\([^ ]*\).*/\1/p') || true
FINAL_LINES=(
  "soak_load ${load_line#ack_load }"
  "soak_faults=$n failed_faults=$FAULT_FAILURES p95_ms_during_faults=${p95:--} rate_points_per_s=$((RATE * BATCH))"
  "${rss_lines[@]}"
  "soak_minutes=$MINUTES acked=${acked:-0} lost=${lost:-unknown} duplicated=${dup:-unknown}"
)
status=0
if [ "${lost:-x}" != 0 ] || [ "${dup:-x}" != 0 ] || [ "$vrc" != 0 ]; then status=1; fi
if [ -z "$acked" ] || [ "$acked" = 0 ]; then
  log "no point was acknowledged: the run proves nothing"
  status=1
fi
if ((FAULT_FAILURES > 0)); then
  log "$FAULT_FAILURES fault(s) failed to run or recover"
  status=1
fi
exit "$status"
