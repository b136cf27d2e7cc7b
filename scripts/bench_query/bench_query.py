#!/usr/bin/env python3
"""Driver of `make bench-query` (scripts/bench-query.sh starts the servers).

Python standard library only. Sub-commands:

  load   generate the dashboard dataset (measurement `cpu`, tags `host` and
         `region`, float fields `usage_user` and `usage_system`, one point
         per host every INTERVAL seconds over HOURS hours ending at a
         10-minute boundary) and send the same line protocol to Shardhouse
         (`/write?db=bench`), to QuestDB (ILP over HTTP `/write`) and, with
         --influx, to InfluxDB 1.8 (`/write?db=bench`, the same batches);
         waits until each answers the full point count; writes dataset.json.
  bench  run every query on every system after a warm-up, N times each
         (1 client: the systems interleaved; C clients: one system at a
         time), check that all give the same answers (InfluxDB gets the very
         InfluxQL text Shardhouse gets and must answer the same series,
         columns and values), print the table and the
         `query_<name>_p95_ms=` / `questdb_<name>_p95_ms=` /
         `influxdb_<name>_p95_ms=` lines.
  loop   run one query against one system for S seconds (what the profile
         watches), with the CPU the given processes used per query.

Times in the queries are absolute (Grafana's `$timeFilter` form, epoch ms),
derived from the loaded data, so both systems read the same window however
long the run takes.
"""

import argparse
import concurrent.futures
import datetime
import json
import math
import os
import queue
import sys
import threading
import time
import urllib.request
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from bench_common import Client, pct, proc_cpu_secs, timed  # noqa: E402  scripts/lib/bench_common.py

MEASUREMENT = "cpu"
DB = "bench"
NS = 1_000_000_000


def log(msg):
    print(f"[bench-query] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Dataset


def region_of(h, regions):
    return f"region_{h % regions}"


# Values are integer hundredths (two decimals) from a fixed hash of (host,
# step): the same text goes to both systems, both parse it to the same
# double, and maxima and percentiles compare exactly.
VALS = [f"{c // 100}.{c % 100:02d}".encode() for c in range(10000)]


def cents(h, k, salt):
    x = (h * 100_003 + k * 7 + salt) & 0xFFFFFFFF
    x = (x * 2654435761) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 2246822519) & 0xFFFFFFFF
    x ^= x >> 13
    return x % 10000


def batches(ds, steps_per_batch, hosts_of=None):
    """Line-protocol bodies, `steps_per_batch` timestamps x every host each
    (of `hosts_of`, default all), in time order."""
    hosts, regions = ds["hosts"], ds["regions"]
    own = list(range(hosts)) if hosts_of is None else list(hosts_of)
    prefix = {h: f"{MEASUREMENT},host=host_{h},region={region_of(h, regions)} usage_user=".encode()
              for h in own}
    mid = b",usage_system="
    steps = ds["steps"]
    start_ns, step_ns = ds["start_ns"], ds["interval_s"] * NS
    for k0 in range(0, steps, steps_per_batch):
        parts = []
        for k in range(k0, min(steps, k0 + steps_per_batch)):
            ts = b" %d\n" % (start_ns + k * step_ns)
            for h in own:
                parts.append(prefix[h] + VALS[cents(h, k, 1)] + mid + VALS[cents(h, k, 2)] + ts)
        yield b"".join(parts), len(parts)


def send_all(name, hostport, path, ds, threads, steps_per_batch):
    """Sends the whole dataset with `threads` senders; returns seconds.
    Each sender owns every `threads`-th host and sends its hosts' points
    in time order, one request at a time, as one agent per group of hosts
    would: a series' points arrive in order (concurrent senders interleave
    only different series)."""
    qs = [queue.Queue(maxsize=2) for _ in range(threads)]
    errors = []

    def sender(q):
        c = Client(hostport)
        while True:
            item = q.get()
            if item is None:
                return
            body, n = item
            delay = 0.05
            while True:
                try:
                    status, data = c.request("POST", path, body=body,
                                             headers={"Content-Type": "text/plain"})
                except OSError as e:
                    status, data = 0, str(e).encode()
                if status in (200, 204):
                    break
                if status in (0, 429, 503) and delay < 30:
                    time.sleep(delay)
                    delay *= 2
                    continue
                errors.append(f"{name}: HTTP {status}: {data[:300]!r}")
                break

    ts = [threading.Thread(target=sender, args=(q,), daemon=True) for q in qs]
    for t in ts:
        t.start()
    t0 = time.perf_counter()
    per_sender = max(1, steps_per_batch * threads)
    gens = [batches(ds, per_sender, range(j, ds["hosts"], threads)) for j in range(threads)]
    live = list(range(threads))
    while live:
        for j in list(live):
            item = next(gens[j], None)
            if item is None:
                live.remove(j)
                qs[j].put(None)
            else:
                qs[j].put(item)
    for t in ts:
        t.join()
    secs = time.perf_counter() - t0
    if errors:
        for e in errors[:5]:
            log(e)
        sys.exit(f"loading {name} failed ({len(errors)} rejected batches)")
    return secs


def qdb_exec(c, sql):
    status, data = c.request("GET", "/exec?" + urllib.parse.urlencode({"query": sql}))
    body = json.loads(data)
    if status != 200 or "error" in body:
        raise RuntimeError(f"QuestDB: HTTP {status}: {data[:500]!r}")
    return body


def sh_query(c, q, epoch="ms", who="Shardhouse"):
    """An InfluxQL query on `/query` (Shardhouse's router or InfluxDB)."""
    status, data = c.request("GET", "/query?" + urllib.parse.urlencode({"db": DB, "epoch": epoch, "q": q}))
    if status != 200:
        raise RuntimeError(f"{who}: HTTP {status}: {data[:500]!r}")
    body = json.loads(data)
    for r in body.get("results", []):
        if "error" in r:
            raise RuntimeError(f"{who}: {r['error']}")
    if "error" in body:
        raise RuntimeError(f"{who}: {body['error']}")
    return body


def ix_query(c, q, epoch="ms"):
    return sh_query(c, q, epoch, who="InfluxDB")


def ix_create_db(hostport):
    c = Client(hostport)
    status, data = c.request("POST", "/query?" + urllib.parse.urlencode({"q": f"CREATE DATABASE {DB}"}))
    if status != 200 or b'"error"' in data:
        sys.exit(f"!!! influxdb: CREATE DATABASE {DB}: HTTP {status}: {data[:300]!r}")


def influxql_count(hostport, ds, who):
    c = Client(hostport, timeout=600)
    body = sh_query(c, f"SELECT count(usage_user) FROM {MEASUREMENT} "
                       f"WHERE time >= {ds['start_ns']} AND time < {ds['end_ns']}", who=who)
    try:
        return body["results"][0]["series"][0]["values"][0][1]
    except (KeyError, IndexError):
        sys.exit(f"!!! {who} answered the count of every point with no rows: {json.dumps(body)[:500]}")


def cmd_load(a):
    now = int(time.time())
    end_s = now - now % 600
    steps = a.hours * 3600 // a.interval
    ds = {
        "hosts": a.hosts, "regions": a.regions, "interval_s": a.interval, "hours": a.hours,
        "steps": steps, "points": steps * a.hosts,
        "start_ns": (end_s - steps * a.interval) * NS, "end_ns": end_s * NS,
    }
    log(f"dataset: {ds['points']:,} points = {a.hosts:,} hosts x {steps:,} timestamps "
        f"({a.interval} s over {a.hours} h, {a.regions} regions), "
        f"{iso(ds['start_ns'])} .. {iso(ds['end_ns'])}")
    steps_per_batch = max(1, a.batch_points // a.hosts)
    if not a.skip_shardhouse:
        secs = send_all("shardhouse", a.sh, f"/write?db={DB}&precision=ns", ds, a.threads, steps_per_batch)
        ds["shardhouse_load_secs"] = round(secs, 2)
        log(f"shardhouse: {ds['points']:,} points in {secs:.1f} s ({ds['points'] / secs:,.0f} points/s)")
    if not a.skip_questdb:
        secs = send_all("questdb", a.qdb, "/write", ds, a.threads, steps_per_batch)
        ds["questdb_load_secs"] = round(secs, 2)
        log(f"questdb: {ds['points']:,} points in {secs:.1f} s ({ds['points'] / secs:,.0f} points/s)")
    if a.influx:
        ix_create_db(a.influx)
        secs = send_all("influxdb", a.influx, f"/write?db={DB}&precision=ns", ds, a.threads, steps_per_batch)
        ds["influxdb_load_secs"] = round(secs, 2)
        log(f"influxdb: {ds['points']:,} points in {secs:.1f} s ({ds['points'] / secs:,.0f} points/s)")
    # Every system must hold every point before a query is timed.
    t0 = time.perf_counter()
    if not a.skip_shardhouse:
        n = influxql_count(a.sh, ds, "shardhouse")
        if n != ds["points"]:
            sys.exit(f"!!! shardhouse holds {n:,} points, expected {ds['points']:,}")
        log(f"shardhouse: count = {n:,} (checked)")
    if a.influx:
        # influxd answers 204 once the batch is in its WAL and cache: readable at once.
        n = influxql_count(a.influx, ds, "influxdb")
        if n != ds["points"]:
            sys.exit(f"!!! influxdb holds {n:,} points, expected {ds['points']:,}")
        log(f"influxdb: count = {n:,} (checked)")
    if not a.skip_questdb:
        c = Client(a.qdb)
        deadline = time.time() + 600
        while True:
            n = qdb_exec(c, f"SELECT count() FROM {MEASUREMENT}")["dataset"][0][0]
            wal = qdb_exec(c, "SELECT writerTxn, sequencerTxn FROM wal_tables()")["dataset"]
            applied = all(w == s for w, s in wal)
            if n == ds["points"] and applied:
                break
            if time.time() > deadline:
                sys.exit(f"!!! questdb holds {n:,} points after 600 s, expected {ds['points']:,}")
            time.sleep(0.5)
        log(f"questdb: count = {n:,}, WAL applied ({time.perf_counter() - t0:.1f} s after loading)")
    with open(a.dataset, "w") as f:
        json.dump(ds, f, indent=1)


# --------------------------------------------------------------------------
# Queries


def iso(ns):
    return datetime.datetime.fromtimestamp(ns / NS, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def qdb_ms(s):
    """QuestDB's `2026-11-23T03:00:00.000000Z` as epoch ms."""
    d = datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
    return int(round(d.timestamp() * 1000))


def sh_rows(body, tag=None):
    """Shardhouse series as rows (tag value, *values) or (*values)."""
    out = []
    for r in body["results"]:
        for s in r.get("series", []):
            t = (s.get("tags") or {}).get(tag, "") if tag else None
            for v in s["values"]:
                out.append(tuple(([t] if tag else []) + list(v)))
    return sorted(out, key=sort_key)


def sort_key(row):
    return tuple((0, x) if isinstance(x, str) else (1, x if x is not None else -math.inf) for x in row)


def queries(ds, only=None):
    end_ns = ds["end_ns"]
    hosts, regions, per_host_h = ds["hosts"], ds["regions"], 3600 // ds["interval_s"]

    def win(secs):
        s = end_ns - secs * NS
        return (f"time >= {s // 1_000_000}ms AND time < {end_ns // 1_000_000}ms",
                f"timestamp >= '{iso(s)}' AND timestamp < '{iso(end_ns)}'")

    h1, h1q = win(3600)
    m10, m10q = win(600)
    h3, h3q = win(3 * 3600)
    allw, allq = win(ds["hours"] * 3600)
    regex_hosts = [h for h in range(hosts) if str(h).startswith("1") and len(str(h)) == 2]
    m = MEASUREMENT
    qs = [
        dict(name="one_series_mean_1m",
             what="mean per 1m, one host, 1h (Grafana panel)",
             points=per_host_h,
             influxql=f"SELECT mean(usage_user) FROM {m} WHERE host = 'host_1' AND {h1} GROUP BY time(1m)",
             sql=f"SELECT timestamp, avg(usage_user) FROM {m} WHERE host = 'host_1' AND {h1q} "
                 f"SAMPLE BY 1m ALIGN TO CALENDAR",
             sh=lambda b: sh_rows(b),
             qdb=lambda b: sorted((qdb_ms(t), v) for t, v in b["dataset"])),
        dict(name="all_hosts_mean_1m",
             what=f"mean per 1m over all {hosts:,} hosts, 1h",
             points=per_host_h * hosts,
             influxql=f"SELECT mean(usage_user) FROM {m} WHERE {h1} GROUP BY time(1m)",
             sql=f"SELECT timestamp, avg(usage_user) FROM {m} WHERE {h1q} SAMPLE BY 1m ALIGN TO CALENDAR",
             sh=lambda b: sh_rows(b),
             qdb=lambda b: sorted((qdb_ms(t), v) for t, v in b["dataset"])),
        dict(name="regex_hosts_5m_by_host",
             what="mean per 5m and host, host =~ /^host_1[0-9]$/, 1h",
             points=per_host_h * len(regex_hosts),
             influxql=f"SELECT mean(usage_user) FROM {m} WHERE host =~ /^host_1[0-9]$/ AND {h1} "
                      f"GROUP BY time(5m), host",
             sql=f"SELECT timestamp, host, avg(usage_user) FROM {m} WHERE host ~ '^host_1[0-9]$' AND {h1q} "
                 f"SAMPLE BY 5m ALIGN TO CALENDAR",
             sh=lambda b: sh_rows(b, "host"),
             qdb=lambda b: sorted(((h, qdb_ms(t), v) for t, h, v in b["dataset"]), key=sort_key)),
        dict(name="last_per_host",
             what="last value per host, 10m",
             points=per_host_h * hosts // 6,
             influxql=f"SELECT last(usage_user) FROM {m} WHERE {m10} GROUP BY host",
             sql=f"SELECT host, timestamp, usage_user FROM {m} WHERE {m10q} LATEST ON timestamp PARTITION BY host",
             sh=lambda b: sh_rows(b, "host"),
             qdb=lambda b: sorted(((h, qdb_ms(t), v) for h, t, v in b["dataset"]), key=sort_key)),
        dict(name="max_p95_by_region",
             what=f"max and percentile 95 per region ({regions}), 3h",
             points=3 * per_host_h * hosts,
             influxql=f"SELECT max(usage_user), percentile(usage_user, 95) FROM {m} WHERE {h3} GROUP BY region",
             sql=f"SELECT region, max(usage_user), approx_percentile(usage_user, 0.95, 5) FROM {m} WHERE {h3q}",
             # The InfluxQL row's time is the window start: not compared.
             sh=lambda b: [(r[0], r[2], r[3]) for r in sh_rows(b, "region")],
             qdb=lambda b: sorted(((r, mx, p) for r, mx, p in b["dataset"]), key=sort_key),
             # QuestDB has no exact percentile: approx_percentile(x, p, 5) is an
             # HdrHistogram with 5 significant digits (same nearest rank).
             tolerance=1e-4),
        dict(name="raw_one_host",
             what="raw points of one host, 1h",
             points=per_host_h,
             influxql=f"SELECT usage_user FROM {m} WHERE host = 'host_7' AND {h1}",
             sql=f"SELECT timestamp, usage_user FROM {m} WHERE host = 'host_7' AND {h1q}",
             sh=lambda b: sh_rows(b),
             qdb=lambda b: sorted((qdb_ms(t), v) for t, v in b["dataset"])),
        dict(name="count_all",
             what=f"count over the whole dataset ({ds['hours']}h)",
             points=ds["points"],
             influxql=f"SELECT count(usage_user) FROM {m} WHERE {allw}",
             sql=f"SELECT count(usage_user) FROM {m} WHERE {allq}",
             sh=lambda b: [(r[1],) for r in sh_rows(b)],
             qdb=lambda b: [tuple(r) for r in b["dataset"]]),
        dict(name="all_hosts_mean_1h_all",
             what=f"mean per 1h over all {hosts:,} hosts, the whole dataset ({ds['hours']}h)",
             points=ds["points"],
             influxql=f"SELECT mean(usage_user) FROM {m} WHERE {allw} GROUP BY time(1h)",
             sql=f"SELECT timestamp, avg(usage_user) FROM {m} WHERE {allq} SAMPLE BY 1h ALIGN TO CALENDAR",
             sh=lambda b: sh_rows(b),
             qdb=lambda b: sorted((qdb_ms(t), v) for t, v in b["dataset"])),
        dict(name="one_series_max_1h_all",
             what=f"max per 1h, one host, the whole dataset ({ds['hours']}h)",
             points=ds["points"] // hosts,
             influxql=f"SELECT max(usage_user) FROM {m} WHERE host = 'host_3' AND {allw} GROUP BY time(1h)",
             sql=f"SELECT timestamp, max(usage_user) FROM {m} WHERE host = 'host_3' AND {allq} "
                 f"SAMPLE BY 1h ALIGN TO CALENDAR",
             sh=lambda b: sh_rows(b),
             qdb=lambda b: sorted((qdb_ms(t), v) for t, v in b["dataset"])),
        dict(name="show_tag_values_host",
             what="SHOW TAG VALUES host (Grafana's variable)",
             points=0,
             influxql=f'SHOW TAG VALUES FROM {m} WITH KEY = "host"',
             sql=f"SELECT DISTINCT host FROM {m}",
             sh=lambda b: sorted((r[1],) for r in sh_rows(b)),
             qdb=lambda b: sorted(tuple(r) for r in b["dataset"])),
    ]
    if only:
        names = [n.strip() for n in only.split(",") if n.strip()]
        unknown = set(names) - {q["name"] for q in qs}
        if unknown:
            sys.exit(f"unknown queries {sorted(unknown)}; known: {[q['name'] for q in qs]}")
        qs = [q for q in qs if q["name"] in names]
    return qs


def same(a, b, tol):
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        return a == b or abs(a - b) <= tol * max(abs(a), abs(b), 1e-300)
    return a == b


def compare(q, sh_body, qdb_body):
    """(ok, message): both systems' answers row by row."""
    tol = q.get("tolerance", 1e-9)
    a, b = q["sh"](sh_body), q["qdb"](qdb_body)
    if len(a) != len(b):
        return False, (f"row counts differ: shardhouse {len(a)}, questdb {len(b)}; "
                       f"first rows shardhouse {a[:3]} questdb {b[:3]}")
    bad = [(x, y) for x, y in zip(a, b) if len(x) != len(y) or not all(same(u, v, tol) for u, v in zip(x, y))]
    if bad:
        return False, f"{len(bad)} of {len(a)} rows differ, e.g. shardhouse {bad[0][0]} vs questdb {bad[0][1]}"
    sample = a[len(a) // 2] if a else ()
    return True, f"{len(a)} rows equal (tolerance {tol:g}), e.g. {sample}"


def influxql_series(body):
    """{(statement_id, name, tags): (columns, rows)} of an InfluxQL answer,
    in the answer's order of series."""
    out = {}
    for r in body.get("results", []):
        for s in r.get("series", []):
            key = (r.get("statement_id", 0), s.get("name", ""), tuple(sorted((s.get("tags") or {}).items())))
            if key in out:
                raise RuntimeError(f"series {key} answered twice")
            out[key] = (s.get("columns", []), [tuple(v) for v in s.get("values", [])])
    return out


def compare_influxql(q, sh_body, ix_body):
    """(ok, message): Shardhouse's and InfluxDB's answers to the same InfluxQL
    text: the same series (name and tags; their order is not compared), the
    same columns, and the same rows in the same order, values within the
    query's tolerance (1e-9 relative; both compute the same aggregate)."""
    tol = q.get("influx_tolerance", 1e-9)
    a, b = influxql_series(sh_body), influxql_series(ix_body)
    if set(a) != set(b):
        only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
        return False, (f"series differ: {len(a)} vs {len(b)}; only shardhouse {only_a[:3]}, "
                       f"only influxdb {only_b[:3]}")
    rows = 0
    for key in sorted(a):
        (ca, ra), (cb, rb) = a[key], b[key]
        if ca != cb:
            return False, f"series {key}: columns shardhouse {ca} vs influxdb {cb}"
        if len(ra) != len(rb):
            return False, (f"series {key}: {len(ra)} rows vs {len(rb)}; first rows shardhouse {ra[:3]} "
                           f"influxdb {rb[:3]}")
        for i, (x, y) in enumerate(zip(ra, rb)):
            if len(x) != len(y) or not all(same(u, v, tol) for u, v in zip(x, y)):
                return False, f"series {key} row {i}: shardhouse {x} vs influxdb {y}"
        rows += len(ra)
    # Clients key series by name and tags; the order is reported, not failed.
    order = "" if list(a) == list(b) else "; the series come in another order"
    return True, f"{len(a)} series, {rows} rows equal (tolerance {tol:g}){order}"


# --------------------------------------------------------------------------
# Timing


def systems(a, q):
    """(name, host:port, query function) of every system of this run."""
    out = [("shardhouse", a.sh, lambda c: sh_query(c, q["influxql"])),
           ("questdb", a.qdb, lambda c: qdb_exec(c, q["sql"]))]
    if a.influx:
        out.append(("influxdb", a.influx, lambda c: ix_query(c, q["influxql"])))
    return out


def run_one(a, q, clients):
    """{system: latencies (ms)} of q with `clients` concurrent clients."""
    syss = systems(a, q)
    if clients == 1:
        conns = [Client(hp) for _, hp, _ in syss]
        for _ in range(a.warmup):
            for c, (_, _, do) in zip(conns, syss):
                do(c)
        lat = {name: [] for name, _, _ in syss}
        for _ in range(a.runs):  # interleaved: every system sees the same machine state
            for c, (name, _, do) in zip(conns, syss):
                lat[name].append(timed(lambda: do(c)))
        return lat

    per = max(1, math.ceil(a.runs / clients))

    def phase(hostport, do):
        barrier = threading.Barrier(clients)

        def worker():
            c = Client(hostport)
            for _ in range(max(1, a.warmup // clients)):
                do(c)
            barrier.wait()
            return [timed(lambda: do(c)) for _ in range(per)]

        with concurrent.futures.ThreadPoolExecutor(clients) as ex:
            futs = [ex.submit(worker) for _ in range(clients)]
            return [x for f in futs for x in f.result()]

    return {name: phase(hp, do) for name, hp, do in syss}


def selected_rows(hostports):
    """The nodes' engine rows read so far (shardhouse_engine_selected_rows_total;
    every statement counts, so on a quiet cluster the rise over one asking is
    that asking's rows)."""
    total = 0
    for hp in hostports:
        with urllib.request.urlopen(f"http://{hp}/metrics", timeout=30) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("shardhouse_engine_selected_rows_total "):
                    total += int(float(line.split()[1]))
    return total


def fmt_ms(x):
    return f"{x:,.1f}" if x < 100 else f"{x:,.0f}"


def cmd_bench(a):
    with open(a.dataset) as f:
        ds = json.load(f)
    qs = queries(ds, a.only)
    shc, qc = Client(a.sh, timeout=600), Client(a.qdb)
    ixc = Client(a.influx, timeout=600) if a.influx else None
    # Answers first: a benchmark of wrong answers is worthless.
    checks, mismatches = {}, 0
    # The first asking of each query (nothing cached yet): the rows the
    # nodes' engine read for it.
    nodes = [h for h in a.node_metrics.split(",") if h]
    rows_read = {}
    load_before = os.getloadavg()
    for q in qs:
        sh_body = None
        try:
            before = selected_rows(nodes) if nodes else 0
            sh_body = sh_query(shc, q["influxql"])
            if nodes:
                rows_read[q["name"]] = selected_rows(nodes) - before
            ok, msg = compare(q, sh_body, qdb_exec(qc, q["sql"]))
        except Exception as e:  # noqa: BLE001 - reported as a mismatch
            ok, msg = False, f"query failed: {e}"
        checks[q["name"]] = {"match": ok, "detail": msg}
        if ok:
            log(f"answers match (questdb): {q['name']}: {msg}")
        else:
            mismatches += 1
            print(f"\n!!!!! MISMATCH {q['name']}: {msg}\n!!!!! shardhouse: {q['influxql']}\n"
                  f"!!!!! questdb:    {q['sql']}\n", flush=True)
            log(f"!!!!! MISMATCH {q['name']}: {msg}")
        if ixc is None:
            continue
        try:
            if sh_body is None:
                sh_body = sh_query(shc, q["influxql"])
            ok, msg = compare_influxql(q, sh_body, ix_query(ixc, q["influxql"]))
        except Exception as e:  # noqa: BLE001 - reported as a mismatch
            ok, msg = False, f"query failed: {e}"
        checks[q["name"]]["influxdb_match"] = ok
        checks[q["name"]]["influxdb_detail"] = msg
        checks[q["name"]]["match"] = checks[q["name"]]["match"] and ok
        if ok:
            log(f"answers match (influxdb): {q['name']}: {msg}")
        else:
            mismatches += 1
            print(f"\n!!!!! MISMATCH shardhouse vs influxdb {q['name']}: {msg}\n"
                  f"!!!!! both:       {q['influxql']}\n", flush=True)
            log(f"!!!!! MISMATCH shardhouse vs influxdb {q['name']}: {msg}")
    results = []
    for clients in [int(c) for c in a.clients.split(",")]:
        for q in qs:
            log(f"timing {q['name']} ({clients} client(s), {a.runs} runs after {a.warmup} warm-up)")
            try:
                lats = run_one(a, q, clients)
            except Exception as e:  # noqa: BLE001
                print(f"\n!!!!! {q['name']} failed while timing: {e}\n", flush=True)
                mismatches += 1
                continue
            r = {"name": q["name"], "clients": clients, "what": q["what"], "points": q["points"],
                 "influxql": q["influxql"], "sql": q["sql"], "match": checks[q["name"]]["match"],
                 "check": checks[q["name"]]["detail"], "runs": len(lats["shardhouse"])}
            if "influxdb_detail" in checks[q["name"]]:
                r["check_influxdb"] = checks[q["name"]]["influxdb_detail"]
            for sysname, lat in lats.items():
                r[sysname] = {"p50_ms": round(pct(lat, 50), 2), "p95_ms": round(pct(lat, 95), 2),
                              "max_ms": round(max(lat), 2), "mean_ms": round(sum(lat) / len(lat), 2)}
            r["p95_ratio"] = round(r["shardhouse"]["p95_ms"] / max(r["questdb"]["p95_ms"], 1e-6), 2)
            if "influxdb" in r:
                r["p95_ratio_influxdb"] = round(r["shardhouse"]["p95_ms"] / max(r["influxdb"]["p95_ms"], 1e-6), 2)
            results.append(r)
    load = f"load average {load_before[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end of the timing"
    report = {"load": load, "rows_read": rows_read, "dataset": ds, "runs": a.runs, "warmup": a.warmup, "clients": a.clients,
              "cluster": a.cluster, "results": results, "answers": checks, "mismatches": mismatches}
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
    print_table(report)
    if mismatches:
        peers = "QuestDB and InfluxDB" if a.influx else "QuestDB"
        print(f"\n!!!!! {mismatches} MISMATCH(ES) between Shardhouse and {peers}: the figures above compare "
              f"different answers\n", flush=True)
    for name, n in rows_read.items():
        print(f"query_{name}_rows_read={n}")
    # The last lines, one pair (or triple) per query (and per client count past 1).
    for r in results:
        suffix = "" if r["clients"] == 1 else f"_c{r['clients']}"
        print(f"query_{r['name']}{suffix}_p95_ms={r['shardhouse']['p95_ms']}")
        print(f"questdb_{r['name']}{suffix}_p95_ms={r['questdb']['p95_ms']}")
        if "influxdb" in r:
            print(f"influxdb_{r['name']}{suffix}_p95_ms={r['influxdb']['p95_ms']}")
    sys.exit(1 if mismatches else 0)


def print_table(rep):
    ds = rep["dataset"]
    print(f"\n### Query benchmark: {ds['points']:,} points ({ds['hosts']:,} hosts x {ds['steps']:,} timestamps, "
          f"{ds['interval_s']} s over {ds['hours']} h), {rep['runs']} runs per query after {rep['warmup']} warm-up; "
          f"{rep['cluster']}; {rep['load']} (2 cores)\n")
    loads = [f"{n} {ds['points'] / ds[k]:,.0f} points/s" for n, k in
             (("Shardhouse", "shardhouse_load_secs"), ("QuestDB", "questdb_load_secs"),
              ("InfluxDB", "influxdb_load_secs")) if ds.get(k)]
    if loads:
        print(f"Load (the same line-protocol batches, 2 senders): {', '.join(loads)}.\n")
    ix = any("influxdb" in r for r in rep["results"])
    fmt = lambda x: f"{fmt_ms(x['p50_ms'])} / {fmt_ms(x['p95_ms'])} / {fmt_ms(x['max_ms'])}"
    verdict = lambda ratio, peer: f"{ratio:.2f}x ({'<= ' + peer if ratio <= 1 else 'slower'})"
    if ix:
        print("| query | clients | points in range | Shardhouse p50 / p95 / max (ms) | InfluxDB p50 / p95 / max (ms) "
              "| QuestDB p50 / p95 / max (ms) | p95 ratio SH/InfluxDB | p95 ratio SH/QDB | same answers |")
        print("|---|---|---|---|---|---|---|---|---|")
    else:
        print("| query | clients | points in range | Shardhouse p50 / p95 / max (ms) | QuestDB p50 / p95 / max (ms) "
              "| p95 ratio SH/QDB | same answers |")
        print("|---|---|---|---|---|---|---|")
    for r in rep["results"]:
        cells = [r["name"], str(r["clients"]), f"{r['points']:,}", fmt(r["shardhouse"])]
        if ix:
            cells.append(fmt(r["influxdb"]) if "influxdb" in r else "-")
        cells.append(fmt(r["questdb"]))
        if ix:
            cells.append(verdict(r["p95_ratio_influxdb"], "InfluxDB") if "influxdb" in r else "-")
        cells += [verdict(r["p95_ratio"], "QuestDB"), "yes" if r["match"] else "**NO**"]
        print("| " + " | ".join(cells) + " |")
    print()
    for r in rep["results"]:
        if r["clients"] == 1:
            print(f"- `{r['name']}` ({r['what']}):\n  - InfluxQL: `{r['influxql']}`\n  - QuestDB: `{r['sql']}`")
    print()


# --------------------------------------------------------------------------
# Profile helper


def cmd_loop(a):
    with open(a.dataset) as f:
        ds = json.load(f)
    (q,) = queries(ds, a.only)
    pids = {}
    for item in a.pids.split(",") if a.pids else []:
        name, pid = item.split("=")
        pids[name] = int(pid)
    if a.target == "influxdb" and not a.influx:
        sys.exit("--target influxdb needs --influx")
    c = Client({"questdb": a.qdb, "influxdb": a.influx}.get(a.target, a.sh), timeout=600)
    do = {"questdb": lambda: qdb_exec(c, q["sql"]),
          "influxdb": lambda: ix_query(c, q["influxql"])}.get(a.target, lambda: sh_query(c, q["influxql"]))
    do()
    before = {n: proc_cpu_secs(p) for n, p in pids.items()}
    lat = []
    t_end = time.perf_counter() + a.secs
    while time.perf_counter() < t_end:
        lat.append(timed(do))
    after = {n: proc_cpu_secs(p) for n, p in pids.items()}
    cpu = {n: round((after[n] - before[n]) / len(lat) * 1000, 1) for n in pids}
    out = {"name": q["name"], "target": a.target, "queries": len(lat), "mean_ms": round(sum(lat) / len(lat), 1),
           "p50_ms": round(pct(lat, 50), 1), "cpu_ms_per_query": cpu}
    print(json.dumps(out))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("load", "bench", "loop"):
        s = sub.add_parser(name)
        s.add_argument("--sh", required=True, help="router host:port")
        s.add_argument("--qdb", required=True, help="QuestDB HTTP host:port")
        s.add_argument("--dataset", required=True, help="dataset.json (written by load)")
        s.add_argument("--influx", default="", help="InfluxDB 1.8 HTTP host:port (none: not compared)")
    lp = sub.choices["load"]
    lp.add_argument("--hosts", type=int, default=1000)
    lp.add_argument("--regions", type=int, default=4)
    lp.add_argument("--hours", type=int, default=12)
    lp.add_argument("--interval", type=int, default=10)
    lp.add_argument("--threads", type=int, default=2)
    lp.add_argument("--batch-points", type=int, default=10000)
    lp.add_argument("--skip-shardhouse", action="store_true")
    lp.add_argument("--skip-questdb", action="store_true")
    bp = sub.choices["bench"]
    bp.add_argument("--runs", type=int, default=50)
    bp.add_argument("--warmup", type=int, default=5)
    bp.add_argument("--clients", default="1")
    bp.add_argument("--only", default="")
    bp.add_argument("--cluster", default="")
    bp.add_argument("--node-metrics", default="", help="the nodes' HTTP host:port, comma separated")
    bp.add_argument("--out", required=True)
    op = sub.choices["loop"]
    op.add_argument("--only", required=True)
    op.add_argument("--target", choices=("shardhouse", "questdb", "influxdb"), default="shardhouse")
    op.add_argument("--secs", type=float, default=10)
    op.add_argument("--pids", default="", help="name=pid,... whose CPU per query is reported")
    a = p.parse_args()
    {"load": cmd_load, "bench": cmd_bench, "loop": cmd_loop}[a.cmd](a)


if __name__ == "__main__":
    main()
