#!/usr/bin/env bash
# `make bench-query` (issue 14): the read path side by side, in one run.
#   1. a local Shardhouse cluster (etcd, NODES nodes, SHARDS shards, RF),
#      QuestDB 9.2.2 (Maven Central, loopback only) and InfluxDB 1.8.10
#      (influxd as scripts/influx-suite/run.sh builds it, its default config
#      but loopback, data in WORK, reporting off; scripts/lib/influxd.sh),
#      all started here;
#   2. the same dashboard dataset loaded into each as line protocol, the same
#      batches (router and influxd `/write?db=bench`, QuestDB ILP over HTTP
#      `/write`): measurement `cpu`, tags host (HOSTS) and region (REGIONS),
#      fields usage_user and usage_system, one point per host every INTERVAL
#      s over HOURS hours;
#   3. the queries Grafana panels send, as InfluxQL to the router's and to
#      influxd's `/query` (the same text) and as the equivalent SQL (SAMPLE
#      BY, LATEST ON) to QuestDB's `/exec`, each RUNS times after WARMUP,
#      with the answers compared first (Shardhouse against QuestDB row by
#      row, against InfluxDB series, columns and values; a mismatch is
#      printed loudly and the script exits 1);
#   4. DASHBOARD=1 (default): a 20-panel dashboard over the last HOURS,
#      refreshed every 5 s for DASHBOARD_SECS (60) on each system in turn
#      while DASHBOARD_RATE (100,000) points/s are written to it
#      (scripts/bench_query/dashboard.py): p50/p95 per panel;
#   5. PROFILE=1 (default): for every query whose Shardhouse p95 is above
#      a peer's, the router and node under `perf record` while the query
#      runs in a loop, and the CPU each process spends per query.
# Prints the table and, as its LAST lines, `query_<name>_p95_ms=<N>`,
# `questdb_<name>_p95_ms=<N>` and `influxdb_<name>_p95_ms=<N>` for every
# query, then `dashboard_<panel>_p95_ms=<N>` (and `influxdb_`/`questdb_`)
# per panel. Everything shares this machine's cores: compare ratios within one
# run, not absolute figures.
#
# Knobs: HOSTS (1000), REGIONS (4), HOURS (24), DAYS (sets HOURS to 24 x
# DAYS; DAYS=7 is the 7-day dataset, 60.5M points), INTERVAL (10 s), RUNS
# (50), WARMUP (5), CLIENTS (comma list of concurrent clients, 1,8), QUERIES
# (comma list of names, all), NODES (1), RF (1), SHARDS (2), INFLUXDB (1; 0
# leaves InfluxDB out; without an influxd binary and no way to build it the
# run says so and goes on without), PROFILE (1), PROFILE_SECS (10), OUT (the
# JSON figures; default $WORK/bench-query.json), WORK (data, logs, profiles;
# default a new temp dir), KEEP_DATA=1, DASHBOARD (1; 0 skips the
# dashboard phase), DASHBOARD_SECS (60), DASHBOARD_RATE (100000 points/s).
# BIG=1 is the larger-cardinality variant: 10,000 hosts over 3 hours.
# ROLLUPS (1; 0 starts the router with --query-rollups false: raw points
# only). ROUTER_ARGS: more router flags (e.g. "--query-percentile-windows
# false"). Before the last lines, `query_<name>_rows_read=<N>`: the rows the
# nodes' engine read for one asking (its SelectedRows event, through
# shardhouse_engine_selected_rows_total), so a long panel shows whether it
# read rollups or raw points.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh
# shellcheck source=scripts/lib/bench.sh
source scripts/lib/bench.sh
# shellcheck source=scripts/lib/questdb.sh
source scripts/lib/questdb.sh
# shellcheck source=scripts/lib/influxd.sh
source scripts/lib/influxd.sh

if [ "${BIG:-0}" = 1 ]; then
  HOSTS=${HOSTS:-10000}
  HOURS=${HOURS:-3}
fi
if [ -n "${DAYS:-}" ]; then
  HOURS=$((DAYS * 24))
fi
HOSTS=${HOSTS:-1000}
REGIONS=${REGIONS:-4}
HOURS=${HOURS:-24}
INTERVAL=${INTERVAL:-10}
RUNS=${RUNS:-50}
WARMUP=${WARMUP:-5}
CLIENTS=${CLIENTS:-1,8}
QUERIES=${QUERIES:-}
NODES=${NODES:-1}
RF=${RF:-1}
SHARDS=${SHARDS:-2}
PROFILE=${PROFILE:-1}
DASHBOARD=${DASHBOARD:-1}
DASHBOARD_SECS=${DASHBOARD_SECS:-60}
DASHBOARD_RATE=${DASHBOARD_RATE:-100000}
PROFILE_SECS=${PROFILE_SECS:-10}
INFLUXDB=${INFLUXDB:-1}
WORK=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/shardhouse-bench-query.XXXXXX")}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
OUT=${OUT:-$WORK/bench-query.json}
PY=scripts/bench_query/bench_query.py
sh_require_bins shardhouse-node shardhouse-router
# The binaries of this run, linked (copied across filesystems) so that a
# rebuild during the run neither changes them nor hides their symbols from
# perf.
mkdir -p "$WORK/bin"
for b in shardhouse-node shardhouse-router; do
  ln -f "$SH_BIN/$b" "$WORK/bin/$b" 2>/dev/null || cp -f "$SH_BIN/$b" "$WORK/bin/$b"
done
SH_BIN=$WORK/bin
log() { echo "[bench-query] $*" >&2; }

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  sh_stop_all 2>/dev/null || true
  qdb_stop
  influxd_stop
  if [ "${KEEP_DATA:-0}" != 1 ]; then
    rm -rf "$WORK/cluster"/node-* "$WORK/cluster/etcd" "$WORK/questdb/db" "${WORK:?}/bin" \
      "$WORK/influxdb"/{meta,data,wal} 2>/dev/null || true
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start=$SECONDS
if [ "$INFLUXDB" = 1 ] && ! influxd_install; then
  log "!!! InfluxDB $INFLUXD_VERSION cannot be had here (no $INFLUXD, and building it failed): going on without it"
  INFLUXDB=0
fi
cluster_desc="Shardhouse $NODES node(s), $SHARDS shard(s), RF=$RF; QuestDB $QDB_VERSION"
[ "$INFLUXDB" = 1 ] && cluster_desc+="; InfluxDB $INFLUXD_VERSION (default config, inmem index)"
log "work dir $WORK; $cluster_desc"

qdb_install
sh_cluster_init "$WORK/cluster" "$NODES"
sh_start_etcd
sh_start_nodes "$SHARDS" "$RF"
# ROLLUPS=0: the router never offers the nodes rollups (the raw read, to
# compare with a run without it). ROUTER_ARGS: more router flags.
read -r -a router_args <<<"${ROUTER_ARGS:-}"
case "${ROLLUPS:-1}" in
  0) sh_start_router --query-rollups false "${router_args[@]}" ;;
  *) sh_start_router "${router_args[@]}" ;;
esac
# shellcheck disable=SC2119
sh_wait_writable || { log "cluster never became writable"; exit 1; }
qport=$(sh_free_port)
qdb_start "$WORK/questdb" "$qport"
QDB="127.0.0.1:$qport"
common=(--sh "$SH_ROUTER_HTTP" --qdb "$QDB" --dataset "$WORK/dataset.json")
node_metrics=$(for ((k = 1; k <= NODES; k++)); do printf '127.0.0.1:%s,' "$(sh_node_http_port "$k")"; done)
if [ "$INFLUXDB" = 1 ]; then
  iport=$(sh_free_port)
  if influxd_start "$WORK/influxdb" "$iport"; then
    common+=(--influx "127.0.0.1:$iport")
  else
    log "!!! influxd did not start (log: $WORK/influxdb/influxd.log): going on without InfluxDB"
    INFLUXDB=0
    cluster_desc=${cluster_desc%%; InfluxDB*}
  fi
fi
python3 "$PY" load "${common[@]}" --hosts "$HOSTS" --regions "$REGIONS" --hours "$HOURS" \
  --interval "$INTERVAL" 2>&1 | tee "$WORK/load.log" >&2

rc=0
python3 "$PY" bench "${common[@]}" --runs "$RUNS" --warmup "$WARMUP" --clients "$CLIENTS" \
  --only "$QUERIES" --cluster "$cluster_desc" --node-metrics "${node_metrics%,}" --out "$OUT" \
  >"$WORK/bench.md" 2>"$WORK/bench.log" || rc=$?
cat "$WORK/bench.log" >&2

# The dashboard while ingesting (after the still-data timing: its writes
# add points to what that phase compared).
if [ "$DASHBOARD" = 1 ]; then
  python3 scripts/bench_query/dashboard.py "${common[@]}" --secs "$DASHBOARD_SECS" --rate "$DASHBOARD_RATE" \
    --out "$WORK/dashboard.json" >"$WORK/dashboard.md" 2>"$WORK/dashboard.log" || {
    rc=1
    log "the dashboard phase failed (see $WORK/dashboard.log)"
  }
  cat "$WORK/dashboard.log" >&2
fi

# Where the time goes, for every query where Shardhouse's p95 is above a peer's.
profile() {
  local name=$1 pids perf_pids k pidk
  pids="router=$(sh_pid_of router)"
  perf_pids=$(sh_pid_of router)
  for ((k = 1; k <= NODES; k++)); do
    pidk=$(sh_pid_of "node-$k")
    pids+=",node-$k=$pidk"
    perf_pids+=",$pidk"
  done
  log "profiling $name for ${PROFILE_SECS}s (perf record -g on router and node(s))"
  python3 "$PY" loop "${common[@]}" --only "$name" --secs "$PROFILE_SECS" --pids "$pids" \
    >"$WORK/profile.$name.json" &
  local loop_pid=$!
  sleep 1
  if command -v perf >/dev/null; then
    perf record --no-buildid-cache -F 499 -g -p "$perf_pids" -o "$WORK/perf.$name.data" -- sleep "$((PROFILE_SECS - 2))" \
      >/dev/null 2>"$WORK/perf.$name.record.log" || log "perf record failed (see $WORK/perf.$name.record.log)"
  fi
  wait "$loop_pid" || true
  bench_profile_md "$WORK" "$name" "$NODES"
}

if [ "$PROFILE" = 1 ] && [ -f "$OUT" ]; then
  for name in $(python3 -c 'import json,sys
for r in json.load(open(sys.argv[1]))["results"]:
    if r["clients"] == 1 and max(r["p95_ratio"], r.get("p95_ratio_influxdb", 0)) > 1: print(r["name"])' "$OUT"); do
    profile "$name"
  done
fi

# What each statement a shard runs for /query costs inside chDB, on a copy
# of node 1's data once the servers are stopped (nothing else running).
if [ "$PROFILE" = 1 ] && [ -f "$OUT" ]; then
  sh_stop_all
  qdb_stop
  influxd_stop
  cp -r "$WORK/cluster/node-1/engine" "$WORK/engine-copy"
  {
    echo "#### What each statement a shard runs costs in chDB (node 1's data, scripts/bench_query/shard_sql_cost.py)"
    echo
    python3 scripts/bench_query/shard_sql_cost.py "$WORK/engine-copy" "$WORK/dataset.json"
    echo
  } >"$WORK/profile.zz_shard_sql.md" 2>"$WORK/shard_sql.log" || log "shard_sql_cost.py failed (see $WORK/shard_sql.log)"
  rm -rf "$WORK/engine-copy"
fi

log "done in $((SECONDS - start)) s; figures in $OUT; logs, profiles in $WORK"
# The table, the profiles, then the last lines (query_/questdb_/influxdb_ p95s).
grep -v -E '^(query|questdb|influxdb)_.*_p95_ms=' "$WORK/bench.md"
[ -f "$WORK/dashboard.md" ] && { grep -v -E '_p95_ms=' "$WORK/dashboard.md" || true; }
cat "$WORK"/profile.*.md 2>/dev/null || true
grep -E '^(query|questdb|influxdb)_.*_p95_ms=' "$WORK/bench.md" || true
[ -f "$WORK/dashboard.md" ] && { grep -E '_p95_ms=' "$WORK/dashboard.md" || true; }
exit "$rc"
