//! Freezing a shard's parts, copying them out, and restoring them into an
//! empty shard: the restored shard answers the same rows, its field types
//! are known (a conflicting write is refused), and a shard that holds data
//! refuses a restore.

use super::*;
use shardhouse_engine::backup::TableParts;
use shardhouse_engine::EngineError;
use std::path::Path;

fn copy_part(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[test]
fn frozen_parts_restore_into_an_empty_shard() {
    let e = engine();
    // Shards no other test of this binary uses: the engine is process-global.
    let (from, to) = (240, 241);
    for i in 1..=5u64 {
        apply_cpu_point(e, from, i, (i % 3, i as i64 * 1_000), i as f64);
    }
    e.flush_shard(from).unwrap();
    apply_cpu_point(e, from, 6, (7, 6_000), 6.0);
    let frozen = e.freeze_shard(from, "t-backup-1").unwrap();
    assert_eq!(frozen.flushed_index, 6, "freeze flushes first");
    assert_eq!(frozen.databases.len(), 1);
    let names: Vec<&str> = frozen.tables.iter().map(|t| t.table.as_str()).collect();
    assert!(
        names.contains(&"cpu") && names.contains(&"_series"),
        "{names:?}"
    );
    // Copy the parts out as a backup would, then drop the freeze.
    let staging = tempfile::tempdir().unwrap();
    let tables: Vec<TableParts> = frozen
        .tables
        .iter()
        .map(|t| TableParts {
            parts: t
                .parts
                .iter()
                .map(|(name, dir)| {
                    let d = staging.path().join(&t.table).join(name);
                    copy_part(dir, &d);
                    (name.clone(), d)
                })
                .collect(),
            ..t.clone()
        })
        .collect();
    e.unfreeze("t-backup-1").unwrap();
    assert!(tables
        .iter()
        .any(|t| t.table == "cpu" && !t.parts.is_empty()));

    e.restore_shard(to, &frozen.databases, &tables).unwrap();
    assert_eq!(count_final(e, to, "cpu"), 6);
    let sum = |s| {
        scalar(
            &e.query(s, "db", "SELECT toUInt64(sum(v)) FROM cpu FINAL")
                .unwrap(),
        )
    };
    assert_eq!(sum(to), sum(from));
    // The restored shard knows its field types and keeps taking writes.
    let bad = encode_points(
        "cpu",
        &[PointRow::new(1, 1).field("v", FieldValue::Str("x".into()))],
    )
    .unwrap();
    let applied = e.apply(to, 1, "db", "cpu", &bad, &[]).unwrap();
    assert!(matches!(applied, Applied::Rejected(_)), "{applied:?}");
    apply_cpu_point(e, to, 2, (9, 9_000), 9.0);
    assert_eq!(count_final(e, to, "cpu"), 7);

    let again = e.restore_shard(to, &frozen.databases, &tables);
    assert!(
        matches!(again, Err(EngineError::RestoreRefused { shard: 241, .. })),
        "{again:?}"
    );
}
