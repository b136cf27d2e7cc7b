"""The InfluxDB 1.x Python client (`influxdb` 5.3) against the router's
/write and /query, unchanged: writes points, then reads them back through
query() in the forms scripts use (ResultSet.get_points by tags, epoch
forms, bind parameters, chunked responses, errors, databases). Exits 0 and
prints `ok` when every check holds; an assertion names what differed.

usage: influxdb_v1_query.py HOST PORT
"""

import sys

from influxdb import InfluxDBClient
from influxdb.exceptions import InfluxDBClientError

host, port = sys.argv[1], int(sys.argv[2])
DB = "pyclient"
client = InfluxDBClient(host=host, port=port, database=DB, timeout=30)

# Databases: created explicitly (a POST of CREATE DATABASE), then listed.
client.create_database(DB)
names = [d["name"] for d in client.get_list_database()]
assert DB in names, names

# 3 hosts x 60 points, one a second from T0.
T0 = 1_700_000_000
points = []
for h in range(3):
    for i in range(60):
        points.append(
            {
                "measurement": "cpu",
                "tags": {"host": "h%d" % h, "region": "west" if h < 2 else "east"},
                "time": (T0 + i) * 1_000_000_000,
                "fields": {"usage": float(h * 100 + i), "n": i},
            }
        )
assert client.write_points(points, time_precision="n", batch_size=50)

RANGE = "time >= %ds AND time < %ds" % (T0, T0 + 60)

# GROUP BY tag: one series per host, read with get_points(tags=...).
rs = client.query("SELECT count(usage), max(n) FROM cpu WHERE %s GROUP BY host" % RANGE)
for h in range(3):
    rows = list(rs.get_points(measurement="cpu", tags={"host": "h%d" % h}))
    assert len(rows) == 1, rows
    assert rows[0]["count"] == 60 and rows[0]["max"] == 59, rows
    assert rows[0]["time"] == "2023-11-14T22:13:20Z", rows[0]["time"]

# GROUP BY time with epoch=ms: integer times, buckets of 10 s.
rs = client.query(
    "SELECT mean(usage) FROM cpu WHERE host = 'h1' AND %s GROUP BY time(10s)" % RANGE,
    epoch="ms",
)
rows = list(rs.get_points())
assert len(rows) == 6, rows
assert rows[0]["time"] == T0 * 1000, rows[0]
assert abs(rows[0]["mean"] - 104.5) < 1e-9, rows[0]

# Bind parameters.
rs = client.query(
    "SELECT usage FROM cpu WHERE host = $host AND %s" % RANGE,
    bind_params={"host": "h2"},
    epoch="s",
)
rows = list(rs.get_points())
assert len(rows) == 60 and rows[0] == {"time": T0, "usage": 200.0}, rows[:2]

# Chunked: the client yields one ResultSet per chunk line.
chunks = list(
    client.query("SELECT usage FROM cpu WHERE %s" % RANGE, chunked=True, chunk_size=25)
)
rows = [p for r in chunks for p in r.get_points()]
assert len(chunks) == 8 and len(rows) == 180, (len(chunks), len(rows))

# Several statements: one ResultSet each.
rss = client.query("SHOW MEASUREMENTS; SHOW TAG VALUES FROM cpu WITH KEY = region")
assert [m["name"] for m in rss[0].get_points()] == ["cpu"], rss[0]
assert sorted(v["value"] for v in rss[1].get_points()) == ["east", "west"], rss[1]
assert [m["name"] for m in client.get_list_measurements()] == ["cpu"]

# Errors: a parse error is a 400 the client raises with InfluxDB's text.
try:
    client.query("SELECT FROM cpu")
    raise AssertionError("a parse error did not raise")
except InfluxDBClientError as e:
    assert e.code == 400 and "error parsing query" in e.content, (e.code, e.content)

# A statement error (only tags selected) raises too. (GROUP BY time()
# without a lower bound is answered now, from the first point, as InfluxDB
# 1.8 answers it.)
try:
    client.query("SELECT host FROM cpu")
    raise AssertionError("a statement error did not raise")
except InfluxDBClientError as e:
    assert "at least one field in select clause" in str(e), str(e)

# DELETE, DROP SERIES and DROP DATABASE through the client.
client.delete_series(measurement="cpu", tags={"host": "h0"})
rs = client.query("SELECT count(usage) FROM cpu WHERE %s GROUP BY host" % RANGE)
assert list(rs.get_points(tags={"host": "h0"})) == [], rs
client.drop_database(DB)
assert DB not in [d["name"] for d in client.get_list_database()]
print("ok")
