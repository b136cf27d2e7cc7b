//! Engine behaviour against the real chDB engine. chDB is one engine per
//! process, so every test here shares one `Engine` and uses its own shards.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arrow_schema::{DataType, Field, Schema, TimeUnit};
use bytes::Bytes;
use shardhouse_engine::testdata::{encode_points, encode_series, FieldValue, PointRow};
use shardhouse_engine::{Applied, Engine, EngineConfig, EngineError, TableBatchRef};
use shardhouse_test_support::arrow::{col_strings, scalar_u64 as scalar};
use shardhouse_test_support::{chdb_dir, wait_for};

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir").keep();
        Engine::open(EngineConfig {
            data_dir: dir,
            chdb_dir: Some(chdb_dir().unwrap()),
            pool_size: 2,
            flush_max_rows: 1_000,
            flush_max_age: Duration::from_millis(50),
            ..Default::default()
        })
        .expect("open engine")
    })
}

fn points(rows: &[PointRow]) -> Vec<u8> {
    encode_points("cpu", rows).expect("encode points")
}

fn f(v: f64) -> FieldValue {
    FieldValue::Float(v)
}

fn count_final(e: &Engine, shard: u32, table: &str) -> u64 {
    scalar(
        &e.query(shard, "db", &format!("SELECT count() FROM {table} FINAL"))
            .expect("count"),
    )
}

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

#[test]
fn type_conflict_names_field_stored_and_offered_types() {
    let e = engine();
    let ts = DataType::Timestamp(TimeUnit::Nanosecond, None);
    let schema = |name: &str, t: DataType| {
        Schema::new(vec![
            Field::new("time", ts.clone(), false),
            Field::new("series_id", DataType::UInt64, false),
            Field::new(name, t, true),
        ])
    };
    let shard = 3;
    // Admission alone decides nothing: only applied entries do.
    e.admit(
        shard,
        "db",
        "weather",
        &schema("temperature", DataType::Float64),
    )
    .unwrap();
    e.admit(
        shard,
        "db",
        "weather",
        &schema("temperature", DataType::Utf8),
    )
    .unwrap();
    let rows = vec![PointRow::new(1, 1).field("temperature", f(21.5))];
    e.apply(
        shard,
        1,
        "db",
        "weather",
        &encode_points("weather", &rows).unwrap(),
        &[],
    )
    .unwrap();
    let err = e
        .admit(
            shard,
            "db",
            "weather",
            &schema("temperature", DataType::Utf8),
        )
        .unwrap_err();
    assert!(
        matches!(err, EngineError::FieldTypeConflict { .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("temperature") && msg.contains("Float64") && msg.contains("String"),
        "{msg}"
    );
    // A field stored by a flush conflicts too.
    let rows = vec![PointRow::new(1, 2).field("pressure", FieldValue::Int(1000))];
    e.apply(
        shard,
        2,
        "db",
        "weather",
        &encode_points("weather", &rows).unwrap(),
        &[],
    )
    .unwrap();
    e.flush_all().unwrap();
    let err = e
        .admit(
            shard,
            "db",
            "weather",
            &schema("pressure", DataType::Boolean),
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("pressure") && err.contains("Int64") && err.contains("Bool"),
        "{err}"
    );
    // Another shard has decided nothing about `weather`.
    e.admit(7, "db", "weather", &schema("pressure", DataType::Boolean))
        .unwrap();
    // Bad shapes are rejected before proposing.
    let bad = Schema::new(vec![Field::new("time", ts.clone(), false)]);
    assert!(matches!(
        e.admit(shard, "db", "weather", &bad),
        Err(EngineError::InvalidBatch { .. })
    ));
    assert!(matches!(
        e.admit(shard, "db", "_series", &schema("v", DataType::Float64)),
        Err(EngineError::InvalidMeasurement { .. })
    ));
}

/// Two entries that introduce one field with two types: the first in the
/// shard's log decides, the second is rejected whole on apply (nothing of
/// it is stored, nothing is cast), and the same log on another replica
/// decides the same. Replicas used to disagree (a node-wide catalog, cast
/// on apply).
#[test]
fn a_conflicting_entry_is_rejected_on_apply_in_log_order() {
    let e = engine();
    let float = encode_points("m", &[PointRow::new(1, 1).field("g", f(1.5))]).unwrap();
    let int = encode_points("m", &[PointRow::new(2, 1).field("g", FieldValue::Int(7))]).unwrap();
    // Shard 21: float first. Shard 22: int first (another shard's log order).
    assert!(matches!(
        e.apply(21, 1, "db", "m", &float, &[]).unwrap(),
        Applied::Stored
    ));
    match e.apply(21, 2, "db", "m", &int, &[]).unwrap() {
        Applied::Rejected(EngineError::FieldTypeConflict {
            field,
            stored,
            offered,
            ..
        }) => {
            assert_eq!(
                (field.as_str(), stored.as_str(), offered.as_str()),
                ("g", "Float64", "Int64")
            );
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(matches!(
        e.apply(22, 1, "db", "m", &int, &[]).unwrap(),
        Applied::Stored
    ));
    assert!(matches!(
        e.apply(22, 2, "db", "m", &float, &[]).unwrap(),
        Applied::Rejected(_)
    ));
    // The rejected entry counts as applied: replaying it changes nothing.
    assert!(matches!(
        e.apply(21, 2, "db", "m", &int, &[]).unwrap(),
        Applied::Stored
    ));
    e.flush_all().unwrap();
    let r = e
        .query(
            21,
            "db",
            "SELECT series_id, g FROM m FINAL ORDER BY series_id",
        )
        .unwrap();
    assert_eq!(col_strings(&r, 0), ["1"]);
    assert_eq!(col_strings(&r, 1), ["1.5"]);
    let r = e
        .query(
            22,
            "db",
            "SELECT series_id, g FROM m FINAL ORDER BY series_id",
        )
        .unwrap();
    assert_eq!(col_strings(&r, 0), ["2"]);
    assert_eq!(col_strings(&r, 1), ["7"]);
    let t = e.query(21, "db", "SELECT type FROM system.columns WHERE database = currentDatabase() AND table = 'm' AND name = 'g'").unwrap();
    assert_eq!(
        col_strings(&t, 0),
        ["SimpleAggregateFunction(anyLast, Nullable(Float64))"]
    );
    // One entry carrying both types (a coalesced write) is rejected whole.
    let both = [
        TableBatchRef {
            database: "db",
            measurement: "n",
            points_ipc: &float_bytes("n"),
            series_ipc: &Bytes::new(),
        },
        TableBatchRef {
            database: "db",
            measurement: "n",
            points_ipc: &int_bytes("n"),
            series_ipc: &Bytes::new(),
        },
    ];
    assert!(matches!(
        e.apply_tables(23, 1, &both).unwrap(),
        Applied::Rejected(_)
    ));
    assert_eq!(e.field_type(23, "db", "n", "g"), None);
}

fn float_bytes(m: &str) -> Bytes {
    Bytes::from(encode_points(m, &[PointRow::new(1, 1).field("g", f(1.5))]).unwrap())
}

fn int_bytes(m: &str) -> Bytes {
    Bytes::from(encode_points(m, &[PointRow::new(2, 1).field("g", FieldValue::Int(7))]).unwrap())
}

#[test]
fn last_write_wins_for_duplicate_series_and_time() {
    let e = engine();
    let shard = 4;
    // Within one entry: 5,000 writes of the same point; the last must win.
    let rows: Vec<PointRow> = (0..5_000)
        .map(|i| PointRow::new(1, 100).field("v", f(i as f64)))
        .collect();
    e.apply(shard, 1, "db", "cpu", &points(&rows), &[]).unwrap();
    // Across entries flushed together.
    e.apply(
        shard,
        2,
        "db",
        "cpu",
        &points(&[PointRow::new(2, 100).field("v", f(1.0))]),
        &[],
    )
    .unwrap();
    e.apply(
        shard,
        3,
        "db",
        "cpu",
        &points(&[PointRow::new(2, 100).field("v", f(2.0))]),
        &[],
    )
    .unwrap();
    e.flush_all().unwrap();
    // Across flushes (separate parts).
    e.apply(
        shard,
        4,
        "db",
        "cpu",
        &points(&[PointRow::new(3, 100).field("v", f(1.0))]),
        &[],
    )
    .unwrap();
    e.flush_all().unwrap();
    e.apply(
        shard,
        5,
        "db",
        "cpu",
        &points(&[PointRow::new(3, 100).field("v", f(3.0))]),
        &[],
    )
    .unwrap();
    e.flush_all().unwrap();
    let r = e
        .query(
            shard,
            "db",
            "SELECT series_id, v FROM cpu FINAL ORDER BY series_id",
        )
        .unwrap();
    assert_eq!(col_strings(&r, 0), ["1", "2", "3"]);
    assert_eq!(col_strings(&r, 1), ["4999.0", "2.0", "3.0"]);
}

#[test]
fn reflushing_the_same_rows_does_not_duplicate_them() {
    let e = engine();
    let shard = 5;
    let rows: Vec<PointRow> = (0..2_000)
        .map(|i| PointRow::new(i % 50, i as i64).field("v", f(i as f64)))
        .collect();
    let bytes = points(&rows);
    e.apply(shard, 1, "db", "cpu", &bytes, &[]).unwrap();
    e.flush_all().unwrap();
    // A crash after the data but before the index was recorded replays the
    // entry: the same rows are written again under a later index.
    e.apply(shard, 2, "db", "cpu", &bytes, &[]).unwrap();
    e.flush_all().unwrap();
    let raw = scalar(&e.query(shard, "db", "SELECT count() FROM cpu").unwrap());
    assert!(raw == 4_000 || raw == 2_000, "raw {raw}");
    assert_eq!(count_final(e, shard, "cpu"), 2_000);
    let sum = e
        .query(shard, "db", "SELECT sum(v) FROM cpu FINAL")
        .unwrap();
    assert_eq!(
        col_strings(&sum, 0),
        [format!("{}.0", (0..2_000).sum::<i32>())]
    );
    // Replaying an index at or below the applied one is a no-op.
    e.apply(shard, 2, "db", "cpu", &bytes, &[]).unwrap();
    e.flush_all().unwrap();
    assert_eq!(e.flushed_index(shard), 2);
}

#[test]
fn export_import_and_drop_a_shard() {
    let e = engine();
    let (src, dst) = (6, 7);
    let rows: Vec<PointRow> = (0..300)
        .map(|i| {
            PointRow::new(i % 3, i as i64)
                .field("v", f(i as f64))
                .field("s", FieldValue::Str("x".into()))
        })
        .collect();
    let series = encode_series(&[
        (0, "cpu", "cpu,h=0"),
        (1, "cpu", "cpu,h=1"),
        (2, "cpu", "cpu,h=2"),
    ])
    .unwrap();
    e.apply(src, 9, "db", "cpu", &points(&rows), &series)
        .unwrap();
    e.apply(
        src,
        10,
        "db",
        "mem",
        &encode_points(
            "mem",
            &[PointRow::new(5, 1).field("free", FieldValue::UInt(3))],
        )
        .unwrap(),
        &[],
    )
    .unwrap();
    // Export flushes first.
    let (idx, bytes) = e.export_shard(src).unwrap();
    assert_eq!(idx, 10);
    // The destination had other data: import replaces it.
    e.apply(
        dst,
        1,
        "db",
        "disk",
        &encode_points("disk", &[PointRow::new(1, 1).field("u", f(1.0))]).unwrap(),
        &[],
    )
    .unwrap();
    e.flush_all().unwrap();
    e.import_shard(dst, idx, &bytes).unwrap();
    assert_eq!(e.flushed_index(dst), 10);
    assert_eq!(count_final(e, dst, "cpu"), 300);
    assert_eq!(count_final(e, dst, "mem"), 1);
    assert_eq!(count_final(e, dst, "_series"), 3);
    let tables = e
        .query(
            dst,
            "db",
            "SELECT name FROM system.tables WHERE database = currentDatabase() ORDER BY name",
        )
        .unwrap();
    assert_eq!(
        col_strings(&tables, 0),
        ["_database", "_samples", "_series", "cpu", "mem"]
    );
    let sum = e
        .query(dst, "db", "SELECT sum(v), any(s) FROM cpu FINAL")
        .unwrap();
    assert_eq!(
        col_strings(&sum, 0),
        [format!("{}.0", (0..300).sum::<i32>())]
    );
    assert_eq!(col_strings(&sum, 1), ["x"]);
    // Entries at or below the imported index are skipped, later ones apply.
    e.apply(dst, 10, "db", "cpu", &points(&rows), &[]).unwrap();
    e.apply(
        dst,
        11,
        "db",
        "cpu",
        &points(&[PointRow::new(9, 9).field("v", f(1.0))]),
        &[],
    )
    .unwrap();
    e.flush_all().unwrap();
    assert_eq!(count_final(e, dst, "cpu"), 301);
    assert!(e.import_shard(dst, 1, b"garbage").is_err());

    e.drop_shard(src).unwrap();
    assert_eq!(e.flushed_index(src), 0);
    let dbs = e
        .query_global("SELECT count() FROM system.databases WHERE name LIKE 'shard\\_0006%'")
        .unwrap();
    assert_eq!(scalar(&dbs), 0);
}

#[test]
fn a_second_data_directory_is_refused() {
    let e = engine();
    let _ = e.flushed_index(0);
    let other = tempfile::tempdir().unwrap();
    let err = Engine::open(EngineConfig {
        data_dir: other.path().to_path_buf(),
        chdb_dir: Some(chdb_dir().unwrap()),
        ..Default::default()
    })
    .err()
    .expect("second data dir must be refused");
    assert!(matches!(err, EngineError::SecondDataDir { .. }), "{err:?}");
    assert!(
        err.to_string().contains("one data directory per process"),
        "{err}"
    );
}

#[test]
fn background_flusher_flushes_by_age_and_size() {
    let e = engine();
    let shard = 8;
    e.apply(
        shard,
        1,
        "db",
        "cpu",
        &points(&[PointRow::new(1, 1).field("v", f(1.0))]),
        &[],
    )
    .unwrap();
    // Age bound is 50 ms: wait (bounded) for the flusher to record the index.
    wait_for("the age-bound flush", Duration::from_secs(20), || {
        e.flushed_index(shard) >= 1
    })
    .unwrap();
    assert_eq!(count_final(e, shard, "cpu"), 1);
    let _ = Arc::new(());
}

#[test]
fn one_entry_carries_several_tables_all_or_nothing() {
    let e = engine();
    let shard = 9;
    let cpu = points(&[PointRow::new(1, 100).field("v", f(1.0))]);
    let mem = encode_points(
        "mem",
        &[
            PointRow::new(2, 100).field("used", f(2.0)),
            PointRow::new(2, 200).field("used", f(3.0)),
        ],
    )
    .expect("encode points");
    e.apply_tables(
        shard,
        1,
        &[
            TableBatchRef {
                database: "db",
                measurement: "cpu",
                points_ipc: &Bytes::from(cpu),
                series_ipc: &Bytes::new(),
            },
            TableBatchRef {
                database: "db",
                measurement: "mem",
                points_ipc: &Bytes::from(mem),
                series_ipc: &Bytes::new(),
            },
        ],
    )
    .unwrap();
    // One bad table fails the whole entry: its good table is not buffered.
    let more_cpu = points(&[PointRow::new(3, 100).field("v", f(9.0))]);
    let err = e
        .apply_tables(
            shard,
            2,
            &[
                TableBatchRef {
                    database: "db",
                    measurement: "cpu",
                    points_ipc: &Bytes::from(more_cpu),
                    series_ipc: &Bytes::new(),
                },
                TableBatchRef {
                    database: "db",
                    measurement: "mem",
                    points_ipc: &Bytes::from_static(b"not an arrow stream"),
                    series_ipc: &Bytes::new(),
                },
            ],
        )
        .expect("an undecodable table is a decision, not a failure");
    // The same bytes on every replica: the entry is rejected whole, alike.
    let Applied::Rejected(err) = err else {
        panic!("an undecodable table must reject the entry, got {err:?}")
    };
    assert!(err.to_string().contains("Arrow IPC"), "{err}");
    e.flush_all().unwrap();
    assert_eq!(count_final(e, shard, "cpu"), 1);
    assert_eq!(count_final(e, shard, "mem"), 2);
    assert_eq!(e.flushed_index(shard), 1);
}

#[test]
fn a_flush_syncs_its_parts_before_the_flushed_index_moves() {
    let e = engine();
    let shard = 31;
    let syncs = || shardhouse_engine::metrics::SYNC_SECONDS.get_sample_count();
    let before = syncs();
    let rows = vec![PointRow::new(5, 1_000).field("usage", f(1.0))];
    let series = encode_series(&[(5, "cpu", "cpu,host=s")]).unwrap();
    e.apply(shard, 7, "db", "cpu", &points(&rows), &series)
        .unwrap();
    e.flush_shard(shard).unwrap();
    assert_eq!(e.flushed_index(shard), 7);
    assert!(
        syncs() > before,
        "the flush moved the flushed index without a syncfs of its parts"
    );
    assert_eq!(count_final(e, shard, "cpu"), 1);
}

/// An entry written before names were checked at admission, carrying a
/// measurement the engine cannot name as a table next to a good one: the
/// bad table is skipped on apply (it used to fail every flush of the shard,
/// for good, and with it every query), the good one is stored.
#[test]
fn an_unstorable_table_in_an_old_entry_is_skipped_and_the_rest_kept() {
    let e = engine();
    let shard = 32;
    let bad_name = "é".repeat(150);
    let bad =
        Bytes::from(encode_points(&bad_name, &[PointRow::new(1, 1).field("v", f(1.0))]).unwrap());
    let good =
        Bytes::from(encode_points("good", &[PointRow::new(2, 1).field("v", f(2.0))]).unwrap());
    let tables = [
        TableBatchRef {
            database: "db",
            measurement: &bad_name,
            points_ipc: &bad,
            series_ipc: &Bytes::new(),
        },
        TableBatchRef {
            database: "db",
            measurement: "good",
            points_ipc: &good,
            series_ipc: &Bytes::new(),
        },
    ];
    assert!(matches!(
        e.apply_tables(shard, 1, &tables).unwrap(),
        Applied::Stored
    ));
    e.flush_shard(shard).unwrap();
    assert_eq!(e.flushed_index(shard), 1);
    assert!(e.flush_failures().iter().all(|f| f.shard != shard));
    assert_eq!(count_final(e, shard, "good"), 1);
    assert_eq!(
        col_strings(&e.query(shard, "db", "SELECT 1").unwrap(), 0),
        ["1"]
    );
}

/// Issue 13: a point is (database, measurement, tags, time); writing it
/// again replaces the fields written and keeps the others, inside one
/// entry, across entries and flushes, before and after merges.
#[test]
fn a_rewrite_keeps_the_fields_it_does_not_carry() {
    let e = engine();
    let shard = 41;
    let read = |e: &Engine| {
        let r = e
            .query(
                shard,
                "db",
                "SELECT toString(u), toString(s), count() OVER () FROM cpu FINAL",
            )
            .unwrap();
        (col_strings(&r, 0), col_strings(&r, 1), col_strings(&r, 2))
    };
    let one = |sid, name: &str, v| PointRow::new(sid, 5_000).field(name, f(v));
    e.apply(shard, 1, "db", "cpu", &points(&[one(1, "u", 1.0)]), &[])
        .unwrap();
    e.flush_shard(shard).unwrap();
    e.apply(shard, 2, "db", "cpu", &points(&[one(1, "s", 2.0)]), &[])
        .unwrap();
    e.flush_shard(shard).unwrap();
    assert_eq!(
        read(e),
        (vec!["1".into()], vec!["2".into()], vec!["1".into()])
    );
    // Two rows for the point in one entry: the later one's fields win.
    e.apply(
        shard,
        3,
        "db",
        "cpu",
        &points(&[one(1, "u", 3.0), one(1, "u", 4.0)]),
        &[],
    )
    .unwrap();
    assert_eq!(
        read(e),
        (vec!["4".into()], vec!["2".into()], vec!["1".into()])
    );
    let db = shardhouse_engine::layout::data_db(shard, "db");
    e.query_global(&format!("OPTIMIZE TABLE {db}.cpu FINAL"))
        .unwrap();
    let raw = e
        .query(shard, "db", "SELECT toString(u), toString(s) FROM cpu")
        .unwrap();
    assert_eq!(
        (col_strings(&raw, 0), col_strings(&raw, 1)),
        (vec!["4".to_string()], vec!["2".to_string()]),
        "a merged part holds one row with both fields"
    );
    // Same series and time in another database: another point.
    e.apply(shard, 4, "other", "cpu", &points(&[one(1, "u", 9.0)]), &[])
        .unwrap();
    assert_eq!(read(e).0, vec!["4".to_string()]);
    let r = e
        .query(
            shard,
            "other",
            "SELECT toString(u), count() FROM cpu FINAL GROUP BY u",
        )
        .unwrap();
    assert_eq!(col_strings(&r, 0), ["9"]);
    assert_eq!(col_strings(&r, 1), ["1"]);
}
