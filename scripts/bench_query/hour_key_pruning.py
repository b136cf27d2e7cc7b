#!/usr/bin/env python3
"""Whether a time condition prunes an hour-first fact table (issue 28).

In a chDB session directory: `sf` (ORDER BY (series_id, time)) and `hf`
(ORDER BY (toStartOfHour(time), series_id, time)), each 24 h of 1,000
series at 10 s merged to one part, built first when missing. Prints the
granules each read keeps (EXPLAIN indexes=1) and its time per query.

usage: hour_key_pruning.py [DIR]   (default /tmp/hour-key-pruning)
"""
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.environ.get("SHARDHOUSE_CHDB_DIR", os.path.join(REPO, ".deps", "chdb")))
from chdb import session  # noqa: E402

s = session.Session(sys.argv[1] if len(sys.argv) > 1 else "/tmp/hour-key-pruning")


def q(sql):
    return s.query(sql, "CSV").bytes().decode()


end = 1796688000
for name, order in (("sf", "(series_id, time)"), ("hf", "(toStartOfHour(time), series_id, time)")):
    if q(f"EXISTS TABLE {name}").strip() == "1":
        continue
    q(f"CREATE TABLE {name} (time DateTime64(9), series_id UInt64, v SimpleAggregateFunction(anyLast, Nullable(Float64))) "
      f"ENGINE = AggregatingMergeTree PARTITION BY toYYYYMMDD(time) ORDER BY {order}")
    q(f"INSERT INTO {name} SELECT fromUnixTimestamp64Nano(toInt64(({end} - 86400 + intDiv(number, 1000) * 10) * 1000000000)), "
      f"cityHash64(number % 1000), rand() % 100 FROM numbers(8640000)")
    q(f"OPTIMIZE TABLE {name} FINAL")
sid = q("SELECT cityHash64(1)").strip()
lo, hi = f"fromUnixTimestamp64Nano(toInt64({end-3600}000000000))", f"fromUnixTimestamp64Nano(toInt64({end}000000000))"
lo24 = f"fromUnixTimestamp64Nano(toInt64({end-86400}000000000))"
for name in ("sf", "hf"):
    for label, extra in (("plain", ""), ("hour cond", f" AND toStartOfHour(time) >= toStartOfHour({lo}) AND toStartOfHour(time) <= toStartOfHour({hi})")):
        cond = f"series_id IN ({sid}) AND time >= {lo} AND time < {hi}{extra}"
        ex = q(f"EXPLAIN indexes=1 SELECT avg(v) FROM {name} WHERE {cond}")
        gran = [l.strip().replace('"','') for l in ex.split('\n') if 'Granules' in l]
        for _ in range(5): q(f"SELECT avg(v) FROM {name} WHERE {cond}")
        t = time.time()
        for _ in range(30): q(f"SELECT avg(v) FROM {name} WHERE {cond}")
        print(name, label, gran[-1], "%.2f ms" % ((time.time() - t) / 30 * 1000))
    # All series, the newest 3 minutes (a refresh's read).
    lo3 = f"fromUnixTimestamp64Nano(toInt64({end-180}000000000))"
    for label, extra in (("plain", ""), ("hour cond", f" AND toStartOfHour(time) >= toStartOfHour({lo3}) AND toStartOfHour(time) <= toStartOfHour({hi})")):
        ex = q(f"EXPLAIN indexes=1 SELECT avg(v) FROM {name} WHERE time >= {lo3} AND time < {hi}{extra}")
        print(name, "all series, 3 min,", label, [l.strip() for l in ex.split('\n') if 'Granules' in l][-1])
