#!/usr/bin/env python3
"""Driver of `make bench-promql` (scripts/bench-promql.sh starts the servers).

Python standard library only. Sub-commands:

  load   generate the dataset and send the SAME Prometheus remote_write
         requests (protobuf encoded here by hand, snappy block format made
         of literals only: valid snappy that every decoder reads, just not
         smaller) to every system, one system after the other, oldest
         samples first; prints the points/s each one took; then waits until
         each answers the full sample count; writes dataset.json.
  bench  check that Shardhouse's answers equal Prometheus's (series, steps,
         values within relative 1e-5: scripts/promql/compare.py's rule) and
         how far VictoriaMetrics's are from them; then time every query on
         every system; prints the table and, last, the
         `<system>_<query>_c<clients>_p50_ms=` / `_p95_ms=` lines.
  loop   run one query against one system for S seconds (what a profile
         watches), with the CPU the given processes used per query.

The dataset, one sample every INTERVAL (15) s per series over HOURS up to
now, each instance scraped at its own offset within the interval:
  http_requests_total{job,instance,code}   counter, INSTANCES x 5 codes
                                           (1,000); a few instances restart
                                           (counter reset) two thirds in
  http_request_duration_seconds_bucket{job,instance,le}
                                           classic histogram, INSTANCES/2
                                           instances x 10 buckets (1,000),
                                           with _sum and _count
  process_resident_memory_bytes{job,instance}   gauge, INSTANCES
"""

import argparse
import bisect
import concurrent.futures
import json
import math
import os
import random
import struct
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "promql"))
import compare  # noqa: E402  scripts/promql/compare.py: the comparison rule of `make test`

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from bench_common import Client, pct, proc_cpu_secs, timed  # noqa: E402  scripts/lib/bench_common.py

CODES = [("200", 10.0), ("201", 2.0), ("404", 1.0), ("500", 0.5), ("503", 0.2)]
BUCKETS = ["0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "+Inf"]
BUCKET_LE = [float(b) for b in BUCKETS]
COUNTER = "http_requests_total"
HIST = "http_request_duration_seconds"
GAUGE = "process_resident_memory_bytes"
SYSTEMS = ("shardhouse", "prometheus", "victoriametrics")
PREFIX = {"shardhouse": "promql", "prometheus": "prometheus", "victoriametrics": "victoriametrics"}
TITLE = {"shardhouse": "Shardhouse", "prometheus": "Prometheus", "victoriametrics": "VictoriaMetrics"}


def log(msg):
    print(f"[bench-promql] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Encoding: prometheus.WriteRequest, snappy


def uvarint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field_bytes(num, payload):
    return uvarint(num << 3 | 2) + uvarint(len(payload)) + payload


def labels_pb(labels):
    """TimeSeries.labels (field 1) of every Label{name=1, value=2}, sorted."""
    out = b""
    for k, v in sorted(labels.items()):
        out += field_bytes(1, field_bytes(1, k.encode()) + field_bytes(2, v.encode()))
    return out


_D = struct.Struct("<d")


def sample_pb(v, ts):
    """TimeSeries.samples (field 2) of Sample{value=1 double, timestamp=2 int64}."""
    body = b"\x09" + _D.pack(v) + b"\x10" + uvarint(ts)
    return b"\x12" + bytes([len(body)]) + body


def snappy_literals(data):
    """Snappy block format: the uncompressed length, then literals of at
    most 64 KiB (tag 61: a two-byte length - 1)."""
    out = bytearray(uvarint(len(data)))
    for i in range(0, len(data), 65536):
        chunk = data[i:i + 65536]
        n = len(chunk) - 1
        if n < 60:
            out.append(n << 2)
        elif n < 256:
            out += bytes([60 << 2, n])
        else:
            out += bytes([61 << 2, n & 0xFF, n >> 8])
        out += chunk
    return bytes(out)


# --------------------------------------------------------------------------
# Dataset


def instance(i):
    return f"host-{i:03d}:9100"


def make_series(instances, steps, seed=29):
    """[(labels dict, [values per step], offset_ms)], deterministic."""
    series = []
    reset_at = steps * 2 // 3
    for i in range(instances):
        off = (i * 7919) % 15000
        for c, (code, base) in enumerate(CODES):
            rng = random.Random(seed * 100003 + i * 10 + c)
            v, vals = float(rng.randint(0, 10000)), []
            for k in range(steps):
                if i % 40 == 7 and k == reset_at:
                    v = 0.0  # the process restarted: the counter starts over
                v += rng.randint(0, int(base * (1 + i % 7) * 30))
                vals.append(v)
            series.append(({"__name__": COUNTER, "job": "api", "instance": instance(i), "code": code}, vals, off))
    for i in range(instances // 2):
        off = (i * 7919) % 15000
        rng = random.Random(seed * 7 + i)
        scale = 0.02 * (1 + i % 5)
        counts, total = [0] * len(BUCKETS), 0.0
        rows = [[] for _ in BUCKETS]
        sums, cnts = [], []
        for k in range(steps):
            for _ in range(rng.randint(5, 40)):
                x = rng.expovariate(1 / scale)
                total += x
                counts[bisect.bisect_left(BUCKET_LE, x)] += 1  # the first bucket with x <= le
            acc = 0
            for b in range(len(BUCKETS)):
                acc += counts[b]
                rows[b].append(float(acc))
            sums.append(round(total, 6))
            cnts.append(float(acc))
        base = {"job": "api", "instance": instance(i)}
        for b, le in enumerate(BUCKETS):
            series.append(({"__name__": HIST + "_bucket", **base, "le": le}, rows[b], off))
        series.append(({"__name__": HIST + "_sum", **base}, sums, off))
        series.append(({"__name__": HIST + "_count", **base}, cnts, off))
    for i in range(instances):
        off = (i * 7919) % 15000
        rng = random.Random(seed * 13 + i)
        vals = [float(int(2e8 + 1e8 * math.sin(k / 40 + i) + rng.randint(0, 1 << 20))) for k in range(steps)]
        series.append(({"__name__": GAUGE, "job": "api", "instance": instance(i)}, vals, off))
    return series


def requests_for(series, idx, steps, t0, interval_ms, batch):
    """Remote-write bodies for the series `idx`, oldest samples first: the
    (step, series) pairs in time order cut every `batch` samples, as
    Prometheus's own queue sends them; one TimeSeries per series in a
    request, its samples in order."""
    labels = {j: labels_pb(series[j][0]) for j in idx}
    bodies, cur, n = [], {}, 0
    for k in range(steps):
        for j in idx:
            _, vals, off = series[j]
            cur.setdefault(j, []).append(sample_pb(vals[k], t0 + k * interval_ms + off))
            n += 1
            if n == batch:
                bodies.append(encode(cur, labels, n))
                cur, n = {}, 0
    if n:
        bodies.append(encode(cur, labels, n))
    return bodies


def encode(cur, labels, n):
    pb = b"".join(field_bytes(1, labels[j] + b"".join(s)) for j, s in cur.items())
    return snappy_literals(pb), n


RW_HEADERS = {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy",
              "X-Prometheus-Remote-Write-Version": "0.1.0"}


def send_all(name, write_url, per_sender):
    """Posts every sender's bodies in order, the senders in parallel;
    returns seconds. Retries 429/503 with backoff; anything else fails."""
    u = urllib.parse.urlsplit(write_url)
    path = u.path + ("?" + u.query if u.query else "")
    errors = []

    def sender(bodies):
        c = Client(write_url)
        for body, _ in bodies:
            delay = 0.05
            while True:
                try:
                    status, data = c.request("POST", path, body=body, headers=RW_HEADERS)
                except OSError as e:
                    status, data = 0, str(e).encode()
                if 200 <= status < 300:
                    break
                if status in (0, 429, 503) and delay < 30:
                    time.sleep(delay)
                    delay *= 2
                    continue
                errors.append(f"{name}: HTTP {status}: {data[:300]!r}")
                return

    ts = [threading.Thread(target=sender, args=(b,), daemon=True) for b in per_sender]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    secs = time.perf_counter() - t0
    if errors:
        for e in errors[:5]:
            log(e)
        sys.exit(f"loading {name} failed ({len(errors)} sender(s) stopped at a refused request)")
    return secs


def instant(c, q, t):
    data = urllib.parse.urlencode({"query": q, "time": f"{t:.3f}"}).encode()
    status, body = c.request("POST", "/api/v1/query", body=data,
                             headers={"Content-Type": "application/x-www-form-urlencoded"})
    if status != 200:
        raise RuntimeError(f"HTTP {status}: {body[:300]!r}")
    return json.loads(body)["data"]["result"]


def cmd_load(a):
    interval_ms = a.interval * 1000
    steps = a.hours * 3600 // a.interval
    now_ms = int(time.time() * 1000)
    # Every sample at or before now: the last step starts one interval
    # before the current interval boundary, offsets are below one interval.
    last_base = (now_ms // interval_ms - 1) * interval_ms
    t0 = last_base - (steps - 1) * interval_ms
    g0 = time.perf_counter()
    series = make_series(a.instances, steps)
    idx = [list(range(j, len(series), a.senders)) for j in range(a.senders)]
    per_sender = [requests_for(series, ix, steps, t0, interval_ms, a.batch) for ix in idx]
    nreq = sum(len(b) for b in per_sender)
    nbytes = sum(len(body) for b in per_sender for body, _ in b)
    points = len(series) * steps
    log(f"{len(series):,} series x {steps:,} samples = {points:,} samples in {nreq:,} requests "
        f"({nbytes / 1e6:.1f} MB), encoded in {time.perf_counter() - g0:.1f} s")
    expect = {}
    for labels, _, _ in series:
        expect[labels["__name__"]] = expect.get(labels["__name__"], 0) + steps
    ds = {"t0_ms": t0, "last_base_ms": last_base, "interval_s": a.interval, "steps": steps,
          "hours": a.hours, "instances": a.instances, "series": len(series), "points": points,
          "requests": nreq, "bytes": nbytes, "batch": a.batch, "senders": a.senders,
          "expect": expect, "write": {}}
    systems = [tuple(s) for s in a.system]
    for name, w, q in systems:
        log(f"writing {points:,} samples to {name} ({w}), {a.senders} sender(s), {a.batch} samples a request")
        secs = send_all(name, w, per_sender)
        ds["write"][name] = {"secs": round(secs, 2), "points_per_sec": round(points / secs)}
        print(f"write {name}: {points:,} samples in {secs:.1f} s = {points / secs:,.0f} points/s", flush=True)
    # Every system must hold every sample before a query is timed.
    at = (last_base + interval_ms) / 1000
    span = a.hours * 3600 + 600
    for name, w, q in systems:
        c, deadline, t1 = Client(q), time.time() + a.wait, time.perf_counter()
        while True:
            got = {}
            try:
                for m in expect:
                    r = instant(c, f"sum(count_over_time({m}[{span}s]))", at)
                    got[m] = int(float(r[0]["value"][1])) if r else 0
            except (RuntimeError, OSError, ValueError, KeyError) as e:
                got = {"error": str(e)}
            if got == expect:
                break
            if time.time() > deadline:
                sys.exit(f"{name} holds {got}, not {expect}, {a.wait} s after the last write")
            time.sleep(0.5)
        ds["write"][name]["visible_after_secs"] = round(time.perf_counter() - t1, 2)
        log(f"{name} answers every sample ({sum(expect.values()):,}) {time.perf_counter() - t1:.1f} s after its last write")
    with open(a.dataset, "w") as f:
        json.dump(ds, f, indent=1)


# --------------------------------------------------------------------------
# Queries


def queries(ds, step, only=None):
    """Grafana-style range queries over the loaded window (step-aligned)."""
    first = ds["t0_ms"] / 1000
    last = (ds["last_base_ms"]) / 1000
    start = math.ceil(first / step) * step
    end = math.floor(last / step) * step
    one = f'{COUNTER}{{instance="{instance(7)}",code="200"}}'
    qs = [
        ("sum_rate", f"sum(rate({COUNTER}[5m]))", "rate over all 1,000 counter series, summed"),
        ("hist_p95", f"histogram_quantile(0.95, sum by (le) (rate({HIST}_bucket[5m])))",
         "p95 of a classic histogram (100 instances x 10 buckets)"),
        ("topk5_rate", f"topk(5, rate({COUNTER}[5m]))", "the 5 busiest of 1,000 counters at each step"),
        ("sum_by_code", f"sum by (code) (rate({COUNTER}[5m]))", "rate of 1,000 counters by code (5 series)"),
        ("one_series_rate", f"rate({one}[5m])", "rate of one counter series"),
        ("gauge_avg", f"avg(avg_over_time({GAUGE}[5m]))", "average of a gauge over 200 series"),
    ]
    names = set(filter(None, (only or "").split(",")))
    return [{"name": n, "promql": q, "what": w, "start": start, "end": end, "step": step}
            for n, q, w in qs if not names or n in names]


def range_body(q):
    return urllib.parse.urlencode({"query": q["promql"], "start": q["start"], "end": q["end"],
                                   "step": q["step"]}).encode()


FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def run_query(c, q, body=None):
    status, data = c.request("POST", "/api/v1/query_range", body=body or range_body(q), headers=FORM)
    if status != 200 or b'"status":"success"' not in data[:64]:
        raise RuntimeError(f"HTTP {status}: {data[:300]!r}")
    return data


def vm_agreement(ref, got):
    """How far VictoriaMetrics's answer is from Prometheus's: series in
    both, steps in both, and the largest relative difference among them."""
    r, g = compare.canon(ref), compare.canon(got)
    common = set(r) & set(g)
    pts = same = 0
    rel = []
    for k in common:
        gv = {p[0]: p[1] for p in g[k]}
        for t, v in r[k]:
            if t not in gv:
                continue
            pts += 1
            fa, fb = float(v), float(gv[t])
            if compare.close(v, gv[t]):
                same += 1
                rel.append(0.0)
            elif math.isnan(fa) or math.isnan(fb):
                rel.append(math.inf)
            else:
                rel.append(abs(fa - fb) / max(abs(fa), abs(fb)))
    worst = max(rel, default=0.0)
    median = pct(rel, 50) if rel else 0.0
    nref = sum(len(v) for v in r.values())
    ngot = sum(len(v) for v in g.values())
    exact = len(r) == len(g) == len(common) and pts == nref == ngot == same
    summary = (f"series {len(common)}/{len(r)} in common (VM {len(g)}), points {pts}/{nref} "
               f"in common (VM {ngot}), {same} within 1e-5; relative difference median {median:.2g}, max {worst:.2g}")
    return exact, summary


def run_one(a, systems, q, clients):
    """Latencies (ms) of q on every system with `clients` concurrent clients:
    one client interleaves the systems run by run (all see the same machine
    state); more clients hammer one system at a time."""
    body = range_body(q)
    if clients == 1:
        cs = {n: Client(u, timeout=600) for n, u in systems}
        for _ in range(a.warmup):
            for n in cs:
                run_query(cs[n], q, body)
        lat = {n: [] for n in cs}
        for _ in range(a.runs):
            for n in cs:
                lat[n].append(timed(lambda: run_query(cs[n], q, body)))
        return lat
    per = max(1, math.ceil(a.runs / clients))

    def phase(url):
        barrier = threading.Barrier(clients)

        def worker():
            c = Client(url, timeout=600)
            for _ in range(max(1, math.ceil(a.warmup / clients))):
                run_query(c, q, body)
            barrier.wait()
            return [timed(lambda: run_query(c, q, body)) for _ in range(per)]

        with concurrent.futures.ThreadPoolExecutor(clients) as ex:
            futs = [ex.submit(worker) for _ in range(clients)]
            return [x for f in futs for x in f.result()]

    return {n: phase(u) for n, u in systems}


def fmt_ms(x):
    if x is None:
        return "-"
    return f"{x:,.1f}" if x < 100 else f"{x:,.0f}"


def cmd_bench(a):
    with open(a.dataset) as f:
        ds = json.load(f)
    systems = [(n, q) for n, _, q in [tuple(s) for s in a.system]]
    urls = dict(systems)
    qs = queries(ds, a.step, a.only)
    cs = {n: Client(u, timeout=600) for n, u in systems}
    checks, mismatches = {}, 0
    load_before = os.getloadavg()
    # Answers first: a benchmark of wrong answers is worthless.
    for q in qs:
        ans = {}
        for n in cs:
            try:
                ans[n] = json.loads(run_query(cs[n], q))["data"]["result"]
            except Exception as e:  # noqa: BLE001 - reported below
                ans[n] = e
        ck = {"series": None}
        if isinstance(ans["prometheus"], Exception):
            sys.exit(f"Prometheus failed on {q['name']}: {ans['prometheus']}")
        ref = ans["prometheus"]
        ck["series"] = len(ref)
        ck["points"] = sum(len(s["values"]) for s in ref)
        if isinstance(ans["shardhouse"], Exception):
            why = f"query failed: {ans['shardhouse']}"
        else:
            why = compare.diff(ref, ans["shardhouse"])
        ck["match"] = why is None
        ck["detail"] = why or f"{len(ref)} series, {ck['points']} points equal (relative 1e-5)"
        if why is None:
            log(f"answers match (Shardhouse = Prometheus): {q['name']}: {ck['detail']}")
        else:
            mismatches += 1
            print(f"\n!!!!! MISMATCH Shardhouse vs Prometheus {q['name']}: {why}\n!!!!! query: {q['promql']}\n",
                  flush=True)
            log(f"!!!!! MISMATCH {q['name']}: {why}")
        if "victoriametrics" in ans:
            if isinstance(ans["victoriametrics"], Exception):
                ck["vm_exact"], ck["vm_detail"] = False, f"query failed: {ans['victoriametrics']}"
            else:
                ck["vm_exact"], ck["vm_detail"] = vm_agreement(ref, ans["victoriametrics"])
            log(f"VictoriaMetrics vs Prometheus: {q['name']}: {ck['vm_detail']}")
        checks[q["name"]] = ck
    results = []
    for clients in [int(c) for c in a.clients.split(",")]:
        for q in qs:
            log(f"timing {q['name']} ({clients} client(s), {a.runs} runs after {a.warmup} warm-up)")
            try:
                lat = run_one(a, systems, q, clients)
            except Exception as e:  # noqa: BLE001
                print(f"\n!!!!! {q['name']} failed while timing: {e}\n", flush=True)
                mismatches += 1
                continue
            r = {"name": q["name"], "clients": clients, "what": q["what"], "promql": q["promql"],
                 "runs": len(lat["shardhouse"]), **checks[q["name"]]}
            for n, xs in lat.items():
                r[n] = {"p50_ms": round(pct(xs, 50), 2), "p95_ms": round(pct(xs, 95), 2),
                        "max_ms": round(max(xs), 2), "mean_ms": round(sum(xs) / len(xs), 2)}
            r["p95_ratio"] = round(r["shardhouse"]["p95_ms"] / max(r["prometheus"]["p95_ms"], 1e-6), 2)
            results.append(r)
    load = f"load average {load_before[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end of the timing"
    report = {"load": load, "dataset": ds, "runs": a.runs, "warmup": a.warmup, "clients": a.clients,
              "step": a.step, "cluster": a.cluster, "systems": [n for n, _ in systems], "results": results,
              "answers": checks, "mismatches": mismatches,
              "window": {"start": qs[0]["start"], "end": qs[0]["end"]} if qs else {}}
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
    print_table(report, urls)
    if mismatches:
        print(f"\n!!!!! {mismatches} MISMATCH(ES) or failure(s) of Shardhouse against Prometheus: the figures "
              f"above compare different answers\n", flush=True)
    for r in results:
        for n in SYSTEMS:
            if n in r:
                for p in ("p50", "p95"):
                    print(f"{PREFIX[n]}_{r['name']}_c{r['clients']}_{p}_ms={r[n][p + '_ms']}")
    sys.exit(1 if mismatches else 0)


def print_table(rep, urls):
    ds = rep["dataset"]
    has_vm = "victoriametrics" in rep["systems"]
    print(f"\n### PromQL: {ds['points']:,} samples ({ds['series']:,} series x {ds['steps']:,} scrapes, "
          f"{ds['interval_s']} s over {ds['hours']} h); range queries over the whole window at a "
          f"{rep['step']} s step; {rep['runs']} runs per query after {rep['warmup']} warm-up; {rep['cluster']}; "
          f"{rep['load']} (2 cores)\n")
    print("| system | remote_write points/s | all samples answered after |")
    print("|---|---|---|")
    for n in rep["systems"]:
        w = ds["write"].get(n, {})
        print(f"| {TITLE[n]} | {w.get('points_per_sec', 0):,} | {w.get('visible_after_secs', '-')} s |")
    print()
    head = "| query | clients | Shardhouse p50 / p95 (ms) | Prometheus p50 / p95 (ms) |"
    sep = "|---|---|---|---|"
    if has_vm:
        head += " VictoriaMetrics p50 / p95 (ms) |"
        sep += "---|"
    head += " p95 SH/Prom | SH = Prom |"
    sep += "---|---|"
    if has_vm:
        head += " VM = Prom |"
        sep += "---|"
    print(head)
    print(sep)
    for r in rep["results"]:
        line = f"| {r['name']} | {r['clients']} |"
        for n in ("shardhouse", "prometheus") + (("victoriametrics",) if has_vm else ()):
            line += f" {fmt_ms(r[n]['p50_ms'])} / {fmt_ms(r[n]['p95_ms'])} |"
        verdict = "<= Prom" if r["p95_ratio"] <= 1 else "slower"
        line += f" {r['p95_ratio']:.2f}x ({verdict}) | {'yes' if r['match'] else '**NO**'} |"
        if has_vm:
            line += f" {'yes' if r.get('vm_exact') else 'no (see below)'} |"
        print(line)
    print()
    for r in rep["results"]:
        if r["clients"] == 1:
            print(f"- `{r['name']}`: `{r['promql']}` ({r['what']}; {r['series']} series, {r['points']} points "
                  f"in Prometheus's answer)")
            if has_vm:
                print(f"  - VictoriaMetrics vs Prometheus: {r.get('vm_detail')}")
    print()


# --------------------------------------------------------------------------
# Profile helper


def cmd_loop(a):
    with open(a.dataset) as f:
        ds = json.load(f)
    (q,) = queries(ds, a.step, a.only)
    pids = dict(p.split("=") for p in a.pids.split(",") if p)
    c = Client(a.url, timeout=600)
    body = range_body(q)
    cpu0 = {n: proc_cpu_secs(p) for n, p in pids.items()}
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < a.secs:
        run_query(c, q, body)
        n += 1
    wall = time.perf_counter() - t0
    out = {"query": q["name"], "promql": q["promql"], "runs": n, "wall_ms_per_query": round(wall * 1000 / n, 1),
           "cpu_ms_per_query": {k: round((proc_cpu_secs(p) - cpu0[k]) * 1000 / n, 1) for k, p in pids.items()}}
    print(json.dumps(out, indent=1))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    lo = sub.add_parser("load")
    lo.add_argument("--system", nargs=3, action="append", required=True, metavar=("NAME", "WRITE_URL", "QUERY_URL"))
    lo.add_argument("--dataset", required=True)
    lo.add_argument("--hours", type=int, default=1)
    lo.add_argument("--interval", type=int, default=15)
    lo.add_argument("--instances", type=int, default=200)
    lo.add_argument("--batch", type=int, default=2000)
    lo.add_argument("--senders", type=int, default=2)
    lo.add_argument("--wait", type=int, default=300)
    be = sub.add_parser("bench")
    be.add_argument("--system", nargs=3, action="append", required=True, metavar=("NAME", "WRITE_URL", "QUERY_URL"))
    be.add_argument("--dataset", required=True)
    be.add_argument("--step", type=int, default=30)
    be.add_argument("--runs", type=int, default=30)
    be.add_argument("--warmup", type=int, default=3)
    be.add_argument("--clients", default="1,8")
    be.add_argument("--only", default="")
    be.add_argument("--cluster", default="")
    be.add_argument("--out", required=True)
    lp = sub.add_parser("loop")
    lp.add_argument("--url", required=True)
    lp.add_argument("--dataset", required=True)
    lp.add_argument("--step", type=int, default=30)
    lp.add_argument("--only", required=True)
    lp.add_argument("--secs", type=float, default=10)
    lp.add_argument("--pids", default="")
    a = p.parse_args()
    {"load": cmd_load, "bench": cmd_bench, "loop": cmd_loop}[a.cmd](a)


if __name__ == "__main__":
    main()
