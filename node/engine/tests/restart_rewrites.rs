//! Skipping `FINAL` survives a restart: a child process writes one table
//! in time order and one with a point written twice, and is killed with
//! SIGKILL; a second child reopens the data directory and must read the
//! clean table without `FINAL` before any write, keep `FINAL` on the
//! other, and catch a replayed point the table already holds.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use shardhouse_engine::testdata::{encode_points, encode_series, FieldValue, PointRow};
use shardhouse_engine::{Engine, EngineConfig};
use shardhouse_test_support::arrow::scalar_u64;
use shardhouse_test_support::roles;

const SHARD: u32 = 5;
/// 2026-11-27 00:00 UTC in ns.
const DAY: i64 = 20_784 * 86_400 * 1_000_000_000;
const SECOND: i64 = 1_000_000_000;

fn open(dir: &Path) -> Engine {
    Engine::open(EngineConfig {
        data_dir: dir.to_path_buf(),
        chdb_dir: Some(shardhouse_test_support::chdb_dir().unwrap()),
        pool_size: 2,
        flush_max_rows: 1_000_000,
        flush_max_age: Duration::from_secs(3600),
        ..Default::default()
    })
    .unwrap()
}

/// 100 series, one point each at `at`.
fn points(measurement: &str, at: i64) -> Vec<u8> {
    let rows: Vec<PointRow> = (0..100)
        .map(|s| PointRow::new(s, at).field("v", FieldValue::Float(at as f64)))
        .collect();
    encode_points(measurement, &rows).unwrap()
}

fn counts(e: &Engine, table: &str) -> (u64, u64) {
    let n = |sql: String| scalar_u64(&e.query(SHARD, "db", &sql).unwrap());
    (
        n(format!("SELECT count() FROM {table}")),
        n(format!("SELECT count() FROM {table} FINAL")),
    )
}

fn writer(dir: &Path) {
    let e = open(dir);
    let series = encode_series(&[(1, "cpu", "cpu,host=a")]).unwrap();
    let mut index = 0;
    for minute in 0..10 {
        index += 1;
        let at = DAY + 12 * 3_600 * SECOND + minute * 60 * SECOND;
        e.apply(SHARD, index, "db", "cpu", &points("cpu", at), &series)
            .unwrap();
        e.flush_all().unwrap();
        index += 1;
        e.apply(SHARD, index, "db", "mem", &points("mem", DAY + SECOND), &[])
            .unwrap();
        e.flush_all().unwrap();
    }
    assert!(!e.reads_need_final(SHARD, "db", "cpu"));
    assert!(e.reads_need_final(SHARD, "db", "mem"));
    let _ = Command::new("kill")
        .args(["-9", &std::process::id().to_string()])
        .status();
    unreachable!("kill -9 of ourselves returned");
}

fn reader(dir: &Path) {
    let e = open(dir);
    assert!(
        !e.reads_need_final(SHARD, "db", "cpu"),
        "a table written in time order reads without FINAL right after a restart"
    );
    assert!(
        e.reads_need_final(SHARD, "db", "mem"),
        "a table holding a point twice keeps FINAL over a restart"
    );
    assert_eq!(counts(&e, "cpu"), (1_000, 1_000));
    let index = e.flushed_index(SHARD);
    // Newer points keep the table clean.
    let later = DAY + 13 * 3_600 * SECOND;
    e.apply(SHARD, index + 1, "db", "cpu", &points("cpu", later), &[])
        .unwrap();
    e.flush_all().unwrap();
    assert!(!e.reads_need_final(SHARD, "db", "cpu"));
    // A point the table already holds (a replay, a rewrite) makes it dirty,
    // although this process never wrote it.
    let before = DAY + 12 * 3_600 * SECOND + 5 * 60 * SECOND;
    e.apply(SHARD, index + 2, "db", "cpu", &points("cpu", before), &[])
        .unwrap();
    e.flush_all().unwrap();
    assert!(e.reads_need_final(SHARD, "db", "cpu"));
    let (raw, once) = counts(&e, "cpu");
    assert_eq!(once, 1_100, "raw {raw}");
    let read = scalar_u64(
        &e.query(SHARD, "db", "SELECT count() FROM cpu FINAL")
            .unwrap(),
    );
    assert_eq!(read, 1_100, "the engine's own read keeps FINAL");
}

#[test]
fn final_is_skipped_after_a_restart_only_where_no_point_is_twice() {
    roles::writer_then_reader(
        "final_is_skipped_after_a_restart_only_where_no_point_is_twice",
        writer,
        reader,
    );
}
