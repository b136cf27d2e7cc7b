#!/usr/bin/env python3
"""A 20-panel dashboard refreshed while points are written: `make
bench-query`'s realistic phase (issue 28: "a 20-panel dashboard refreshed
every 5 s for a minute while 100k points/s are written").

For each system in turn (Shardhouse, then InfluxDB 1.8 if given, then
QuestDB), on its own so that no system's load slows another's panels:

  - writers send RATE points/s of a second measurement (`ingest`, SERIES
    series, the current time) and keep the dashboard's own measurement
    (`cpu`) live: one point per host every INTERVAL s at the current time,
    continuing the loaded dataset (the newest bucket changes, as on a real
    dashboard);
  - every REFRESH s the dashboard asks its 20 panels (the queries Grafana
    sends for a host/region dashboard over the last HOURS: `$timeFilter`
    as `time >= now() - Nh`, `GROUP BY time($__interval)`), 6 at a time as
    a browser does, for SECS seconds;
  - p50/p95 per panel, the refresh's wall time, the points/s the writers
    achieved.

Answers are not compared here (the data moves while the panels run; the
`bench` phase compares the same queries on still data). Prints a table and,
as its last lines, `dashboard_<panel>_p95_ms=`, `influxdb_dashboard_...`,
`questdb_dashboard_...` and `<system>_dashboard_refresh_p95_ms=`.

Usage: dashboard.py --sh H:P --qdb H:P [--influx H:P] --dataset ds.json
       [--secs 60] [--refresh 5] [--rate 100000] [--series 10000]
"""

import argparse
import concurrent.futures
import json
import os
import queue
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from bench_common import Client, pct, timed  # noqa: E402
from bench_query import (DB, MEASUREMENT, NS, VALS, cents, ix_query, log,  # noqa: E402
                         qdb_exec, region_of, sh_query)

BROWSER_CONCURRENCY = 6


def interval_of(hours):
    """Grafana's `$__interval` for a ~1,000-pixel panel over `hours`,
    at least 1 minute (what a 24 h dashboard asks)."""
    secs = max(60, hours * 3600 // 1000)
    return f"{secs // 60}m" if secs % 60 == 0 else f"{secs}s"


def panels(ds):
    """(name, InfluxQL, QuestDB SQL) of the 20 panels, over the last
    `hours` (relative to now, as Grafana asks)."""
    m, hours = MEASUREMENT, ds["hours"]
    iv = interval_of(hours)
    tf = f"time >= now() - {hours}h"
    qf = f"timestamp >= dateadd('h', -{hours}, now())"
    h1, q1 = "time >= now() - 1h", "timestamp >= dateadd('h', -1, now())"
    m10, q10 = "time >= now() - 10m", "timestamp >= dateadd('m', -10, now())"
    m15, q15 = "time >= now() - 15m", "timestamp >= dateadd('m', -15, now())"
    sample = f"SAMPLE BY {iv} ALIGN TO CALENDAR"
    out = []
    for h in (1, 2, 3, 4):
        out.append((f"host{h}_mean", f"SELECT mean(usage_user) FROM {m} WHERE host = 'host_{h}' AND {tf} GROUP BY time({iv})",
                    f"SELECT timestamp, avg(usage_user) FROM {m} WHERE host = 'host_{h}' AND {qf} {sample}"))
    out += [
        ("all_mean", f"SELECT mean(usage_user) FROM {m} WHERE {tf} GROUP BY time({iv})",
         f"SELECT timestamp, avg(usage_user) FROM {m} WHERE {qf} {sample}"),
        ("all_max", f"SELECT max(usage_user) FROM {m} WHERE {tf} GROUP BY time({iv})",
         f"SELECT timestamp, max(usage_user) FROM {m} WHERE {qf} {sample}"),
        ("all_min", f"SELECT min(usage_user) FROM {m} WHERE {tf} GROUP BY time({iv})",
         f"SELECT timestamp, min(usage_user) FROM {m} WHERE {qf} {sample}"),
        ("all_count", f"SELECT count(usage_user) FROM {m} WHERE {tf} GROUP BY time({iv})",
         f"SELECT timestamp, count(usage_user) FROM {m} WHERE {qf} {sample}"),
        ("region_mean_system", f"SELECT mean(usage_system) FROM {m} WHERE {tf} GROUP BY time({iv}), region",
         f"SELECT timestamp, region, avg(usage_system) FROM {m} WHERE {qf} {sample}"),
        ("region_max_system", f"SELECT max(usage_system) FROM {m} WHERE {tf} GROUP BY time({iv}), region",
         f"SELECT timestamp, region, max(usage_system) FROM {m} WHERE {qf} {sample}"),
        ("regex_hosts_by_host", f"SELECT mean(usage_user) FROM {m} WHERE host =~ /^host_1[0-9]$/ AND {tf} "
                                f"GROUP BY time({iv}), host",
         f"SELECT timestamp, host, avg(usage_user) FROM {m} WHERE host ~ '^host_1[0-9]$' AND {qf} {sample}"),
        ("host5_mean_system", f"SELECT mean(usage_system) FROM {m} WHERE host = 'host_5' AND {tf} GROUP BY time({iv})",
         f"SELECT timestamp, avg(usage_system) FROM {m} WHERE host = 'host_5' AND {qf} {sample}"),
        ("last_per_host", f"SELECT last(usage_user) FROM {m} WHERE {m10} GROUP BY host",
         f"SELECT host, timestamp, usage_user FROM {m} WHERE {q10} LATEST ON timestamp PARTITION BY host"),
        ("raw_host7_1h", f"SELECT usage_user FROM {m} WHERE host = 'host_7' AND {h1}",
         f"SELECT timestamp, usage_user FROM {m} WHERE host = 'host_7' AND {q1}"),
        ("raw_host8_15m", f"SELECT usage_system FROM {m} WHERE host = 'host_8' AND {m15}",
         f"SELECT timestamp, usage_system FROM {m} WHERE host = 'host_8' AND {q15}"),
        ("stat_count", f"SELECT count(usage_user) FROM {m} WHERE {tf}",
         f"SELECT count(usage_user) FROM {m} WHERE {qf}"),
        ("stat_max_1h", f"SELECT max(usage_user) FROM {m} WHERE {h1}",
         f"SELECT max(usage_user) FROM {m} WHERE {q1}"),
        ("region_mean_10m", f"SELECT mean(usage_user) FROM {m} WHERE {m10} GROUP BY region",
         f"SELECT region, avg(usage_user) FROM {m} WHERE {q10}"),
        ("var_hosts", f'SHOW TAG VALUES FROM {m} WITH KEY = "host"', f"SELECT DISTINCT host FROM {m}"),
        ("var_regions", f'SHOW TAG VALUES FROM {m} WITH KEY = "region"', f"SELECT DISTINCT region FROM {m}"),
    ]
    assert len(out) == 20, len(out)
    return out


class Writers:
    """Background writes to one system: `rate` points/s of `ingest`
    (`series` series) and the live `cpu` points of the dataset's hosts."""

    def __init__(self, hostport, path, ds, rate, series):
        self.hostport, self.path, self.ds = hostport, path, ds
        self.rate, self.series = rate, series
        self.stop = threading.Event()
        self.sent = 0
        self.errors = []
        self.prefix = [f"ingest,host=ih_{i},rack=r{i % 50} value=".encode() for i in range(series)]
        self.threads = [threading.Thread(target=self.ingest, args=(j, 2), daemon=True) for j in range(2)]
        self.threads.append(threading.Thread(target=self.live_cpu, daemon=True))

    def post(self, c, body):
        status, data = c.request("POST", self.path, body=body, headers={"Content-Type": "text/plain"})
        if status not in (200, 204):
            self.errors.append(f"HTTP {status}: {data[:200]!r}")

    def ingest(self, j, of):
        """Writer j of `of`: its share of `rate` every second, in batches
        of 10,000 points stamped with the current time."""
        c = Client(self.hostport)
        per_sec = self.rate // of
        nxt = time.time()
        while not self.stop.is_set():
            ts = b" %d\n" % time.time_ns()
            lines = [self.prefix[(j + k * of) % self.series] + VALS[k % 10000] + ts for k in range(per_sec)]
            for i in range(0, len(lines), 10000):
                self.post(c, b"".join(lines[i:i + 10000]))
                self.sent += len(lines[i:i + 10000])
            nxt += 1
            time.sleep(max(0.0, nxt - time.time()))

    def live_cpu(self):
        """One point per host every interval at the current step,
        continuing the dataset's values."""
        ds, c = self.ds, Client(self.hostport)
        step_ns = ds["interval_s"] * NS
        last = ds["steps"] - 1
        while not self.stop.is_set():
            k = (time.time_ns() - ds["start_ns"]) // step_ns
            if k <= last:
                # Woken a little early: never write a step twice (a
                # rewrite, which a live dashboard does not see).
                self.stop.wait(0.05)
                continue
            last = k
            ts = ds["start_ns"] + k * step_ns
            body = b"".join(
                f"{MEASUREMENT},host=host_{h},region={region_of(h, ds['regions'])} usage_user=".encode()
                + VALS[cents(h, k, 1)] + b",usage_system=" + VALS[cents(h, k, 2)] + b" %d\n" % ts
                for h in range(ds["hosts"]))
            self.post(c, body)
            self.stop.wait(max(0.1, (ts + step_ns - time.time_ns()) / NS))

    def __enter__(self):
        self.t0 = time.perf_counter()
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)
        self.secs = time.perf_counter() - self.t0


def run_system(name, hostport, do, ds, a, write_path):
    """{panel: latencies}, refresh wall times and the achieved write rate
    of one system."""
    ps = panels(ds)
    lat = {p[0]: [] for p in ps}
    refreshes = []
    clients = [Client(hostport, timeout=600) for _ in range(BROWSER_CONCURRENCY)]
    pool = queue_of(clients)
    before = cache_counters(hostport) if name == "shardhouse" else {}
    with Writers(hostport, write_path, ds, a.rate, a.series) as w:
        time.sleep(2)  # the writers reach their rate before the first refresh
        t_end = time.perf_counter() + a.secs
        while time.perf_counter() < t_end:
            t0 = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(BROWSER_CONCURRENCY) as ex:
                def panel(p):
                    c = pool.get()
                    try:
                        return p[0], timed(lambda: do(c, p))
                    finally:
                        pool.put(c)
                for pname, ms in ex.map(panel, ps):
                    lat[pname].append(ms)
            refreshes.append((time.perf_counter() - t0) * 1000)
            time.sleep(max(0.0, a.refresh - (time.perf_counter() - t0)))
    if w.errors:
        log(f"{name}: {len(w.errors)} rejected write batches, first: {w.errors[0]}")
    rate = w.sent / w.secs
    log(f"{name}: {len(refreshes)} refreshes, writes {rate:,.0f} points/s of {a.rate:,} asked")
    if before:
        after = cache_counters(hostport)
        log(f"{name}: router query cache during the phase: " +
            ", ".join(f"{k} {after.get(k, 0) - before.get(k, 0):g}" for k in sorted(after)))
    return lat, refreshes, rate


def cache_counters(hostport):
    """The router's query cache counters (hits, misses, invalidations)."""
    status, data = Client(hostport).request("GET", "/metrics")
    out = {}
    for line in data.decode(errors="replace").splitlines():
        for k in ("hits", "misses", "invalidations"):
            if line.startswith(f"shardhouse_router_query_cache_{k}_total"):
                out[k] = out.get(k, 0) + float(line.rsplit(" ", 1)[1])
    return out


def queue_of(items):
    q = queue.Queue()
    for i in items:
        q.put(i)
    return q


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sh", required=True)
    p.add_argument("--qdb", required=True)
    p.add_argument("--influx", default="")
    p.add_argument("--dataset", required=True)
    p.add_argument("--secs", type=float, default=60)
    p.add_argument("--refresh", type=float, default=5)
    p.add_argument("--rate", type=int, default=100_000)
    p.add_argument("--series", type=int, default=10_000)
    p.add_argument("--out", default="")
    a = p.parse_args()
    with open(a.dataset) as f:
        ds = json.load(f)
    syss = [("shardhouse", a.sh, lambda c, q: sh_query(c, q[1]), f"/write?db={DB}&precision=ns")]
    if a.influx:
        syss.append(("influxdb", a.influx, lambda c, q: ix_query(c, q[1]), f"/write?db={DB}&precision=ns"))
    syss.append(("questdb", a.qdb, lambda c, q: qdb_exec(c, q[2]), "/write"))
    results = {}
    for name, hp, do, path in syss:
        log(f"dashboard on {name}: 20 panels every {a.refresh:g} s for {a.secs:g} s, writing {a.rate:,} points/s")
        results[name] = run_system(name, hp, do, ds, a, path)
    names = [q[0] for q in panels(ds)]
    cols = [n for n, *_ in syss]
    print(f"#### Dashboard while ingesting: 20 panels over the last {ds['hours']} h "
          f"(GROUP BY time({interval_of(ds['hours'])})), every {a.refresh:g} s for {a.secs:g} s, "
          f"{BROWSER_CONCURRENCY} at a time, while {a.rate:,} points/s are written\n")
    print("| panel | " + " | ".join(f"{c} p50 / p95 (ms)" for c in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for n in names:
        cells = [f"{pct(results[c][0][n], 50):,.1f} / {pct(results[c][0][n], 95):,.1f}" for c in cols]
        print(f"| {n} | " + " | ".join(cells) + " |")
    cells = [f"{pct(results[c][1], 50):,.0f} / {pct(results[c][1], 95):,.0f}" for c in cols]
    print("| whole refresh | " + " | ".join(cells) + " |")
    print("| writes achieved (points/s) | " + " | ".join(f"{results[c][2]:,.0f}" for c in cols) + " |")
    print()
    if a.out:
        with open(a.out, "w") as f:
            json.dump({c: {"panels": results[c][0], "refresh_ms": results[c][1], "write_rate": results[c][2]}
                       for c in cols}, f)
    prefix = {"shardhouse": "dashboard_", "influxdb": "influxdb_dashboard_", "questdb": "questdb_dashboard_"}
    for c in cols:
        for n in names:
            print(f"{prefix[c]}{n}_p95_ms={pct(results[c][0][n], 95):.2f}")
        print(f"{c}_dashboard_refresh_p95_ms={pct(results[c][1], 95):.1f}")


if __name__ == "__main__":
    main()
