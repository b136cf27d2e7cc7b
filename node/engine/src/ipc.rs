//! Building and reading the Arrow IPC *stream* bytes carried in Raft entries.
//!
//! Tests, benchmarks and other crates use [`encode_points`] / [`encode_series`]
//! to build entries from simple rows; the router builds the same shape from
//! its column builders.

use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Float64Builder, Int64Builder, StringBuilder, UInt64Builder,
};
use arrow_array::{ArrayRef, RecordBatch, StringArray, TimestampNanosecondArray, UInt64Array};
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::error::{EngineError, Result};
use crate::layout::{FieldType, SERIES_ID, TIME};

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

/// The Arrow type of the `time` column.
pub fn time_type() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, None)
}

/// Schema of a points batch with the given fields.
pub fn points_schema(fields: &[(String, FieldType)]) -> SchemaRef {
    let mut cols = vec![
        Field::new(TIME, time_type(), false),
        Field::new(SERIES_ID, DataType::UInt64, false),
    ];
    for (n, t) in fields {
        cols.push(Field::new(n, t.arrow(), true));
    }
    Arc::new(Schema::new(cols))
}

/// Schema of a series batch: series_id, measurement, tags (canonical series key text).
pub fn series_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(SERIES_ID, DataType::UInt64, false),
        Field::new("measurement", DataType::Utf8, false),
        Field::new("tags", DataType::Utf8, false),
    ]))
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
    let schema = points_schema(&fields);
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(TimestampNanosecondArray::from_iter_values(
            rows.iter().map(|r| r.time_ns),
        )),
        Arc::new(UInt64Array::from_iter_values(
            rows.iter().map(|r| r.series_id),
        )),
    ];
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
        cols.push(col);
    }
    Ok(RecordBatch::try_new(schema, cols)?)
}

/// Arrow IPC stream bytes of one batch.
pub fn encode_batch(batch: &RecordBatch) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    {
        let mut w = StreamWriter::try_new(&mut out, &batch.schema())?;
        w.write(batch)?;
        w.finish()?;
    }
    Ok(out)
}

/// points_ipc bytes for a Raft entry, from rows.
pub fn encode_points(measurement: &str, rows: &[PointRow]) -> Result<Vec<u8>> {
    encode_batch(&points_batch(measurement, rows)?)
}

/// series_ipc bytes for a Raft entry: (series_id, measurement, canonical key text).
pub fn encode_series(rows: &[(u64, &str, &str)]) -> Result<Vec<u8>> {
    let batch = RecordBatch::try_new(
        series_schema(),
        vec![
            Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.2))),
        ],
    )?;
    encode_batch(&batch)
}

/// Reads all batches of an IPC stream (empty bytes read as no batches).
pub fn decode_stream(bytes: &[u8]) -> Result<(Option<SchemaRef>, Vec<RecordBatch>)> {
    if bytes.is_empty() {
        return Ok((None, Vec::new()));
    }
    let reader = StreamReader::try_new(std::io::Cursor::new(bytes), None)?;
    let schema = reader.schema();
    let mut out = Vec::new();
    for b in reader {
        out.push(b?);
    }
    Ok((Some(schema), out))
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
}
