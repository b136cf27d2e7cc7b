//! What one committed entry stores: several tables under one index, all
//! or nothing; a table the engine cannot name is skipped.

use bytes::Bytes;
use shardhouse_engine::testdata::{encode_points, PointRow};
use shardhouse_engine::{Applied, TableBatchRef};
use shardhouse_test_support::arrow::col_strings;

use crate::{apply_cpu_series, count_final, drop_cpu_series, engine, f, points};

#[test]
fn one_entry_carries_several_tables_all_or_nothing() {
    let e = engine();
    let shard = 9;
    let cpu = points(&[PointRow::new(1, 100).field("v", f(1.0))]);
    let mem = encode_points(
        "mem",
        &[
            PointRow::new(2, 100).field("used", f(2.0)),
            PointRow::new(2, 200).field("used", f(3.0)),
        ],
    )
    .expect("encode points");
    e.apply_tables(
        shard,
        1,
        &[
            TableBatchRef {
                database: "db",
                measurement: "cpu",
                points_ipc: &Bytes::from(cpu),
                series_ipc: &Bytes::new(),
            },
            TableBatchRef {
                database: "db",
                measurement: "mem",
                points_ipc: &Bytes::from(mem),
                series_ipc: &Bytes::new(),
            },
        ],
    )
    .unwrap();
    // One bad table fails the whole entry: its good table is not buffered.
    let more_cpu = points(&[PointRow::new(3, 100).field("v", f(9.0))]);
    let err = e
        .apply_tables(
            shard,
            2,
            &[
                TableBatchRef {
                    database: "db",
                    measurement: "cpu",
                    points_ipc: &Bytes::from(more_cpu),
                    series_ipc: &Bytes::new(),
                },
                TableBatchRef {
                    database: "db",
                    measurement: "mem",
                    points_ipc: &Bytes::from_static(b"not an arrow stream"),
                    series_ipc: &Bytes::new(),
                },
            ],
        )
        .expect("an undecodable table is a decision, not a failure");
    // The same bytes on every replica: the entry is rejected whole, alike.
    let Applied::Rejected(err) = err else {
        panic!("an undecodable table must reject the entry, got {err:?}")
    };
    assert!(err.to_string().contains("Arrow IPC"), "{err}");
    e.flush_all().unwrap();
    assert_eq!(count_final(e, shard, "cpu"), 1);
    assert_eq!(count_final(e, shard, "mem"), 2);
    assert_eq!(e.flushed_index(shard), 1);
}

/// An entry written before names were checked at admission, carrying a
/// measurement the engine cannot name as a table next to a good one: the
/// bad table is skipped on apply (it used to fail every flush of the shard,
/// for good, and with it every query), the good one is stored.
#[test]
fn an_unstorable_table_in_an_old_entry_is_skipped_and_the_rest_kept() {
    let e = engine();
    let shard = 32;
    let bad_name = "é".repeat(150);
    let bad =
        Bytes::from(encode_points(&bad_name, &[PointRow::new(1, 1).field("v", f(1.0))]).unwrap());
    let good =
        Bytes::from(encode_points("good", &[PointRow::new(2, 1).field("v", f(2.0))]).unwrap());
    let tables = [
        TableBatchRef {
            database: "db",
            measurement: &bad_name,
            points_ipc: &bad,
            series_ipc: &Bytes::new(),
        },
        TableBatchRef {
            database: "db",
            measurement: "good",
            points_ipc: &good,
            series_ipc: &Bytes::new(),
        },
    ];
    assert!(matches!(
        e.apply_tables(shard, 1, &tables).unwrap(),
        Applied::Stored
    ));
    e.flush_shard(shard).unwrap();
    assert_eq!(e.flushed_index(shard), 1);
    assert!(e.flush_failures().iter().all(|f| f.shard != shard));
    assert_eq!(count_final(e, shard, "good"), 1);
    assert_eq!(
        col_strings(&e.query(shard, "db", "SELECT 1").unwrap(), 0),
        ["1"]
    );
}

/// A router lists a request's series in every entry it sends; a replica
/// stores a series' `_series` row once (the rows of later entries add
/// nothing to the set), and stores it again after a storage operation may
/// have removed it.
#[test]
fn a_series_row_is_stored_once_until_an_operation_may_remove_it() {
    use shardhouse_engine::metrics::SERIES_ROWS_SKIPPED;
    use shardhouse_test_support::arrow::scalar_u64;

    let e = engine();
    let shard = 57;
    let write = |index: u64, rows: &[(u64, &str, &str)]| {
        apply_cpu_series(e, shard, index, rows);
        // A flush per entry: each entry's rows reach their own part, so
        // rows sent again would show before any merge.
        e.flush_all().expect("flush");
    };
    let rows_of = |sql: &str| scalar_u64(&e.query(shard, "db", sql).expect(sql));
    let both = [(1, "cpu", "cpu,host=a"), (2, "cpu", "cpu,host=b")];
    let skipped_before = SERIES_ROWS_SKIPPED.get();
    write(1, &both);
    write(2, &both);
    write(3, &[(2, "cpu", "cpu,host=b"), (3, "cpu", "cpu,host=c")]);
    assert!(
        SERIES_ROWS_SKIPPED.get() - skipped_before >= 3,
        "entries 2 and 3 repeat 3 series rows"
    );
    assert_eq!(
        rows_of("SELECT count() FROM _series"),
        3,
        "one row per series"
    );
    assert_eq!(
        rows_of("SELECT count() FROM cpu FINAL"),
        6,
        "every point stored"
    );
    assert_eq!(
        rows_of("SELECT count() FROM _series WHERE tags['host'] = 'c'"),
        1,
        "a series new to a later entry is stored with its tags"
    );

    // DROP SERIES FROM cpu removes every `_series` row of cpu; the next
    // write of series 1 must store its row again.
    let applied = e.apply_op(shard, 4, &drop_cpu_series());
    assert!(matches!(applied, Ok(Applied::Stored)), "{applied:?}");
    assert_eq!(rows_of("SELECT count() FROM _series FINAL"), 0);
    write(5, &both[..1]);
    assert_eq!(
        rows_of("SELECT count() FROM _series FINAL WHERE series_id = 1 AND tags['host'] = 'a'"),
        1,
        "the series row written after the drop is stored again"
    );
}

/// InfluxDB's `DELETE` forgets a series it leaves without a point: `SHOW
/// SERIES` lists only series with data. A series with a point left keeps
/// its row, and so does one the delete did not touch.
#[test]
fn a_delete_that_empties_a_series_removes_it_from_the_tag_index() {
    use shardhouse_common::proto::{storage_op, DeletePoints, StorageOp};
    use shardhouse_engine::testdata::encode_series;
    use shardhouse_test_support::arrow::col_strings;

    let e = engine();
    let shard = 58;
    let pts = [(1, 1), (1, 2), (2, 1), (2, 10), (3, 10)]
        .map(|(id, t)| PointRow::new(id, t).field("v", f(t as f64)));
    let series = [
        (1, "cpu", "cpu,host=a"),
        (2, "cpu", "cpu,host=b"),
        (3, "cpu", "cpu,host=c"),
    ];
    let applied = e.apply_tables(
        shard,
        1,
        &[TableBatchRef {
            database: "db",
            measurement: "cpu",
            points_ipc: &Bytes::from(points(&pts)),
            series_ipc: &Bytes::from(encode_series(&series).expect("encode series")),
        }],
    );
    assert!(matches!(applied, Ok(Applied::Stored)), "{applied:?}");
    e.flush_all().expect("flush");
    let delete = StorageOp {
        op: Some(storage_op::Op::DeletePoints(DeletePoints {
            database: "db".into(),
            measurement: "cpu".into(),
            min_time_ns: i64::MIN,
            max_time_ns: 5,
            predicate: None,
            drop_series: false,
        })),
    };
    let applied = e.apply_op(shard, 2, &delete);
    assert!(matches!(applied, Ok(Applied::Stored)), "{applied:?}");
    let ids = |sql: &str| col_strings(&e.query(shard, "db", sql).expect(sql), 0);
    assert_eq!(
        ids("SELECT series_id FROM _series FINAL ORDER BY series_id"),
        ["2", "3"],
        "series 1 has no point left"
    );
    assert_eq!(
        ids("SELECT series_id FROM cpu FINAL ORDER BY series_id"),
        ["2", "3"]
    );
}
