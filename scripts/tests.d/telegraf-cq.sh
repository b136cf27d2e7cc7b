#!/usr/bin/env bash
# `make test` suite: a real Telegraf writing through InfluxDB's v1 output
# into a retention policy, and a continuous query downsampling into a
# second one, across a kill -9 of the router running the query and of a
# node (issue 27).
#
#  1. Telegraf (scripts/deps.d/telegraf.sh) with inputs.cpu and inputs.mem
#     every second, outputs.influxdb with `retention_policy = "two_weeks"`,
#     and outputs.file: the file is the record of every metric it sent.
#  2. A 3-node RF=3 cluster; policies two_weeks (default) and downsampled;
#     `CREATE CONTINUOUS QUERY ... RESAMPLE EVERY 5s FOR 30s` averaging
#     cpu's usage_idle into downsampled.cpu_5s, grouped by every tag.
#  3. While Telegraf writes: kill -9 of the router (the only one, so the
#     one running the query), restarted; then kill -9 of node 1, restarted.
#  4. Telegraf stops (it flushes what it buffered). Checks: every cpu and
#     mem point of the file is in two_weeks, once, with its usage_idle /
#     used_percent; every 5 s interval of every cpu series has one row in
#     downsampled.cpu_5s whose value is the mean of the raw points.
# Last line: `telegraf_cq raw_points=N missing=0 intervals=N wrong=0`.
#
# Knob: TELEGRAF_CQ_SECONDS (default 12): how long Telegraf writes before
# the first kill, and again between the kills and before it stops; e.g.
# TELEGRAF_CQ_SECONDS=120 for a run of several minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh

log() { echo "[telegraf-cq] $*" >&2; }
fail() {
  echo "FAIL telegraf-cq: $*" >&2
  exit 1
}

CACHE=${SHARDHOUSE_CACHE:-$HOME/.cache/shardhouse}
sh_require_bins shardhouse-node shardhouse-router
scripts/deps.d/telegraf.sh || fail "cannot build telegraf (scripts/deps.d/telegraf.sh)"
TELEGRAF="$CACHE/bin/telegraf-1.37.2"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/shardhouse-telegraf-cq.XXXXXX")
TG_PID=""
cleanup() {
  local rc=$?
  set +e
  [ -n "$TG_PID" ] && kill "$TG_PID" 2>/dev/null && wait "$TG_PID" 2>/dev/null
  [ -n "${SH_DATA:-}" ] && sh_stop_all
  if [ "$rc" != 0 ] || [ "${KEEP_DATA:-0}" = 1 ]; then
    log "data kept in $TMP"
  else
    rm -rf "$TMP"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

sh_cluster_init "$TMP/cluster" 3
sh_cluster_credential
sh_start_etcd
sh_start_nodes 4 3
# shellcheck disable=SC2119 # the router takes no extra flags here
sh_start_router
sh_wait_writable "$SH_READY_TIMEOUT" || fail "cluster never became writable"
ROUTER="http://$SH_ROUTER_HTTP"

influxql() { # STATEMENT: runs it, fails on any error in the answer
  local out
  out=$(curl -s -XPOST "$ROUTER/query" --data-urlencode "q=$1")
  case "$out" in
    *'"error"'*) fail "$1: $out" ;;
  esac
}
influxql 'CREATE DATABASE "telegraf"'
influxql 'CREATE RETENTION POLICY "two_weeks" ON "telegraf" DURATION 14d REPLICATION 1 DEFAULT'
influxql 'CREATE RETENTION POLICY "downsampled" ON "telegraf" DURATION 52w REPLICATION 1'
influxql 'CREATE CONTINUOUS QUERY "cq_cpu_5s" ON "telegraf" RESAMPLE EVERY 5s FOR 30s BEGIN SELECT mean("usage_idle") AS "usage_idle" INTO "telegraf"."downsampled"."cpu_5s" FROM "telegraf"."two_weeks"."cpu" GROUP BY time(5s), * END'

cat >"$TMP/telegraf.conf" <<EOF
[agent]
  interval = "1s"
  flush_interval = "1s"
  hostname = "tg-test"
  metric_buffer_limit = 100000
[[inputs.cpu]]
  percpu = true
  totalcpu = true
  fieldinclude = ["usage_idle", "usage_user"]
[[inputs.mem]]
  fieldinclude = ["used_percent", "available"]
[[outputs.influxdb]]
  urls = ["$ROUTER"]
  database = "telegraf"
  retention_policy = "two_weeks"
  timeout = "5s"
[[outputs.file]]
  files = ["$TMP/metrics.lp"]
  data_format = "influx"
EOF
"$TELEGRAF" --config "$TMP/telegraf.conf" >"$TMP/telegraf.log" 2>&1 &
TG_PID=$!
log "telegraf running (pid $TG_PID)"

RUN_SECONDS=${TELEGRAF_CQ_SECONDS:-12}
sleep "$RUN_SECONDS"
log "kill -9 of the router (it runs the continuous query)"
sh_kill9 router
sleep 3
# shellcheck disable=SC2119
sh_start_router
sleep "$((RUN_SECONDS > 10 ? RUN_SECONDS : 10))"
log "kill -9 of node 1"
sh_kill9 node-1
sleep 3
sh_start_node 1
sh_wait_node 1
sleep "$((RUN_SECONDS > 10 ? RUN_SECONDS : 10))"
kill -TERM "$TG_PID"
wait "$TG_PID" || true
TG_PID=""
grep -q 'E! \[outputs.influxdb\]' "$TMP/telegraf.log" &&
  log "telegraf saw write errors while a process was down (it retries): $(grep -c 'E! \[outputs.influxdb\]' "$TMP/telegraf.log")"
[ -s "$TMP/metrics.lp" ] || fail "telegraf recorded no metric: $(tail -n 5 "$TMP/telegraf.log")"

# The last raw interval is complete once Telegraf stopped; the query runs
# every 5 s and the new router waits out the old one's lease (10 s).
verify() {
  python3 - "$ROUTER" "$TMP/metrics.lp" <<'PY'
import json, sys, urllib.parse, urllib.request
router, path = sys.argv[1], sys.argv[2]
STEP = 5_000_000_000

def query(q):
    url = router + "/query?" + urllib.parse.urlencode({"db": "telegraf", "epoch": "ns", "q": q})
    with urllib.request.urlopen(url, timeout=30) as r:
        res = json.load(r)["results"][0]
    if "error" in res:
        sys.exit(f"{q}: {res['error']}")
    out = {}
    for s in res.get("series", []):
        key = tuple(sorted(s.get("tags", {}).items()))
        for t, v in s["values"]:
            if (key, t) in out:
                sys.exit(f"{q}: ({key}, {t}) answered twice")
            out[(key, t)] = v
    return out

sent = {"cpu": {}, "mem": {}}
field_of = {"cpu": "usage_idle", "mem": "used_percent"}
for line in open(path):
    head, fields, ts = line.rsplit(" ", 2)
    name, *tags = head.split(",")
    if name not in sent:
        continue
    values = dict(f.split("=", 1) for f in fields.split(","))
    v = float(values[field_of[name]].rstrip("i"))
    key = tuple(sorted(t.split("=", 1) for t in tags))
    sent[name][(tuple(map(tuple, key)), int(ts))] = v

missing = 0
raw = 0
for name, points in sent.items():
    got = query(f'SELECT "{field_of[name]}" FROM "telegraf"."two_weeks"."{name}" GROUP BY *')
    raw += len(points)
    for k, v in points.items():
        if k not in got:
            missing += 1
            if missing <= 5:
                print(f"missing {name} {k}", file=sys.stderr)
        elif abs(got[k] - v) > 1e-9 * max(1.0, abs(v)):
            sys.exit(f"{name} {k}: stored {got[k]}, sent {v}")
    extra = set(got) - set(points)
    if extra:
        sys.exit(f"{name}: {len(extra)} points Telegraf never sent, e.g. {sorted(extra)[:2]}")

means = {}
for (key, t), v in sent["cpu"].items():
    means.setdefault((key, t - t % STEP), []).append(v)
got = query('SELECT "usage_idle" FROM "telegraf"."downsampled"."cpu_5s" GROUP BY *')
wrong = 0
for k, vs in means.items():
    want = sum(vs) / len(vs)
    if k not in got or abs(got[k] - want) > 1e-9 * max(1.0, abs(want)):
        wrong += 1
        if wrong <= 5:
            print(f"interval {k}: stored {got.get(k)}, mean of raw {want} ({len(vs)} points)", file=sys.stderr)
extra = set(got) - set(means)
print(f"telegraf_cq raw_points={raw} missing={missing} intervals={len(means)} wrong={wrong} extra_intervals={len(extra)}")
sys.exit(1 if missing or wrong or extra else 0)
PY
}

deadline=$((SECONDS + 60)) t0=$SECONDS
until verify >"$TMP/verify.out" 2>"$TMP/verify.err"; do
  if ((SECONDS >= deadline)); then
    cat "$TMP/verify.err" "$TMP/verify.out" >&2
    fail "raw points or downsampled intervals wrong 60 s after Telegraf stopped"
  fi
  sleep 3
done
log "every raw point and interval found $((SECONDS - t0)) s after Telegraf stopped"
cat "$TMP/verify.out"
