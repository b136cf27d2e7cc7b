#!/usr/bin/env bash
# `make chaos`: faults against a local RF=3 cluster under steady load, then a
# check that every acknowledged point is stored exactly once.
#
# Scenarios, in turn, while `shardhouse-loadtest ack-load` writes and records
# every acknowledged point:
#   1. kill -9 a node, restart it
#   2. kill -9 the router, restart it
#   3. partition one node from the others for PARTITION_SECS (20 s), heal
#      (iptables on loopback, matching the node's sockets by cgroup v2;
#      needs root: skipped with a message where unavailable)
#   4. stop all nodes, start them again
# Last line: `chaos_scenarios=<N> acked_points_lost=<M>`; exits non-zero when
# M != 0, when nothing was acknowledged, or when the read-back fails.
#
# Knobs: CHAOS_SHORT=1 (test-suite timings), RATE (req/s), BATCH (points per
# request), SHARDS, PARTITION_SECS, KEEP_DATA=1, SHARDHOUSE_DATA (default: a
# fresh temp dir).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh

log() { echo "[chaos] $*" >&2; }

SHORT=${CHAOS_SHORT:-0}
if [ "$SHORT" = 1 ]; then
  SETTLE=${CHAOS_SETTLE_SECS:-4}; DOWN=${CHAOS_DOWN_SECS:-3}
  RATE=${RATE:-10}; BATCH=${BATCH:-50}
else
  SETTLE=${CHAOS_SETTLE_SECS:-10}; DOWN=${CHAOS_DOWN_SECS:-5}
  RATE=${RATE:-20}; BATCH=${BATCH:-100}
fi
PARTITION_SECS=${PARTITION_SECS:-20}
SHARDS=${SHARDS:-6}
LT="$SH_BIN/shardhouse-loadtest"
for b in shardhouse-node shardhouse-router shardhouse-loadtest; do
  [ -x "$SH_BIN/$b" ] || { log "missing $SH_BIN/$b: run cargo build --release --workspace --bins (make build)"; echo "chaos_scenarios=0 acked_points_lost=unknown"; exit 1; }
done

DATA=${SHARDHOUSE_DATA:-$(mktemp -d "${TMPDIR:-/tmp}/shardhouse-chaos.XXXXXX")}

# --- Partition support: root, iptables, cgroup v2 (socket cgroup match).
CG2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts || true)
PARTITION_OK=0
PARTITION_WHY=""
if [ "$(id -u)" != 0 ]; then
  PARTITION_WHY="not root"
elif [ -z "$CG2" ]; then
  PARTITION_WHY="no cgroup v2 mount"
else
  if ! command -v iptables >/dev/null; then
    log "installing iptables (Debian) for the partition scenario"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables >/dev/null 2>&1; } || true
  fi
  if ! command -v iptables >/dev/null; then
    PARTITION_WHY="iptables not installable"
  elif ! iptables -w -L OUTPUT -n >/dev/null 2>&1; then
    PARTITION_WHY="iptables cannot read the OUTPUT chain (no netfilter in this kernel/sandbox)"
  else
    CG_REL="shardhouse-chaos-$$"
    if mkdir -p "$CG2/$CG_REL" 2>/dev/null; then
      SH_CGROUP_ROOT="$CG2/$CG_REL"
      PARTITION_OK=1
    else
      PARTITION_WHY="cannot create a cgroup under $CG2"
    fi
  fi
fi

RULES=()
heal() {
  local r
  for r in "${RULES[@]}"; do
    # shellcheck disable=SC2086
    iptables -w -D OUTPUT $r 2>/dev/null || true
  done
  RULES=()
}

LOAD_PID=""
cleanup() {
  local rc=$?
  heal
  if [ -n "$LOAD_PID" ] && kill -0 "$LOAD_PID" 2>/dev/null; then
    kill -TERM "$LOAD_PID" 2>/dev/null || true
    wait "$LOAD_PID" 2>/dev/null || true
  fi
  [ -n "${SH_DATA:-}" ] && sh_stop_all
  if [ -n "${SH_CGROUP_ROOT:-}" ] && [ -d "$SH_CGROUP_ROOT" ]; then
    local d
    for d in "$SH_CGROUP_ROOT"/*/; do [ -d "$d" ] && rmdir "$d" 2>/dev/null; done
    rmdir "$SH_CGROUP_ROOT" 2>/dev/null || true
  fi
  if [ "${KEEP_DATA:-0}" != 1 ] && [ -z "${SHARDHOUSE_DATA:-}" ] && [ "$rc" = 0 ]; then
    rm -rf "$DATA"
  else
    log "data and logs kept in $DATA"
  fi
  # The summary is always the last line, after any cleanup messages.
  echo "$FINAL_LINE"
  exit "$rc"
}
FINAL_LINE="chaos_scenarios=0 acked_points_lost=unknown"
trap cleanup EXIT
trap 'exit 130' INT TERM

sh_cluster_init "$DATA" 3
sh_check_not_running
log "cluster in $SH_DATA: etcd, 3 nodes (RF=3, $SHARDS shards), router"
sh_start_etcd
sh_start_nodes "$SHARDS" 3
sh_start_router
sh_wait_writable || { log "cluster never became writable"; exit 1; }

ACKS="$SH_DATA/acks.log"
MEAS="chaos_$(date +%s)"
log "steady load: $RATE req/s x $BATCH points into $MEAS, acks in $ACKS"
"$LT" ack-load --url "http://$SH_ROUTER_HTTP" --ack-log "$ACKS" --measurement "$MEAS" \
  --rate "$RATE" --batch "$BATCH" --secs 3600 --stop-file "$SH_DATA/stop-load" \
  --timeout-ms 5000 >"$SH_DATA/logs/ack-load.log" 2>&1 &
LOAD_PID=$!

acked_lines() {
  local n
  n=$(grep -vc '^#' "$ACKS" 2>/dev/null) || true
  echo "${n:-0}"
}
# Each scenario must be followed by acknowledged writes again, or the
# cluster did not recover (and "nothing lost" would mean little).
expect_progress() {
  local before=$1 what=$2 deadline=$((SECONDS + 60))
  while (($(acked_lines) <= before)); do
    ((SECONDS < deadline)) || { log "no write acknowledged within 60 s after: $what"; return 1; }
    sleep 1
  done
  log "writes acknowledged again after: $what ($(acked_lines) acked requests so far)"
}

scenarios=0
recovery_failures=0
sleep "$SETTLE"

log "== 1/4 kill -9 node 2, restart after ${DOWN}s"
sh_kill9 node-2
sleep "$DOWN"
sh_start_node 2
sh_wait_node 2
sleep "$SETTLE"
expect_progress "$(acked_lines)" "node 2 restart" || recovery_failures=$((recovery_failures + 1))
scenarios=$((scenarios + 1))

log "== 2/4 kill -9 the router, restart after ${DOWN}s"
sh_kill9 router
sleep "$DOWN"
sh_start_router
sleep "$SETTLE"
expect_progress "$(acked_lines)" "router restart" || recovery_failures=$((recovery_failures + 1))
scenarios=$((scenarios + 1))

if [ "$PARTITION_OK" = 1 ]; then
  log "== 3/4 partition node 3 from nodes 1, 2 and the router for ${PARTITION_SECS}s (iptables on loopback, cgroup $CG_REL/node-3)"
  p3=$(sh_node_grpc_port 3)
  RULES+=("-o lo -p tcp --dport $p3 -j DROP")
  for k in 1 2; do
    RULES+=("-o lo -p tcp -m cgroup --path $CG_REL/node-3 --dport $(sh_node_grpc_port "$k") -j DROP")
  done
  for r in "${RULES[@]}"; do
    # shellcheck disable=SC2086
    iptables -w -I OUTPUT $r
  done
  sleep "$PARTITION_SECS"
  heal
  log "healed"
  sleep "$SETTLE"
  expect_progress "$(acked_lines)" "partition heal" || recovery_failures=$((recovery_failures + 1))
  scenarios=$((scenarios + 1))
else
  log "== 3/4 SKIPPED partition: $PARTITION_WHY (needs root, iptables and cgroup v2)"
fi

log "== 4/4 stop all nodes, start them again"
for k in 3 2 1; do sh_stop "node-$k"; done
sleep "$DOWN"
sh_start_nodes "$SHARDS" 3
sleep "$SETTLE"
expect_progress "$(acked_lines)" "full node restart" || recovery_failures=$((recovery_failures + 1))
scenarios=$((scenarios + 1))

touch "$SH_DATA/stop-load"
wait "$LOAD_PID" || true
LOAD_PID=""
tail -n 1 "$SH_DATA/logs/ack-load.log" >&2

log "verifying every acknowledged point (read back through /api/v1/sql)"
set +e
"$LT" verify --url "http://$SH_ROUTER_HTTP" --ack-log "$ACKS" --wait-secs 90 >"$SH_DATA/verify.out" 2>"$SH_DATA/logs/verify.log"
vrc=$?
set -e
cat "$SH_DATA/verify.out" >&2
lost=$(sed -n 's/^acked_points_lost=//p' "$SH_DATA/verify.out" | tail -n 1)
acked=$(sed -n 's/^verify acked_points=\([0-9,]*\).*/\1/p' "$SH_DATA/verify.out" | tr -d ,)
if [ -z "$lost" ]; then
  tail -n 20 "$SH_DATA/logs/verify.log" >&2
  lost=unknown
fi
status=0
if [ "$lost" != 0 ] || [ "$vrc" != 0 ]; then status=1; fi
if [ -z "$acked" ] || [ "$acked" = 0 ]; then
  log "no point was acknowledged: the run proves nothing"
  status=1
fi
if ((recovery_failures > 0)); then
  log "$recovery_failures scenario(s) were not followed by acknowledged writes within 60 s"
  status=1
fi
FINAL_LINE="chaos_scenarios=$scenarios acked_points_lost=$lost"
exit "$status"
