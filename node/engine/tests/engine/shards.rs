//! Moving a shard whole: export, import and drop.

use shardhouse_engine::testdata::{encode_points, encode_series, FieldValue, PointRow};
use shardhouse_test_support::arrow::{col_strings, scalar_u64 as scalar};

use crate::{apply_cpu_point, count_final, engine, f, points};

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
    let disk = encode_points("disk", &[PointRow::new(1, 1).field("u", f(1.0))]).unwrap();
    let disk_series = encode_series(&[(1, "disk", "disk,h=9")]).unwrap();
    e.apply(dst, 1, "db", "disk", &disk, &disk_series).unwrap();
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
    apply_cpu_point(e, dst, 11, (9, 9), 1.0);
    e.flush_all().unwrap();
    assert_eq!(count_final(e, dst, "cpu"), 301);
    // The import removed the series the destination held before: written
    // again, its `_series` row is stored again (not taken as held).
    e.apply(dst, 12, "db", "disk", &disk, &disk_series).unwrap();
    e.flush_all().unwrap();
    assert_eq!(count_final(e, dst, "_series"), 4);
    assert!(e.import_shard(dst, 1, b"garbage").is_err());

    e.drop_shard(src).unwrap();
    assert_eq!(e.flushed_index(src), 0);
    let dbs = e
        .query_global("SELECT count() FROM system.databases WHERE name LIKE 'shard\\_0006%'")
        .unwrap();
    assert_eq!(scalar(&dbs), 0);
}
