#!/usr/bin/env bash
# `make bench-promql` (issue 29): is Shardhouse's PromQL as fast as the
# reference Prometheus and VictoriaMetrics single-node on the same data?
#   1. three peers on loopback, all started here: a local Shardhouse cluster
#      (etcd, NODES nodes, SHARDS shards, RF); Prometheus 2.42 (Debian's
#      `prometheus`, apt-get installed when missing) with
#      --web.enable-remote-write-receiver; VictoriaMetrics single-node
#      v1.151.0 (scripts/bench-deps/victoriametrics.sh builds it from the Go
#      module proxy into $SHARDHOUSE_CACHE/bin; when it cannot be built the
#      run goes on with the other two and says so);
#   2. ONE remote_write stream, the same requests to all three, one system
#      after the other (router `/api/v1/prom/write?db=prometheus`,
#      Prometheus and VictoriaMetrics `/api/v1/write`): a counter
#      `http_requests_total{job,instance,code}` (1,000 series), a classic
#      histogram `http_request_duration_seconds` (100 instances x 10 `le`
#      buckets, with _sum/_count) and a gauge (200 series), one sample
#      every INTERVAL s over the last HOURS up to now, oldest first (the
#      TSDB of Prometheus refuses samples too far behind its head); prints
#      each system's points/s and waits until each answers every sample;
#   3. Grafana-style range queries over the loaded window at a STEP s step
#      on each `/api/v1/query_range` (the router's reads db=prometheus, its
#      default): sum(rate()) over 1,000 series, histogram_quantile(0.95) of
#      the summed bucket rates, topk(5, rate()), sum by (code) (rate()),
#      the rate of one series and avg(avg_over_time()) of the gauge.
#      Before any timing Shardhouse's answers must equal Prometheus's (same
#      series and steps, values within relative 1e-5, the rule of
#      scripts/promql/compare.py): a mismatch is printed loudly and the
#      script exits 1. VictoriaMetrics's agreement with Prometheus is
#      printed (its rate() does not extrapolate, so it differs; never fails);
#   4. every query RUNS times after WARMUP, at each CLIENTS count (1 client:
#      the three systems interleaved run by run; more: one system at a
#      time); p50/p95 per query, system and client count;
#   5. PROFILE=1 (default): among the queries whose Shardhouse p95 is above
#      Prometheus's at 1 client, the slowest (p50), then the worst ratios
#      (at most PROFILE_MAX queries in all): the router and node(s) under
#      `perf record -g` while the query runs in a loop, and the CPU each
#      process spends per query.
# Prints the tables and, as its LAST lines, `promql_<name>_c<N>_p50_ms=`,
# `promql_<name>_c<N>_p95_ms=` and the same for `prometheus_` and
# `victoriametrics_`. Everything shares this machine's cores: compare ratios
# within one run, not absolute figures.
#
# VictoriaMetrics runs with -search.disableCache (its rollup result cache
# would answer the 2nd to 30th run of the same range from memory; the other
# two have no such cache; VM_CACHE=1 keeps it) and -search.latencyOffset=0s
# (the window ends before "now - 30 s" anyway).
#
# Knobs: HOURS (1), INTERVAL (15 s), INSTANCES (200: 1,000 counter series,
# 100 histograms, 200 gauges), BATCH (2,000 samples a remote_write request),
# SENDERS (2 concurrent writers, each owning half of the series; the
# requests are encoded once, before the first write, and held in memory:
# ~43 MB an hour of data at the default INSTANCES), STEP (30 s),
# RUNS (30), WARMUP (3), CLIENTS (comma list, 1,8), QUERIES (comma list of
# names, all), NODES (1), RF (1), SHARDS (2), VM (1; 0 leaves
# VictoriaMetrics out), VM_CACHE (0), PROFILE (1), PROFILE_MAX (2),
# PROFILE_SECS (10), OUT (the JSON figures; default $WORK/bench-promql.json),
# WORK (data, logs, profiles; default a new temp dir, removed on exit; a
# given WORK keeps all but the data directories), KEEP_DATA=1 (keep it all).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh
# shellcheck source=scripts/lib/bench.sh
source scripts/lib/bench.sh

HOURS=${HOURS:-1}
INTERVAL=${INTERVAL:-15}
INSTANCES=${INSTANCES:-200}
BATCH=${BATCH:-2000}
SENDERS=${SENDERS:-2}
STEP=${STEP:-30}
RUNS=${RUNS:-30}
WARMUP=${WARMUP:-3}
CLIENTS=${CLIENTS:-1,8}
QUERIES=${QUERIES:-}
NODES=${NODES:-1}
RF=${RF:-1}
SHARDS=${SHARDS:-2}
VM=${VM:-1}
VM_CACHE=${VM_CACHE:-0}
VM_VERSION=1.151.0
PROFILE=${PROFILE:-1}
PROFILE_MAX=${PROFILE_MAX:-2}
PROFILE_SECS=${PROFILE_SECS:-10}
CACHE=${SHARDHOUSE_CACHE:-$HOME/.cache/shardhouse}
WORK_GIVEN=${WORK:+1}
WORK=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/shardhouse-bench-promql.XXXXXX")}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
OUT=${OUT:-$WORK/bench-promql.json}
PY=scripts/bench_promql/bench_promql.py
log() { echo "[bench-promql] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

sh_require_bins shardhouse-node shardhouse-router
# The binaries of this run, linked (copied across filesystems) so that a
# rebuild during the run neither changes them nor hides their symbols from
# perf.
mkdir -p "$WORK/bin"
for b in shardhouse-node shardhouse-router; do
  ln -f "$SH_BIN/$b" "$WORK/bin/$b" 2>/dev/null || cp -f "$SH_BIN/$b" "$WORK/bin/$b"
done
SH_BIN=$WORK/bin

PROM_PID="" VM_PID="" LOOP_PID=""
# shellcheck disable=SC2317 # called by cleanup (the EXIT trap)
stop_pid() {
  local p=$1 i
  [ -n "$p" ] || return 0
  kill -TERM "$p" 2>/dev/null || return 0
  for ((i = 0; i < 150; i++)); do
    kill -0 "$p" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || true
}
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  stop_pid "$LOOP_PID"
  stop_pid "$PROM_PID"
  stop_pid "$VM_PID"
  [ -z "${SH_DATA:-}" ] || sh_stop_all 2>/dev/null || true
  if [ "${KEEP_DATA:-0}" != 1 ]; then
    if [ -n "$WORK_GIVEN" ]; then
      rm -rf "$WORK/cluster" "$WORK/prometheus" "$WORK/victoriametrics" "${WORK:?}/bin" "$WORK"/perf.*.data 2>/dev/null || true
    else
      rm -rf "$WORK"
    fi
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_http NAME PID URL: until URL answers 200 (60 s), or NAME exits.
wait_http() {
  local name=$1 pid=$2 url=$3 deadline=$((SECONDS + 60))
  until curl -fsS -m 2 -o /dev/null "$url" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { tail -n 30 "$WORK/$name.log" >&2; die "$name exited (log: $WORK/$name.log)"; }
    ((SECONDS < deadline)) || die "$name not ready after 60 s (log: $WORK/$name.log)"
    sleep 0.3
  done
}

start=$SECONDS
log "work dir $WORK"

# --- peers: the reference Prometheus, VictoriaMetrics (optional), Shardhouse
if ! command -v prometheus >/dev/null; then
  log "installing Debian's prometheus (apt-get)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus >/dev/null 2>&1 ||
    die "no prometheus binary and apt-get install prometheus failed"
fi
PROM_VERSION=$(prometheus --version 2>&1 | head -n 1 | awk '{print $3}')

VM_BIN=$CACHE/bin/victoria-metrics-$VM_VERSION
VM_NOTE=""
if [ "$VM" = 1 ]; then
  bash scripts/bench-deps/victoriametrics.sh || true
  if [ ! -x "$VM_BIN" ]; then
    VM_NOTE="VictoriaMetrics left out: $(cat "$CACHE/bin/.victoria-metrics.skipped" 2>/dev/null || echo "no $VM_BIN")"
    log "!!! $VM_NOTE; going on with Shardhouse and Prometheus"
  fi
else
  VM_NOTE="VictoriaMetrics left out (VM=0)"
fi

sh_cluster_init "$WORK/cluster" "$NODES"
sh_start_etcd
sh_start_nodes "$SHARDS" "$RF"
# shellcheck disable=SC2119 # no arguments: the defaults
sh_start_router
# shellcheck disable=SC2119
sh_wait_writable || die "cluster never became writable"

PROM_PORT=$(sh_free_port)
mkdir -p "$WORK/prometheus"
# No scrape jobs: everything it holds comes from the remote_write stream.
printf 'global:\n  scrape_interval: %ss\n' "$INTERVAL" >"$WORK/prometheus.yml"
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/prometheus" \
  --web.listen-address="127.0.0.1:$PROM_PORT" --web.enable-remote-write-receiver \
  --log.level=warn >"$WORK/prometheus.log" 2>&1 &
PROM_PID=$!
wait_http prometheus "$PROM_PID" "http://127.0.0.1:$PROM_PORT/-/ready"
log "Prometheus $PROM_VERSION ready at 127.0.0.1:$PROM_PORT (pid $PROM_PID)"

systems=(--system shardhouse "http://$SH_ROUTER_HTTP/api/v1/prom/write?db=prometheus" "http://$SH_ROUTER_HTTP"
  --system prometheus "http://127.0.0.1:$PROM_PORT/api/v1/write" "http://127.0.0.1:$PROM_PORT")
peers="Prometheus $PROM_VERSION"
if [ -z "$VM_NOTE" ]; then
  VM_PORT=$(sh_free_port)
  vm_args=(-httpListenAddr="127.0.0.1:$VM_PORT" -storageDataPath="$WORK/victoriametrics"
    -search.latencyOffset=0s -loggerLevel=WARN)
  [ "$VM_CACHE" = 1 ] || vm_args+=(-search.disableCache)
  "$VM_BIN" "${vm_args[@]}" >"$WORK/victoriametrics.log" 2>&1 &
  VM_PID=$!
  wait_http victoriametrics "$VM_PID" "http://127.0.0.1:$VM_PORT/health"
  log "VictoriaMetrics v$VM_VERSION ready at 127.0.0.1:$VM_PORT (pid $VM_PID)"
  systems+=(--system victoriametrics "http://127.0.0.1:$VM_PORT/api/v1/write" "http://127.0.0.1:$VM_PORT")
  peers+=", VictoriaMetrics v$VM_VERSION ($([ "$VM_CACHE" = 1 ] && echo "result cache on" || echo "-search.disableCache"))"
fi
cluster_desc="Shardhouse $NODES node(s), $SHARDS shard(s), RF=$RF; $peers"
log "$cluster_desc"

# --- the remote_write stream, then the queries
common=("${systems[@]}" --dataset "$WORK/dataset.json")
python3 "$PY" load "${common[@]}" --hours "$HOURS" --interval "$INTERVAL" --instances "$INSTANCES" \
  --batch "$BATCH" --senders "$SENDERS" 2>&1 | tee "$WORK/load.log" >&2
[ "${PIPESTATUS[0]}" = 0 ] || die "loading failed (see $WORK/load.log)"

rc=0
python3 "$PY" bench "${common[@]}" --step "$STEP" --runs "$RUNS" --warmup "$WARMUP" --clients "$CLIENTS" \
  --only "$QUERIES" --cluster "$cluster_desc" --out "$OUT" >"$WORK/bench.md" 2>"$WORK/bench.log" || rc=$?
cat "$WORK/bench.log" >&2

# --- where the time goes, for the queries where Shardhouse's p95 is above
# Prometheus's (worst ratio first)
profile() {
  local name=$1 pids perf_pids k pidk proc
  pids="router=$(sh_pid_of router)"
  perf_pids=$(sh_pid_of router)
  for ((k = 1; k <= NODES; k++)); do
    pidk=$(sh_pid_of "node-$k")
    pids+=",node-$k=$pidk"
    perf_pids+=",$pidk"
  done
  log "profiling $name for ${PROFILE_SECS}s (perf record -g on router and node(s))"
  python3 "$PY" loop --url "http://$SH_ROUTER_HTTP" --dataset "$WORK/dataset.json" --step "$STEP" \
    --only "$name" --secs "$PROFILE_SECS" --pids "$pids" >"$WORK/profile.$name.json" &
  LOOP_PID=$!
  sleep 1
  if command -v perf >/dev/null; then
    perf record --no-buildid-cache -F 499 -g -p "$perf_pids" -o "$WORK/perf.$name.data" -- sleep "$((PROFILE_SECS - 2))" \
      >/dev/null 2>"$WORK/perf.$name.record.log" || log "perf record failed (see $WORK/perf.$name.record.log)"
  fi
  wait "$LOOP_PID" || true
  LOOP_PID=""
  bench_profile_md "$WORK" "$name" "$NODES"
}

if [ "$PROFILE" = 1 ] && [ -f "$OUT" ]; then
  for name in $(python3 -c 'import json,sys
rs = [r for r in json.load(open(sys.argv[1]))["results"] if r["clients"] == 1 and r["p95_ratio"] > 1]
slowest = sorted(rs, key=lambda r: -r["shardhouse"]["p50_ms"])[:1]
names = [r["name"] for r in slowest + sorted(rs, key=lambda r: -r["p95_ratio"])]
print(" ".join(list(dict.fromkeys(names))[:int(sys.argv[2])]))' "$OUT" "$PROFILE_MAX"); do
    profile "$name"
  done
fi

if [ "${KEEP_DATA:-0}" = 1 ] || [ -n "$WORK_GIVEN" ]; then
  log "done in $((SECONDS - start)) s; figures in $OUT; logs, profiles in $WORK"
else
  log "done in $((SECONDS - start)) s; $WORK (figures, logs, profiles) is removed on exit: KEEP_DATA=1 keeps it"
fi
# The table, the profiles, then the last lines (<system>_<query>_c<N>_p50/p95_ms=).
last='^(promql|prometheus|victoriametrics)_.*_c[0-9]+_p(50|95)_ms='
[ -z "$VM_NOTE" ] || echo "note: $VM_NOTE"
grep -v -E "$last" "$WORK/bench.md" || true
cat "$WORK"/profile.*.md 2>/dev/null || true
grep -E "$last" "$WORK/bench.md" || true
exit "$rc"
