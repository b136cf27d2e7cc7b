#!/usr/bin/env python3
"""Scrape targets with the metric families PromQL compliance queries are
written against (`demo_*`: CPU counters per mode, memory gauges per type,
disk usage, a request-latency histogram, a batch job's timestamps and a
metric that comes and goes), so that Shardhouse and a reference Prometheus
can be compared on those queries without the public demo hosts.

Usage: demo_targets.py PORT [PORT...]   (one target per port)

Values are functions of wall-clock time plus a seeded random walk, so that
every scrape sees new numbers; counters restart now and then (as after a
process restart) so that `resets` and rate's reset handling are exercised.
"""
import math
import random
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BUCKETS = [0.0001, 0.00015, 0.0002, 0.0003, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.1]
MODES = {"idle": 0.6, "user": 0.25, "system": 0.1}
ENDPOINTS = [
    (method, path, status)
    for method in ("GET", "POST")
    for path in ("/api/foo", "/api/bar", "/api/nonexistent")
    for status in ("200", "404", "500")
]
# A restart every RESTART_S seconds, staggered per target.
RESTART_S = 600


class Target:
    def __init__(self, index):
        self.index = index
        self.rng = random.Random(1000 + index)
        self.lock = threading.Lock()
        self.num_cpus = 4 + 2 * index
        self.born = time.time() - index * 170
        self.last = time.time()
        self.cpu = {mode: 0.0 for mode in MODES}
        self.hist = {e: [0] * (len(BUCKETS) + 1) for e in ENDPOINTS}
        self.hist_sum = {e: 0.0 for e in ENDPOINTS}
        self.disk = 10e9 * (1 + index)
        self.batch_success = time.time()
        self.batch_bytes = 0

    def advance(self):
        now = time.time()
        dt = max(0.0, now - self.last)
        self.last = now
        if now - self.born > RESTART_S:
            self.born = now
            self.cpu = {mode: 0.0 for mode in MODES}
            self.hist = {e: [0] * (len(BUCKETS) + 1) for e in ENDPOINTS}
            self.hist_sum = {e: 0.0 for e in ENDPOINTS}
        for mode, share in MODES.items():
            self.cpu[mode] += dt * self.num_cpus * share * (0.8 + 0.4 * self.rng.random())
        for e in ENDPOINTS:
            weight = (3 if e[0] == "GET" else 1) * (10 if e[2] == "200" else 1)
            for _ in range(self.rng.randint(0, int(weight * dt) + 1)):
                latency = self.rng.lognormvariate(math.log(0.0004 * (1 + self.index)), 1.0)
                self.hist_sum[e] += latency
                for i, bound in enumerate(BUCKETS):
                    if latency <= bound:
                        self.hist[e][i] += 1
                self.hist[e][-1] += 1
        self.disk += self.rng.uniform(-1e6, 5e6) * dt
        if self.rng.random() < dt / 30:
            self.batch_success = now
            self.batch_bytes = self.rng.randint(1, 10**8)

    def render(self):
        with self.lock:
            self.advance()
            now = time.time()
            out = []
            out.append("# TYPE demo_num_cpus gauge")
            out.append(f"demo_num_cpus {self.num_cpus}")
            out.append("# TYPE demo_cpu_usage_seconds_total counter")
            for mode, value in self.cpu.items():
                out.append(f'demo_cpu_usage_seconds_total{{mode="{mode}"}} {value!r}')
            out.append("# TYPE demo_memory_usage_bytes gauge")
            total = 8e9 * (1 + self.index)
            used = total * (0.4 + 0.2 * math.sin(now / 300 + self.index)) + self.rng.uniform(0, 1e6)
            parts = {"used": used, "buffers": total * 0.05 + self.rng.uniform(0, 1e5),
                     "cached": total * 0.15 + self.rng.uniform(0, 1e5)}
            parts["free"] = total - sum(parts.values())
            for kind, value in parts.items():
                out.append(f'demo_memory_usage_bytes{{type="{kind}"}} {value!r}')
            out.append("# TYPE demo_disk_usage_bytes gauge")
            out.append(f"demo_disk_usage_bytes {self.disk!r}")
            out.append("# TYPE demo_disk_total_bytes gauge")
            out.append(f"demo_disk_total_bytes {1e11 * (1 + self.index)!r}")
            out.append("# TYPE demo_api_request_duration_seconds histogram")
            for (method, path, status), counts in self.hist.items():
                labels = f'method="{method}",path="{path}",status="{status}"'
                for bound, count in zip(BUCKETS + ["+Inf"], counts):
                    out.append(f'demo_api_request_duration_seconds_bucket{{{labels},le="{bound}"}} {count}')
                out.append(f"demo_api_request_duration_seconds_sum{{{labels}}} {self.hist_sum[(method, path, status)]!r}")
                out.append(f"demo_api_request_duration_seconds_count{{{labels}}} {counts[-1]}")
            out.append("# TYPE demo_batch_last_success_timestamp_seconds gauge")
            out.append(f"demo_batch_last_success_timestamp_seconds {self.batch_success!r}")
            out.append("# TYPE demo_batch_last_run_processed_bytes gauge")
            out.append(f"demo_batch_last_run_processed_bytes {self.batch_bytes}")
            # Present for two minutes, absent for one: Prometheus writes a
            # stale marker when it goes, which the store must keep.
            if int(now / 60 + self.index) % 3 != 2:
                out.append("# TYPE demo_intermittent_metric gauge")
                out.append(f"demo_intermittent_metric {self.rng.random()!r}")
            return "\n".join(out) + "\n"


def serve(port, target):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = target.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_):
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def main():
    ports = [int(p) for p in sys.argv[1:]]
    if not ports:
        sys.exit("usage: demo_targets.py PORT [PORT...]")
    threads = [threading.Thread(target=serve, args=(p, Target(i)), daemon=True) for i, p in enumerate(ports)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
