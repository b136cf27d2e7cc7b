#!/usr/bin/env bash
# `make bench-e2e`: the end-to-end open-model ramp, in one run, against
#   1. a local cluster with RF=1 (one node),
#   2. a local cluster with RF=3 (three nodes),
#   3. QuestDB 9.2.2 (Maven Central, loopback only, line protocol over HTTP,
#      its worker pools sized for a small host: qdb_small_host in
#      scripts/lib/bench.sh),
# all driven by the same load generator, dataset, batch sizes and steps.
# Every (system, batch size) ramp starts on a fresh server. The ramp offers
# POINT_RATES, then grows by GROW per step with no fixed ceiling until a
# step delivers < 80% of offered. Prints the ramp tables, a per-stage
# breakdown from the router/node metrics, and as its LAST lines, the better
# of the batch sizes for each system:
#   DATASET=low (default, one batch of 1,000):
#     e2e_rf1_sustainable_points_per_sec=<N>
#     e2e_rf3_sustainable_points_per_sec=<N>
#     questdb_sustainable_points_per_sec=<N>
#   DATASET=1m (or 100k; batches of 1,000 and 10,000):
#     e2e_1m_rf1_sustainable_points_per_sec=<N>
#     e2e_1m_rf3_sustainable_points_per_sec=<N>
#     e2e_1m_questdb_sustainable_points_per_sec=<N>
# Everything (server, load generator) shares this machine's cores: compare
# ratios within one run, not absolute figures across machines.
#
# Knobs: POINT_RATES (first steps, points/s, comma separated), GROW (factor
# per step after them; 0 = the listed steps only), MAX_STEPS, BATCHES
# (points per request, comma separated; BATCH=<n> for one), DATASET
# (low|100k|1m), PROTOCOL (line|msgpack|...), STEP_SECS, SHARDS (default:
# one per node, i.e. 1 for RF=1 and 3 for RF=3; see docs/benchmarks.md for
# what more shards per node cost), MAX_INFLIGHT, SYSTEMS (any of
# rf1,rf3,questdb), OUT (directory for JSON, metrics and logs),
# SKIP_QUESTDB=1, QDB_DEFAULTS=1 (QuestDB with its own defaults).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh
# shellcheck source=scripts/lib/questdb.sh
source scripts/lib/questdb.sh
# shellcheck source=scripts/lib/bench.sh
source scripts/lib/bench.sh

POINT_RATES=${POINT_RATES:-25000,50000,100000,150000,200000,250000,300000,400000,500000}
GROW=${GROW:-1.25}
MAX_STEPS=${MAX_STEPS:-60}
DATASET=${DATASET:-low}
if [ "$DATASET" = low ]; then BATCHES=${BATCHES:-${BATCH:-1000}}; else BATCHES=${BATCHES:-${BATCH:-1000,10000}}; fi
SYSTEMS=${SYSTEMS:-rf1,rf3,questdb}
[ "${SKIP_QUESTDB:-0}" = 1 ] && SYSTEMS=${SYSTEMS//questdb/}
PROTOCOL=${PROTOCOL:-line}
STEP_SECS=${STEP_SECS:-10}
SHARDS=${SHARDS:-}
MAX_INFLIGHT=${MAX_INFLIGHT:-256}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/shardhouse-bench-e2e.XXXXXX")}
mkdir -p "$OUT"
LT="$SH_BIN/shardhouse-loadtest"
sh_require_bins shardhouse-node shardhouse-router shardhouse-loadtest
log() { echo "[bench-e2e] $*" >&2; }

# The names of a system's ramps and last lines: today's names for the low
# dataset (so the recorded runs stay comparable), the dataset in them
# otherwise; with several batch sizes each ramp gets a _b<batch> suffix.
sys_key() { # SYSTEM -> e2e_rf1 | questdb | e2e_1m_rf1 | e2e_1m_questdb
  local sys=$1
  if [ "$DATASET" = low ]; then
    [ "$sys" = questdb ] && echo questdb || echo "e2e_$sys"
  else
    echo "e2e_${DATASET}_$sys"
  fi
}
ramp_key() { # SYSTEM BATCH
  if [[ "$BATCHES" == *,* ]]; then echo "$(sys_key "$1")_b$2"; else sys_key "$1"; fi
}

# Scrapes /metrics of the router and every node into $OUT/<name>.<comp>.prom.
scrape() {
  local name=$1 k
  curl -s -m 5 "http://$SH_ROUTER_HTTP/metrics" >"$OUT/$name.router.prom" || true
  for ((k = 1; k <= SH_NODES; k++)); do
    curl -s -m 5 "http://127.0.0.1:$(sh_node_http_port "$k")/metrics" >"$OUT/$name.node-$k.prom" || true
  done
}

# Per-stage breakdown: mean time per observation and total seconds of each
# write-path histogram, summed over label sets and processes.
stages() {
  local name=$1
  python3 - "$name" "$OUT"/"$name".*.prom <<'PY'
import sys, re, collections
name, files = sys.argv[1], sys.argv[2:]
want = ["shardhouse_router_parse_seconds", "shardhouse_router_series_hash_seconds",
        "shardhouse_router_batch_build_seconds", "shardhouse_router_queue_wait_seconds",
        "shardhouse_router_forward_seconds",
        "shardhouse_router_write_seconds", "shardhouse_node_write_seconds",
        "shardhouse_wal_append_seconds", "shardhouse_wal_commit_seconds",
        "shardhouse_engine_flush_seconds", "shardhouse_wal_group_commit_entries"]
s = collections.defaultdict(float); c = collections.defaultdict(float)
points = 0.0
for f in files:
    for line in open(f, errors="replace"):
        if line.startswith("#"): continue
        m = re.match(r'^([a-z_]+?)(_sum|_count)?(\{[^}]*\})?\s+([0-9.eE+-]+|NaN)', line)
        if not m: continue
        metric, suf, val = m.group(1), m.group(2), m.group(4)
        try: v = float(val)
        except ValueError: continue
        if metric == "shardhouse_router_points_total" and not suf: points += v
        if metric in want:
            if suf == "_sum": s[metric] += v
            elif suf == "_count": c[metric] += v
print(f"\n#### {name}: where a write's time goes (from /metrics, whole run)\n")
print("| stage (histogram) | observations | mean | total |")
print("|---|---|---|---|")
for w in want:
    if c[w] == 0:
        print(f"| `{w}` | 0 | - | - |"); continue
    mean = s[w] / c[w]
    if w.endswith("_entries"):
        print(f"| `{w}` | {int(c[w]):,} | {mean:.1f} entries | - |")
    else:
        print(f"| `{w}` | {int(c[w]):,} | {mean*1000:.2f} ms | {s[w]:.1f} s |")
if points:
    print(f"\nrouter points: {int(points):,}; CPU-side stages per point: " + ", ".join(
        f"{w.split('_')[2]} {1e9*s[w]/points:.0f} ns" for w in want[:3] if c[w]))
PY
}

run_cluster() { # NAME BATCH NODES RF
  local name=$1 batch=$2 nodes=$3 rf=$4
  local shards=${SHARDS:-$nodes}
  log "== $name: $nodes node(s), RF=$rf, $shards shards, $batch points/request"
  sh_cluster_init "$OUT/$name-data" "$nodes"
  sh_start_etcd
  sh_start_nodes "$shards" "$rf"
  sh_start_router
  sh_wait_writable || { log "$name cluster never became writable"; sh_stop_all; return 1; }
  bench_ramp "$name" "$batch" "http://$SH_ROUTER_HTTP" --pid-dir "$SH_DATA/pids" || true
  scrape "$name"
  stages "$name" | tee "$OUT/$name.stages.md"
  sh_stop_all
  # The data of a bench run is not worth keeping (it can be GBs).
  rm -rf "$SH_DATA"/node-* "$SH_DATA"/etcd
}

trap 'sh_stop_all 2>/dev/null || true; qdb_stop' EXIT

run_questdb() { # NAME BATCH
  local name=$1 batch=$2 qport
  log "== $name: questdb $QDB_VERSION, $batch points/request"
  qport=$(sh_free_port)
  qdb_start "$OUT/questdb-data" "$qport"
  bench_ramp "$name" "$batch" "http://127.0.0.1:$qport" --line-path /write --pid "questdb=$QDB_PID" || true
  qdb_stop
  rm -rf "$OUT/questdb-data/db"
}

start=$SECONDS
log "results in $OUT; first rates ${POINT_RATES} points/s then x$GROW per step, batches $BATCHES, dataset $DATASET, protocol $PROTOCOL, ${STEP_SECS}s steps, systems $SYSTEMS"
IFS=, read -r -a batch_list <<<"$BATCHES"
IFS=, read -r -a sys_list <<<"$SYSTEMS"
if [[ ",$SYSTEMS," == *,questdb,* ]]; then qdb_install; qdb_small_host; log "QuestDB: $(qdb_settings)"; fi
for sys in "${sys_list[@]}"; do
  for b in "${batch_list[@]}"; do
    case $sys in
      rf1) run_cluster "$(ramp_key rf1 "$b")" "$b" 1 1 ;;
      rf3) run_cluster "$(ramp_key rf3 "$b")" "$b" 3 3 ;;
      questdb) run_questdb "$(ramp_key questdb "$b")" "$b" ;;
      "") ;;
      *) log "unknown system $sys (rf1, rf3, questdb)"; exit 2 ;;
    esac
  done
done

log "done in $((SECONDS - start)) s; JSON, metrics and logs in $OUT"
echo
echo "## Summary ($DATASET dataset, batches $BATCHES; load average $(cut -d' ' -f1-3 /proc/loadavg) at the end; QuestDB: $(qdb_settings))"
for sys in "${sys_list[@]}"; do
  [ -n "$sys" ] || continue
  for b in "${batch_list[@]}"; do
    n=$(ramp_key "$sys" "$b")
    [ -f "$OUT/$n.md" ] && grep "^${n}_sustainable_points_per_sec=" "$OUT/$n.md" | tail -n 1 | sed "s/^/  batch $b: /" || true
  done
done
echo
# Last lines: each system at the better of its batch sizes.
for sys in "${sys_list[@]}"; do
  [ -n "$sys" ] || continue
  best=0
  for b in "${batch_list[@]}"; do
    n=$(ramp_key "$sys" "$b")
    v=$(bench_sustainable "$n")
    if ((v > best)); then best=$v; fi
  done
  echo "$(sys_key "$sys")_sustainable_points_per_sec=$best"
done
