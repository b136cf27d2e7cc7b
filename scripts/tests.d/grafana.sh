#!/usr/bin/env bash
# `make test` suite: a real Grafana server (built from the Go module proxy by
# scripts/deps.d/grafana.sh, no frontend) runs the shipped dashboard against
# a local cluster. It provisions the datasource and the dashboard from
# deploy/grafana/provisioning (what a `make run` user points Grafana at),
# writes an hour of Telegraf-shaped cpu/mem points, then for every panel
# POSTs /api/ds/query as the dashboard's frontend does: Grafana's backend
# expands $timeFilter / $__interval / $interval and queries the router.
# Checks: the dashboard Grafana loaded is the chart's file; the host
# variable's query (through Grafana's datasource proxy) lists the hosts
# written; each panel's frames are non-empty, the query Grafana ran is the
# expansion router/tests/grafana_dashboard.rs tests (whose answers it checks
# against the data), the frames hold the router's answer to that query, and
# the sample count equals the points written.
# Skips, printing why, when the Grafana build was skipped (no Go, or the
# module proxy refused the version). Cost: ~40 s with the binaries built.
set -euo pipefail
cd "$(dirname "$0")/../.."

CACHE=${SHARDHOUSE_CACHE:-$HOME/.cache/shardhouse}
BIN=${SHARDHOUSE_BIN:-${CARGO_TARGET_DIR:-$CACHE/target}/release}
export SHARDHOUSE_BIN=$BIN
fail() { echo "FAIL grafana: $*" >&2; exit 1; }

# shellcheck source=scripts/lib/grafana.sh
source scripts/lib/grafana.sh
if ! why=$(sh_grafana_built); then
  echo "SKIP grafana: no Grafana server ($why)"
  exit 0
fi
for b in shardhouse-node shardhouse-router; do
  [ -x "$BIN/$b" ] || fail "$BIN/$b missing: build with cargo build --release --workspace --bins"
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/shardhouse-grafana-test.XXXXXX")
GRAFANA_PID=""
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh
cleanup() {
  if [ -n "$GRAFANA_PID" ]; then
    kill "$GRAFANA_PID" 2>/dev/null || true
    wait "$GRAFANA_PID" 2>/dev/null || true
  fi
  [ -z "${SH_DATA:-}" ] || sh_stop_all
  rm -rf "$TMP"
}
trap cleanup EXIT

# --- a local cluster (3 nodes, RF=3, free ports), as `make run` starts it
sh_cluster_init "$TMP/data" 3
sh_start_etcd
sh_start_nodes 4 3
sh_start_router
sh_wait_writable || fail "the cluster does not take writes"
ROUTER="http://$SH_ROUTER_HTTP"

# --- Grafana, provisioned from deploy/grafana as the README tells users
SHARDHOUSE_URL=$ROUTER SHARDHOUSE_DASHBOARDS=$PWD/deploy/grafana/dashboards \
  sh_start_grafana "$TMP/grafana" "$PWD/deploy/grafana/provisioning" || fail "grafana did not start"
echo "ok: cluster at $ROUTER, Grafana $(cat "$GRAFANA_DIR/.version") (github.com/grafana/grafana) at $GRAFANA"

python3 - "$ROUTER" "$GRAFANA" charts/shardhouse/dashboards/hosts.json <<'PY' ||
import base64, json, random, sys, time, urllib.error, urllib.parse, urllib.request

router, grafana, dashboard_path = sys.argv[1:4]
DS_UID, DB = "shardhouse-influxql", "telegraf"
HOSTS = ["api.example.com", "db-1", "web-1"]
AUTH = {"Authorization": "Basic " + base64.b64encode(b"admin:admin").decode()}


def call(method, url, body=None, headers=None, form=False):
    data = None
    headers = dict(headers or {})
    if body is not None:
        if form:
            data = urllib.parse.urlencode(body).encode()
        elif isinstance(body, str):
            data = body.encode()
        else:
            data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            text = r.read().decode()
            return r.status, (json.loads(text) if text else None)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def check(ok, what):
    if not ok:
        sys.exit(f"FAIL grafana: {what}")


# An hour of Telegraf-shaped points, every 10 s per host, ending 30 s ago.
now = int(time.time() * 1000)
rng = random.Random(14)
lines, totals = [], []
for h in HOSTS:
    t = now - 3_600_000
    while t < now - 30_000:
        ts = (t + rng.randrange(2000)) * 1_000_000 + rng.randrange(1_000_000)
        for c in ["cpu-total", "cpu0", "cpu1"]:
            u, s, io = rng.randrange(60000) / 1000, rng.randrange(20000) / 1000, rng.randrange(5000) / 1000
            lines.append(f"cpu,cpu={c},host={h} usage_user={u},usage_system={s},usage_iowait={io},usage_idle={100 - u - s - io} {ts}")
            if c == "cpu-total":
                totals.append(ts)
        used = (1 << 30) + rng.randrange(7 << 30)
        lines.append(f"mem,host={h} used={used}i,available={(16 << 30) - used}i,total={16 << 30}i,used_percent={used / (16 << 30) * 100} {ts}")
        t += 10_000
status, body = call("POST", f"{router}/query", {"q": f'CREATE DATABASE "{DB}"'}, form=True)
check(status == 200, f"CREATE DATABASE: {status} {body}")
status, body = call("POST", f"{router}/write?db={DB}", "\n".join(lines))
check(status == 204, f"write: {status} {body}")

# The dashboard Grafana provisioned is the chart's.
shipped = json.load(open(dashboard_path))
status, body = call("GET", f"{grafana}/api/dashboards/uid/{shipped['uid']}", headers=AUTH)
check(status == 200, f"dashboard {shipped['uid']} not provisioned: {status} {body}")
queries = lambda d: [(p["title"], [t["query"] for t in p["targets"]]) for p in d["panels"]]
check(queries(body["dashboard"]) == queries(shipped), "Grafana's dashboard differs from the chart's")
status, body = call("GET", f"{grafana}/api/datasources/uid/{DS_UID}", headers=AUTH)
check(status == 200 and body["url"] == router, f"datasource {DS_UID}: {status} {body}")

# The host variable's query, as the frontend runs it (Grafana's proxy).
for v in shipped["templating"]["list"]:
    if v["type"] != "query":
        continue
    q = urllib.parse.urlencode({"db": DB, "q": v["query"], "epoch": "ms"})
    status, body = call("GET", f"{grafana}/api/datasources/proxy/uid/{DS_UID}/query?{q}", headers=AUTH)
    got = [row[1] for row in body["results"][0]["series"][0]["values"]] if status == 200 else body
    check(got == sorted(HOSTS), f"variable {v['name']}: {got}, want {sorted(HOSTS)}")


def escape_regex(s):
    return "".join("\\" + c if c in "\\^$*+?.()|[]{}/" else c for c in s)


# Last hour, all hosts, a 1000-point panel: Grafana's interval is 10 s.
frm, to, interval_ms = now - 3_600_000, now, 10_000
host_all = "(" + "|".join(escape_regex(h) for h in HOSTS) + ")"
expand = lambda q: (q.replace("$timeFilter", f"time >= {frm}ms and time <= {to}ms")
                    .replace("$__interval", "10s").replace("$interval", "10s"))


def series_of(answer):
    """(tags, times, values) per value column of an InfluxDB answer."""
    out = []
    for s in answer.get("series", []):
        for i, col in enumerate(s["columns"][1:], 1):
            out.append((sorted((s.get("tags") or {}).items()), [r[0] for r in s["values"]], [r[i] for r in s["values"]]))
    return sorted(out, key=repr)


def series_of_frames(frames):
    out = []
    for f in frames:
        times, values = f["data"]["values"]
        out.append((sorted((f["schema"]["fields"][1].get("labels") or {}).items()), times, values))
    return sorted(out, key=repr)


checked = 0
for panel in shipped["panels"]:
    targets = [dict(t, query=t["query"].replace("$host", host_all), datasource={"type": "influxdb", "uid": DS_UID},
                    intervalMs=interval_ms, maxDataPoints=1000) for t in panel["targets"]]
    status, body = call("POST", f"{grafana}/api/ds/query", {"from": str(frm), "to": str(to), "queries": targets}, headers=AUTH)
    check(status == 200, f"panel {panel['title']!r}: /api/ds/query {status} {body}")
    for t in targets:
        res = body["results"][t["refId"]]
        frames = res.get("frames") or []
        check("error" not in res, f"panel {panel['title']!r} {t['refId']}: {res.get('error')}")
        check(any(v is not None for f in frames for v in f["data"]["values"][1]),
              f"panel {panel['title']!r} {t['refId']}: no values in {len(frames)} frames")
        ran = frames[0]["schema"]["meta"]["executedQueryString"]
        check(ran == expand(t["query"]), f"panel {panel['title']!r}: Grafana ran\n  {ran}\nnot\n  {expand(t['query'])}")
        q = urllib.parse.urlencode({"db": DB, "q": ran, "epoch": "ms"})
        status, direct = call("GET", f"{router}/query?{q}")
        check(status == 200, f"router: {status} {direct}")
        check(series_of_frames(frames) == series_of(direct["results"][0]),
              f"panel {panel['title']!r} {t['refId']}: Grafana's frames differ from the router's answer to {ran}")
        if panel["title"] == "CPU samples in range":
            want = sum(1 for ts in totals if frm * 1_000_000 <= ts <= to * 1_000_000)
            check(frames[0]["data"]["values"][1] == [want], f"samples: {frames[0]['data']['values'][1]}, want {want}")
        checked += 1
print(f"ok: {checked} dashboard queries run by Grafana's backend against the router, frames = the router's answers")
PY
  { tail -n 20 "$TMP"/grafana/logs/grafana.log >&2 || true; fail "dashboard check"; }
echo "grafana: passed"
