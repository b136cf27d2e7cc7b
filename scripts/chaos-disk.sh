#!/usr/bin/env bash
# The disk scenarios of `make chaos` (scripts/chaos.sh runs this after its
# own five, on a cluster of its own): a local RF=3 cluster, and for every
# scenario a fresh `shardhouse-loadtest ack-load` recording each acknowledged
# point (its own ack log and measurement), stopped after the scenario and
# `verify`-ed: every acknowledged point stored exactly once.
#
#   6. wal_disk_full: node V's WAL directory is a size-limited tmpfs (V is
#      node 1 or 2, whichever leads some shards but not all); a ballast file
#      leaves less than the 64 MiB reserve. Node V refuses the writes of the
#      shards it leads (`WAL disk full on node V`, counted in
#      shardhouse_wal_writes_refused_total{reason="disk_full"}; the router
#      retries them until the request deadline and answers 503), and
#      shardhouse_wal_disk_full is 1. One-line probe writes through the
#      router (one shard each): those of shards V follows in are committed
#      by the quorum meanwhile; every acknowledged probe is stored and a
#      refused one is not (a probe whose outcome is unknown, a timeout, may
#      be either). The ballast goes and the same process takes every probe
#      again. Requests of the steady load that stay refused past their
#      retries fail (not acknowledged): allowed here, and counted.
#   7. engine_disk_full: node 2's engine directory is a tmpfs filled to the
#      last block: its flushes fail, /health says `shard N flush` `fail`
#      (and shardhouse_engine_flush_failing_shards), writes go on into the
#      WAL; freed, the flushes succeed and every row is found.
#   8. corrupt_wal: node 3 killed -9, 4 KiB in the middle of its RocksDB
#      log/table files overwritten; restarted, it says `WAL damaged at
#      start`, keeps the damaged WAL as wal.damaged-<time> and its replicas
#      are rebuilt from the leaders' snapshots (the auto rebuild counter);
#      writes go on throughout; node 3 reports each of its replicas rebuilt
#      and none still rebuilding. Then the engine: node 1 killed -9, one
#      column file of a flushed part of this scenario's measurement cut to
#      half (a lost tail); restarted, it must name the part (`engine part
#      damaged`), rebuild that replica from its leader's snapshot
#      (rebuilds_total{trigger="damaged"}) and count no damaged shard after.
#   9. slow_replica: node 3 (a follower: it leads nothing after its restart,
#      and leaders do not rebalance in this cluster) restarted with every WAL
#      write batch SLOW_DELAY_MS (200) ms slower (SHARDHOUSE_TEST_FAULT_DISK);
#      the write p95 of the load while it is slow is printed next to the p95
#      just before; every write must be acknowledged and found.
# Then every replica: the router reads one replica per shard, so at the end
# every node is stopped and each node's engine is read with chDB itself
# (python, the engine's own package): every acknowledged point of every
# scenario on every replica, once (`replica_check ... missing=0
# duplicated=0`; a miss counts as lost).
#
# 6 and 7 need root (tmpfs): elsewhere `SKIPPED <scenario>: <why>` and they
# are not counted. Leader balancing is off on these nodes
# (SHARDHOUSE_NODE_LEADER_BALANCE_INTERVAL_MS=0) so that which node leads
# what only changes by elections, which the script causes itself; their WAL
# write buffer is 16 MiB (see WAL_LEAVE_MB below).
#
# One line per scenario (`disk_scenario name=... acked_points=...
# failed_writes=... lost=... duplicated=...` and its figures); last line:
# `chaos_scenarios=<N> acked_points_lost=<M>`; exits non-zero when a
# scenario fails.
#
# Knobs: CHAOS_SHORT=1 (test-suite timings), RATE, BATCH, SHARDS,
# SLOW_DELAY_MS, KEEP_DATA=1, SHARDHOUSE_DATA.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh
# shellcheck source=scripts/lib/faults.sh
source scripts/lib/faults.sh

log() { echo "[chaos-disk $(date -u +%T)] $*" >&2; }

SHORT=${CHAOS_SHORT:-0}
if [ "$SHORT" = 1 ]; then
  SETTLE=3; FULL_SECS=3; SLOW_SECS=8
  RATE=${RATE:-10}; BATCH=${BATCH:-50}
else
  SETTLE=8; FULL_SECS=10; SLOW_SECS=20
  RATE=${RATE:-20}; BATCH=${BATCH:-100}
fi
SHARDS=${SHARDS:-6}
SLOW_DELAY_MS=${SLOW_DELAY_MS:-200}
WAL_TMPFS_MB=256
WAL_LEAVE_MB=32     # below the node's 64 MiB WAL reserve: writes refused
# RocksDB preallocates its log 1.1 write buffers at a time (256 MiB by
# default): a small buffer keeps that below WAL_LEAVE_MB, so the full node
# refuses at its reserve instead of meeting ENOSPC in an append; it also
# gives the corruption scenario table files to damage.
export SHARDHOUSE_NODE_WAL_WRITE_BUFFER_BYTES=$((16 << 20))
ENGINE_TMPFS_MB=512
PROBES=24           # one-line probe writes (distinct series: every shard)
PROBE_TIMEOUT=4     # s; a refused probe waits the router's 10 s deadline
LT="$SH_BIN/shardhouse-loadtest"
for b in shardhouse-node shardhouse-router shardhouse-loadtest shardhouse-ctl; do
  [ -x "$SH_BIN/$b" ] || { log "missing $SH_BIN/$b: run make build"; echo "chaos_scenarios=0 acked_points_lost=unknown"; exit 1; }
done

DATA=${SHARDHOUSE_DATA:-$(mktemp -d "${TMPDIR:-/tmp}/shardhouse-chaos-disk.XXXXXX")}
faults_disk_setup

LOAD_PID=""
cleanup() {
  local rc=$?
  faults_stop_pids "$LOAD_PID"
  [ -n "${SH_DATA:-}" ] && sh_stop_all
  # Unmounts every tmpfs (the nodes have exited); a kept run keeps copies.
  faults_finish "$rc" "$DATA"
  echo "$FINAL_LINE"
  exit "$rc"
}
FINAL_LINE="chaos_scenarios=0 acked_points_lost=unknown"
trap cleanup EXIT
trap 'exit 130' INT TERM
trap 'log "stopped at line $LINENO: $BASH_COMMAND (exit $?)"' ERR

sh_cluster_init "$DATA" 3
sh_check_not_running
export SHARDHOUSE_NODE_LEADER_BALANCE_INTERVAL_MS=0
if [ "$FAULTS_DISK_OK" = 1 ]; then
  # Before the first start: the nodes create their directories on them.
  faults_tmpfs 1 wal "$WAL_TMPFS_MB"
  faults_tmpfs 2 wal "$WAL_TMPFS_MB"
  faults_tmpfs 2 engine "$ENGINE_TMPFS_MB"
fi
log "cluster in $SH_DATA: etcd, 3 nodes (RF=3, $SHARDS shards, no leader balancing), router"
sh_start_etcd
sh_start_nodes "$SHARDS" 3
sh_start_router
sh_wait_writable || { log "cluster never became writable"; exit 1; }
CTL=("$SH_BIN/shardhouse-ctl" --etcd "$SH_ETCD_ENDPOINT" --cluster "$SH_CLUSTER_NAME")
ROUTER="http://$SH_ROUTER_HTTP"

# Shards node K leads (the shard map's leader hints).
leaders_of() {
  "${CTL[@]}" status --json 2>/dev/null |
    python3 -c 'import json,sys; k=int(sys.argv[1]); print(next((n["leaders"] for n in json.load(sys.stdin)["nodes"] if n["nodeId"]==k), 0))' "$1"
}

# --- One recorded load per scenario -------------------------------------
ACKS=""
load_start() {
  SCENARIO_T0=$SECONDS
  ACKS="$SH_DATA/acks-$1.log"
  rm -f "$SH_DATA/stop-load"
  LOAD_MEAS="disk_$1_$(date +%s)"
  "$LT" ack-load --url "$ROUTER" --ack-log "$ACKS" --measurement "$LOAD_MEAS" \
    --rate "$RATE" --batch "$BATCH" --secs 3600 --stop-file "$SH_DATA/stop-load" \
    --timeout-ms 10000 --retries 8 >"$SH_DATA/logs/ack-load-$1.log" 2>&1 &
  LOAD_PID=$!
}
acked_lines() { faults_acked_requests "$ACKS"; }
expect_progress() { faults_expect_progress "$ACKS" "$@"; }

scenarios=0
lost_total=0
failed_scenarios=0
# scenario_end NAME OK ALLOW_FAILED FIGURES: stops the load, verifies its
# ack log, prints the scenario line and counts it.
scenario_end() {
  local name=$1 ok=$2 allow_failed=$3 figures=$4 line failed acked vline lost dup
  touch "$SH_DATA/stop-load"
  wait "$LOAD_PID" || true
  LOAD_PID=""
  line=$(grep -E '^ack_load ' "$SH_DATA/logs/ack-load-$name.log" | tail -n 1) || true
  failed=$(sed -n 's/.* failed=\([0-9]*\).*/\1/p' <<<"$line")
  acked=$(sed -n 's/.* acked_points=\([0-9]*\).*/\1/p' <<<"$line")
  set +e
  "$LT" verify --url "$ROUTER" --ack-log "$ACKS" --wait-secs 90 >"$SH_DATA/verify-$name.out" 2>>"$SH_DATA/logs/verify.log"
  set -e
  vline=$(grep -E '^verify ' "$SH_DATA/verify-$name.out" | tail -n 1) || true
  lost=$(sed -n 's/^acked_points_lost=//p' "$SH_DATA/verify-$name.out" | tail -n 1)
  dup=$(sed -n 's/.* duplicated=\([0-9]*\).*/\1/p' <<<"$vline")
  echo "disk_scenario name=$name acked_points=${acked:-unknown} failed_writes=${failed:-unknown} lost=${lost:-unknown} duplicated=${dup:-unknown} $figures secs=$((SECONDS - SCENARIO_T0))" >&2
  if [ -z "$acked" ] || [ "$acked" = 0 ]; then
    log "$name: nothing acknowledged, it proves nothing"; ok=0
  fi
  if [ "$allow_failed" != 1 ] && [ "${failed:-x}" != 0 ]; then
    log "$name: writes failed for good: $line"; ok=0
  fi
  if [ "${lost:-x}" != 0 ] || [ "${dup:-x}" != 0 ]; then
    log "$name: acknowledged points lost or doubled: $(cat "$SH_DATA/verify-$name.out")"; ok=0
  fi
  if [[ "${lost:-}" =~ ^[0-9]+$ ]] && [[ "$lost_total" =~ ^[0-9]+$ ]]; then
    lost_total=$((lost_total + lost + ${dup:-0}))
  else
    lost_total=unknown
  fi
  scenarios=$((scenarios + 1))
  if [ "$ok" != 1 ]; then
    failed_scenarios=$((failed_scenarios + 1))
    log "== $name FAILED"
  fi
}

# --- Probes: one line per request, one series (so one shard) each -------
PROBE_DB=chaos_disk_probe
PROBE_ROUND=0
PROBES_ACKED=0
PROBES_UNKNOWN=0
# probe_round PATTERN: sends PROBES writes at once; sets PROBE_OK (204),
# PROBE_REFUSED (503 whose body matches PATTERN) and PROBE_OTHER (anything
# else, e.g. the router's deadline passing while an attempt was in flight:
# an unknown outcome, the point may still be stored).
probe_round() {
  local i code pids=() dir="$SH_DATA/probe"
  PROBE_ROUND=$((PROBE_ROUND + 1))
  PROBE_OK=0; PROBE_REFUSED=0; PROBE_OTHER=0
  mkdir -p "$dir"
  for ((i = 0; i < PROBES; i++)); do
    curl -s -m "$PROBE_TIMEOUT" -o "$dir/$i.body" -w '%{http_code}' -XPOST "$ROUTER/write?db=$PROBE_DB" \
      --data-binary "probe,s=p$i v=$((PROBE_ROUND * 1000 + i))i $((1700000000000000000 + PROBE_ROUND * 1000 + i))" \
      >"$dir/$i.code" 2>/dev/null &
    pids+=($!)
  done
  wait "${pids[@]}" 2>/dev/null || true
  for ((i = 0; i < PROBES; i++)); do
    code=$(cat "$dir/$i.code" 2>/dev/null || true)
    if [ "$code" = 204 ]; then
      PROBE_OK=$((PROBE_OK + 1))
    elif [ "$code" = 503 ] && grep -q "$1" "$dir/$i.body"; then
      PROBE_REFUSED=$((PROBE_REFUSED + 1))
      PROBE_ANSWER=$(head -c 400 "$dir/$i.body")
    else
      PROBE_OTHER=$((PROBE_OTHER + 1))
      log "probe answered ${code:-nothing}: $(head -c 200 "$dir/$i.body" 2>/dev/null)"
    fi
  done
  PROBES_ACKED=$((PROBES_ACKED + PROBE_OK))
  PROBES_UNKNOWN=$((PROBES_UNKNOWN + PROBE_OTHER))
}
# The probe points stored (the router returns one count per shard).
probe_stored() {
  curl -s -m 30 -G "$ROUTER/api/v1/sql?db=$PROBE_DB" --data-urlencode 'q=SELECT count() AS n FROM probe FINAL' |
    python3 -c 'import json,sys; print(sum(int(r["n"]) for r in json.load(sys.stdin)))' 2>/dev/null || echo unknown
}

# --- 6. WAL disk full --------------------------------------------------------
if [ "$FAULTS_DISK_OK" = 1 ]; then
  V=1
  for k in 1 2; do
    l=$(leaders_of "$k")
    if ((l > 0 && l < SHARDS)); then V=$k; break; fi
  done
  leads=$(leaders_of "$V")
  log "== 6 WAL disk full on node $V (leads $leads of $SHARDS shards): ballast leaves ${WAL_LEAVE_MB} MiB < the 64 MiB reserve"
  load_start wal_disk_full
  ok=1
  sleep "$SETTLE"
  pid_before=$(sh_pid_of "node-$V")
  faults_disk_fill "$V" wal "$WAL_LEAVE_MB"
  log "node $V's WAL disk filled ($(faults_disk_free_mib "$V" wal) MiB free)"
  # The node looks at its free space at most every 250 ms, when a write
  # comes (the load keeps them coming): probes sent before that look are
  # rightly taken into the reserve, so they wait until it has looked.
  t_fill=$(date +%s%3N)
  deadline=$((SECONDS + 10))
  until [ "$(faults_node_metric "$V" shardhouse_wal_disk_full)" = 1 ]; do
    ((SECONDS < deadline)) || { log "node $V never reported its WAL disk full (shardhouse_wal_disk_full) within 10 s"; ok=0; break; }
    sleep 0.1
  done
  detected_ms=$(($(date +%s%3N) - t_fill))
  full_at=$(acked_lines)
  t_full=$SECONDS
  PROBE_ANSWER=""
  probe_round "WAL disk full on node $V"
  full_ok=$PROBE_OK
  full_refused=$PROBE_REFUSED
  log "probes while full: $PROBE_OK committed, $PROBE_REFUSED refused, $PROBE_OTHER other; refusal: $PROBE_ANSWER"
  full_metric=$(faults_node_metric "$V" shardhouse_wal_disk_full)
  # The node refuses with the reason (507 / RESOURCE_EXHAUSTED, counted);
  # the router retries it until the request's deadline, so a client sees
  # the reason only when its request was not queued behind another.
  refused=$(faults_node_metric "$V" shardhouse_wal_writes_refused_total 'reason="disk_full"')
  refused=${refused%.*}
  if ((leads > 0)) && ((${refused:-0} == 0)); then
    log "node $V leads $leads shard(s) yet refused no write as 'WAL disk full'"; ok=0
  fi
  if ((leads < SHARDS)) && ((PROBE_OK == 0)); then
    log "no probe was committed by the other replicas while node $V's WAL disk was full"; ok=0
  fi
  [ "$full_metric" = 1 ] || { log "shardhouse_wal_disk_full on node $V is '$full_metric', want 1"; ok=0; }
  sleep $((FULL_SECS - (SECONDS - t_full) > 0 ? FULL_SECS - (SECONDS - t_full) : 0))
  acked_while_full=$(($(acked_lines) - full_at))
  faults_disk_free "$V" wal
  log "node $V's WAL disk freed"
  t_freed=$(date +%s%3N)
  # Space is back: the same process takes every probe again.
  deadline=$((SECONDS + 30))
  while :; do
    probe_round "WAL disk full"
    ((PROBE_OK == PROBES)) && break
    ((SECONDS < deadline)) || { log "probes still refused 30 s after the ballast went"; ok=0; break; }
    sleep 0.5
  done
  recovered_ms=$(($(date +%s%3N) - t_freed))
  [ "$(sh_pid_of "node-$V")" = "$pid_before" ] && sh_alive "node-$V" ||
    { log "node $V restarted or died"; ok=0; }
  after_metric=$(faults_node_metric "$V" shardhouse_wal_disk_full)
  [ "$after_metric" = 0 ] || { log "shardhouse_wal_disk_full on node $V stays '$after_metric'"; ok=0; }
  expect_progress "$(acked_lines)" "WAL disk freed" || ok=0
  sleep "$SETTLE"
  # Every acknowledged probe is stored and a refused one is not; an
  # unknown outcome may be either.
  stored=$(probe_stored)
  if ! [[ "$stored" =~ ^[0-9]+$ ]] || ((stored < PROBES_ACKED || stored > PROBES_ACKED + PROBES_UNKNOWN)); then
    log "probe points stored: $stored, acknowledged: $PROBES_ACKED, unknown outcome: $PROBES_UNKNOWN"; ok=0
  fi
  scenario_end wal_disk_full "$ok" 1 "node=$V leads=$leads full_detected_ms=$detected_ms probes_while_full_committed=$full_ok node_refused_disk_full=${refused:-0} probes_while_full_503_with_reason=$full_refused probes_acked=$PROBES_ACKED probes_unknown=$PROBES_UNKNOWN probes_stored=$stored acked_requests_while_full=$acked_while_full all_probes_taken_ms_after_free=$recovered_ms"
else
  log "== 6 SKIPPED wal_disk_full: $FAULTS_DISK_WHY"
fi

# --- 7. Engine disk full ----------------------------------------------------
if [ "$FAULTS_DISK_OK" = 1 ]; then
  E=2
  log "== 7 engine disk full on node $E: its flushes fail, the WAL keeps the rows"
  load_start engine_disk_full
  ok=1
  sleep "$SETTLE"
  faults_disk_fill "$E" engine 0
  log "node $E's engine disk filled ($(faults_disk_free_mib "$E" engine) MiB free)"
  t_full=$SECONDS
  health=""
  deadline=$((SECONDS + 30))
  until grep -q '"fail"' <<<"$health" && grep -q 'flush' <<<"$health"; do
    ((SECONDS < deadline)) || { log "node $E's /health never reported the failing flush: $health"; ok=0; break; }
    sleep 0.5
    health=$(curl -s -m 5 "http://127.0.0.1:$(sh_node_http_port "$E")/health" || true)
  done
  reported_s=$((SECONDS - t_full))
  failing=$(faults_node_metric "$E" shardhouse_engine_flush_failing_shards)
  log "node $E /health after ${reported_s}s: $(python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["status"], "|", d["checks"][0]["name"], "|", d["checks"][0]["message"][:200])' <<<"$health" 2>/dev/null || echo "$health")"
  [[ "${failing:-0}" =~ ^[1-9] ]] || { log "shardhouse_engine_flush_failing_shards on node $E is '$failing'"; ok=0; }
  before=$(acked_lines)
  sleep "$FULL_SECS"
  expect_progress "$before" "writes while node $E's engine disk is full" || ok=0
  faults_disk_free "$E" engine
  log "node $E's engine disk freed"
  t_freed=$SECONDS
  deadline=$((SECONDS + 90))
  until [ "$(faults_node_metric "$E" shardhouse_engine_flush_failing_shards)" = 0 ]; do
    ((SECONDS < deadline)) || { log "node $E's flushes still fail 90 s after space returned"; ok=0; break; }
    sleep 0.5
  done
  flushing_again_s=$((SECONDS - t_freed))
  sh_alive "node-$E" || { log "node $E died"; ok=0; }
  scenario_end engine_disk_full "$ok" 0 "node=$E health_reported_s=$reported_s failing_shards=$failing flushes_ok_s_after_free=$flushing_again_s"
else
  log "== 7 SKIPPED engine_disk_full: $FAULTS_DISK_WHY"
fi

# --- 8. Corrupted WAL ---------------------------------------------------------
C=3
log "== 8 corrupted WAL on node $C, then a truncated engine part on node 1: kill -9, damage, restart"
load_start corrupt_wal
ok=1
sleep "$SETTLE"
sh_kill9 "node-$C"
damaged=$(faults_corrupt_wal "$C" | tr '\n' ' ') || { ok=0; damaged=none; }
log "damaged: $damaged"
sh_start_node "$C"
sh_wait_node "$C"
mark=$(cat "$SH_DATA/pids/node-$C.logmark" 2>/dev/null || echo 0)
said=$(tail -n +"$((mark + 1))" "$SH_DATA/logs/node-$C.log" | grep -m1 'WAL damaged at start' || true)
[ -n "$said" ] || { log "node $C did not detect the damage: $(tail -n +"$((mark + 1))" "$SH_DATA/logs/node-$C.log" | grep -E 'ERROR|WARN' | tail -n 5)"; ok=0; }
kept=$(cd "$SH_DATA/node-$C" && ls -d wal.damaged-* 2>/dev/null | head -n 1)
[ -n "$kept" ] || { log "no wal.damaged-* kept in node-$C"; ok=0; }
t0=$SECONDS
deadline=$((SECONDS + 90))
rebuilt=0
while :; do
  rebuilt=$(faults_node_metric "$C" shardhouse_wal_replica_rebuilds_total 'trigger="auto"')
  rebuilt=${rebuilt%.*}
  rebuilding=$(curl -s -m 5 "http://127.0.0.1:$(sh_node_http_port "$C")/health" | grep -c 'rebuild"' || true)
  ((${rebuilt:-0} >= SHARDS && rebuilding == 0)) && break
  ((SECONDS < deadline)) || { log "node $C: $rebuilt of $SHARDS replicas rebuilt, $rebuilding still rebuilding after 90 s"; ok=0; break; }
  sleep 0.5
done
rebuild_s=$((SECONDS - t0))
# The same scenario for the engine: node P killed -9 and a column file of
# one of its parts of this load's measurement cut to half (a lost tail);
# restarted, it must name the damaged part and rebuild that replica from
# its leader's snapshot.
P=1
deadline=$((SECONDS + 20))
until [ -n "$(faults_engine_part_file "$P" "$LOAD_MEAS")" ]; do
  ((SECONDS < deadline)) || break
  sleep 0.5
done
sh_kill9 "node-$P"
part=$(faults_truncate_engine_part "$P" "$LOAD_MEAS") || { ok=0; part=""; }
log "node $P: truncated $part"
sh_start_node "$P"
sh_wait_node "$P"
pmark=$(cat "$SH_DATA/pids/node-$P.logmark" 2>/dev/null || echo 0)
t0=$SECONDS
deadline=$((SECONDS + 60))
part_said=""
part_rebuilt=0
while :; do
  part_said=$(tail -n +"$((pmark + 1))" "$SH_DATA/logs/node-$P.log" | grep -m1 'engine part damaged' || true)
  part_rebuilt=$(faults_node_metric "$P" shardhouse_wal_replica_rebuilds_total 'trigger="damaged"')
  part_rebuilt=${part_rebuilt%.*}
  damaged_now=$(faults_node_metric "$P" shardhouse_engine_damaged_shards)
  [ -n "$part_said" ] && ((${part_rebuilt:-0} >= 1)) && [ "${damaged_now:-x}" = 0 ] && break
  ((SECONDS < deadline)) || { log "node $P: damaged part reported: ${part_said:-no}; rebuilt: ${part_rebuilt:-0}; damaged shards now: ${damaged_now:-?}"; ok=0; break; }
  sleep 0.5
done
part_rebuild_s=$((SECONDS - t0))
[ -z "$part" ] || grep -q "${part%% *}" <<<"$part_said" || { log "node $P did not name part ${part%% *}: $part_said"; ok=0; }
expect_progress "$(acked_lines)" "nodes $C and $P restarted with damaged data" || ok=0
sleep "$SETTLE"
scenario_end corrupt_wal "$ok" 0 "node=$C detected=$([ -n "$said" ] && echo yes || echo no) kept=${kept:-none} replicas_rebuilt=${rebuilt:-0} rebuilt_within_s=$rebuild_s part_node=$P part_damaged=${part%% *} part_detected=$([ -n "$part_said" ] && echo yes || echo no) part_rebuilds=${part_rebuilt:-0} part_rebuilt_within_s=$part_rebuild_s"

# --- 9. One slow replica ------------------------------------------------------
S=3
leads=$(leaders_of "$S")
log "== 9 slow replica: node $S (leads $leads) restarted with WAL writes ${SLOW_DELAY_MS} ms slower"
load_start slow_replica
ok=1
sleep "$SETTLE"
h0=$(date +%s%3N)
sleep "$SLOW_SECS"
h1=$(date +%s%3N)
faults_restart_node "$S" "node=$S,wal_write_delay_ms=$SLOW_DELAY_MS"
s0=$(date +%s%3N)
sleep "$SLOW_SECS"
s1=$(date +%s%3N)
leads_slow=$(leaders_of "$S")
sum=$(faults_node_metric "$S" shardhouse_wal_append_seconds_sum)
cnt=$(faults_node_metric "$S" shardhouse_wal_append_seconds_count)
mean_ms=$(python3 -c 'import sys; s,c=float(sys.argv[1] or 0),float(sys.argv[2] or 0); print(round(s/c*1000) if c else 0)' "${sum:-0}" "${cnt:-0}")
if ((mean_ms < SLOW_DELAY_MS * 9 / 10)); then
  log "node $S's mean WAL append is ${mean_ms} ms: the delay was not on"; ok=0
fi
faults_restart_node "$S"
sleep "$SETTLE"
p95_of() { "$LT" analyze latency --ack-log "$ACKS" --window "$1-$2" | sed -n 's/.* p95_ms=\([^ ]*\).*/\1/p'; }
p95_healthy=$(p95_of "$h0" "$h1") || true
p95_slow=$(p95_of "$s0" "$s1") || true
if ((leads_slow > 0)); then log "node $S led $leads_slow shard(s) while slow: its shards wait for it"; fi
scenario_end slow_replica "$ok" 0 "node=$S delay_ms=$SLOW_DELAY_MS node_mean_append_ms=$mean_ms p95_ms_healthy=${p95_healthy:-unknown} p95_ms_slow=${p95_slow:-unknown} slow_node_leads=$leads_slow"

# --- Every replica, read offline ----------------------------------------
# The router reads one replica per shard (the leader). Here every node is
# stopped (a clean stop flushes its engine) and each node's engine is
# opened with chDB itself: every acknowledged point of every scenario must
# be on every replica, once.
log "every replica: nodes stopped, each engine read with chDB"
sh_stop router
for k in 3 2 1; do sh_stop "node-$k"; done
set +e
PYTHONPATH="$SHARDHOUSE_CHDB_DIR" python3 - "$SH_DATA" 1 2 3 >"$SH_DATA/replicas.out" 2>"$SH_DATA/logs/replicas.log" <<'PY'
import glob, os, sys
from chdb import session

data, nodes = sys.argv[1], sys.argv[2:]
want = {}  # measurement -> acknowledged seqs (ack log: `first count ...`)
for path in sorted(glob.glob(os.path.join(data, "acks-*.log"))):
    meas, acked = None, set()
    for line in open(path):
        if line.startswith("#"):
            for part in line[1:].split():
                if part.startswith("measurement="):
                    meas = part.split("=", 1)[1]
            continue
        f = line.split()
        if len(f) >= 2:
            acked.update(range(int(f[0]), int(f[0]) + int(f[1])))
    want[meas] = acked
missing_all = dup_all = 0
for k in nodes:
    s = session.Session(os.path.join(data, f"node-{k}", "engine"))
    for meas, acked in want.items():
        q = f"SELECT database FROM system.tables WHERE name = '{meas}' AND match(database, '^shard_[0-9]+_')"
        got = []
        for db in s.query(q, "TSV").bytes().decode().split():
            got += [int(x) for x in s.query(f"SELECT toInt64(v) FROM `{db}`.`{meas}` FINAL", "TSV").bytes().decode().split()]
        missing, dup = len(acked - set(got)), len(got) - len(set(got))
        print(f"replica node={k} measurement={meas} acked={len(acked)} stored={len(got)} missing={missing} duplicated={dup}")
        missing_all, dup_all = missing_all + missing, dup_all + dup
    s.close()
print(f"replica_check nodes={len(nodes)} measurements={len(want)} missing={missing_all} duplicated={dup_all}")
PY
set -e
cat "$SH_DATA/replicas.out" >&2
rline=$(grep -E '^replica_check ' "$SH_DATA/replicas.out" || true)
r_missing=$(sed -n 's/.* missing=\([0-9]*\).*/\1/p' <<<"$rline")
r_dup=$(sed -n 's/.* duplicated=\([0-9]*\).*/\1/p' <<<"$rline")
if [ -z "$r_missing" ] || [ -z "$r_dup" ]; then
  tail -n 20 "$SH_DATA/logs/replicas.log" >&2
  log "the replica check did not run"
  failed_scenarios=$((failed_scenarios + 1))
elif ((r_missing + r_dup > 0)); then
  log "acknowledged points missing or doubled on a replica"
  failed_scenarios=$((failed_scenarios + 1))
  [[ "$lost_total" =~ ^[0-9]+$ ]] && lost_total=$((lost_total + r_missing + r_dup))
fi

FINAL_LINE="chaos_scenarios=$scenarios acked_points_lost=$lost_total"
((failed_scenarios == 0)) || { log "$failed_scenarios scenario(s) failed"; exit 1; }
[ "$lost_total" = 0 ] || exit 1
