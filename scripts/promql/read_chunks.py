#!/usr/bin/env python3
"""remote_read STREAMED_XOR_CHUNKS, checked against the reference
Prometheus's raw samples.

Asks the router's /api/v1/read for a few metrics with
accepted_response_types [STREAMED_XOR_CHUNKS, SAMPLES] (what Prometheus
2.55+ sends; Debian's 2.42 asks for SAMPLES only), checks the answer's
content type, every frame's CRC32-Castagnoli, and decodes the XOR chunks
(a decoder written here from the chunk format, independent of the
router's encoder). Every series and sample must equal what the reference
Prometheus answers for `name[window]` (raw samples; stale markers, which
remote_read keeps and PromQL hides, are left out of the comparison).

Usage: read_chunks.py PROMETHEUS_URL ROUTER_URL START END METRIC...
(START, END in Unix seconds). Prints `ok: ...`; exits 1 with
`FAIL read_chunks: ...` on the first difference.
"""
import json
import struct
import sys
import urllib.parse
import urllib.request

STREAMED = "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse"
STALE_NAN = 0x7FF0000000000002


def fail(msg):
    print(f"FAIL read_chunks: {msg}", file=sys.stderr)
    sys.exit(1)


# --- protobuf
def varint(n):
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def ld(field, payload):
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def uint(field, n):
    return varint(field << 3) + varint(n)


def read_varint(buf, i):
    n = shift = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


def fields(buf):
    """[(field, value)] of a message: ints for varints, bytes otherwise."""
    out, i = [], 0
    while i < len(buf):
        key, i = read_varint(buf, i)
        wt = key & 7
        if wt == 0:
            v, i = read_varint(buf, i)
        elif wt == 2:
            n, i = read_varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        else:
            fail(f"wire type {wt}")
        out.append((key >> 3, v))
    return out


def snappy_literal(raw):
    """Snappy block format with literals only (what the router decodes)."""
    out = bytearray(varint(len(raw)))
    for i in range(0, len(raw), 65536):
        part = raw[i:i + 65536]
        out += bytes([61 << 2]) + struct.pack("<H", len(part) - 1) + part  # 2-byte length
    return bytes(out)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


# --- XOR chunks (Prometheus tsdb/chunkenc)
class Bits:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def read(self, n):
        v = 0
        for _ in range(n):
            byte = self.data[self.pos >> 3]
            v = (v << 1) | ((byte >> (7 - (self.pos & 7))) & 1)
            self.pos += 1
        return v

    def uvarint(self):
        n = shift = 0
        while True:
            b = self.read(8)
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return n


def signed(v, n):
    """Prometheus's reading of an n-bit delta of delta: above 2^(n-1) is negative."""
    return v - (1 << n) if v > 1 << (n - 1) else v


def xor_samples(data):
    count = struct.unpack(">H", data[:2])[0]
    r = Bits(data[2:])
    out, leading, trailing = [], 0, 0
    t = t_delta = bits = 0
    for i in range(count):
        if i == 0:
            z = r.uvarint()
            t = (z >> 1) ^ -(z & 1)
            bits = r.read(64)
        else:
            if i == 1:
                t_delta = r.uvarint()
            else:
                for size in (0, 14, 17, 20, 64):
                    if size == 64 or not r.read(1):
                        break
                dod = 0 if size == 0 else signed(r.read(size), size)
                t_delta += dod
            t += t_delta
            if r.read(1):
                if r.read(1):
                    leading = r.read(5)
                    sig = r.read(6) or 64
                    trailing = 64 - leading - sig
                bits ^= r.read(64 - leading - trailing) << trailing
        out.append((t, struct.unpack(">d", bits.to_bytes(8, "big"))[0], bits))
    return out


# --- the two sides
def read_chunks(router, name, start_ms, end_ms):
    matcher = uint(1, 0) + ld(2, b"__name__") + ld(3, name.encode())
    query = uint(1, start_ms) + uint(2, end_ms) + ld(3, matcher)
    body = snappy_literal(ld(1, query) + uint(2, 1) + uint(2, 0))
    req = urllib.request.Request(router + "/api/v1/read", data=body, method="POST")
    req.add_header("Content-Type", "application/x-protobuf")
    req.add_header("Content-Encoding", "snappy")
    with urllib.request.urlopen(req, timeout=60) as r:
        if r.headers.get("Content-Type") != STREAMED:
            fail(f"{name}: content type {r.headers.get('Content-Type')!r}, want {STREAMED!r}")
        stream = r.read()
    series, i = {}, 0
    while i < len(stream):
        n, i = read_varint(stream, i)
        crc, msg = struct.unpack(">I", stream[i:i + 4])[0], stream[i + 4:i + 4 + n]
        i += 4 + n
        if crc != crc32c(msg):
            fail(f"{name}: a frame's CRC32C does not match")
        for field, cs in fields(msg):
            if field != 1:
                continue
            labels, samples = [], []
            for f, v in fields(cs):
                if f == 1:
                    lf = dict(fields(v))
                    labels.append((lf[1].decode(), lf[2].decode()))
                elif f == 2:
                    chunk = dict(fields(v))
                    got = xor_samples(chunk[4])
                    if got and (got[0][0], got[-1][0]) != (chunk.get(1, 0), chunk.get(2, 0)):
                        fail(f"{name}: chunk min/max time does not match its samples")
                    samples += got
            series.setdefault(tuple(sorted(labels)), []).extend(samples)
    return series


def reference(prom, name, start, end):
    qs = urllib.parse.urlencode({"query": f"{name}[{end - start}s]", "time": end})
    with urllib.request.urlopen(f"{prom}/api/v1/query?{qs}", timeout=60) as r:
        data = json.load(r)["data"]["result"]
    return {
        tuple(sorted(s["metric"].items())): [(round(float(t) * 1000), float(v)) for t, v in s["values"]]
        for s in data
    }


def main():
    prom, router, start, end = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    lo, hi = start * 1000, end * 1000
    total = 0
    for name in sys.argv[5:]:
        ours = read_chunks(router, name, lo, hi)
        ours = {k: [(t, v) for t, v, bits in s if bits != STALE_NAN and lo < t <= hi]
                for k, s in ours.items()}
        ours = {k: s for k, s in ours.items() if s}
        want = {k: [(t, v) for t, v in s if lo < t <= hi] for k, s in reference(prom, name, start, end).items()}
        want = {k: s for k, s in want.items() if s}
        if set(ours) != set(want):
            fail(f"{name}: series {sorted(set(ours) ^ set(want))} on one side only")
        for k in want:
            if ours[k] != want[k]:
                diff = [(a, b) for a, b in zip(ours[k], want[k]) if a != b][:3]
                fail(f"{name}{dict(k)}: {len(ours[k])} vs {len(want[k])} samples, first differences {diff}")
            total += len(want[k])
        if not want:
            fail(f"{name}: no samples on either side")
    print(f"ok: remote_read STREAMED_XOR_CHUNKS, {total} samples of {len(sys.argv) - 5} metrics "
          "equal to the reference's")


if __name__ == "__main__":
    main()
