//! A field's type: decided by the first entry of the shard's log that
//! carries it; a conflicting entry is refused or rejected whole.

use arrow_schema::{DataType, Field, Schema, TimeUnit};
use bytes::Bytes;
use shardhouse_engine::testdata::{encode_points, FieldValue, PointRow};
use shardhouse_engine::{Applied, EngineError, TableBatchRef};
use shardhouse_test_support::arrow::col_strings;

use crate::{engine, f, float_bytes, int_bytes};

#[test]
fn type_conflict_names_field_stored_and_offered_types() {
    let e = engine();
    let ts = DataType::Timestamp(TimeUnit::Nanosecond, None);
    let schema = |name: &str, t: DataType| {
        Schema::new(vec![
            Field::new("time", ts.clone(), false),
            Field::new("series_id", DataType::UInt64, false),
            Field::new(name, t, true),
        ])
    };
    let shard = 3;
    // Admission alone decides nothing: only applied entries do.
    e.admit(
        shard,
        "db",
        "weather",
        &schema("temperature", DataType::Float64),
    )
    .unwrap();
    e.admit(
        shard,
        "db",
        "weather",
        &schema("temperature", DataType::Utf8),
    )
    .unwrap();
    let rows = vec![PointRow::new(1, 1).field("temperature", f(21.5))];
    e.apply(
        shard,
        1,
        "db",
        "weather",
        &encode_points("weather", &rows).unwrap(),
        &[],
    )
    .unwrap();
    let err = e
        .admit(
            shard,
            "db",
            "weather",
            &schema("temperature", DataType::Utf8),
        )
        .unwrap_err();
    assert!(
        matches!(err, EngineError::FieldTypeConflict { .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("temperature") && msg.contains("Float64") && msg.contains("String"),
        "{msg}"
    );
    // A field stored by a flush conflicts too.
    let rows = vec![PointRow::new(1, 2).field("pressure", FieldValue::Int(1000))];
    e.apply(
        shard,
        2,
        "db",
        "weather",
        &encode_points("weather", &rows).unwrap(),
        &[],
    )
    .unwrap();
    e.flush_all().unwrap();
    let err = e
        .admit(
            shard,
            "db",
            "weather",
            &schema("pressure", DataType::Boolean),
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("pressure") && err.contains("Int64") && err.contains("Bool"),
        "{err}"
    );
    // Another shard has decided nothing about `weather`.
    e.admit(7, "db", "weather", &schema("pressure", DataType::Boolean))
        .unwrap();
    // Bad shapes are rejected before proposing.
    let bad = Schema::new(vec![Field::new("time", ts.clone(), false)]);
    assert!(matches!(
        e.admit(shard, "db", "weather", &bad),
        Err(EngineError::InvalidBatch { .. })
    ));
    assert!(matches!(
        e.admit(shard, "db", "_series", &schema("v", DataType::Float64)),
        Err(EngineError::InvalidMeasurement { .. })
    ));
}

/// Two entries that introduce one field with two types: the first in the
/// shard's log decides, the second is rejected whole on apply (nothing of
/// it is stored, nothing is cast), and the same log on another replica
/// decides the same. Replicas used to disagree (a node-wide catalog, cast
/// on apply).
#[test]
fn a_conflicting_entry_is_rejected_on_apply_in_log_order() {
    let e = engine();
    let float = encode_points("m", &[PointRow::new(1, 1).field("g", f(1.5))]).unwrap();
    let int = encode_points("m", &[PointRow::new(2, 1).field("g", FieldValue::Int(7))]).unwrap();
    // Shard 21: float first. Shard 22: int first (another shard's log order).
    assert!(matches!(
        e.apply(21, 1, "db", "m", &float, &[]).unwrap(),
        Applied::Stored
    ));
    match e.apply(21, 2, "db", "m", &int, &[]).unwrap() {
        Applied::Rejected(EngineError::FieldTypeConflict {
            field,
            stored,
            offered,
            ..
        }) => {
            assert_eq!(
                (field.as_str(), stored.as_str(), offered.as_str()),
                ("g", "Float64", "Int64")
            );
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(matches!(
        e.apply(22, 1, "db", "m", &int, &[]).unwrap(),
        Applied::Stored
    ));
    assert!(matches!(
        e.apply(22, 2, "db", "m", &float, &[]).unwrap(),
        Applied::Rejected(_)
    ));
    // The rejected entry counts as applied: replaying it changes nothing.
    assert!(matches!(
        e.apply(21, 2, "db", "m", &int, &[]).unwrap(),
        Applied::Stored
    ));
    e.flush_all().unwrap();
    let r = e
        .query(
            21,
            "db",
            "SELECT series_id, g FROM m FINAL ORDER BY series_id",
        )
        .unwrap();
    assert_eq!(col_strings(&r, 0), ["1"]);
    assert_eq!(col_strings(&r, 1), ["1.5"]);
    let r = e
        .query(
            22,
            "db",
            "SELECT series_id, g FROM m FINAL ORDER BY series_id",
        )
        .unwrap();
    assert_eq!(col_strings(&r, 0), ["2"]);
    assert_eq!(col_strings(&r, 1), ["7"]);
    let t = e.query(21, "db", "SELECT type FROM system.columns WHERE database = currentDatabase() AND table = 'm' AND name = 'g'").unwrap();
    assert_eq!(
        col_strings(&t, 0),
        ["SimpleAggregateFunction(anyLast, Nullable(Float64))"]
    );
    // One entry carrying both types (a coalesced write) is rejected whole.
    let both = [
        TableBatchRef {
            database: "db",
            measurement: "n",
            points_ipc: &float_bytes("n"),
            series_ipc: &Bytes::new(),
        },
        TableBatchRef {
            database: "db",
            measurement: "n",
            points_ipc: &int_bytes("n"),
            series_ipc: &Bytes::new(),
        },
    ];
    assert!(matches!(
        e.apply_tables(23, 1, &both).unwrap(),
        Applied::Rejected(_)
    ));
    assert_eq!(e.field_type(23, "db", "n", "g"), None);
}
