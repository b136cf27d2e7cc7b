#!/usr/bin/env bash
# `make bench-small-writes`: many small writers, open model (issue 18).
# Requests of 1-10 points (1M-series set, line protocol, 4,096 pre-encoded
# requests, fixed seed) arrive at a constant rate per step; the rate steps
# through RATES and then grows by GROW per step, with no fixed ceiling,
# until a step delivers < 80% of offered. A request due while MAX_INFLIGHT
# are outstanding is dropped, not queued. In one run, each on a fresh
# server:
#   1. a local 3-node cluster, RF=3 (SHARDS, default 3: one per node),
#   2. QuestDB 9.2.2 (ILP over HTTP /write, sized for a small host:
#      qdb_small_host in scripts/lib/bench.sh).
# Sustainable = the highest step with >= 99% of offered delivered and
# p99 <= 100 ms (report::SMALL_WRITES_BUDGET). Last lines:
#   small_writes_rf3_requests_per_sec=<N>
#   small_writes_questdb_requests_per_sec=<N>
# Knobs: RATES (first steps, req/s), GROW, MAX_STEPS, STEP_SECS, SHARDS,
# MAX_INFLIGHT, MIN_POINTS, MAX_POINTS, SYSTEMS (rf3,questdb), OUT,
# QDB_DEFAULTS=1.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh
# shellcheck source=scripts/lib/questdb.sh
source scripts/lib/questdb.sh
# shellcheck source=scripts/lib/bench.sh
source scripts/lib/bench.sh

RATES=${RATES:-1000,2000,4000}
GROW=${GROW:-1.25}
MAX_STEPS=${MAX_STEPS:-40}
STEP_SECS=${STEP_SECS:-10}
SHARDS=${SHARDS:-3}
MAX_INFLIGHT=${MAX_INFLIGHT:-1024}
MIN_POINTS=${MIN_POINTS:-1}
MAX_POINTS=${MAX_POINTS:-10}
SYSTEMS=${SYSTEMS:-rf3,questdb}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/shardhouse-bench-small-writes.XXXXXX")}
mkdir -p "$OUT"
LT="$SH_BIN/shardhouse-loadtest"
sh_require_bins shardhouse-node shardhouse-router shardhouse-loadtest
log() { echo "[bench-small-writes] $*" >&2; }

small() { # NAME URL EXTRA_ARGS...
  local name=$1 url=$2 load0
  shift 2
  load0=$(cut -d' ' -f1-3 /proc/loadavg)
  "$LT" small-writes --name "$name" --url "$url" --rates "$RATES" --grow "$GROW" \
    --max-steps "$MAX_STEPS" --stop-below-pct 80 --step-secs "$STEP_SECS" \
    --max-inflight "$MAX_INFLIGHT" --min-points "$MIN_POINTS" --max-points "$MAX_POINTS" \
    --warmup-secs "${WARMUP_SECS:-5}" --json "$OUT/$name.json" --summary-key "$name" \
    "$@" 2>"$OUT/$name.loadtest.log" | tee "$OUT/$name.md"
  echo "note: load average $load0 at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end" | tee -a "$OUT/$name.md"
}

trap 'sh_stop_all 2>/dev/null || true; qdb_stop' EXIT
start=$SECONDS
log "results in $OUT; rates $RATES req/s then x$GROW per step, $MIN_POINTS-$MAX_POINTS points/request, ${STEP_SECS}s steps"

if [[ ",$SYSTEMS," == *,rf3,* ]]; then
  log "== rf3: 3 nodes, RF=3, $SHARDS shards"
  sh_cluster_init "$OUT/rf3-data" 3
  sh_start_etcd
  sh_start_nodes "$SHARDS" 3
  sh_start_router
  if sh_wait_writable; then
    small small_writes_rf3 "http://$SH_ROUTER_HTTP" --pid-dir "$SH_DATA/pids" || true
  else
    log "rf3 cluster never became writable"
  fi
  sh_stop_all
  rm -rf "$SH_DATA"/node-* "$SH_DATA"/etcd
fi

if [[ ",$SYSTEMS," == *,questdb,* ]]; then
  qdb_install
  qdb_small_host
  log "== questdb $QDB_VERSION ($(qdb_settings))"
  qport=$(sh_free_port)
  qdb_start "$OUT/questdb-data" "$qport"
  small small_writes_questdb "http://127.0.0.1:$qport" --line-path /write --pid "questdb=$QDB_PID" || true
  qdb_stop
  rm -rf "$OUT/questdb-data/db"
fi

log "done in $((SECONDS - start)) s; JSON and logs in $OUT"
echo
for n in small_writes_rf3 small_writes_questdb; do
  [[ ",$SYSTEMS," == *,${n#small_writes_},* ]] || continue
  v=$(grep -h "^${n}_requests_per_sec=" "$OUT/$n.md" 2>/dev/null | tail -n 1 | cut -d= -f2)
  echo "${n}_requests_per_sec=${v:-0}"
done
