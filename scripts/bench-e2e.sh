#!/usr/bin/env bash
# `make bench-e2e`: the end-to-end open-model ramp, in one run, against
#   1. a local cluster with RF=1 (one node),
#   2. a local cluster with RF=3 (three nodes),
#   3. QuestDB 9.2.2 (Maven Central, loopback only, line protocol over HTTP),
# all driven by the same load generator, dataset, batch and steps. Prints the
# three ramp tables, a per-stage breakdown from the router/node metrics, and
# as its LAST lines:
#   e2e_rf1_sustainable_points_per_sec=<N>
#   e2e_rf3_sustainable_points_per_sec=<N>
#   questdb_sustainable_points_per_sec=<N>
# Everything (server, load generator) shares this machine's cores: compare
# ratios within one run, not absolute figures across machines.
#
# Knobs: POINT_RATES (points/s per step, comma separated), BATCH (points per
# request), DATASET (low|100k|1m), PROTOCOL (line|msgpack|...), STEP_SECS,
# SHARDS (default: one per node, i.e. 1 for RF=1 and 3 for RF=3; see
# docs/benchmarks.md for what more shards per node cost), MAX_INFLIGHT, OUT
# (directory for JSON, metrics and logs), SKIP_QUESTDB=1.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh
# shellcheck source=scripts/lib/questdb.sh
source scripts/lib/questdb.sh

POINT_RATES=${POINT_RATES:-25000,50000,100000,150000,200000,250000,300000,400000,500000}
BATCH=${BATCH:-1000}
DATASET=${DATASET:-low}
PROTOCOL=${PROTOCOL:-line}
STEP_SECS=${STEP_SECS:-10}
SHARDS=${SHARDS:-}
MAX_INFLIGHT=${MAX_INFLIGHT:-256}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/shardhouse-bench-e2e.XXXXXX")}
mkdir -p "$OUT"
LT="$SH_BIN/shardhouse-loadtest"
sh_require_bins shardhouse-node shardhouse-router shardhouse-loadtest
log() { echo "[bench-e2e] $*" >&2; }

ramp() { # NAME URL EXTRA_ARGS...
  local name=$1 url=$2
  shift 2
  "$LT" ramp --name "$name" --url "$url" --protocol "$PROTOCOL" --dataset "$DATASET" \
    --batch "$BATCH" --point-rates "$POINT_RATES" --step-secs "$STEP_SECS" \
    --max-inflight "$MAX_INFLIGHT" --stop-below-pct 80 --warmup-secs "${WARMUP_SECS:-5}" --json "$OUT/$name.json" \
    --summary-key "$name" "$@" 2>"$OUT/$name.loadtest.log" | tee "$OUT/$name.md"
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

run_cluster() { # NAME NODES RF
  local name=$1 nodes=$2 rf=$3
  local shards=${SHARDS:-$nodes}
  log "== $name: $nodes node(s), RF=$rf, $shards shards"
  sh_cluster_init "$OUT/$name-data" "$nodes"
  sh_start_etcd
  sh_start_nodes "$shards" "$rf"
  sh_start_router
  sh_wait_writable || { log "$name cluster never became writable"; sh_stop_all; return 1; }
  ramp "e2e_$name" "http://$SH_ROUTER_HTTP" --pid-dir "$SH_DATA/pids" || true
  scrape "e2e_$name"
  stages "e2e_$name" | tee "$OUT/e2e_$name.stages.md"
  sh_stop_all
  # The data of a bench run is not worth keeping (it can be GBs).
  rm -rf "$SH_DATA"/node-* "$SH_DATA"/etcd
}

trap 'sh_stop_all 2>/dev/null || true; qdb_stop' EXIT

start=$SECONDS
log "results in $OUT; rates ${POINT_RATES} points/s, batch $BATCH, dataset $DATASET, protocol $PROTOCOL, ${STEP_SECS}s steps"
run_cluster rf1 1 1
run_cluster rf3 3 3

if [ "${SKIP_QUESTDB:-0}" != 1 ]; then
  log "== questdb $QDB_VERSION"
  qdb_install
  qport=$(sh_free_port)
  qdb_start "$OUT/questdb-data" "$qport"
  ramp questdb "http://127.0.0.1:$qport" --line-path /write --pid "questdb=$QDB_PID" || true
  qdb_stop
  rm -rf "$OUT/questdb-data/db"
fi

log "done in $((SECONDS - start)) s; JSON, metrics and logs in $OUT"
echo
echo "## Summary"
for n in e2e_rf1 e2e_rf3 questdb; do
  [ -f "$OUT/$n.md" ] && grep "^${n}_sustainable_points_per_sec=" "$OUT/$n.md" | tail -n 1 | sed 's/^/  /' || true
done
echo
for n in e2e_rf1 e2e_rf3 questdb; do
  v=$(grep -h "^${n}_sustainable_points_per_sec=" "$OUT/$n.md" 2>/dev/null | tail -n 1 | cut -d= -f2)
  echo "${n}_sustainable_points_per_sec=${v:-0}"
done
