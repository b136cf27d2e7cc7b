//! One table that cannot be stored must not stop anything else: the shard's
//! other tables keep flushing, queries of them keep working, the failing
//! table is reported (flush_failures, for /health) and retried with
//! backoff, the flushed index stays below its rows, and it recovers once
//! the cause is gone. Real chDB; the failure is a real engine error (a
//! table of the same name that cannot take the rows).

use std::time::Duration;

use shardhouse_engine::testdata::{encode_points, FieldValue, PointRow};
use shardhouse_engine::{Engine, EngineConfig, EngineError};
use shardhouse_test_support::arrow::{col_strings, scalar_u64 as scalar};
use shardhouse_test_support::{chdb_dir, wait_for};

const SHARD: u32 = 5;

fn rows(sid: u64, t: i64) -> Vec<u8> {
    let r = [PointRow::new(sid, t).field("v", FieldValue::Float(t as f64))];
    encode_points("m", &r).unwrap()
}

#[test]
fn a_table_that_cannot_flush_stops_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(EngineConfig {
        data_dir: dir.path().to_path_buf(),
        chdb_dir: Some(chdb_dir().unwrap()),
        pool_size: 2,
        flush_max_rows: 1_000,
        flush_max_age: Duration::from_millis(50),
        ..Default::default()
    })
    .unwrap();
    // The shard exists with a healthy table; then a table named like the
    // next measurement appears that cannot take its rows (one column).
    let good = |sid, t| {
        let r = [PointRow::new(sid, t).field("v", FieldValue::Float(1.0))];
        encode_points("good", &r).unwrap()
    };
    e.apply(SHARD, 1, "db", "good", &good(1, 1), &[]).unwrap();
    e.flush_shard(SHARD).unwrap();
    assert_eq!(e.flushed_index(SHARD), 1);
    let db = shardhouse_engine::layout::data_db(SHARD, "db");
    e.query_global(&format!("CREATE TABLE {db}.m (x UInt8) ENGINE = Memory"))
        .unwrap();

    e.apply(SHARD, 2, "db", "m", &rows(7, 2), &[]).unwrap();
    e.apply(SHARD, 3, "db", "good", &good(2, 3), &[]).unwrap();
    e.apply(SHARD, 4, "db", "m", &rows(8, 4), &[]).unwrap();
    e.apply(SHARD, 5, "db", "good", &good(3, 5), &[]).unwrap();
    assert!(e.flush_shard(SHARD).is_err(), "the bad table fails");

    // The healthy table flushed; the index stops below the first bad entry.
    assert_eq!(e.flushed_index(SHARD), 1);
    let failures = e.flush_failures();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].shard, SHARD);
    assert_eq!(failures[0].tables, ["db/m"]);
    assert!(failures[0].attempts >= 1);
    // Reads of everything else work; a read of the failing table says why.
    let r = e
        .query(SHARD, "db", "SELECT count() FROM good FINAL")
        .unwrap();
    assert_eq!(scalar(&r), 3);
    assert_eq!(
        col_strings(&e.query(SHARD, "db", "SELECT 1").unwrap(), 0),
        ["1"]
    );
    match e.query(SHARD, "db", "SELECT * FROM m") {
        Err(EngineError::TableUnavailable { table, .. }) => assert_eq!(table, "db/m"),
        other => panic!("expected TableUnavailable, got {other:?}"),
    }
    // Writing on continues; retries are backed off, not once per tick.
    for i in 6..40 {
        e.apply(SHARD, i, "db", "good", &good(i, i as i64), &[])
            .unwrap();
        std::thread::sleep(Duration::from_millis(25));
    }
    let attempts = e.flush_failures()[0].attempts;
    assert!(
        attempts <= 8,
        "{attempts} attempts in ~1 s: retries are not backed off"
    );
    wait_for("good rows flushed", Duration::from_secs(30), || {
        scalar(
            &e.query_global(&format!("SELECT count() FROM {db}.good FINAL"))
                .unwrap(),
        ) == 37
    })
    .unwrap();
    assert_eq!(e.flushed_index(SHARD), 1);

    // The operator removes the cause: the next retry stores the rows.
    e.query_global(&format!("DROP TABLE {db}.m SYNC")).unwrap();
    e.flush_shard(SHARD).unwrap();
    assert!(e.flush_failures().is_empty());
    assert_eq!(e.flushed_index(SHARD), 39);
    let r = e
        .query(
            SHARD,
            "db",
            "SELECT series_id, v FROM m FINAL ORDER BY series_id",
        )
        .unwrap();
    assert_eq!(col_strings(&r, 0), ["7", "8"]);
    assert_eq!(col_strings(&r, 1), ["2.0", "4.0"]);
}
