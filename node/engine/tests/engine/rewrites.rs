//! A point written again: last write wins per (series, time), fields it
//! does not carry are kept, a flush repeated stores nothing twice.

use shardhouse_engine::testdata::PointRow;
use shardhouse_engine::Engine;
use shardhouse_test_support::arrow::{col_strings, scalar_u64 as scalar};

use crate::{apply_cpu_point, count_final, engine, f, points};

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
    apply_cpu_point(e, shard, 2, (2, 100), 1.0);
    apply_cpu_point(e, shard, 3, (2, 100), 2.0);
    e.flush_all().unwrap();
    // Across flushes (separate parts).
    apply_cpu_point(e, shard, 4, (3, 100), 1.0);
    e.flush_all().unwrap();
    apply_cpu_point(e, shard, 5, (3, 100), 3.0);
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

/// Reads drop `FINAL` only while every key of a table is stored once: a
/// table written in time order per series reads without it, and the same
/// answers; the first rewrite brings it back, and the rewritten point
/// still reads once with its last value.
#[test]
fn final_is_dropped_until_a_point_is_written_twice() {
    let e = engine();
    let shard = 16;
    for i in 1..=4u64 {
        // Two series, each in time order, one flush (one part) per entry.
        apply_cpu_point(e, shard, 2 * i - 1, (1, i as i64 * 1_000), i as f64);
        apply_cpu_point(e, shard, 2 * i, (2, i as i64 * 1_000), 10.0 * i as f64);
        e.flush_all().unwrap();
    }
    assert!(!e.reads_need_final(shard, "db", "cpu"));
    let sum = |e: &Engine| {
        col_strings(
            &e.query(shard, "db", "SELECT count(), sum(v) FROM cpu FINAL")
                .unwrap(),
            1,
        )
    };
    assert_eq!(count_final(e, shard, "cpu"), 8);
    assert_eq!(sum(e), ["110.0"]);

    // The same key again, in its own flush: FINAL is back, one row.
    apply_cpu_point(e, shard, 9, (1, 2_000), 100.0);
    e.flush_all().unwrap();
    assert!(e.reads_need_final(shard, "db", "cpu"));
    assert_eq!(count_final(e, shard, "cpu"), 8);
    assert_eq!(sum(e), ["208.0"]);
    let raw = scalar(&e.query(shard, "db", "SELECT count() FROM cpu").unwrap());
    assert!(raw == 9 || raw == 8, "raw {raw}");
}
