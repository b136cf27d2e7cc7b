//! Unit tests of `/api/v1/sql`'s pure parts: statement validation, the
//! `shard` column of per-shard answers, and the JSON/CSV encoding with its
//! UTC timestamps.

use super::*;
use arrow_array::{Array, Int64Array, ListArray, StructArray};

#[test]
fn only_single_selects_pass() {
    assert_eq!(validate_select(" select 1; ").unwrap(), "select 1");
    assert!(validate_select("SELECT count() FROM cpu").is_ok());
    for bad in [
        "INSERT INTO t VALUES (1)",
        "DROP TABLE cpu",
        "select 1; drop table x",
        "",
    ] {
        assert!(validate_select(bad).is_err(), "{bad}");
    }
}

#[test]
fn rows_get_a_shard_column_in_json_and_csv() {
    let b = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)])),
        vec![Arc::new(Int64Array::from(vec![7, 8]))],
    )
    .unwrap();
    let b = with_shard_column(&b, 3).unwrap();
    let (_, json) = encode(std::slice::from_ref(&b), false).unwrap();
    let rows: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(
        rows,
        serde_json::json!([{"v": 7, "shard": 3}, {"v": 8, "shard": 3}])
    );
    let (_, csv) = encode(&[b], true).unwrap();
    assert_eq!(String::from_utf8(csv).unwrap(), "v,shard\n7,3\n8,3\n");
    assert_eq!(encode(&[], false).unwrap().1, b"[]");
}

/// Issue 12: `SELECT 1 AS shard` gave row objects with two `shard` keys.
#[test]
fn a_result_with_its_own_shard_column_gets_underscore_shard() {
    let b = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new(
            "shard",
            DataType::Int64,
            false,
        )])),
        vec![Arc::new(Int64Array::from(vec![1]))],
    )
    .unwrap();
    let b = with_shard_column(&b, 5).unwrap();
    let (_, json) = encode(std::slice::from_ref(&b), false).unwrap();
    assert_eq!(
        String::from_utf8(json).unwrap(),
        r#"[{"shard":1,"_shard":5}]"#
    );
    let (_, csv) = encode(std::slice::from_ref(&b), true).unwrap();
    assert_eq!(String::from_utf8(csv).unwrap(), "shard,_shard\n1,5\n");
    // And again when `_shard` is taken too.
    let b = with_shard_column(&b, 6).unwrap();
    assert_eq!(b.schema().field(2).name(), "__shard");
}

#[test]
fn rfc3339_in_utc() {
    assert_eq!(rfc3339_utc(0, 0), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339_utc(1_700_000_000, 0), "2023-11-14T22:13:20Z");
    assert_eq!(
        rfc3339_utc(1_700_000_000, 500_000_000),
        "2023-11-14T22:13:20.5Z"
    );
    assert_eq!(
        rfc3339_utc(1_700_000_000, 1),
        "2023-11-14T22:13:20.000000001Z"
    );
    assert_eq!(
        rfc3339_utc(-1, 999_999_999),
        "1969-12-31T23:59:59.999999999Z"
    );
    assert_eq!(rfc3339_utc(951_782_400, 0), "2000-02-29T00:00:00Z");
    // The int64 nanosecond extremes.
    assert_eq!(
        rfc3339_utc(
            i64::MIN.div_euclid(1_000_000_000),
            i64::MIN.rem_euclid(1_000_000_000) as u32
        ),
        "1677-09-21T00:12:43.145224192Z"
    );
    assert_eq!(
        rfc3339_utc(i64::MAX / 1_000_000_000, (i64::MAX % 1_000_000_000) as u32),
        "2262-04-11T23:47:16.854775807Z"
    );
}

fn time_batch(tz: Option<&str>) -> RecordBatch {
    use arrow_array::TimestampNanosecondArray;
    let t = TimestampNanosecondArray::from(vec![
        Some(1_700_000_000_000_000_000),
        Some(1_700_000_000_250_000_000),
        None,
    ])
    .with_timezone_opt(tz.map(str::to_owned));
    let ty = t.data_type().clone();
    // The same instants in a nested column: List<Timestamp>.
    let inner = Arc::new(Field::new("item", ty.clone(), true));
    let list = ListArray::new(
        inner.clone(),
        arrow_buffer::OffsetBuffer::from_lengths([1, 1, 0]),
        Arc::new(t.clone()),
        None,
    );
    RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("time", ty, true),
            Field::new("times", DataType::List(inner), true),
        ])),
        vec![Arc::new(t), Arc::new(list)],
    )
    .unwrap()
}

/// Issue 12: chDB labels DateTime64 with the machine's zone name, and
/// arrow refused "Etc/UTC" (500 on the README's own query). Any label
/// gives the same UTC text. (`tests/sql_time_zone.rs` repeats this
/// under several `TZ` values.)
#[test]
fn timestamps_render_as_rfc3339_utc_whatever_the_zone_label() {
    for tz in [
        Some("Etc/UTC"),
        Some("UTC"),
        Some("Europe/Berlin"),
        Some("America/New_York"),
        Some("+05:30"),
        Some("-08:00"),
        None,
    ] {
        let b = with_shard_column(&time_batch(tz), 0).unwrap();
        let (ct, json) = encode(std::slice::from_ref(&b), false).unwrap();
        assert_eq!(ct, "application/json");
        let rows: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(
            rows,
            serde_json::json!([
                {"time": "2023-11-14T22:13:20Z", "times": ["2023-11-14T22:13:20Z"], "shard": 0},
                {"time": "2023-11-14T22:13:20.25Z", "times": ["2023-11-14T22:13:20.25Z"], "shard": 0},
                {"times": [], "shard": 0},
            ]),
            "label {tz:?}"
        );
        let plain = RecordBatch::try_new(
            Arc::new(Schema::new(vec![b.schema().field(0).clone()])),
            vec![b.column(0).clone()],
        )
        .unwrap();
        let (ct, csv) = encode(&[plain], true).unwrap();
        assert_eq!(ct, "text/csv");
        assert_eq!(
            String::from_utf8(csv).unwrap(),
            // (the csv crate quotes the empty field of a one-column row)
            "time\n2023-11-14T22:13:20Z\n2023-11-14T22:13:20.25Z\n\"\"\n",
            "label {tz:?}"
        );
    }
}

#[test]
fn other_time_units_and_struct_columns() {
    use arrow_array::{TimestampMillisecondArray, TimestampSecondArray};
    let s = TimestampSecondArray::from(vec![1_700_000_000]).with_timezone("Asia/Kolkata");
    let ms = TimestampMillisecondArray::from(vec![1_700_000_000_123]).with_timezone("Etc/UTC");
    let st = StructArray::from(vec![(
        Arc::new(Field::new("at", ms.data_type().clone(), false)),
        Arc::new(ms.clone()) as ArrayRef,
    )]);
    let b = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("s", s.data_type().clone(), false),
            Field::new("st", st.data_type().clone(), false),
        ])),
        vec![Arc::new(s), Arc::new(st)],
    )
    .unwrap();
    let (_, json) = encode(&[b], false).unwrap();
    assert_eq!(
        String::from_utf8(json).unwrap(),
        r#"[{"s":"2023-11-14T22:13:20Z","st":{"at":"2023-11-14T22:13:20.123Z"}}]"#
    );
}
