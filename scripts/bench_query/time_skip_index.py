#!/usr/bin/env python3
"""Would a minmax skip index on `time` let a dashboard refresh skip granules?

Issue 28 (docs/benchmarks.md, "Engine cost per read statement"). Builds,
in a scratch chDB directory, two copies of a fact table as layout.rs makes
it (AggregatingMergeTree, PARTITION BY day, ORDER BY (series_id, time)),
one with `INDEX time_minmax time TYPE minmax GRANULARITY 1`, holding 24 h
of HOSTS hosts every STEP s that end at 05:00 UTC (two day partitions, each
merged to one part, as a node's data settles). Then, for the two reads a
refreshed `GROUP BY time(1m)` panel still makes (the newest 3 minutes and
the first, partial bucket of `now() - 24h`), prints the granules each
index keeps (`EXPLAIN indexes = 1`) and the engine CPU per statement; a
third copy ordered by (toStartOfHour(time), series_id, time) shows what a
sort key that starts with a coarse time would keep instead.

Usage: time_skip_index.py SCRATCH_DIR [HOSTS=1000] [STEP=10]
"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.environ.get("SHARDHOUSE_CHDB_DIR", os.path.join(os.path.dirname(__file__), "../../.deps/chdb")))
from chdb import session  # noqa: E402

NS = 1_000_000_000
FIELD = "SimpleAggregateFunction(anyLast, Nullable(Float64))"


def load(s, hosts, step, start, end):
    s.query("CREATE DATABASE IF NOT EXISTS skip_check")
    for t, idx, key in (("plain", "", "series_id, time"),
                        ("indexed", ", INDEX time_minmax time TYPE minmax GRANULARITY 1", "series_id, time"),
                        ("hour_first", "", "toStartOfHour(time), series_id, time")):
        s.query(f"DROP TABLE IF EXISTS skip_check.{t}")
        s.query(f"CREATE TABLE skip_check.{t} (time DateTime64(9), series_id UInt64, usage_user {FIELD}{idx}) "
                f"ENGINE = AggregatingMergeTree PARTITION BY toYYYYMMDD(time) ORDER BY ({key})")
        chunk = 2 * 3600 * NS
        for t0 in range(start, end, chunk):
            s.query(f"INSERT INTO skip_check.{t} SELECT fromUnixTimestamp64Nano(toInt64({t0} + "
                    f"intDiv(number, {hosts}) * {step * NS})), number % {hosts}, rand() % 100 "
                    f"FROM numbers({hosts} * {chunk // (step * NS)})")
        s.query(f"OPTIMIZE TABLE skip_check.{t} FINAL")


def main():
    scratch = sys.argv[1]
    hosts = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    step = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    s = session.Session(scratch)
    end = (1764300000 // 86400 * 86400 + 5 * 3600) * NS
    start = end - 24 * 3600 * NS
    load(s, hosts, step, start, end)
    print(str(s.query("SELECT table, partition, sum(rows), sum(marks) AS granules FROM system.parts "
                      "WHERE database = 'skip_check' AND active GROUP BY table, partition ORDER BY 1, 2",
                      "PrettyCompactMonoBlock")))
    print("| read | table | granules kept (MinMax, Partition, PrimaryKey[, time_minmax]) | engine CPU ms p50 |")
    print("|---|---|---|---|")
    for name, lo, hi in (("newest 3 min", end - 180 * NS, end), ("first bucket of now()-24h", start, start + 60 * NS)):
        for t in ("plain", "indexed", "hour_first"):
            q = (f"SELECT intDiv(toUnixTimestamp64Nano(time), 60000000000) AS b, sum(usage_user), count(usage_user) "
                 f"FROM skip_check.{t} WHERE time >= fromUnixTimestamp64Nano(toInt64({lo})) "
                 f"AND time < fromUnixTimestamp64Nano(toInt64({hi})) GROUP BY b SETTINGS use_query_condition_cache = 0")
            plan = str(s.query("EXPLAIN indexes = 1 " + q, "TSV"))
            kept = [line.split(":")[1].strip() for line in plan.splitlines() if "Granules:" in line]
            cpu = []
            for _ in range(15):
                c0 = time.process_time()
                s.query(q, "ArrowStream")
                cpu.append((time.process_time() - c0) * 1000)
            print(f"| {name} | {t} | {', '.join(kept[1:])} | {statistics.median(cpu):.1f} |")


if __name__ == "__main__":
    main()
