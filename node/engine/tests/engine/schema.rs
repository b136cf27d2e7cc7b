//! The storage a shard gets: its databases, tables and columns, created
//! as entries are applied.

use shardhouse_engine::testdata::{encode_series, FieldValue, PointRow};
use shardhouse_test_support::arrow::{col_strings, scalar_u64 as scalar};

use crate::{count_final, engine, f, points};

#[test]
fn schema_is_created_per_shard_database() {
    let e = engine();
    let shard = 1;
    let rows = vec![PointRow::new(11, 1_000)
        .field("usage", f(0.5))
        .field("cores", FieldValue::Int(4))
        .field("up", FieldValue::Bool(true))
        .field("host_name", FieldValue::Str("a".into()))
        .field("bytes", FieldValue::UInt(7))];
    let series = encode_series(&[(11, "cpu", "cpu,host=a")]).unwrap();
    e.apply(shard, 3, "db", "cpu", &points(&rows), &series)
        .unwrap();
    e.flush_all().unwrap();
    assert_eq!(e.flushed_index(shard), 3);

    let cols = e
        .query(shard, "db",
            "SELECT name, type FROM system.columns WHERE database = currentDatabase() AND table = 'cpu' ORDER BY position",
        )
        .unwrap();
    let names = col_strings(&cols, 0);
    let types = col_strings(&cols, 1);
    assert_eq!(
        names,
        [
            "time",
            "series_id",
            "usage",
            "cores",
            "up",
            "host_name",
            "bytes"
        ]
    );
    assert_eq!(
        types,
        [
            "DateTime64(9)",
            "UInt64",
            "SimpleAggregateFunction(anyLast, Nullable(Float64))",
            "SimpleAggregateFunction(anyLast, Nullable(Int64))",
            "SimpleAggregateFunction(anyLast, Nullable(Bool))",
            "SimpleAggregateFunction(anyLast, Nullable(String))",
            "SimpleAggregateFunction(anyLast, Nullable(UInt64))"
        ]
    );
    let sorting = e
        .query(shard, "db", "SELECT sorting_key, engine FROM system.tables WHERE database = currentDatabase() AND name = 'cpu'")
        .unwrap();
    assert_eq!(col_strings(&sorting, 0), ["series_id, time"]);
    assert_eq!(col_strings(&sorting, 1), ["AggregatingMergeTree"]);
    let db = e.query(shard, "db", "SELECT currentDatabase()").unwrap();
    assert_eq!(
        col_strings(&db, 0),
        [shardhouse_engine::layout::data_db(1, "db")]
    );
    let s = e
        .query(
            shard,
            "db",
            "SELECT series_id, measurement, toString(tags), tags['host'] FROM _series FINAL",
        )
        .unwrap();
    assert_eq!(col_strings(&s, 0), ["11"]);
    assert_eq!(col_strings(&s, 2), ["{'host':'a'}"]);
    assert_eq!(col_strings(&s, 3), ["a"]);
    let flushed = e
        .query(shard, "", "SELECT max(`index`) FROM _flushed")
        .unwrap();
    assert_eq!(scalar(&flushed), 3);
    let v = e
        .query(
            shard,
            "db",
            "SELECT toUnixTimestamp64Nano(time), usage, cores, up, host_name, bytes FROM cpu FINAL",
        )
        .unwrap();
    assert_eq!(col_strings(&v, 0), ["1000"]);
    assert_eq!(col_strings(&v, 1), ["0.5"]);
    assert_eq!(col_strings(&v, 3), ["true"]);
    assert_eq!(col_strings(&v, 4), ["a"]);
}

#[test]
fn new_fields_add_columns_while_writing() {
    let e = engine();
    let shard = 2;
    // 60 entries of 100 rows with the background flusher running (flushes
    // every 1,000 rows); field `b` appears at entry 20, `c` at entry 40.
    let writer = std::thread::spawn(move || {
        for idx in 1..=60u64 {
            let rows: Vec<PointRow> = (0..100)
                .map(|i| {
                    let mut p =
                        PointRow::new(i % 10, (idx * 1000 + i) as i64).field("a", f(idx as f64));
                    if idx >= 20 {
                        p = p.field("b", FieldValue::Int(idx as i64));
                    }
                    if idx >= 40 {
                        p = p.field("c", FieldValue::Str(format!("v{idx}")));
                    }
                    p
                })
                .collect();
            engine()
                .apply(shard, idx, "db", "cpu", &points(&rows), &[])
                .unwrap();
        }
    });
    writer.join().unwrap();
    e.flush_all().unwrap();
    assert_eq!(e.flushed_index(shard), 60);
    assert_eq!(count_final(e, shard, "cpu"), 6000);
    let r = e
        .query(shard, "db", "SELECT countIf(b IS NOT NULL), countIf(c IS NOT NULL), countIf(a IS NULL) FROM cpu FINAL")
        .unwrap();
    assert_eq!(col_strings(&r, 0), ["4100"]);
    assert_eq!(col_strings(&r, 1), ["2100"]);
    assert_eq!(col_strings(&r, 2), ["0"]);
    let flushes = e.query(shard, "", "SELECT count() FROM _flushed").unwrap();
    assert!(scalar(&flushes) >= 1);
}
