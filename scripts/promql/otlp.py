#!/usr/bin/env python3
"""End-to-end check of the router's OTLP/HTTP `POST /v1/metrics`.

Sends an OTLP protobuf body (encoded here by hand from the OTLP field
numbers, so the router's decoding is checked against the wire format, not
against its own library) with every kind Prometheus's receiver maps, plus
points that must be refused (delta temporality, exponential histogram, no
value, a label the router does not store); then an OTLP/JSON body, gzip'd.
Reads everything back with PromQL (`/api/v1/query`) and asserts the
names, labels and values, the partial_success count, and the 400/415
answers. Usage: otlp.py ROUTER_URL [DB] (DB: the database written and
read, the `db` parameter of both; default the router's `prometheus`). Prints `ok: ...` lines; exits 1 with
`FAIL otlp: ...` on the first difference.
"""
import gzip
import json
import struct
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

ROUTER = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8086"
DB = {"db": sys.argv[2]} if len(sys.argv) > 2 else {}


def fail(msg):
    print(f"FAIL otlp: {msg}", file=sys.stderr)
    sys.exit(1)


# --- protobuf, by hand
def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def ld(field, payload):
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def uint(field, n):
    return varint(field << 3) + varint(n)


def fixed64(field, n):
    return varint(field << 3 | 1) + struct.pack("<Q", n)


def sfixed64(field, n):
    return varint(field << 3 | 1) + struct.pack("<q", n)


def double(field, x):
    return varint(field << 3 | 1) + struct.pack("<d", x)


def text(field, s):
    return ld(field, s.encode())


def kv(key, value):
    return text(1, key) + ld(2, text(1, value))  # KeyValue{key, AnyValue{string_value}}


def attrs(field, pairs):
    return b"".join(ld(field, kv(k, v)) for k, v in pairs)


def number_point(t_ns, value=None, as_int=None, labels=()):
    body = fixed64(3, t_ns) + attrs(7, labels)
    if value is not None:
        body += double(4, value)
    if as_int is not None:
        body += sfixed64(6, as_int)
    return body


CUMULATIVE, DELTA = 2, 1


def metric(name, unit, kind, payload):
    fields = {"gauge": 5, "sum": 7, "histogram": 9, "exp": 10, "summary": 11}
    return text(1, name) + text(3, unit) + ld(fields[kind], payload)


def gauge(points):
    return b"".join(ld(1, p) for p in points)


def sum_(points, temporality, monotonic):
    return gauge(points) + uint(2, temporality) + uint(3, 1 if monotonic else 0)


def histogram_point(t_ns, count, total, counts, bounds, labels=()):
    packed_counts = b"".join(struct.pack("<Q", c) for c in counts)
    packed_bounds = b"".join(struct.pack("<d", b) for b in bounds)
    return (fixed64(3, t_ns) + fixed64(4, count) + double(5, total) + ld(6, packed_counts)
            + ld(7, packed_bounds) + attrs(9, labels))


def summary_point(t_ns, count, total, quantiles):
    qs = b"".join(ld(6, double(1, q) + double(2, v)) for q, v in quantiles)
    return fixed64(3, t_ns) + fixed64(4, count) + double(5, total) + qs


def request(resource, metrics):
    scope = ld(1, text(1, "e2e")) + b"".join(ld(2, m) for m in metrics)
    rm = ld(1, attrs(1, resource)) + ld(2, scope)
    return ld(1, rm)


def read_fields(buf):
    """Top-level fields of a protobuf message: {field: [value, ...]}."""
    out, i = {}, 0
    while i < len(buf):
        key, i = read_varint(buf, i)
        field, wt = key >> 3, key & 7
        if wt == 0:
            v, i = read_varint(buf, i)
        elif wt == 2:
            n, i = read_varint(buf, i)
            v, i = buf[i:i + n], i + n
        else:
            fail(f"unexpected wire type {wt} in an answer")
        out.setdefault(field, []).append(v)
    return out


def read_varint(buf, i):
    n = shift = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


# --- HTTP
def post(body, content_type, encoding=None):
    url = ROUTER + "/v1/metrics" + ("?" + urllib.parse.urlencode(DB) if DB else "")
    req = urllib.request.Request(url, data=body, method="POST")
    req.add_header("Content-Type", content_type)
    if encoding:
        req.add_header("Content-Encoding", encoding)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers.get("Content-Type"), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read()


def instant(query, at):
    qs = urllib.parse.urlencode({"query": query, "time": f"{at:.3f}", **DB})
    with urllib.request.urlopen(f"{ROUTER}/api/v1/query?{qs}", timeout=30) as r:
        answer = json.load(r)
    if answer.get("status") != "success":
        fail(f"{query}: {answer}")
    return {
        tuple(sorted(s["metric"].items())): float(s["value"][1])
        for s in answer["data"]["result"]
    }


def read_back(query, at, want):
    """Polls until `query` at `at` answers exactly `want` (30 s at most)."""
    deadline = time.time() + 30
    while True:
        got = instant(query, at)
        if got == want or time.time() > deadline:
            break
        time.sleep(1)
    if got != want:
        missing = {k: v for k, v in want.items() if got.get(k) != v}
        extra = {k: v for k, v in got.items() if k not in want}
        fail(f"{query}: missing or different {missing}; unexpected {extra}")


def series(name, **labels):
    return tuple(sorted({"__name__": name, **labels}.items()))


def main():
    now_ms = int(time.time() * 1000) - 5000
    t_ns = now_ms * 1_000_000 + 789  # sub-millisecond part: cut, as Prometheus does
    at = now_ms / 1000 + 1
    resource = [("service.name", "otlp-demo"), ("service.namespace", "shop"),
                ("service.instance.id", "i-1"), ("host.name", "h1"), ("k8s.pod.name", "p-7")]
    good = [
        metric("otel.requests", "{request}", "sum", sum_([
            number_point(t_ns, 10.0, labels=[("http.method", "GET")]),
            number_point(t_ns, 3.0, labels=[("http.method", "POST")])], CUMULATIVE, True)),
        metric("otel.memory.usage", "By", "gauge", gauge([number_point(t_ns, as_int=2048)])),
        metric("otel.cpu.utilization", "1", "gauge", gauge([number_point(t_ns, 0.25)])),
        metric("otel.queue.depth", "{item}", "sum",
               sum_([number_point(t_ns, 7.0)], CUMULATIVE, False)),
        metric("otel.latency", "s", "histogram", ld(1, histogram_point(
            t_ns, 4, 2.5, [1, 2, 1], [0.1, 1.0], labels=[("route", "/api")])) + uint(2, CUMULATIVE)),
        metric("otel.rpc", "ms", "summary", ld(1, summary_point(t_ns, 5, 70.0, [(0.5, 12.0), (0.99, 30.0)]))),
    ]
    bad = [
        metric("otel.delta", "", "sum", sum_([number_point(t_ns, 1.0)], DELTA, True)),
        metric("otel.broken", "", "gauge", gauge([number_point(t_ns)])),
        metric("otel.exp", "s", "exp", ld(1, fixed64(3, t_ns) + fixed64(4, 1)) + uint(2, CUMULATIVE)),
        # `time` is no label the router stores: refused by the write path.
        metric("otel.timed", "", "gauge", gauge([number_point(t_ns, 1.0, labels=[("time", "x")])])),
    ]
    status, ctype, body = post(request(resource, good + bad), "application/x-protobuf")
    if status != 200 or ctype != "application/x-protobuf":
        fail(f"protobuf export answered {status} {ctype} {body!r}")
    partial = read_fields(read_fields(body).get(1, [b""])[0])
    rejected, message = partial.get(1, [0])[0], partial.get(2, [b""])[0].decode()
    if rejected != 4:
        fail(f"partial_success.rejected_data_points = {rejected}, want 4 ({message})")
    for name in ['"otel.delta"', '"otel.broken"', '"otel.exp"', '"otel_timed"']:
        if name not in message:
            fail(f"partial_success.error_message does not name {name}: {message}")
    print(f"ok: protobuf export, 4 of 11 data points refused: {message[:160]}...")

    ids = {"job": "shop/otlp-demo", "instance": "i-1"}
    read_back('{job="shop/otlp-demo"}', at, {
        series("otel_requests_total", http_method="GET", **ids): 10.0,
        series("otel_requests_total", http_method="POST", **ids): 3.0,
        series("otel_memory_usage_bytes", **ids): 2048.0,
        series("otel_cpu_utilization_ratio", **ids): 0.25,
        series("otel_queue_depth", **ids): 7.0,
        series("otel_latency_seconds_bucket", le="0.1", route="/api", **ids): 1.0,
        series("otel_latency_seconds_bucket", le="1", route="/api", **ids): 3.0,
        series("otel_latency_seconds_bucket", le="+Inf", route="/api", **ids): 4.0,
        series("otel_latency_seconds_sum", route="/api", **ids): 2.5,
        series("otel_latency_seconds_count", route="/api", **ids): 4.0,
        series("otel_rpc_milliseconds", quantile="0.5", **ids): 12.0,
        series("otel_rpc_milliseconds", quantile="0.99", **ids): 30.0,
        series("otel_rpc_milliseconds_sum", **ids): 70.0,
        series("otel_rpc_milliseconds_count", **ids): 5.0,
        series("target_info", host_name="h1", k8s_pod_name="p-7", **ids): 1.0,
    })
    # The sample time is the point's, cut to the millisecond.
    got = instant('timestamp(otel_memory_usage_bytes{job="shop/otlp-demo"})', at)
    if list(got.values()) != [now_ms / 1000]:
        fail(f"timestamp() = {got}, want {now_ms / 1000}")
    got = instant('histogram_quantile(0.5, otel_latency_seconds_bucket{job="shop/otlp-demo"})', at)
    if len(got) != 1 or abs(list(got.values())[0] - 0.55) > 1e-9:
        fail(f"histogram_quantile over the OTLP buckets = {got}, want 0.55")
    print("ok: PromQL reads back every OTLP kind with its names, labels, values and time")

    # OTLP/JSON, gzip'd: int64 as strings, an enum by name.
    doc = {"resourceMetrics": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "otlp-json"}}]},
        "scopeMetrics": [{"metrics": [
            {"name": "json.temp", "unit": "Cel",
             "gauge": {"dataPoints": [{"timeUnixNano": str(t_ns), "asDouble": 21.5}]}},
            {"name": "json.events", "unit": "",
             "sum": {"aggregationTemporality": "AGGREGATION_TEMPORALITY_CUMULATIVE", "isMonotonic": True,
                     "dataPoints": [{"timeUnixNano": str(t_ns), "asInt": "42",
                                     "attributes": [{"key": "kind", "value": {"stringValue": "click"}}]}]}},
        ]}],
    }]}
    status, ctype, body = post(gzip.compress(json.dumps(doc).encode()), "application/json", "gzip")
    if status != 200 or not (ctype or "").startswith("application/json") or json.loads(body) != {}:
        fail(f"JSON export answered {status} {ctype} {body!r}")
    read_back('{job="otlp-json"}', at, {
        series("json_temp_celsius", job="otlp-json"): 21.5,
        series("json_events_total", job="otlp-json", kind="click"): 42.0,
    })
    print("ok: OTLP/JSON with gzip")

    status, _, body = post(request(resource, bad[:1]), "application/x-protobuf")
    st = read_fields(body)
    if status != 400 or st.get(1) != [3] or b"delta temporality" not in st.get(2, [b""])[0]:
        fail(f"an all-delta export answered {status} {body!r} (want 400, Status code 3)")
    status, _, body = post(b"\xff\xff\xff", "application/x-protobuf")
    if status != 400 or b"ExportMetricsServiceRequest" not in body:
        fail(f"an undecodable body answered {status} {body!r} (want 400)")
    status, _, body = post(b"{}", "text/plain")
    if status != 415:
        fail(f"text/plain answered {status} {body!r} (want 415)")
    print("ok: 400 for an all-refused and an undecodable export, 415 for text/plain")


if __name__ == "__main__":
    main()
