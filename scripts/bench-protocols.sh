#!/usr/bin/env bash
# `make bench-protocols`: against a real local cluster (RF=3 by default):
#   1. the protocol table (GreptimeDB protocol study method): every ingest
#      protocol (line protocol, msgpack, remote_write, gRPC unary, gRPC
#      streaming) at batch sizes 50/200/1000/2000, 5 workers, fixed work,
#      1M-series and 100k-series sets;
#   2. the small-write profile (YugabyteDB study method): hundreds of
#      concurrent clients, each sending 1-10 points per request;
#   3. the k6 ramp (loadtest/k6/ramp.js) when `k6` is on PATH, so the k6
#      scripts are exercised against the same cluster.
# Prints the tables; JSON, metrics and logs go to $OUT.
#
# Knobs: NODES (3), RF (3), SHARDS (8), SCALE (fraction of the study's 10M
# rows per cell, default 0.01), SERIES (1m,100k), CLIENTS (100,200,400),
# STEP_SECS (10), K6_RATES (req/s per k6 step, default 50,100,200), OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh

NODES=${NODES:-3}
RF=${RF:-3}
SHARDS=${SHARDS:-8}
SCALE=${SCALE:-0.01}
SERIES=${SERIES:-1m,100k}
CLIENTS=${CLIENTS:-100,200,400}
STEP_SECS=${STEP_SECS:-10}
K6_RATES=${K6_RATES:-50,100,200}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/shardhouse-bench-protocols.XXXXXX")}
mkdir -p "$OUT"
LT="$SH_BIN/shardhouse-loadtest"
sh_require_bins shardhouse-node shardhouse-router shardhouse-loadtest
log() { echo "[bench-protocols] $*" >&2; }

sh_cluster_init "$OUT/data" "$NODES"
trap 'sh_stop_all 2>/dev/null || true' EXIT
sh_start_etcd
sh_start_nodes "$SHARDS" "$RF"
sh_start_router
sh_wait_writable || { log "cluster never became writable"; exit 1; }
url="http://$SH_ROUTER_HTTP"
grpc="http://$SH_ROUTER_GRPC"
log "cluster: $NODES node(s), RF=$RF, $SHARDS shards; results in $OUT"

echo "## Protocols ($NODES nodes, RF=$RF, $SHARDS shards)"
echo
"$LT" protocols --url "$url" --grpc-url "$grpc" --series "$SERIES" --scale "$SCALE" \
  --json "$OUT/protocols.json" 2>"$OUT/protocols.log"
echo
echo "## Small writes ($NODES nodes, RF=$RF, $SHARDS shards)"
echo
"$LT" small-writes --url "$url" --clients "$CLIENTS" --step-secs "$STEP_SECS" \
  --pid-dir "$SH_DATA/pids" --json "$OUT/small-writes.json" 2>"$OUT/small-writes.log"

if command -v k6 >/dev/null 2>&1; then
  echo
  echo "## k6 ramp (loadtest/k6/ramp.js, line protocol, 1,000 points/request)"
  echo
  "$LT" payload --dataset low --batch 1000 --out "$OUT/payload.lp" 2>/dev/null
  echo "| rate (req/s) | requests | failed | dropped | p50 | p95 | p99 | points/s |"
  echo "|---|---|---|---|---|---|---|---|"
  IFS=, read -r -a rates <<<"$K6_RATES"
  for r in "${rates[@]}"; do
    RATE=$r PAYLOAD_FILE="$OUT/payload.lp" POINTS_PER_REQUEST=1000 DURATION="${STEP_SECS}s" \
      URL="$url" k6 run --quiet --summary-export "$OUT/k6-$r.json" loadtest/k6/ramp.js \
      >"$OUT/k6-$r.log" 2>&1 || log "k6 at $r req/s exited non-zero (see $OUT/k6-$r.log)"
    python3 - "$OUT/k6-$r.json" "$r" "$STEP_SECS" <<'PY'
import json, sys
path, rate, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
m = json.load(open(path))["metrics"]
d = m.get("http_req_duration", {})
reqs = m.get("http_reqs", {}).get("count", 0)
failed = m.get("http_req_failed", {}).get("passes", 0)
dropped = m.get("dropped_iterations", {}).get("count", 0)
pts = m.get("points_acked", {}).get("count", 0)
ms = lambda k: f"{d.get(k, 0):.0f} ms"
print(f"| {rate} | {reqs} | {failed} | {dropped} | {ms('p(50)')} | {ms('p(95)')} | {ms('p(99)')} | {pts / secs:,.0f} |")
PY
  done
else
  log "k6 not on PATH: skipping the k6 ramp (go install go.k6.io/k6@v1.3.0)"
fi
