//! Data survives a process restart: a child process writes, flushes part of
//! its entries and is killed with SIGKILL (no shutdown, no final
//! flush); a second child reopens the data directory, checks the flushed
//! index and the rows, replays the WAL tail and checks again.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use shardhouse_engine::testdata::{encode_points, encode_series, FieldValue, PointRow};
use shardhouse_engine::{Engine, EngineConfig};
use shardhouse_test_support::roles;

const SHARD: u32 = 3;

fn entry(idx: u64) -> Vec<u8> {
    let rows: Vec<PointRow> = (0..1_000)
        .map(|i| {
            PointRow::new(i % 10, (idx * 10_000 + i) as i64)
                .field("v", FieldValue::Float(idx as f64))
        })
        .collect();
    encode_points("cpu", &rows).unwrap()
}

fn open(dir: &Path) -> Engine {
    Engine::open(EngineConfig {
        data_dir: dir.to_path_buf(),
        chdb_dir: Some(shardhouse_test_support::chdb_dir().unwrap()),
        pool_size: 2,
        flush_max_rows: 1_000_000,
        // Long age bound: only explicit flushes write, so the test knows
        // exactly what is durable when the writer dies.
        flush_max_age: Duration::from_secs(3600),
        ..Default::default()
    })
    .unwrap()
}

fn count(e: &Engine) -> u64 {
    shardhouse_test_support::arrow::scalar_u64(
        &e.query(SHARD, "db", "SELECT count() FROM cpu FINAL")
            .unwrap(),
    )
}

fn writer(dir: &Path) {
    let e = open(dir);
    let series = encode_series(&[(1, "cpu", "cpu,host=a")]).unwrap();
    for idx in 1..=5 {
        e.apply(SHARD, idx, "db", "cpu", &entry(idx), &series)
            .unwrap();
    }
    e.flush_all().unwrap();
    // Applied but never flushed: lives only in the (simulated) WAL.
    e.apply(SHARD, 6, "db", "cpu", &entry(6), &[]).unwrap();
    // Die without shutdown or destructors: kill -9 ourselves (abort would
    // write a core dump of a process with chDB mapped, which takes minutes).
    let _ = Command::new("kill")
        .args(["-9", &std::process::id().to_string()])
        .status();
    unreachable!("kill -9 of ourselves returned");
}

fn reader(dir: &Path) {
    let e = open(dir);
    assert_eq!(
        e.flushed_index(SHARD),
        5,
        "flushed index read back from chDB"
    );
    assert_eq!(count(&e), 5_000);
    // The stored field type survives too.
    let ts = arrow_schema::DataType::Timestamp(arrow_schema::TimeUnit::Nanosecond, None);
    let conflict = arrow_schema::Schema::new(vec![
        arrow_schema::Field::new("time", ts, false),
        arrow_schema::Field::new("series_id", arrow_schema::DataType::UInt64, false),
        arrow_schema::Field::new("v", arrow_schema::DataType::Utf8, true),
    ]);
    let err = e
        .admit(SHARD, "db", "cpu", &conflict)
        .unwrap_err()
        .to_string();
    assert!(err.contains("Float64"), "{err}");
    // WAL replay from the start: entries <= 5 are skipped, 6 is applied.
    for idx in 1..=6 {
        e.apply(SHARD, idx, "db", "cpu", &entry(idx), &[]).unwrap();
    }
    e.flush_all().unwrap();
    assert_eq!(e.flushed_index(SHARD), 6);
    assert_eq!(count(&e), 6_000);
    let raw = shardhouse_test_support::arrow::scalar_u64(
        &e.query(SHARD, "db", "SELECT count() FROM cpu").unwrap(),
    );
    assert_eq!(raw, 6_000, "skipped entries must not be written again");
}

#[test]
fn data_survives_a_process_restart() {
    roles::writer_then_reader("data_survives_a_process_restart", writer, reader);
}
