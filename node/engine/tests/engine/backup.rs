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
    // A merged part is named by its sources only within one table UUID.
    assert!(
        frozen.tables.iter().all(|t| t.uuid.len() == 36),
        "{:?}",
        frozen.tables.iter().map(|t| &t.uuid).collect::<Vec<_>>()
    );
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

/// A backup names a part merged since the previous backup by the parts it
/// was merged from (shardhouse_backup::merged); restoring those parts must
/// give the merged part's rows.
#[test]
fn a_merged_part_restores_from_the_parts_it_was_merged_from() {
    use shardhouse_backup::{merged, PartEntry, TableEntry};
    let e = engine();
    let (from, to) = (242, 243);
    let staging = tempfile::tempdir().unwrap();
    // Three flushes: three parts of one partition.
    for i in 1..=3u64 {
        apply_cpu_point(e, from, i, (i, i as i64 * 1_000), i as f64);
        e.flush_shard(from).unwrap();
    }
    let rows_of = |dir: &Path| -> u64 {
        std::fs::read_to_string(dir.join("count.txt"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    // The "previous backup": its cpu parts, copied out, with row counts.
    let first = e.freeze_shard(from, "t-merge-1").unwrap();
    let cpu = first.tables.iter().find(|t| t.table == "cpu").unwrap();
    assert_eq!(cpu.parts.len(), 3, "{:?}", cpu.parts);
    let mut base = TableEntry {
        database: "db".into(),
        table: "cpu".into(),
        uuid: cpu.uuid.clone(),
        fields: Vec::new(),
        order: None,
        parts: Vec::new(),
    };
    let mut copied = Vec::new();
    for (name, dir) in &cpu.parts {
        let d = staging.path().join(name);
        copy_part(dir, &d);
        base.parts.push(PartEntry {
            name: name.clone(),
            rows: rows_of(dir),
            files: Vec::new(),
        });
        copied.push((name.clone(), d));
    }
    e.unfreeze("t-merge-1").unwrap();

    // The engine merges them; the next backup finds one merged part.
    let table = shardhouse_engine::layout::qualified(
        &shardhouse_engine::layout::data_db(from, "db"),
        "cpu",
    );
    e.query_global(&format!("OPTIMIZE TABLE {table} FINAL"))
        .unwrap();
    let second = e.freeze_shard(from, "t-merge-2").unwrap();
    let cpu2 = second.tables.iter().find(|t| t.table == "cpu").unwrap();
    assert_eq!(cpu2.parts.len(), 1, "{:?}", cpu2.parts);
    assert_eq!(cpu2.uuid, cpu.uuid);
    let (merged_name, merged_dir) = &cpu2.parts[0];
    let sources = merged::sources_in_base(merged_name, rows_of(merged_dir), &base)
        .unwrap_or_else(|| panic!("{merged_name} not named by {:?}", base.parts));
    assert_eq!(sources.len(), 3);
    e.unfreeze("t-merge-2").unwrap();

    // Restoring the sources gives the merged part's rows.
    let tables: Vec<TableParts> = first
        .tables
        .iter()
        .filter(|t| t.table == "cpu")
        .map(|t| TableParts {
            parts: copied.clone(),
            ..t.clone()
        })
        .collect();
    e.restore_shard(to, &first.databases, &tables).unwrap();
    assert_eq!(count_final(e, to, "cpu"), 3);
    let sum = |s| {
        scalar(
            &e.query(s, "db", "SELECT toUInt64(sum(v)) FROM cpu FINAL")
                .unwrap(),
        )
    };
    assert_eq!(sum(to), sum(from));
}
