#!/usr/bin/env python3
"""Grafana's Prometheus data source against Shardhouse, next to the same
data source against the reference Prometheus (scripts/tests.d/promql.sh).

Usage: grafana_prom.py GRAFANA BEGIN END
  GRAFANA  Grafana's URL (admin:admin), provisioned with the data sources
           `sh-promql` (the router) and `ref-prom` (the reference)
  BEGIN, END  the window (Unix seconds) both hold every sample of

Checks, each through Grafana's backend as its frontend calls it:
  1. the data source's health check (Save & test) passes;
  2. the metric browser: metric names (`label/__name__/values`), label
     names, the series of a selector and metadata answer, and the names and
     series equal the reference's over the window;
  3. dashboard panels (`POST /api/ds/query`, range queries at Grafana's
     step): every frame's labels and samples equal the reference's
     (relative tolerance 1e-5).
Prints `ok: ...` lines; exits 1 naming the first difference.
"""

import base64
import json
import math
import sys
import urllib.parse
import urllib.request

GRAFANA, BEGIN, END = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
SH, REF = "sh-promql", "ref-prom"
AUTH = "Basic " + base64.b64encode(b"admin:admin").decode()
PANELS = [
    "rate(demo_requests_total[1m])",
    "sum by (code) (rate(demo_requests_total[1m]))",
    "histogram_quantile(0.9, sum by (le) (rate(demo_latency_seconds_bucket[1m])))",
    "topk(3, demo_requests_total)",
    "avg by (instance) (demo_temperature_celsius)",
    "up",
]


def fail(msg):
    print(f"FAIL grafana-prom: {msg}", file=sys.stderr)
    sys.exit(1)


def call(path, body=None):
    req = urllib.request.Request(
        GRAFANA + path,
        data=None if body is None else json.dumps(body).encode(),
        method="GET" if body is None else "POST",
        headers={"Authorization": AUTH, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        fail(f"{path}: HTTP {e.code}: {e.read()[:400]!r}")


def resource(uid, path, **params):
    q = urllib.parse.urlencode(params, doseq=True)
    got = call(f"/api/datasources/uid/{uid}/resources/api/v1/{path}?{q}")
    if got.get("status") != "success":
        fail(f"{uid} {path}: {got}")
    return got["data"]


# 1. Save & test
for uid in (SH, REF):
    h = call(f"/api/datasources/uid/{uid}/health")
    if h.get("status") != "OK":
        fail(f"health check of {uid}: {h}")
print(f"ok: grafana health check: {call(f'/api/datasources/uid/{SH}/health')['message']}")

# 2. The metric browser
window = {"start": BEGIN, "end": END}
names = {uid: set(resource(uid, "label/__name__/values", **window)) for uid in (SH, REF)}
# Prometheus answers the names of every series of its head block, also of
# series that began after END (the OTLP check's rejections make a new
# counter); Shardhouse only those with samples in the window. The names
# that must agree are those with a sample in the window at the reference.
live = {
    r["metric"]["__name__"]
    for r in resource(REF, "query", query='group by (__name__) ({__name__=~".+"})', time=END)["result"]
}
if not names[SH] <= names[REF] or not live <= names[SH]:
    fail(
        f"metric names differ: only Shardhouse {sorted(names[SH] - names[REF])[:10]}, "
        f"missing at Shardhouse {sorted(live - names[SH])[:10]}"
    )
labels = set(resource(SH, "labels", **window))
for want in ("__name__", "instance", "job", "code"):
    if want not in labels:
        fail(f"label names lack {want}: {sorted(labels)}")
for match in ('up', 'demo_requests_total{code="200"}'):
    series = {
        uid: sorted(json.dumps(s, sort_keys=True) for s in resource(uid, "series", **window, **{"match[]": match}))
        for uid in (SH, REF)
    }
    if series[SH] != series[REF] or not series[SH]:
        fail(f"series {match}: Shardhouse {series[SH][:3]}, Prometheus {series[REF][:3]}")
meta = resource(SH, "metadata")
if not isinstance(meta, dict):
    fail(f"metadata: {meta!r}")
print(f"ok: grafana metric browser: {len(names[SH])} metric names, {len(labels)} label names, series and metadata as the reference's")


# 3. Panels
def frames(uid, expr):
    body = {
        "from": str(BEGIN * 1000),
        "to": str(END * 1000),
        "queries": [
            {
                "refId": "A",
                "datasource": {"uid": uid, "type": "prometheus"},
                "expr": expr,
                "range": True,
                "instant": False,
                "interval": "10s",
                "intervalMs": 10000,
                "maxDataPoints": 200,
            }
        ],
    }
    res = call("/api/ds/query", body)["results"]["A"]
    if res.get("error"):
        fail(f"{uid} {expr}: {res['error']}")
    out = {}
    for f in res.get("frames", []):
        fields = f["schema"]["fields"]
        value = fields[1]
        key = json.dumps(value.get("labels") or {}, sort_keys=True)
        times, values = f["data"]["values"][:2]
        out[key] = list(zip(times, values))
    return out


def same(a, b):
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= 1e-5 * max(1.0, abs(a), abs(b))


samples = 0
for expr in PANELS:
    got, want = frames(SH, expr), frames(REF, expr)
    if not want:
        fail(f"{expr}: the reference answered no frame")
    if set(got) != set(want):
        fail(f"{expr}: frames {sorted(got)[:3]} vs the reference's {sorted(want)[:3]}")
    for key, pts in want.items():
        mine = got[key]
        if len(mine) != len(pts) or any(t1 != t2 or not same(v1, v2) for (t1, v1), (t2, v2) in zip(mine, pts)):
            diff = next(((p, q) for p, q in zip(mine, pts) if p[0] != q[0] or not same(p[1], q[1])), None)
            fail(f"{expr} {key}: {len(mine)} samples vs {len(pts)}; first difference {diff}")
        samples += len(pts)
print(f"ok: grafana panels: {len(PANELS)} PromQL panels, {samples} samples equal to the reference's")
