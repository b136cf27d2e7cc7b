//! Opening and flushing: one data directory per process, the background
//! flusher's bounds, a flush durable before its flushed index moves.

use shardhouse_engine::testdata::{encode_series, PointRow};
use shardhouse_engine::{Engine, EngineConfig, EngineError};
use shardhouse_test_support::{chdb_dir, wait_for};
use std::time::Duration;

use crate::{apply_cpu_point, count_final, engine, f, points};

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
    apply_cpu_point(e, shard, 1, (1, 1), 1.0);
    // Age bound is 50 ms: wait (bounded) for the flusher to record the index.
    wait_for("the age-bound flush", Duration::from_secs(20), || {
        e.flushed_index(shard) >= 1
    })
    .unwrap();
    assert_eq!(count_final(e, shard, "cpu"), 1);
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
