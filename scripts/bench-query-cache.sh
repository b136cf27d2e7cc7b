#!/usr/bin/env bash
# Engine CPU of a dashboard's first load against its refresh (issue 28,
# item 4: the router's cache of settled GROUP BY time() buckets). A local
# cluster (1 node, 2 shards) gets 24 h of points (HOSTS hosts at STEP s, two
# fields); a 10-panel dashboard over `now() - 24h` is loaded once (every
# statement misses the cache), then refreshed REFRESHES times. Prints the
# node process's CPU seconds (utime + stime from /proc: chDB runs inside
# it) for the first load and per refresh, the ratio, and the router's
# cache counters. Pass --query-cache-mb 0 as ROUTER_ARGS to compare with
# the cache off. Cost: ~2 min.
set -euo pipefail
cd "$(dirname "$0")/.."

HOSTS=${HOSTS:-200}
STEP=${STEP:-20}
REFRESHES=${REFRESHES:-5}
ROUTER_ARGS=${ROUTER_ARGS:-}
BIN=${SHARDHOUSE_BIN:-${CARGO_TARGET_DIR:-$HOME/.cache/shardhouse/target}/release}
export SHARDHOUSE_BIN=$BIN

TMP=$(mktemp -d "${TMPDIR:-/tmp}/shardhouse-bench-query-cache.XXXXXX")
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh
cleanup() {
  [ -z "${SH_DATA:-}" ] || sh_stop_all
  rm -rf "$TMP"
}
trap cleanup EXIT

sh_cluster_init "$TMP/data" 1
sh_start_etcd
sh_start_nodes 2 1
# shellcheck disable=SC2086
sh_start_router $ROUTER_ARGS
sh_wait_writable || sh_die "the cluster does not take writes"

python3 - "http://$SH_ROUTER_HTTP" "$(sh_pid_of node-1)" "$HOSTS" "$STEP" "$REFRESHES" <<'PY'
import json, os, random, sys, time, urllib.parse, urllib.request

router, pid, hosts, step, refreshes = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
DB = "dash"
TICK = os.sysconf("SC_CLK_TCK")


def call(method, path, body=None):
    req = urllib.request.Request(router + path, data=body, method=method)
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.read().decode()


def query(q):
    body = urllib.parse.urlencode({"db": DB, "q": q, "epoch": "ms"}).encode()
    res = json.loads(call("POST", "/query", body))["results"][0]
    if "error" in res:
        raise SystemExit(f"{q}: {res['error']}")
    return res


def cpu_seconds():
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def metric(name):
    for line in call("GET", "/metrics").splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


random.seed(1)
now = time.time_ns()
start = now - 24 * 3600 * 10**9
t0 = time.time()
batch = []
count = 0
for t in range(start, now, step * 10**9):
    for h in range(hosts):
        batch.append(f"cpu,host=host_{h},region=r{h % 4} usage_user={random.random() * 100:.3f},usage_idle={random.randint(0, 100)}i {t}")
    if len(batch) >= 50_000:
        call("POST", f"/write?db={DB}&precision=ns", "\n".join(batch).encode())
        count += len(batch)
        batch = []
if batch:
    call("POST", f"/write?db={DB}&precision=ns", "\n".join(batch).encode())
    count += len(batch)
print(f"wrote {count} points in {time.time() - t0:.0f} s")
# Flush and settle before measuring (the flush is not the dashboard's cost).
query("SELECT count(usage_user) FROM cpu WHERE time > now() - 1m")
time.sleep(3)

R = "time >= now() - 24h"
panels = [
    f"SELECT mean(usage_user) FROM cpu WHERE {R} GROUP BY time(1m)",
    f"SELECT mean(usage_user) FROM cpu WHERE host = 'host_1' AND {R} GROUP BY time(1m)",
    f"SELECT max(usage_user) FROM cpu WHERE {R} GROUP BY time(5m), region",
    f"SELECT count(usage_user) FROM cpu WHERE {R} GROUP BY time(1m)",
    f"SELECT sum(usage_idle) FROM cpu WHERE {R} GROUP BY time(10m), region",
    f"SELECT min(usage_user), max(usage_user) FROM cpu WHERE {R} GROUP BY time(5m)",
    f"SELECT mean(usage_user) FROM cpu WHERE host =~ /host_1.$/ AND {R} GROUP BY time(5m), host",
    f"SELECT last(usage_user) FROM cpu WHERE {R} GROUP BY time(1m) fill(previous)",
    f"SELECT spread(usage_idle) FROM cpu WHERE region = 'r2' AND {R} GROUP BY time(15m)",
    f"SELECT mean(usage_idle) FROM cpu WHERE {R} GROUP BY time(1h), region",
]


def load():
    before, t = cpu_seconds(), time.time()
    for q in panels:
        query(q)
    return cpu_seconds() - before, time.time() - t


first, first_wall = load()
refresh = []
for _ in range(refreshes):
    time.sleep(5)
    refresh.append(load())
mean_cpu = sum(c for c, _ in refresh) / len(refresh)
mean_wall = sum(w for _, w in refresh) / len(refresh)
print(f"query_cache_first_load_engine_cpu_s {first:.3f}")
print(f"query_cache_first_load_wall_s {first_wall:.3f}")
print(f"query_cache_refresh_engine_cpu_s {mean_cpu:.3f}")
print(f"query_cache_refresh_wall_s {mean_wall:.3f}")
print(f"query_cache_refresh_ratio {mean_cpu / first:.3f}" if first > 0 else "query_cache_refresh_ratio n/a")
for k in ("hits", "misses", "invalidations"):
    print(f"query_cache_{k} {metric(f'shardhouse_router_query_cache_{k}_total'):.0f}")
PY
