#!/usr/bin/env bash
# `make test` suite: the router's cache of settled GROUP BY time() buckets
# (router/src/read/influx/cache.rs, node/engine/src/change_marks.rs) on a
# real cluster (1 node, 2 shards). Writes 40 minutes of points of three
# hosts, then checks every answer against one computed here from the points
# written, and the cache's metrics:
# - a repeated statement is a hit (only the newest buckets read) with the
#   same answer; a range moved on reuses the cached buckets inside it;
# - a late point in an old, cached bucket is in the next answer, and the
#   cache counts an invalidation;
# - a DELETE of one host's points in an old bucket changes the next answer
#   accordingly (another invalidation).
# Cost: ~15 s with the binaries built.
set -euo pipefail
cd "$(dirname "$0")/../.."

BIN=${SHARDHOUSE_BIN:-${CARGO_TARGET_DIR:-$HOME/.cache/shardhouse/target}/release}
export SHARDHOUSE_BIN=$BIN
fail() { echo "FAIL query-cache: $*" >&2; exit 1; }
for b in shardhouse-node shardhouse-router; do
  [ -x "$BIN/$b" ] || fail "$BIN/$b missing: build with cargo build --release --workspace --bins"
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/shardhouse-query-cache-test.XXXXXX")
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
sh_start_router --query-cache-mb 16
sh_wait_writable || fail "the cluster does not take writes"

python3 - "http://$SH_ROUTER_HTTP" <<'PY' || fail "see above"
import json, random, sys, time, urllib.parse, urllib.request

router = sys.argv[1]
DB, M = "qcache", "m"
MIN = 60 * 10**9
HOSTS = ["h1", "h2", "h3"]
points = {}  # (host, t) -> int value


def call(method, path, body=None):
    req = urllib.request.Request(router + path, data=body, method=method)
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read().decode()


def write(lines):
    call("POST", f"/write?db={DB}&precision=ns", "\n".join(lines).encode())


def query(q):
    body = urllib.parse.urlencode({"db": DB, "q": q, "epoch": "ns"}).encode()
    out = json.loads(call("POST", "/query", body))
    res = out["results"][0]
    if "error" in res:
        raise SystemExit(f"FAIL: {q}: {res['error']}")
    return res.get("series", [])


def metric(name):
    for line in call("GET", "/metrics").splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def counters():
    return {k: metric(f"shardhouse_router_query_cache_{k}_total")
            for k in ("hits", "misses", "invalidations")}


def expected(start, end, per_host):
    """The answer's non-null rows: (host or '', bucket) -> [count, sum, max]."""
    out = {}
    for (host, t), v in points.items():
        if not (start <= t < end):
            continue
        key = (host if per_host else "", t - t % MIN)
        c = out.setdefault(key, [0, 0, None])
        c[0] += 1
        c[1] += v
        c[2] = v if c[2] is None else max(c[2], v)
    return out


def rows(series):
    out = {}
    for s in series:
        host = s.get("tags", {}).get("host", "")
        for t, count, total, top in s["values"]:
            # An empty bucket counts 0 (as InfluxDB's fill does for count).
            if count:
                out[(host, t)] = [count, total, top]
    return out


def statement(start, end, per_host):
    by = ", host" if per_host else ""
    return (f"SELECT count(v), sum(v), max(v) FROM {M} "
            f"WHERE time >= {start} AND time < {end} GROUP BY time(1m){by}")


def check(label, start, end, per_host=True, moved=None):
    before = counters()
    got = rows(query(statement(start, end, per_host)))
    want = expected(start, end, per_host)
    if got != want:
        keys = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
        diff = [(k, got.get(k), want.get(k)) for k in keys[:6]]
        raise SystemExit(f"FAIL {label}: answer differs from the points written: {diff}")
    after = counters()
    delta = {k: after[k] - before[k] for k in after}
    if moved is not None and delta != moved:
        raise SystemExit(f"FAIL {label}: cache counters moved {delta}, expected {moved}")
    print(f"ok: {label} ({len(got)} rows, cache {delta})")


random.seed(7)
now = time.time_ns()
first = now - now % MIN - 40 * MIN
lines = []
for host in HOSTS:
    for t in range(first, now - 10**9, 10 * 10**9):
        v = random.randint(-1000, 1000)
        points[(host, t)] = v
        lines.append(f"{M},host={host} v={v}i {t}")
write(lines)
print(f"ok: wrote {len(lines)} points over 40 minutes")

# Mid-bucket bounds, as Grafana's now-35m .. now.
start, end = now - 35 * MIN - 17 * 10**9, now
hit = {"hits": 1, "misses": 0, "invalidations": 0}
miss = {"hits": 0, "misses": 1, "invalidations": 0}
invalidated = {"hits": 0, "misses": 1, "invalidations": 1}
check("first load", start, end, moved=miss)
check("refresh", start, end, moved=hit)
check("refresh again", start, end, moved=hit)
check("range moved on 95 s", start + 95 * 10**9, end, moved=hit)
check("ungrouped first load", start, end, per_host=False, moved=miss)
check("ungrouped refresh", start, end, per_host=False, moved=hit)

# A late point in an old bucket (cached): the next answer has it.
late = first + 15 * MIN + 3 * 10**9
points[("h1", late)] = 5000
write([f"{M},host=h1 v=5000i {late}"])
check("after a late write", start, end, moved=invalidated)
check("refresh after the late write", start, end, moved=hit)
check("ungrouped after the late write", start, end, per_host=False, moved=invalidated)

# A delete of one host's points in an old bucket.
lo, hi = first + 20 * MIN, first + 21 * MIN
query(f"DELETE FROM {M} WHERE host = 'h2' AND time >= {lo} AND time <= {hi - 1}")
for k in [k for k in points if k[0] == "h2" and lo <= k[1] < hi]:
    del points[k]
check("after a delete", start, end, moved=invalidated)
check("refresh after the delete", start, end, moved=hit)
print("query_cache passed")
PY
