//! Running planned SQL on one replica of every shard and reading the Arrow
//! answers as InfluxQL values.

use std::collections::BTreeMap;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, UInt64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use shardhouse_eval::Value;
use tokio::time::Instant;

use crate::error::Result;
use crate::state::Router;

/// The batches each shard answered `sql` with (shards that have no table
/// of the statement answer nothing).
pub async fn on_every_shard(
    router: &Router,
    database: &str,
    sql: &str,
    deadline: Instant,
) -> Result<Vec<(u32, Vec<RecordBatch>)>> {
    decode_all(router.cluster.planned_all(database, sql, deadline).await?)
}

fn decode_all(answers: Vec<(u32, Vec<u8>)>) -> Result<Vec<(u32, Vec<RecordBatch>)>> {
    answers
        .into_iter()
        .map(|(shard, ipc)| Ok((shard, decode(shard, ipc)?)))
        .collect()
}

/// Each shard's fields of `measurement` (rows table, name, type), from the
/// shards' catalogs (shards without the database answer nothing).
pub async fn catalog_on_every_shard(
    router: &Router,
    database: &str,
    measurement: &str,
    deadline: Instant,
) -> Result<Vec<(u32, Vec<RecordBatch>)>> {
    decode_all(
        router
            .cluster
            .catalog_all(database, Some(measurement), deadline)
            .await?,
    )
}

/// A shard's Arrow IPC answer as batches (empty: the shard has no table).
pub fn decode(shard: u32, ipc: Vec<u8>) -> Result<Vec<RecordBatch>> {
    crate::read::sql::decode_ipc(shard, ipc)
}

/// A column's value at `row` (NULL for a null cell or a type we do not
/// read).
pub fn value_at(col: &ArrayRef, row: usize) -> Value {
    if col.is_null(row) {
        return Value::Null;
    }
    match col.data_type() {
        DataType::Float64 => Value::Float(col.as_primitive::<Float64Type>().value(row)),
        DataType::Float32 => Value::Float(
            col.as_primitive::<arrow_array::types::Float32Type>()
                .value(row) as f64,
        ),
        DataType::Int64 => Value::Int(col.as_primitive::<Int64Type>().value(row)),
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32 => narrow_int(col, row),
        DataType::UInt64 => Value::UInt(col.as_primitive::<UInt64Type>().value(row)),
        DataType::Boolean => Value::Bool(col.as_boolean().value(row)),
        DataType::Utf8 => Value::String(col.as_string::<i32>().value(row).to_owned()),
        DataType::LargeUtf8 => Value::String(col.as_string::<i64>().value(row).to_owned()),
        DataType::Binary => {
            Value::String(String::from_utf8_lossy(col.as_binary::<i32>().value(row)).into_owned())
        }
        DataType::LargeBinary => {
            Value::String(String::from_utf8_lossy(col.as_binary::<i64>().value(row)).into_owned())
        }
        _ => Value::Null,
    }
}

/// Arithmetic with literals comes back in ClickHouse's narrowest integer
/// type (`i % 3` is an Int8): each is InfluxDB's int64.
fn narrow_int(col: &ArrayRef, row: usize) -> Value {
    use arrow_array::types::{Int16Type, Int32Type, Int8Type, UInt16Type, UInt32Type, UInt8Type};
    Value::Int(match col.data_type() {
        DataType::Int8 => col.as_primitive::<Int8Type>().value(row).into(),
        DataType::Int16 => col.as_primitive::<Int16Type>().value(row).into(),
        DataType::Int32 => col.as_primitive::<Int32Type>().value(row).into(),
        DataType::UInt8 => col.as_primitive::<UInt8Type>().value(row).into(),
        DataType::UInt16 => col.as_primitive::<UInt16Type>().value(row).into(),
        DataType::UInt32 => col.as_primitive::<UInt32Type>().value(row).into(),
        _ => return Value::Null,
    })
}

/// A text column's value (strings come back as Utf8 or Binary).
pub fn text_at(col: &ArrayRef, row: usize) -> String {
    match value_at(col, row) {
        Value::String(s) => s,
        Value::Null => String::new(),
        other => format!("{other:?}"),
    }
}

/// An integer column's value as i64 (times, counts).
pub fn int_at(col: &ArrayRef, row: usize) -> Option<i64> {
    match value_at(col, row) {
        Value::Int(v) => Some(v),
        Value::UInt(v) => i64::try_from(v).ok(),
        _ => None,
    }
}

/// A `UInt64` column's value (series ids).
pub fn u64_at(col: &ArrayRef, row: usize) -> Option<u64> {
    match value_at(col, row) {
        Value::UInt(v) => Some(v),
        Value::Int(v) => u64::try_from(v).ok(),
        _ => None,
    }
}

/// The items of a list cell (`Array(T)`); `None` for a column of no list.
pub fn list_at(col: &ArrayRef, row: usize) -> Option<ArrayRef> {
    match col.data_type() {
        DataType::List(_) => Some(col.as_list::<i32>().value(row)),
        DataType::LargeList(_) => Some(col.as_list::<i64>().value(row)),
        _ => None,
    }
}

/// The strings of a list cell (`Array(String)`).
pub fn strings_at(col: &ArrayRef, row: usize) -> Vec<String> {
    let Some(inner) = list_at(col, row) else {
        return Vec::new();
    };
    (0..inner.len()).map(|i| text_at(&inner, i)).collect()
}

/// Series ids to their tags, from the answers of [`super::sqlgen::series_sql`].
pub fn series_tags(answers: &[(u32, Vec<RecordBatch>)]) -> BTreeMap<u64, BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (_, batches) in answers {
        for b in batches {
            if b.num_columns() < 3 {
                continue;
            }
            let (ids, keys, vals) = (b.column(0), b.column(1), b.column(2));
            for row in 0..b.num_rows() {
                let Some(id) = u64_at(ids, row) else { continue };
                let tags: BTreeMap<String, String> = strings_at(keys, row)
                    .into_iter()
                    .zip(strings_at(vals, row))
                    .collect();
                out.insert(id, tags);
            }
        }
    }
    out
}
