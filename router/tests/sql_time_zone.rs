//! Issue 12: `/api/v1/sql` answered 500 for any `time` column on a machine
//! whose zone is "Etc/UTC" (chDB labels DateTime64 with the machine's zone
//! name). The router's encoding must not depend on the label nor on the
//! router's own `TZ`. A test binary of its own: it changes `TZ`, which no
//! other thread of this process reads meanwhile.

use arrow_array::{Array, RecordBatch, TimestampNanosecondArray};
use arrow_schema::{Field, Schema};
use shardhouse_router::read::sql::encode;
use std::sync::Arc;

fn batch(label: Option<&str>) -> RecordBatch {
    let t =
        TimestampNanosecondArray::from(vec![1_700_000_000_000_000_000, 1_700_000_000_000_001_000])
            .with_timezone_opt(label.map(str::to_owned));
    RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new(
            "time",
            t.data_type().clone(),
            false,
        )])),
        vec![Arc::new(t)],
    )
    .unwrap()
}

#[test]
fn time_columns_are_utc_under_every_tz_and_label() {
    let labels = [
        None,
        Some("Etc/UTC"),
        Some("UTC"),
        Some("Europe/Berlin"),
        Some("Asia/Kolkata"),
        Some("+05:30"),
    ];
    for tz in [
        None,
        Some("UTC"),
        Some("Etc/UTC"),
        Some("Europe/Berlin"),
        Some("Asia/Kolkata"),
        Some("America/New_York"),
    ] {
        match tz {
            Some(tz) => std::env::set_var("TZ", tz),
            None => std::env::remove_var("TZ"),
        }
        for label in labels {
            let (_, json) = encode(&[batch(label)], false)
                .unwrap_or_else(|e| panic!("TZ={tz:?} label {label:?}: {e}"));
            assert_eq!(
                String::from_utf8(json).unwrap(),
                r#"[{"time":"2023-11-14T22:13:20Z"},{"time":"2023-11-14T22:13:20.000001Z"}]"#,
                "TZ={tz:?} label {label:?}"
            );
            let (_, csv) = encode(&[batch(label)], true).unwrap();
            assert_eq!(
                String::from_utf8(csv).unwrap(),
                "time\n2023-11-14T22:13:20Z\n2023-11-14T22:13:20.000001Z\n",
                "TZ={tz:?} label {label:?}"
            );
        }
    }
}
