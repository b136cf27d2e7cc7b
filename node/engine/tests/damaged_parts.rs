//! Damaged parts on the real chDB engine: a child process writes two
//! shards into parts, saves a snapshot of shard 3 and is killed with
//! SIGKILL; a column file of one of shard 3's parts is then truncated or
//! has bytes changed in place, and a second child reopens the data
//! directory. Shard 3 must be reported damaged and its reads refused
//! (never answered with fewer rows), shard 4 served, and importing the
//! snapshot must clear the damage.
//!
//! `SHARDHOUSE_ENGINE_TEST_ROWS` (rows per entry, default 1000) makes the
//! data larger, to measure what the checksum check at start costs.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use shardhouse_common::status::{ErrorExt, StatusCode};
use shardhouse_engine::testdata::{encode_points, encode_series, FieldValue, PointRow};
use shardhouse_engine::{Engine, EngineConfig, EngineError};

const ROLE: &str = "SHARDHOUSE_ENGINE_TEST_ROLE";
const DIR: &str = "SHARDHOUSE_ENGINE_TEST_DIR";
const ROWS: &str = "SHARDHOUSE_ENGINE_TEST_ROWS";
const DAMAGED: u32 = 3;
const HEALTHY: u32 = 4;
const ENTRIES: u64 = 5;

fn rows() -> u64 {
    std::env::var(ROWS)
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1_000)
}

fn entry(idx: u64) -> Vec<u8> {
    let rows: Vec<PointRow> = (0..rows())
        .map(|i| {
            PointRow::new(i % 10, (idx * 10_000_000 + i) as i64)
                .field("v", FieldValue::Float(idx as f64 + i as f64 * 0.37))
        })
        .collect();
    encode_points("cpu", &rows).unwrap()
}

fn open(dir: &Path) -> Engine {
    Engine::open(EngineConfig {
        data_dir: dir.join("engine"),
        chdb_dir: Some(shardhouse_test_support::chdb_dir().unwrap()),
        pool_size: 2,
        flush_max_rows: 100_000_000,
        flush_max_age: Duration::from_secs(3600),
        ..Default::default()
    })
    .unwrap()
}

fn count(e: &Engine, shard: u32) -> Result<u64, EngineError> {
    e.query(shard, "db", "SELECT count() FROM cpu WHERE NOT ignore(*)")
        .map(|b| shardhouse_test_support::arrow::scalar_u64(&b))
}

fn writer(dir: &Path) {
    let e = open(dir);
    let series = encode_series(&[(1, "cpu", "cpu,host=a")]).unwrap();
    for shard in [DAMAGED, HEALTHY] {
        for idx in 1..=ENTRIES {
            e.apply(shard, idx, "db", "cpu", &entry(idx), &series)
                .unwrap();
            // One part per entry.
            e.flush_all().unwrap();
        }
    }
    let (index, snap) = e.export_shard(DAMAGED).unwrap();
    assert_eq!(index, ENTRIES);
    std::fs::write(dir.join("snapshot"), snap).unwrap();
    let _ = Command::new("kill")
        .args(["-9", &std::process::id().to_string()])
        .status();
    unreachable!("kill -9 of ourselves returned");
}

/// The damaged shard's reads are refused, as Unavailable (the router
/// reads another replica), naming the damage.
fn assert_refused(e: &Engine) {
    let err = count(e, DAMAGED).expect_err("a damaged shard must not answer");
    assert_eq!(err.status_code(), StatusCode::Unavailable, "{err}");
    assert!(
        matches!(err, EngineError::ShardDamaged { shard: DAMAGED, .. }),
        "{err}"
    );
}

fn reader(dir: &Path, mode: &str, part: &str) {
    let e = open(dir);
    let all = ENTRIES * rows();
    match mode {
        "truncate" => {
            let d = e.damaged_shards();
            assert_eq!(d.len(), 1, "{d:?}");
            assert_eq!(d[0].shard, DAMAGED);
            let text = d[0].describe();
            assert!(
                text.contains(part) && text.contains("broken-on-start"),
                "{text}"
            );
            assert_refused(&e);
        }
        "corrupt" => {
            // The sizes still match: chDB loads the part; the first read
            // of it fails on its checksum and marks the shard.
            assert!(e.damaged_shards().is_empty());
            assert_refused(&e);
            assert_eq!(e.damaged_shards().len(), 1);
            let t = Instant::now();
            let found = e.verify_parts().unwrap();
            let took = t.elapsed();
            assert_eq!(found.len(), 1, "{found:?}");
            let text = found[0].describe();
            assert!(text.contains(part) && text.contains("Checksum"), "{text}");
            let bytes = e
                .query_global(
                    "SELECT toUInt64(sum(bytes_on_disk)) FROM system.parts WHERE active AND database LIKE 'shard%'",
                )
                .map(|b| shardhouse_test_support::arrow::scalar_u64(&b))
                .unwrap();
            eprintln!(
                "verify_parts: {bytes} bytes of parts ({all} rows per shard) checked in {took:?}"
            );
        }
        other => panic!("unknown mode {other}"),
    }
    assert_eq!(count(&e, HEALTHY).unwrap(), all, "the other shard serves");
    let export = e.export_shard(DAMAGED);
    assert!(
        matches!(export, Err(EngineError::ShardDamaged { .. })),
        "a damaged copy must not seed another replica"
    );
    let snap = std::fs::read(dir.join("snapshot")).unwrap();
    e.import_shard(DAMAGED, ENTRIES, &snap).unwrap();
    assert!(e.damaged_shards().is_empty(), "the snapshot replaced it");
    let detached = e
        .query_global(&format!(
            "SELECT count() FROM system.detached_parts WHERE database LIKE 'shard_{DAMAGED:04}%'"
        ))
        .map(|b| shardhouse_test_support::arrow::scalar_u64(&b))
        .unwrap();
    assert_eq!(detached, 0, "the damaged part is gone with the old copy");
    assert_eq!(count(&e, DAMAGED).unwrap(), all);
    assert!(
        e.verify_parts().unwrap().is_empty(),
        "nothing damaged is left"
    );
}

fn run_child(test: &str, role: &str, dir: &Path, extra: &[(&str, &str)]) -> bool {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--nocapture"])
        .env(ROLE, role)
        .env(DIR, dir);
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.status().unwrap().success()
}

/// The data file of shard 3's second part of `cpu`.
fn victim(dir: &Path) -> std::path::PathBuf {
    let data = dir.join("engine/data");
    let db = std::fs::read_dir(&data)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&format!("shard_{DAMAGED:04}_"))
        })
        .expect("shard 3's database");
    let mut parts: Vec<_> = std::fs::read_dir(db.join("cpu"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("data.bin").is_file())
        .collect();
    parts.sort();
    assert_eq!(parts.len() as u64, ENTRIES, "{parts:?}");
    parts[1].join("data.bin")
}

fn damaged_part_case(test: &str, mode: &str) {
    let dir = Path::new(&std::env::var(DIR).unwrap_or_default()).to_path_buf();
    match std::env::var(ROLE).as_deref() {
        Ok("writer") => return writer(&dir),
        Ok("reader") => {
            return reader(&dir, mode, &std::env::var("PART").unwrap());
        }
        _ => {}
    }
    shardhouse_test_support::chdb_dir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    assert!(
        !run_child(test, "writer", tmp.path(), &[]),
        "the writer must die abruptly"
    );
    let file = victim(tmp.path());
    let len = std::fs::metadata(&file).unwrap().len();
    let mut bytes = std::fs::read(&file).unwrap();
    match mode {
        "truncate" => bytes.truncate(bytes.len() / 2),
        _ => {
            let mid = bytes.len() / 2;
            for b in &mut bytes[mid..mid + 16] {
                *b ^= 0xFF;
            }
        }
    }
    std::fs::write(&file, &bytes).unwrap();
    let part = file
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy();
    eprintln!("{mode}: {} ({len} bytes)", file.display());
    assert!(
        run_child(test, "reader", tmp.path(), &[("PART", &part)]),
        "reader checks failed"
    );
}

#[test]
fn a_truncated_part_is_found_at_open_and_its_shard_refused_until_replaced() {
    damaged_part_case(
        "a_truncated_part_is_found_at_open_and_its_shard_refused_until_replaced",
        "truncate",
    );
}

#[test]
fn a_part_corrupted_in_place_is_found_by_a_read_or_the_check_and_refused() {
    damaged_part_case(
        "a_part_corrupted_in_place_is_found_by_a_read_or_the_check_and_refused",
        "corrupt",
    );
}
