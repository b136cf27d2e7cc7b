#!/usr/bin/env python3
"""The InfluxDB v2 Python client's health() and ready() against a running
router (issue 12: health() reported "fail", ready() returned nothing).

Usage: influxdb_v2_health.py http://127.0.0.1:8086
Needs `pip install influxdb-client`. Exits 0 when both answer as they do
against InfluxDB; router/tests/http_fake_node.rs runs it when the package
is importable.
"""
import sys
import warnings

from influxdb_client import InfluxDBClient

warnings.simplefilter("ignore")  # health() is deprecated in favour of ping()

url = sys.argv[1]
with InfluxDBClient(url=url, token="unused", org="unused") as client:
    health = client.health()
    print(f"health: name={health.name} status={health.status} "
          f"message={health.message!r} version={health.version} checks={health.checks}")
    assert health.status == "pass", health
    assert health.name == "shardhouse", health
    assert health.message == "ready for queries and writes", health
    assert health.checks == [], health
    ready = client.ready()
    print(f"ready: status={ready.status} started={ready.started} up={ready.up}")
    assert ready.status == "ready", ready
    assert ready.started is not None and ready.up, ready
    assert client.ping(), "ping"
print("OK")
