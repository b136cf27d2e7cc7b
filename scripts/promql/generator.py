#!/usr/bin/env python3
"""Metrics for the PromQL comparison test: counters (with a reset),
gauges and a classic histogram in Prometheus's text format, served on
several ports at once (one scrape target per port, as `instance`s).

Usage: generator.py PORT [PORT...]
Values move with wall-clock time so that every scrape sees new numbers.
"""
import math
import random
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

START = time.time()
BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5]


class Target:
    def __init__(self, index):
        self.index = index
        self.lock = threading.Lock()
        self.rng = random.Random(index)
        self.requests = {}
        self.buckets = [0] * (len(BUCKETS) + 1)
        self.latency_sum = 0.0
        self.last = time.time()

    def advance(self):
        now = time.time()
        dt = now - self.last
        self.last = now
        for path in ("/", "/api", "/static"):
            for code in ("200", "500"):
                rate = (1 + self.index) * (10 if code == "200" else 1) * (len(path))
                key = (path, code)
                self.requests[key] = self.requests.get(key, 0) + self.rng.randint(0, int(rate * dt) + 1)
        # One counter restarts every 90 s, as after a process restart.
        if int(now - START) % 90 < int(now - START - dt) % 90 and ("/static", "500") in self.requests:
            self.requests[("/static", "500")] = 0
        for _ in range(int(20 * dt) + 1):
            v = self.rng.expovariate(1 / (0.05 * (1 + self.index)))
            self.latency_sum += v
            for i, le in enumerate(BUCKETS):
                if v <= le:
                    self.buckets[i] += 1
            self.buckets[-1] += 1

    def render(self):
        with self.lock:
            self.advance()
            t = time.time() - START
            out = ["# HELP demo_requests_total Requests handled.", "# TYPE demo_requests_total counter"]
            for (path, code), v in sorted(self.requests.items()):
                out.append(f'demo_requests_total{{path="{path}",code="{code}"}} {v}')
            out += ["# HELP demo_temperature_celsius A gauge.", "# TYPE demo_temperature_celsius gauge"]
            for room in ("kitchen", "hall", "cellar"):
                phase = len(room) + self.index
                out.append(f'demo_temperature_celsius{{room="{room}"}} {20 + 5 * math.sin(t / 30 + phase):.4f}')
            out += ["# HELP demo_queue_length Items waiting.", "# TYPE demo_queue_length gauge"]
            out.append(f"demo_queue_length {self.rng.randint(0, 50)}")
            # Present 20 s out of every 40 s: Prometheus writes stale
            # markers when it disappears.
            if int(t / 20) % 2 == 0:
                out += ["# TYPE demo_intermittent_metric gauge", f"demo_intermittent_metric {self.index}"]
            out += ["# HELP demo_latency_seconds Request latency.", "# TYPE demo_latency_seconds histogram"]
            for le, c in zip([*map(str, BUCKETS), "+Inf"], self.buckets):
                out.append(f'demo_latency_seconds_bucket{{le="{le}"}} {c}')
            out.append(f"demo_latency_seconds_sum {self.latency_sum}")
            out.append(f"demo_latency_seconds_count {self.buckets[-1]}")
            return ("\n".join(out) + "\n").encode()


def serve(port, target):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = target.render()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    ports = [int(p) for p in sys.argv[1:]]
    for i, p in enumerate(ports):
        threading.Thread(target=serve, args=(p, Target(i)), daemon=True).start()
    print("READY generator", *ports, flush=True)
    while True:
        time.sleep(3600)
