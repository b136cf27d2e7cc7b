#!/usr/bin/env python3
"""What each statement the router sends a shard for `/query` costs in chDB.

Part of `make bench-query`'s profile (scripts/bench-query.sh runs it on a copy
of node 1's engine directory once the cluster is stopped). It opens the copy
with the chdb-core wheel the nodes load (`$SHARDHOUSE_CHDB_DIR`, Python
session API), and times, per shard database holding `cpu`:

- the guard a node runs before every statement (read.rs: formatQuerySingleLine,
  EXPLAIN AST, USE);
- the statements the router plans today (router/src/influx/sqlgen.rs, as
  captured from a run): the schema (`system.columns`), the tag index
  (`_series`), the fact rows read FINAL, for the windows of the benchmark;
- for comparison, the same windows aggregated inside chDB (per-bucket sums
  and counts, a count), with and without FINAL;
- the fixed cost of one host's fact statement (issue 28 item 1): as the
  node runs it (no FINAL on clean tables), on one thread (the readers'
  `max_threads`), with a literal `series_id` instead of the `_series`
  subquery, and the subquery alone (docs/benchmarks.md, "Engine cost per
  read statement").

Usage: shard_sql_cost.py ENGINE_DIR DATASET_JSON
"""

import json
import os
import sys
import time

sys.path.insert(0, os.environ.get("SHARDHOUSE_CHDB_DIR", os.path.join(os.path.dirname(__file__), "../../.deps/chdb")))
from chdb import session  # noqa: E402

NS = 1_000_000_000


def main():
    engine_dir, dataset = sys.argv[1], sys.argv[2]
    ds = json.load(open(dataset))
    end = ds["end_ns"]
    hour = 3600 * NS
    s = session.Session(engine_dir)
    out = str(s.query("SELECT DISTINCT database FROM system.tables WHERE name = 'cpu' ORDER BY database", "TSV"))
    dbs = [line.strip() for line in out.splitlines() if line.strip()]

    def win(start):
        return (f"time >= fromUnixTimestamp64Nano(toInt64({start})) "
                f"AND time < fromUnixTimestamp64Nano(toInt64({end}))")

    def fact(start, extra="", final=" FINAL"):
        return ("SELECT toUnixTimestamp64Nano(time) AS `__t`, series_id AS `__sid`, `usage_user` AS `s0` "
                f"FROM `cpu`{final} WHERE {win(start)}{extra} LIMIT 10000001")

    host_1 = "SELECT series_id FROM _series WHERE measurement = 'cpu' AND ((tags['host'] = 'host_1'))"
    one_host = f" AND series_id IN ({host_1})"
    all_h = ds["hours"] * hour
    stmts = [
        ("schema: system.columns of cpu", "SELECT table, name, type FROM system.columns WHERE database = "
         "currentDatabase() AND name NOT IN ('time', 'series_id') AND table = 'cpu'"),
        ("tag index: _series of cpu", "SELECT series_id, arrayMap(k -> toString(k), mapKeys(tags)) AS keys, "
         "mapValues(tags) AS vals FROM _series WHERE measurement = 'cpu'"),
        ("fact rows FINAL: host_1, 1h", fact(end - hour, one_host)),
        ("fact rows: host_1, 1h (no FINAL)", fact(end - hour, one_host, "")),
        ("fact rows: host_1, 1h, max_threads=1", fact(end - hour, one_host, "") + " SETTINGS max_threads = 1"),
        ("fact rows: host_1, 1h, literal series_id", fact(end - hour, " AND series_id IN ({host_1_id})", "")),
        ("tag index: the host_1 subquery alone", host_1),
        ("fact rows FINAL: all hosts, 1h", fact(end - hour)),
        ("fact rows FINAL: all hosts, 3h", fact(end - 3 * hour)),
        (f"fact rows FINAL: all hosts, {ds['hours']}h", fact(end - all_h)),
        ("in chDB: sum+count per 1m, all hosts, 1h, FINAL",
         f"SELECT intDiv(toUnixTimestamp64Nano(time), 60000000000) AS b, sum(usage_user), count(usage_user) "
         f"FROM cpu FINAL WHERE {win(end - hour)} GROUP BY b"),
        (f"in chDB: count, {ds['hours']}h, FINAL", f"SELECT count(usage_user) FROM cpu FINAL WHERE {win(end - all_h)}"),
        (f"in chDB: count, {ds['hours']}h, no FINAL", f"SELECT count(usage_user) FROM cpu WHERE {win(end - all_h)}"),
    ]

    def timed(q, n):
        s.query(q, "ArrowStream")
        t0 = time.perf_counter()
        for _ in range(n):
            r = s.query(q, "ArrowStream")
        return (time.perf_counter() - t0) / n * 1000, len(r.bytes())

    print("| statement (per shard) | " + " | ".join(f"{d[:10]} ms (Arrow MB)" for d in dbs) + " |")
    print("|---|" + "---|" * len(dbs))
    guard = []
    for d in dbs:
        s.query(f"USE {d}")
        q = stmts[2][1].replace("'", "\\'")
        g = timed(f"SELECT formatQuerySingleLine('{q}')", 20)[0] + timed(f"EXPLAIN AST {stmts[2][1]}", 20)[0] \
            + timed(f"USE {d}", 20)[0]
        guard.append(f"{g:.2f}")
    print("| node guard per statement (format + EXPLAIN AST + USE) | " + " | ".join(guard) + " |")
    for name, q in stmts:
        cells = []
        for d in dbs:
            s.query(f"USE {d}")
            if "{host_1_id}" in q:
                ids = str(s.query(host_1, "CSV")).split()
                q = q.replace("{host_1_id}", ", ".join(ids) or "0")
            ms, nbytes = timed(q, 3 if "h, " in name and "1h" not in name else 10)
            cells.append(f"{ms:.2f} ({nbytes / 1e6:.2f})")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
