//! The Arrow IPC *stream* bytes carried in Raft entries, engine side.
//!
//! The schemas and the IPC encode/decode are `shardhouse_common::wire`'s
//! (the router builds the same bytes); this module only adapts them to the
//! engine's [`FieldType`] and adds row builders for tests and benchmarks
//! ([`encode_points`] / [`encode_series`]).

use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Float64Builder, Int64Builder, StringBuilder, UInt64Builder,
};
use arrow_array::{ArrayRef, RecordBatch, StringArray, UInt64Array};
use arrow_schema::SchemaRef;
use shardhouse_common::wire;

use crate::error::{EngineError, Result};
use crate::layout::FieldType;

pub use shardhouse_common::wire::{decode_stream, series_schema, time_type};

/// One field value of a point.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    Float(f64),
    Int(i64),
    UInt(u64),
    Str(String),
    Bool(bool),
}

impl FieldValue {
    /// The stored type of this value.
    pub fn field_type(&self) -> FieldType {
        match self {
            FieldValue::Float(_) => FieldType::Float64,
            FieldValue::Int(_) => FieldType::Int64,
            FieldValue::UInt(_) => FieldType::UInt64,
            FieldValue::Str(_) => FieldType::String,
            FieldValue::Bool(_) => FieldType::Bool,
        }
    }
}

/// One point: a series, a timestamp (ns since the epoch) and its fields.
#[derive(Debug, Clone, PartialEq)]
pub struct PointRow {
    pub series_id: u64,
    pub time_ns: i64,
    pub fields: Vec<(String, FieldValue)>,
}

impl PointRow {
    pub fn new(series_id: u64, time_ns: i64) -> PointRow {
        PointRow {
            series_id,
            time_ns,
            fields: Vec::new(),
        }
    }

    /// Adds a field (builder style).
    pub fn field(mut self, name: &str, value: FieldValue) -> PointRow {
        self.fields.push((name.to_string(), value));
        self
    }
}

/// Schema of a points batch with the given fields (the wire's, see
/// [`wire::points_schema`]).
pub fn points_schema(fields: &[(String, FieldType)]) -> SchemaRef {
    wire::points_schema(fields.iter().map(|(n, t)| (n.as_str(), t.arrow())))
}

/// Builds a points batch. Fields appear in first-seen order; a point that
/// lacks a field gets NULL there. A field offered with two types is an error.
pub fn points_batch(measurement: &str, rows: &[PointRow]) -> Result<RecordBatch> {
    let mut fields: Vec<(String, FieldType)> = Vec::new();
    for r in rows {
        for (n, v) in &r.fields {
            match fields.iter().find(|(fname, _)| fname == n) {
                Some((_, t)) if *t != v.field_type() => {
                    return Err(EngineError::FieldTypeConflict {
                        measurement: measurement.to_string(),
                        field: n.clone(),
                        stored: t.name().to_string(),
                        offered: v.field_type().name().to_string(),
                    })
                }
                Some(_) => {}
                None => fields.push((n.clone(), v.field_type())),
            }
        }
    }
    let mut cols: Vec<(String, ArrayRef)> = Vec::with_capacity(fields.len());
    for (name, t) in &fields {
        let get = |r: &PointRow| {
            r.fields
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        let col: ArrayRef = match t {
            FieldType::Float64 => {
                let mut b = Float64Builder::with_capacity(rows.len());
                rows.iter().for_each(|r| match get(r) {
                    Some(FieldValue::Float(x)) => b.append_value(x),
                    _ => b.append_null(),
                });
                Arc::new(b.finish())
            }
            FieldType::Int64 => {
                let mut b = Int64Builder::with_capacity(rows.len());
                rows.iter().for_each(|r| match get(r) {
                    Some(FieldValue::Int(x)) => b.append_value(x),
                    _ => b.append_null(),
                });
                Arc::new(b.finish())
            }
            FieldType::UInt64 => {
                let mut b = UInt64Builder::with_capacity(rows.len());
                rows.iter().for_each(|r| match get(r) {
                    Some(FieldValue::UInt(x)) => b.append_value(x),
                    _ => b.append_null(),
                });
                Arc::new(b.finish())
            }
            FieldType::String => {
                let mut b = StringBuilder::new();
                rows.iter().for_each(|r| match get(r) {
                    Some(FieldValue::Str(x)) => b.append_value(x),
                    _ => b.append_null(),
                });
                Arc::new(b.finish())
            }
            FieldType::Bool => {
                let mut b = BooleanBuilder::with_capacity(rows.len());
                rows.iter().for_each(|r| match get(r) {
                    Some(FieldValue::Bool(x)) => b.append_value(x),
                    _ => b.append_null(),
                });
                Arc::new(b.finish())
            }
        };
        cols.push((name.clone(), col));
    }
    Ok(wire::points_batch(
        rows.iter().map(|r| r.time_ns).collect(),
        rows.iter().map(|r| r.series_id).collect(),
        cols,
    )?)
}

/// Arrow IPC stream bytes of one batch.
pub fn encode_batch(batch: &RecordBatch) -> Result<Vec<u8>> {
    Ok(wire::encode_batch(batch)?)
}

/// points_ipc bytes for a Raft entry, from rows.
pub fn encode_points(measurement: &str, rows: &[PointRow]) -> Result<Vec<u8>> {
    encode_batch(&points_batch(measurement, rows)?)
}

/// series_ipc bytes for a Raft entry: (series_id, measurement, canonical key text).
pub fn encode_series(rows: &[(u64, &str, &str)]) -> Result<Vec<u8>> {
    let batch = wire::series_batch(
        UInt64Array::from_iter_values(rows.iter().map(|r| r.0)),
        StringArray::from_iter_values(rows.iter().map(|r| r.1)),
        StringArray::from_iter_values(rows.iter().map(|r| r.2)),
    )?;
    encode_batch(&batch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Array;

    #[test]
    fn points_round_trip_with_missing_fields() {
        let rows = vec![
            PointRow::new(1, 10).field("a", FieldValue::Float(1.5)),
            PointRow::new(2, 20)
                .field("b", FieldValue::Str("x".into()))
                .field("a", FieldValue::Float(2.5)),
        ];
        let bytes = encode_points("m", &rows).unwrap();
        let (schema, batches) = decode_stream(&bytes).unwrap();
        let schema = schema.unwrap();
        assert_eq!(schema.field(2).name(), "a");
        assert_eq!(schema.field(3).name(), "b");
        assert_eq!(batches[0].num_rows(), 2);
        assert!(batches[0].column(3).is_null(0));
        crate::layout::batch_fields("m", &schema).unwrap();
    }

    #[test]
    fn mixed_types_for_one_field_are_rejected() {
        let rows = vec![
            PointRow::new(1, 10).field("a", FieldValue::Float(1.5)),
            PointRow::new(1, 11).field("a", FieldValue::Int(1)),
        ];
        let err = points_batch("m", &rows).unwrap_err().to_string();
        assert!(
            err.contains("`a`") && err.contains("Float64") && err.contains("Int64"),
            "{err}"
        );
    }

    #[test]
    fn empty_series_bytes_decode_to_nothing() {
        assert!(decode_stream(&[]).unwrap().1.is_empty());
        let b = encode_series(&[(7, "cpu", "cpu,host=a")]).unwrap();
        assert_eq!(decode_stream(&b).unwrap().1[0].num_rows(), 1);
    }

    #[test]
    fn stored_column_names_are_the_wire_names() {
        // Buffered batches are aligned to the fact tables by column name.
        assert_eq!(crate::layout::TIME, wire::TIME);
        assert_eq!(crate::layout::SERIES_ID, wire::SERIES_ID);
        let s = points_schema(&[("v".into(), FieldType::Bool)]);
        assert_eq!(s.field(2).data_type(), &FieldType::Bool.arrow());
        assert_eq!(s.field(0).data_type(), &time_type());
    }
}
