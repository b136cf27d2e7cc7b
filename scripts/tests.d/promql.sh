#!/usr/bin/env bash
# `make test` suite: PromQL answered by Shardhouse equals a real
# Prometheus's. A Prometheus 2.42 (Debian's `prometheus` package) scrapes
# itself, the router and three generator targets (scripts/promql/generator.py:
# counters with a reset, gauges, a classic histogram) every 5 s for ~2.5
# minutes and remote-writes everything to a local cluster (3 nodes, RF=3).
# Then every query of scripts/promql/queries.txt runs as a range query
# against both /api/v1/query_range endpoints over the same window and the
# answers are compared series by series (scripts/promql/compare.py; relative
# tolerance 1e-5 as the compliance tester's). Also checks the API's edges:
# buildinfo, labels, series, a parse error's 400 bad_data. Then remote_read:
# a second Prometheus with no data of its own reads through the router's
# /api/v1/read, and its answers to a subset of the queries must equal the
# reference's; scripts/promql/read_chunks.py reads a few metrics as
# STREAMED_XOR_CHUNKS and checks every sample against the reference's.
# Last, OpenTelemetry metrics in: scripts/promql/otlp.py posts
# OTLP/HTTP bodies (protobuf encoded by hand, and gzip'd JSON) to
# /v1/metrics?db=otlp and reads every kind back with PromQL (names, labels,
# values, refused points counted in partial_success, 400/415).
# Then Grafana's Prometheus data source, unchanged (scripts/promql/grafana_prom.py):
# a real Grafana with one data source on the router and one on the
# reference; its health check, its metric browser (names, labels, series,
# metadata) and six dashboard panels through /api/ds/query must answer as
# the reference's. Skips, printing why, when Prometheus cannot be installed
# (or, for the Grafana part only, when Grafana was not built). Cost: ~4 min.
set -euo pipefail
cd "$(dirname "$0")/../.."

BIN=${SHARDHOUSE_BIN:-${CARGO_TARGET_DIR:-$HOME/.cache/shardhouse/target}/release}
export SHARDHOUSE_BIN=$BIN
SCRAPE_SECONDS=${PROMQL_SCRAPE_SECONDS:-150}
fail() { echo "FAIL promql: $*" >&2; exit 1; }

if ! command -v prometheus >/dev/null; then
  if ! (DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus >/dev/null 2>&1); then
    echo "SKIP promql: no prometheus binary and apt-get install prometheus failed"
    exit 0
  fi
fi
PROM_VERSION=$(prometheus --version 2>&1 | sed -n 1p)
for b in shardhouse-node shardhouse-router; do
  [ -x "$BIN/$b" ] || fail "$BIN/$b missing: build with cargo build --release --workspace --bins"
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/shardhouse-promql-test.XXXXXX")
PROM_PID="" GEN_PID="" DEMO_PID="" READER_PID=""
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh
cleanup() {
  local p
  for p in $PROM_PID $GEN_PID $DEMO_PID $READER_PID; do
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  [ -z "${SH_DATA:-}" ] || sh_stop_all
  rm -rf "$TMP"
}
trap cleanup EXIT

sh_cluster_init "$TMP/data" 3
sh_start_etcd
sh_start_nodes 4 3
sh_start_router
sh_wait_writable || fail "the cluster does not take writes"
ROUTER="http://$SH_ROUTER_HTTP"

# --- scrape targets and the reference Prometheus
G1=$(sh_free_port) G2=$(sh_free_port) G3=$(sh_free_port) PROM_PORT=$(sh_free_port)
python3 scripts/promql/generator.py "$G1" "$G2" "$G3" >"$TMP/generator.log" 2>&1 &
GEN_PID=$!
# The metric families the PromQL compliance tester's queries read (demo_*:
# CPU counters, memory gauges, a latency histogram, a metric that comes and
# goes), for the queries of queries.txt written against them.
D1=$(sh_free_port) D2=$(sh_free_port) D3=$(sh_free_port)
python3 scripts/promql/demo_targets.py "$D1" "$D2" "$D3" >"$TMP/demo_targets.log" 2>&1 &
DEMO_PID=$!
cat >"$TMP/prometheus.yml" <<YAML
# evaluation_interval stays at its default (1m): the default step of a
# subquery, which the router's engine also uses.
global:
  scrape_interval: 5s
scrape_configs:
  - job_name: prometheus
    static_configs: [{targets: ['127.0.0.1:$PROM_PORT']}]
  - job_name: demo
    static_configs: [{targets: ['127.0.0.1:$G1', '127.0.0.1:$G2', '127.0.0.1:$G3']}]
  - job_name: demo_service
    static_configs: [{targets: ['127.0.0.1:$D1', '127.0.0.1:$D2', '127.0.0.1:$D3']}]
  - job_name: shardhouse
    static_configs: [{targets: ['$SH_ROUTER_HTTP']}]
remote_write:
  - url: $ROUTER/api/v1/prom/write
    queue_config: {batch_send_deadline: 1s, min_backoff: 100ms, max_backoff: 1s}
YAML
# start_prometheus NAME PORT: runs Prometheus with $TMP/NAME.yml, its TSDB
# in $TMP/NAME, on PORT; sets STARTED_PID once it answers /-/ready.
start_prometheus() {
  local name=$1 port=$2 deadline=$((SECONDS + 60))
  prometheus --config.file="$TMP/$name.yml" --storage.tsdb.path="$TMP/$name" \
    --web.listen-address="127.0.0.1:$port" --log.level=warn >"$TMP/$name.log" 2>&1 &
  STARTED_PID=$!
  until curl -fsS -m 2 "http://127.0.0.1:$port/-/ready" >/dev/null 2>&1; do
    kill -0 "$STARTED_PID" 2>/dev/null || { cat "$TMP/$name.log" >&2; fail "prometheus ($name) exited"; }
    ((SECONDS < deadline)) || fail "prometheus ($name) not ready after 60 s"
    sleep 0.5
  done
}
start_prometheus prometheus "$PROM_PORT"
PROM_PID=$STARTED_PID
PROM="http://127.0.0.1:$PROM_PORT"
echo "reference: $PROM_VERSION; scraping for ${SCRAPE_SECONDS}s"
START=$(date +%s)
sleep "$SCRAPE_SECONDS"

# --- the API's edges
body=$(curl -s "$ROUTER/api/v1/status/buildinfo")
echo "$body" | grep -q '"version":"2\.' || fail "buildinfo: $body"
code=$(curl -s -o "$TMP/err.json" -w '%{http_code}' "$ROUTER/api/v1/query?query=sum(up")
[ "$code" = 400 ] && grep -q '"errorType":"bad_data"' "$TMP/err.json" ||
  fail "a malformed query answered $code $(cat "$TMP/err.json") (want 400 bad_data)"
curl -s "$ROUTER/api/v1/label/__name__/values" | grep -q '"demo_requests_total"' ||
  fail "label/__name__/values lacks demo_requests_total"
curl -s "$ROUTER/api/v1/labels" | grep -q '"instance"' || fail "labels lacks instance"
curl -s -G "$ROUTER/api/v1/series" --data-urlencode 'match[]=up{job="demo"}' | grep -q '"job":"demo"' ||
  fail "series lacks up{job=demo}"
echo "ok: buildinfo, labels, label values, series, bad_data"

# --- the same range queries on both; the window ends 20 s ago so that
# remote_write has delivered every sample in it.
END=$(($(date +%s) - 20))
BEGIN=$((START + 30))
python3 scripts/promql/compare.py "$PROM" "$ROUTER" scripts/promql/queries.txt "$BEGIN" "$END" 10 |
  tee "$TMP/compare.out"
status=${PIPESTATUS[0]}
[ "$status" = 0 ] || fail "$(tail -1 "$TMP/compare.out")"
echo "ok: promql"

# --- remote_read: a Prometheus with an empty TSDB answers from Shardhouse.
READER_PORT=$(sh_free_port)
cat >"$TMP/reader.yml" <<YAML
global:
  scrape_interval: 5s
remote_read:
  - url: $ROUTER/api/v1/read
    read_recent: true
YAML
start_prometheus reader "$READER_PORT"
READER_PID=$STARTED_PID
READER="http://127.0.0.1:$READER_PORT"
# awk stops by itself: grep piped into head fails under pipefail (SIGPIPE,
# exit 141) once grep writes more than head reads.
awk '!/^#/ { print; if (++n == 20) exit }' scripts/promql/queries.txt >"$TMP/read-queries.txt"
python3 scripts/promql/compare.py "$PROM" "$READER" "$TMP/read-queries.txt" "$BEGIN" "$END" 10 |
  tee "$TMP/compare-read.out"
status=${PIPESTATUS[0]}
[ "$status" = 0 ] || fail "remote_read: $(tail -1 "$TMP/compare-read.out")"
code=$(curl -s -o "$TMP/read-err.txt" -w '%{http_code}' -XPOST -H 'Content-Encoding: snappy' \
  --data-binary 'not snappy' "$ROUTER/api/v1/read")
[ "$code" = 400 ] && grep -q "snappy" "$TMP/read-err.txt" ||
  fail "a bad remote_read body answered $code $(cat "$TMP/read-err.txt") (want 400 naming snappy)"
# STREAMED_XOR_CHUNKS, which Prometheus 2.55+ asks for first (2.42 asks for
# SAMPLES only): frames and XOR chunks decoded by the script, every sample
# equal to the reference's raw samples.
python3 scripts/promql/read_chunks.py "$PROM" "$ROUTER" "$BEGIN" "$END" \
  up demo_requests_total prometheus_http_requests_total || fail "remote_read chunks: see above"
echo "ok: remote_read"

# --- OpenTelemetry metrics in (OTLP/HTTP), in a database of their own so
# the comparisons above never see them.
python3 scripts/promql/otlp.py "$ROUTER" otlp || fail "otlp: see above"
echo "ok: otlp"

# --- Grafana's Prometheus data source, unchanged: a real Grafana (built by
# scripts/deps.d/grafana.sh; skipped, saying so, when it could not be built)
# with one data source on the router and one on the reference Prometheus.
# shellcheck source=scripts/lib/grafana.sh
source scripts/lib/grafana.sh
if ! why=$(sh_grafana_built); then
  echo "SKIP grafana prometheus data source: no Grafana server ($why)"
  exit 0
fi
G=$TMP/grafana
mkdir -p "$G/provisioning/datasources" "$G/provisioning/dashboards"
cat >"$G/provisioning/datasources/prom.yaml" <<YAML
apiVersion: 1
datasources:
  - {name: Shardhouse PromQL, uid: sh-promql, type: prometheus, access: proxy, url: "$ROUTER", jsonData: {httpMethod: POST, timeInterval: 5s}}
  - {name: Prometheus reference, uid: ref-prom, type: prometheus, access: proxy, url: "$PROM", jsonData: {httpMethod: POST, timeInterval: 5s}}
YAML
GRAFANA_PID=""
sh_start_grafana "$G" "$G/provisioning" || { PROM_PID="$PROM_PID $GRAFANA_PID"; fail "grafana did not start"; }
PROM_PID="$PROM_PID $GRAFANA_PID"
python3 scripts/promql/grafana_prom.py "$GRAFANA" "$BEGIN" "$END" ||
  fail "grafana prometheus data source: see above"
