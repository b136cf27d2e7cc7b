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
#   5. rebalance under load: a second load at half the sustainable RF=3 rate
#      (RB_RATE x RB_BATCH; docs/benchmarks.md: ~400k points/s on 2 cores),
#      node 4 joins and `shardhouse-ctl rebalance` moves shards onto it, then
#      `rebalance --nodes 1,2,3` drains it again; every write of that load
#      must be acknowledged (retrying 429/503 is allowed, a failure is not)
#      and found; the p95 of the requests in flight during the moves is
#      printed (`rebalance_under_load ... p95_ms_during_moves=`)
# Then scripts/chaos-disk.sh (full disk, corruption, slow replica) if it
# exists, on its own cluster: its scenarios and lost points are added.
# Last line: `chaos_scenarios=<N> acked_points_lost=<M>`; exits non-zero when
# M != 0, when nothing was acknowledged, or when the read-back fails.
#
# Knobs: CHAOS_SHORT=1 (test-suite timings), RATE (req/s), BATCH (points per
# request), RB_RATE, RB_BATCH (the rebalance load), SHARDS, PARTITION_SECS,
# KEEP_DATA=1, SHARDHOUSE_DATA (default: a fresh temp dir).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh
# shellcheck source=scripts/lib/faults.sh
source scripts/lib/faults.sh

log() { echo "[chaos] $*" >&2; }

SHORT=${CHAOS_SHORT:-0}
if [ "$SHORT" = 1 ]; then
  SETTLE=${CHAOS_SETTLE_SECS:-4}; DOWN=${CHAOS_DOWN_SECS:-3}
  RATE=${RATE:-10}; BATCH=${BATCH:-50}
  RB_RATE=${RB_RATE:-5}; RB_BATCH=${RB_BATCH:-2000}
else
  SETTLE=${CHAOS_SETTLE_SECS:-10}; DOWN=${CHAOS_DOWN_SECS:-5}
  RATE=${RATE:-20}; BATCH=${BATCH:-100}
  # Half of the ~400k points/s RF=3 sustains on this 2-core machine.
  RB_RATE=${RB_RATE:-20}; RB_BATCH=${RB_BATCH:-10000}
fi
PARTITION_SECS=${PARTITION_SECS:-20}
SHARDS=${SHARDS:-6}
LT="$SH_BIN/shardhouse-loadtest"
for b in shardhouse-node shardhouse-router shardhouse-loadtest shardhouse-ctl; do
  [ -x "$SH_BIN/$b" ] || { log "missing $SH_BIN/$b: run cargo build --release --workspace --bins (make build)"; echo "chaos_scenarios=0 acked_points_lost=unknown"; exit 1; }
done

DATA=${SHARDHOUSE_DATA:-$(mktemp -d "${TMPDIR:-/tmp}/shardhouse-chaos.XXXXXX")}

# Partition support (root, iptables, cgroup v2): scripts/lib/faults.sh.
faults_partition_setup

LOAD_PID=""
RB_LOAD_PID=""
cleanup() {
  local rc=$?
  faults_heal
  faults_stop_pids "$LOAD_PID" "$RB_LOAD_PID"
  [ -n "${SH_DATA:-}" ] && sh_stop_all
  faults_finish "$rc" "$DATA"
  # The summary is always the last line, after any cleanup messages.
  echo "$FINAL_LINE"
  exit "$rc"
}
FINAL_LINE="chaos_scenarios=0 acked_points_lost=unknown"
trap cleanup EXIT
trap 'exit 130' INT TERM

# Ports for 4 nodes; node 4 joins only for the rebalance scenario.
sh_cluster_init "$DATA" 4
SH_NODES=3
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

acked_lines() { faults_acked_requests "$ACKS"; }
# Each scenario must be followed by acknowledged writes again.
expect_progress() {
  faults_expect_progress "$ACKS" "$1" "$2" || return 1
  log "writes acknowledged again after: $2 ($(acked_lines) acked requests so far)"
}

scenarios=0
recovery_failures=0
sleep "$SETTLE"

log "== 1/5 kill -9 node 2, restart after ${DOWN}s"
sh_kill9 node-2
sleep "$DOWN"
sh_start_node 2
sh_wait_node 2
sleep "$SETTLE"
expect_progress "$(acked_lines)" "node 2 restart" || recovery_failures=$((recovery_failures + 1))
scenarios=$((scenarios + 1))

log "== 2/5 kill -9 the router, restart after ${DOWN}s"
sh_kill9 router
sleep "$DOWN"
sh_start_router
sleep "$SETTLE"
expect_progress "$(acked_lines)" "router restart" || recovery_failures=$((recovery_failures + 1))
scenarios=$((scenarios + 1))

if [ "$FAULTS_PARTITION_OK" = 1 ]; then
  log "== 3/5 partition node 3 from nodes 1, 2 and the router for ${PARTITION_SECS}s (iptables on loopback, cgroup $FAULTS_CG_REL/node-3)"
  faults_partition 3 1 2
  sleep "$PARTITION_SECS"
  faults_heal
  log "healed"
  sleep "$SETTLE"
  expect_progress "$(acked_lines)" "partition heal" || recovery_failures=$((recovery_failures + 1))
  scenarios=$((scenarios + 1))
else
  log "== 3/5 SKIPPED partition: $FAULTS_PARTITION_WHY (needs root, iptables and cgroup v2)"
fi

log "== 4/5 stop all nodes, start them again"
for k in 3 2 1; do sh_stop "node-$k"; done
sleep "$DOWN"
sh_start_nodes "$SHARDS" 3
sleep "$SETTLE"
expect_progress "$(acked_lines)" "full node restart" || recovery_failures=$((recovery_failures + 1))
scenarios=$((scenarios + 1))

log "== 5/5 rebalance under load: $RB_RATE req/s x $RB_BATCH points; node 4 joins, shards move onto it, then it is drained"
CTL=("$SH_BIN/shardhouse-ctl" --etcd "$SH_ETCD_ENDPOINT" --cluster "$SH_CLUSTER_NAME")
RB_ACKS="$SH_DATA/rebalance-acks.log"
"$LT" ack-load --url "http://$SH_ROUTER_HTTP" --ack-log "$RB_ACKS" --measurement "rebalance_$(date +%s)" \
  --rate "$RB_RATE" --batch "$RB_BATCH" --secs 3600 --stop-file "$SH_DATA/stop-rb-load" \
  --timeout-ms 10000 --retries 8 >"$SH_DATA/logs/rebalance-load.log" 2>&1 &
RB_LOAD_PID=$!
rb_ok=1
sleep "$SETTLE"
sh_start_node 4
sh_wait_node 4
SH_NODES=4
# rebalance_run LABEL ARGS...: one ctl rebalance, its window (Unix ms) kept
# for the latency figure.
RB_WINDOWS=()
rebalance_run() {
  local label=$1 t0 t1
  shift
  t0=$(date +%s%3N)
  if ! "${CTL[@]}" rebalance "$@" >"$SH_DATA/logs/rebalance-$label.out" 2>&1; then
    log "shardhouse-ctl rebalance $* failed:"; tail -n 20 "$SH_DATA/logs/rebalance-$label.out" >&2
    rb_ok=0
  fi
  t1=$(date +%s%3N)
  RB_WINDOWS+=(--window "$t0-$t1")
  log "$label: $(grep -E '^rebalance moves=' "$SH_DATA/logs/rebalance-$label.out" || echo 'no summary')"
}
rebalance_run onto-4
sleep "$DOWN"
rebalance_run drain-4 --nodes 1,2,3
sh_stop node-4
SH_NODES=3
sleep "$DOWN"
touch "$SH_DATA/stop-rb-load"
wait "$RB_LOAD_PID" || true
RB_LOAD_PID=""
rb_load=$(grep -E '^ack_load ' "$SH_DATA/logs/rebalance-load.log" | tail -n 1) || true
rb_failed=$(sed -n 's/.* failed=\([0-9]*\).*/\1/p' <<<"$rb_load")
rb_p95=$("$LT" analyze latency --ack-log "$RB_ACKS" "${RB_WINDOWS[@]}" | sed -n 's/.* p95_ms=\([^ ]*\).*/\1/p') || true
set +e
"$LT" verify --url "http://$SH_ROUTER_HTTP" --ack-log "$RB_ACKS" --wait-secs 90 >"$SH_DATA/rebalance-verify.out" 2>>"$SH_DATA/logs/verify.log"
set -e
rb_lost=$(sed -n 's/^acked_points_lost=//p' "$SH_DATA/rebalance-verify.out" | tail -n 1) || true
rb_retries=$(sed -n 's/^rebalance moves=.* retries=//p' "$SH_DATA"/logs/rebalance-*.out | awk '{ s += $1 } END { print s + 0 }')
echo "rebalance_under_load rate_points_per_s=$((RB_RATE * RB_BATCH)) acked_points=$(sed -n 's/.* acked_points=\([0-9]*\).*/\1/p' <<<"$rb_load") failed_writes=${rb_failed:-unknown} lost=${rb_lost:-unknown} p95_ms_during_moves=${rb_p95:-unknown} p95_ms_whole_run=$(sed -n 's/.* p95_ms=\([^ ]*\).*/\1/p' <<<"$rb_load") ctl_retries=$rb_retries" | tee "$SH_DATA/rebalance.summary" >&2
if [ "$rb_ok" != 1 ] || [ "${rb_failed:-x}" != 0 ] || [ "${rb_lost:-x}" != 0 ]; then
  log "rebalance under load failed (ctl ok=$rb_ok, failed writes=${rb_failed:-unknown}, lost=${rb_lost:-unknown})"
  recovery_failures=$((recovery_failures + 1))
fi
expect_progress "$(acked_lines)" "rebalance under load" || recovery_failures=$((recovery_failures + 1))
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
  log "$recovery_failures scenario(s) failed or were not followed by acknowledged writes within 60 s"
  status=1
fi
if [ "${rb_lost:-x}" != 0 ] && [ "$lost" = 0 ]; then lost=${rb_lost:-unknown}; fi

# The disk scenarios (another script, its own cluster): this cluster stops
# first so the two never share the machine.
if [ -f scripts/chaos-disk.sh ]; then
  sh_stop_all
  log "== disk scenarios: scripts/chaos-disk.sh"
  set +e
  env -u SH_DATA -u SH_NODES -u SHARDHOUSE_DATA CHAOS_SHORT="$SHORT" bash scripts/chaos-disk.sh 2>&1 | tee "$SH_DATA/chaos-disk.out" >&2
  drc=${PIPESTATUS[0]}
  set -e
  dlast=$(tail -n 1 "$SH_DATA/chaos-disk.out")
  if [[ "$dlast" =~ ^chaos_scenarios=([0-9]+)\ acked_points_lost=([0-9]+)$ ]]; then
    scenarios=$((scenarios + BASH_REMATCH[1]))
    [[ "$lost" =~ ^[0-9]+$ ]] && lost=$((lost + BASH_REMATCH[2]))
  else
    log "chaos-disk.sh did not end with chaos_scenarios=<N> acked_points_lost=<M>: $dlast"
    lost=unknown
  fi
  if [ "$drc" != 0 ]; then
    log "chaos-disk.sh failed (exit $drc)"
    status=1
  fi
fi
FINAL_LINE="chaos_scenarios=$scenarios acked_points_lost=$lost"
exit "$status"
