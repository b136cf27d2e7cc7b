"""What the benchmark drivers share (scripts/bench_query/bench_query.py,
scripts/bench_promql/bench_promql.py): a keep-alive HTTP client, the
percentile rule, a timer and a process's CPU time, so that both report
figures measured the same way."""
import http.client
import math
import os
import time
import urllib.parse


class Client:
    """One keep-alive HTTP/1.1 connection (reconnects once on a dropped
    one) to `address`: `host:port` or a base URL `http://host:port`."""

    def __init__(self, address, timeout=120):
        if "://" in address:
            u = urllib.parse.urlsplit(address)
            self.host, self.port = u.hostname, u.port
        else:
            host, port = address.rsplit(":", 1)
            self.host, self.port = host, int(port)
        self.timeout = timeout
        self.conn = None

    def request(self, method, path, body=None, headers=None):
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request(method, path, body=body, headers=headers or {})
                resp = self.conn.getresponse()
                return resp.status, resp.read()
            except (http.client.HTTPException, ConnectionError, OSError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
        raise RuntimeError("unreachable")


def pct(xs, p):
    """The p-th percentile of xs, nearest rank."""
    s = sorted(xs)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def timed(fn):
    """Milliseconds fn() took."""
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def proc_cpu_secs(pid):
    """CPU seconds (user + system) process pid has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
