//! The tag index: the rows of a database's `_series` table, built from the
//! series a write carries. Plain data, no I/O.
//!
//! Routers send each new series as its canonical key (docs/series_id.md);
//! the index stores the key's tags as a `Map(LowCardinality(String),
//! String)`, so `tags['host'] = 'a'`, `match(tags['host'], ...)` and
//! `GROUP BY tags['host']` are plain column operations. Only series new to
//! a request are sent, so the parsing costs per new series, not per point.

use std::sync::Arc;

use arrow_array::builder::{MapBuilder, StringBuilder};
use arrow_array::{Array, RecordBatch, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use crate::error::{EngineError, Result};
use crate::layout::SERIES_ID;

/// Schema of `_series` rows as the engine ingests them.
pub fn index_schema() -> SchemaRef {
    schema_with(tags_builder().finish().data_type().clone())
}

fn schema_with(tags: DataType) -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(SERIES_ID, DataType::UInt64, false),
        Field::new("measurement", DataType::Utf8, false),
        Field::new("tags", tags, false),
    ]))
}

fn tags_builder() -> MapBuilder<StringBuilder, StringBuilder> {
    MapBuilder::new(None, StringBuilder::new(), StringBuilder::new()).with_values_field(Field::new(
        "values",
        DataType::Utf8,
        false,
    ))
}

/// Turns a wire series batch (`series_id`, `measurement`, `tags` = the
/// canonical key) into `_series` rows. A key that does not parse keeps
/// its series with no tags (and is counted in the log): the points stay
/// readable by `series_id`.
pub fn index_batch(wire: &RecordBatch) -> Result<RecordBatch> {
    let bad = |what: &str| EngineError::InvalidBatch {
        measurement: "_series".into(),
        reason: format!("series batch column {what}"),
    };
    let ids = wire
        .column(0)
        .as_any()
        .downcast_ref::<UInt64Array>()
        .ok_or_else(|| bad("0 (series_id) is not UInt64"))?;
    let measurements = wire
        .column(1)
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| bad("1 (measurement) is not Utf8"))?;
    let keys = wire
        .column(2)
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| bad("2 (tags) is not Utf8"))?;
    let mut tags = tags_builder();
    for i in 0..wire.num_rows() {
        match shardhouse_common::series::parse_canonical_key(keys.value(i).as_bytes()) {
            Some((_, pairs)) => {
                for (k, v) in pairs {
                    tags.keys().append_value(String::from_utf8_lossy(&k));
                    tags.values().append_value(String::from_utf8_lossy(&v));
                }
            }
            None => tracing::warn!(series_id = ids.value(i), key = %keys.value(i),
                "series key is not canonical; the series is indexed without tags"),
        }
        tags.append(true)?;
    }
    let tags = tags.finish();
    Ok(RecordBatch::try_new(
        schema_with(tags.data_type().clone()),
        vec![
            Arc::new(ids.clone()),
            Arc::new(measurements.clone()),
            Arc::new(tags),
        ],
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::MapArray;

    #[test]
    fn canonical_keys_become_tag_maps() {
        let wire = RecordBatch::try_new(
            crate::ipc::series_schema(),
            vec![
                Arc::new(UInt64Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec!["cpu", "cpu"])),
                Arc::new(StringArray::from(vec!["cpu,host=a,region=eu", "cpu"])),
            ],
        )
        .unwrap();
        let rows = index_batch(&wire).unwrap();
        assert_eq!(rows.schema(), index_schema());
        let tags = rows.column(2).as_any().downcast_ref::<MapArray>().unwrap();
        assert_eq!(tags.value_length(0), 2);
        assert_eq!(tags.value_length(1), 0);
        let keys = tags.keys().as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(keys.value(0), "host");
        assert_eq!(keys.value(1), "region");
    }
}
