//! The data set: 1M series of a TSBS cpu-only-like `cpu` (host, region,
//! rack; 10 Float64 fields), in batches shared by every layout.

use std::ops::Range;
use std::sync::Arc;

use anyhow::Result;
use arrow_array::{
    ArrayRef, Float64Array, RecordBatch, StringArray, TimestampNanosecondArray, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use shardhouse_test_support::arrow::{map_array, map_field, ts_field};

use crate::{BASE_NS, BATCH, FIELDS, INTERVAL_NS, RACKS, REGIONS};

pub(crate) fn host(s: usize) -> String {
    format!("host_{s}")
}
pub(crate) fn region(s: usize) -> String {
    format!("region_{}", s % REGIONS)
}
pub(crate) fn rack(s: usize) -> String {
    format!("rack_{}", (s / REGIONS) % RACKS)
}

/// Integer-valued Float64 in [0, 1000): sums are exact, so both layouts'
/// answers compare exactly whatever order chDB aggregates in.
pub(crate) fn value(series: usize, ts: usize, field: usize) -> f64 {
    let mut z = ((series as u64) << 16 | (ts as u64) << 4 | field as u64)
        .wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) % 1000) as f64
}

/// The series of one batch, shared by every timestamp.
pub(crate) struct Chunk {
    pub(crate) series_id: ArrayRef,
    pub(crate) host: ArrayRef,
    pub(crate) region: ArrayRef,
    pub(crate) rack: ArrayRef,
    /// `_series` rows of these series.
    pub(crate) series_rows: RecordBatch,
}

/// One timestamp of one chunk.
pub(crate) struct FactBatch {
    pub(crate) chunk: usize,
    pub(crate) time: ArrayRef,
    pub(crate) fields: Vec<ArrayRef>,
}

pub(crate) struct Data {
    pub(crate) series: usize,
    pub(crate) timestamps: usize,
    pub(crate) chunks: Vec<Chunk>,
    /// Timestamp after timestamp, chunks in order (as scrapes arrive).
    pub(crate) facts: Vec<FactBatch>,
    pub(crate) series_schema: SchemaRef,
}

impl Data {
    pub(crate) fn build(series: usize, timestamps: usize) -> Result<Data> {
        let series_schema = Arc::new(Schema::new(vec![
            Field::new("series_id", DataType::UInt64, false),
            Field::new("measurement", DataType::Utf8, false),
            map_field("tags"),
        ]));
        let ranges: Vec<Range<usize>> = (0..series)
            .step_by(BATCH)
            .map(|s| s..(s + BATCH).min(series))
            .collect();
        let mut chunks = Vec::new();
        for r in &ranges {
            let ids = UInt64Array::from_iter_values(r.clone().map(|s| {
                let (h, g, k) = (host(s), region(s), rack(s));
                shardhouse_common::series::series_id(
                    "cpu",
                    &[("host", &h), ("rack", &k), ("region", &g)],
                )
            }));
            let series_id: ArrayRef = Arc::new(ids);
            let keys =
                StringArray::from_iter_values(r.clone().flat_map(|_| ["host", "rack", "region"]));
            let vals = StringArray::from_iter_values(
                r.clone().flat_map(|s| [host(s), rack(s), region(s)]),
            );
            let series_rows = RecordBatch::try_new(
                series_schema.clone(),
                vec![
                    series_id.clone(),
                    Arc::new(StringArray::from_iter_values(r.clone().map(|_| "cpu"))),
                    Arc::new(map_array(keys, vals, 3, r.len())?),
                ],
            )?;
            chunks.push(Chunk {
                series_id,
                host: Arc::new(StringArray::from_iter_values(r.clone().map(host))),
                region: Arc::new(StringArray::from_iter_values(r.clone().map(region))),
                rack: Arc::new(StringArray::from_iter_values(r.clone().map(rack))),
                series_rows,
            });
        }
        let mut facts = Vec::new();
        for ts in 0..timestamps {
            for (chunk, r) in ranges.iter().enumerate() {
                let t = BASE_NS + ts as i64 * INTERVAL_NS;
                facts.push(FactBatch {
                    chunk,
                    time: Arc::new(TimestampNanosecondArray::from_iter_values(
                        r.clone().map(|_| t),
                    )),
                    fields: (0..FIELDS.len())
                        .map(|f| {
                            Arc::new(Float64Array::from_iter_values(
                                r.clone().map(|s| value(s, ts, f)),
                            )) as ArrayRef
                        })
                        .collect(),
                });
            }
        }
        Ok(Data {
            series,
            timestamps,
            chunks,
            facts,
            series_schema,
        })
    }

    pub(crate) fn rows(&self) -> usize {
        self.series * self.timestamps
    }

    pub(crate) fn last_time_ns(&self) -> i64 {
        BASE_NS + (self.timestamps as i64 - 1) * INTERVAL_NS
    }
}

pub(crate) fn fact_schema(tag_columns: bool) -> SchemaRef {
    let mut fields = vec![ts_field(), Field::new("series_id", DataType::UInt64, false)];
    if tag_columns {
        for t in ["host", "region", "rack"] {
            fields.push(Field::new(t, DataType::Utf8, false));
        }
    }
    fields.extend(
        FIELDS
            .iter()
            .map(|f| Field::new(*f, DataType::Float64, true)),
    );
    Arc::new(Schema::new(fields))
}
