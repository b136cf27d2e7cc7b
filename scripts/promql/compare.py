#!/usr/bin/env python3
"""Runs the same PromQL range queries against a reference Prometheus and
Shardhouse and compares the answers series by series, point by point,
with the compliance tester's tolerance (relative 1e-5; NaN equals NaN).

Usage: compare.py REFERENCE_URL SHARDHOUSE_URL QUERIES_FILE START END STEP
SHARDHOUSE_URL may be `file:PATH`: one JSON answer per query line, in
order (what `cargo run -p shardhouse-promql --example replay` prints).
A query both refuse passes (a line starting with `!` expects that);
prints one line per query (ok/FAIL) and, last,
`promql_compare passed=N failed=M total=T`. Exit status 0 when all pass.
"""
import json
import math
import sys
import urllib.parse
import urllib.request


def query_range(base, q, start, end, step):
    data = urllib.parse.urlencode({"query": q, "start": start, "end": end, "step": step}).encode()
    req = urllib.request.Request(base + "/api/v1/query_range", data=data, method="POST")
    req.add_header("Content-Type", "application/x-www-form-urlencoded")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        body = e.read()
        try:
            return e.code, json.loads(body)
        except ValueError:
            return e.code, {"status": "error", "error": body.decode(errors="replace")}


def close(a, b):
    fa, fb = float(a), float(b)
    if math.isnan(fa) or math.isnan(fb):
        return math.isnan(fa) and math.isnan(fb)
    if fa == fb:
        return True
    return abs(fa - fb) <= 1e-5 * max(abs(fa), abs(fb))


def canon(result):
    return {json.dumps(s["metric"], sort_keys=True): s["values"] for s in result}


def diff(ref, got):
    r, g = canon(ref), canon(got)
    if set(r) != set(g):
        only_r = sorted(set(r) - set(g))[:3]
        only_g = sorted(set(g) - set(r))[:3]
        return f"series differ: only reference {only_r}, only shardhouse {only_g} ({len(r)} vs {len(g)})"
    for k in r:
        pr, pg = r[k], g[k]
        if [p[0] for p in pr] != [p[0] for p in pg]:
            return f"{k}: timestamps differ ({len(pr)} vs {len(pg)} points; first {pr[:2]} vs {pg[:2]})"
        for a, b in zip(pr, pg):
            if not close(a[1], b[1]):
                return f"{k} at {a[0]}: reference {a[1]}, shardhouse {b[1]}"
    return None


def main():
    ref, sh, path, start, end, step = sys.argv[1:7]
    queries = [l.strip() for l in open(path) if l.strip() and not l.startswith("#")]
    answers = None
    if sh.startswith("file:"):
        answers = [json.loads(l) for l in open(sh[5:]) if l.strip()]
    passed = failed = 0
    for i, q in enumerate(queries):
        rs, rj = query_range(ref, q, start, end, step)
        if answers is not None:
            ss, sj = "replay", answers[i]
        else:
            ss, sj = query_range(sh, q, start, end, step)
        if rj.get("status") != "success":
            why = None if sj.get("status") != "success" else f"reference failed ({rj.get('error')}), shardhouse answered"
        elif sj.get("status") != "success":
            why = f"shardhouse {ss}: {sj.get('error')}"
        else:
            why = diff(rj["data"]["result"], sj["data"]["result"])
        if why is None:
            passed += 1
            print(f"ok    {q}")
        else:
            failed += 1
            print(f"FAIL  {q}\n      {why}")
    print(f"promql_compare passed={passed} failed={failed} total={passed + failed}")
    sys.exit(0 if failed == 0 else 1)


if __name__ == "__main__":
    main()
