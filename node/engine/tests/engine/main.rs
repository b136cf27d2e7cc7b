//! Engine behaviour against the real chDB engine. chDB is one engine per
//! process, so every test here shares one `Engine` and uses its own shards.
//! One test binary by topic: a module a topic, helpers here.

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use shardhouse_engine::testdata::{encode_points, FieldValue, PointRow};
use shardhouse_engine::{Applied, Engine, EngineConfig};
use shardhouse_test_support::arrow::scalar_u64 as scalar;
use shardhouse_test_support::chdb_dir;

mod backup;
mod entries;
mod field_types;
mod flushing;
mod rewrites;
mod schema;
mod series_cache;
mod shards;

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

/// Applies entry `index` of `shard` holding one `cpu` point of `series`
/// at `time` with `v` = `value`; it must be stored.
fn apply_cpu_point(e: &Engine, shard: u32, index: u64, (series, time): (u64, i64), value: f64) {
    let rows = [PointRow::new(series, time).field("v", f(value))];
    let applied = e.apply(shard, index, "db", "cpu", &points(&rows), &[]);
    assert!(matches!(applied, Ok(Applied::Stored)), "{applied:?}");
}

/// Applies entry `index` of `shard`: one `cpu` point (time and `v` =
/// `index`) of each series in `rows`, with the series rows (id,
/// measurement, key) a router sends; it must be stored.
fn apply_cpu_series(e: &Engine, shard: u32, index: u64, rows: &[(u64, &str, &str)]) {
    let pts: Vec<PointRow> = rows
        .iter()
        .map(|&(id, _, _)| PointRow::new(id, index as i64).field("v", f(index as f64)))
        .collect();
    let series = shardhouse_engine::testdata::encode_series(rows).expect("encode series");
    let applied = e.apply_tables(
        shard,
        index,
        &[shardhouse_engine::TableBatchRef {
            database: "db",
            measurement: "cpu",
            points_ipc: &Bytes::from(points(&pts)),
            series_ipc: &Bytes::from(series),
        }],
    );
    assert!(matches!(applied, Ok(Applied::Stored)), "{applied:?}");
}

/// `DROP SERIES FROM cpu` in `db`: every point and `_series` row of cpu.
fn drop_cpu_series() -> shardhouse_common::proto::StorageOp {
    use shardhouse_common::proto::{storage_op, DeletePoints, StorageOp};
    StorageOp {
        op: Some(storage_op::Op::DeletePoints(DeletePoints {
            database: "db".into(),
            measurement: "cpu".into(),
            min_time_ns: i64::MIN,
            max_time_ns: i64::MAX,
            predicate: None,
            drop_series: true,
        })),
    }
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

fn float_bytes(m: &str) -> Bytes {
    Bytes::from(encode_points(m, &[PointRow::new(1, 1).field("g", f(1.5))]).unwrap())
}

fn int_bytes(m: &str) -> Bytes {
    Bytes::from(encode_points(m, &[PointRow::new(2, 1).field("g", FieldValue::Int(7))]).unwrap())
}
