//! Reshaping Arrow columns between what entries carry, what chDB returns
//! and what a table stores.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::TimestampNanosecondType;
use arrow_array::{new_null_array, Array, ArrayRef, RecordBatch, UInt64Array};
use arrow_schema::{DataType, SchemaRef, TimeUnit};

use crate::error::Result;

pub(crate) fn align_all(batches: &[RecordBatch], schema: &SchemaRef) -> Result<Vec<RecordBatch>> {
    batches.iter().map(|b| align(b, schema)).collect()
}

/// Reshapes a batch to `schema`: columns by name, cast to the target type
/// (NULL where a value cannot be cast), missing columns as NULL.
pub(crate) fn align(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    let n = batch.num_rows();
    let bs = batch.schema();
    let cast_opts = arrow_cast::CastOptions {
        safe: true,
        ..Default::default()
    };
    let cols: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .map(|f| match bs.index_of(f.name()) {
            Ok(i) => {
                let c = batch.column(i);
                if c.data_type() == f.data_type() {
                    c.clone()
                } else if let (
                    DataType::Timestamp(TimeUnit::Nanosecond, _),
                    DataType::Timestamp(TimeUnit::Nanosecond, tz),
                ) = (c.data_type(), f.data_type())
                {
                    // chDB returns DateTime64 as Timestamp(ns, "Etc/UTC"); the
                    // instants are the same, only the label differs (a cast
                    // would need the tz database to "convert" them).
                    Arc::new(
                        c.as_primitive::<TimestampNanosecondType>()
                            .clone()
                            .with_timezone_opt(tz.clone()),
                    ) as ArrayRef
                } else {
                    arrow_cast::cast::cast_with_options(c, f.data_type(), &cast_opts)
                        .unwrap_or_else(|_| new_null_array(f.data_type(), n))
                }
            }
            Err(_) => new_null_array(f.data_type(), n),
        })
        .collect();
    Ok(RecordBatch::try_new(schema.clone(), cols)?)
}

/// Column `i` of a query result as strings (whatever string type chDB returned).
pub(crate) fn strings(b: &RecordBatch, i: usize) -> Vec<String> {
    let c = arrow_cast::cast::cast(b.column(i), &DataType::Utf8)
        .unwrap_or_else(|_| new_null_array(&DataType::Utf8, b.num_rows()));
    let c = c
        .as_any()
        .downcast_ref::<arrow_array::StringArray>()
        .expect("cast to Utf8 gives a StringArray");
    (0..c.len())
        .map(|j| {
            if c.is_null(j) {
                String::new()
            } else {
                c.value(j).to_string()
            }
        })
        .collect()
}

/// Column `i` of a query result as u64s.
pub(crate) fn i64s(b: &RecordBatch, i: usize) -> Vec<i64> {
    let c = arrow_cast::cast::cast(b.column(i), &DataType::Int64)
        .unwrap_or_else(|_| new_null_array(&DataType::Int64, b.num_rows()));
    let c = c
        .as_any()
        .downcast_ref::<arrow_array::Int64Array>()
        .expect("cast to Int64 gives an Int64Array");
    (0..c.len())
        .map(|j| if c.is_null(j) { 0 } else { c.value(j) })
        .collect()
}

pub(crate) fn u64s(b: &RecordBatch, i: usize) -> Vec<u64> {
    let c = arrow_cast::cast::cast(b.column(i), &DataType::UInt64)
        .unwrap_or_else(|_| new_null_array(&DataType::UInt64, b.num_rows()));
    let c = c
        .as_any()
        .downcast_ref::<UInt64Array>()
        .expect("cast to UInt64 gives a UInt64Array");
    (0..c.len())
        .map(|j| if c.is_null(j) { 0 } else { c.value(j) })
        .collect()
}
