//! Arrow batches for tests: the node's points shape, IPC bytes both ways,
//! and columns read back as strings.

use std::sync::Arc;

use arrow_array::{
    ArrayRef, Int64Array, MapArray, RecordBatch, StringArray, StructArray,
    TimestampNanosecondArray, UInt64Array,
};
use arrow_schema::{ArrowError, DataType, Field, Fields, Schema, TimeUnit};

/// The `time` column's field: nanoseconds, no zone, not null.
pub fn ts_field() -> Field {
    Field::new(
        "time",
        DataType::Timestamp(TimeUnit::Nanosecond, None),
        false,
    )
}

fn map_entry_fields() -> Fields {
    Fields::from(vec![
        Field::new("keys", DataType::Utf8, false),
        Field::new("values", DataType::Utf8, true),
    ])
}

fn map_entries() -> Field {
    Field::new("entries", DataType::Struct(map_entry_fields()), false)
}

/// A `Map(String, String)` column's Arrow field (the `_series` tags).
pub fn map_field(name: &str) -> Field {
    Field::new(name, DataType::Map(Arc::new(map_entries()), false), false)
}

/// A map column of `rows` rows with `per_row` entries each, from flat keys
/// and values (row after row).
pub fn map_array(
    keys: StringArray,
    values: StringArray,
    per_row: usize,
    rows: usize,
) -> Result<MapArray, ArrowError> {
    let offsets = arrow_buffer::OffsetBuffer::from_lengths(std::iter::repeat_n(per_row, rows));
    let entries = StructArray::new(
        map_entry_fields(),
        vec![Arc::new(keys) as ArrayRef, Arc::new(values) as ArrayRef],
        None,
    );
    MapArray::try_new(Arc::new(map_entries()), offsets, entries, None, false)
}

/// `time` (ns), `series_id`, and one Int64 field `v`.
pub fn points_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        ts_field(),
        Field::new("series_id", DataType::UInt64, false),
        Field::new("v", DataType::Int64, true),
    ]))
}

/// One batch where each point is unique: time = v = value, series =
/// value % 8.
pub fn points_batch(values: &[i64]) -> RecordBatch {
    RecordBatch::try_new(
        points_schema(),
        vec![
            Arc::new(TimestampNanosecondArray::from(values.to_vec())),
            Arc::new(UInt64Array::from_iter_values(
                values.iter().map(|v| (*v as u64) % 8),
            )),
            Arc::new(Int64Array::from(values.to_vec())),
        ],
    )
    .expect("points batch")
}

/// [`points_batch`] as Arrow IPC stream bytes (a Write request's points).
pub fn points_ipc(values: &[i64]) -> Vec<u8> {
    ipc_bytes(&points_schema(), &[points_batch(values)])
}

/// Batches as one Arrow IPC stream.
pub fn ipc_bytes(schema: &Schema, batches: &[RecordBatch]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, schema).expect("ipc writer");
    for b in batches {
        w.write(b).expect("ipc write");
    }
    w.finish().expect("ipc finish");
    drop(w);
    out
}

/// The batches of an Arrow IPC stream.
pub fn decode_ipc(ipc: &[u8]) -> Vec<RecordBatch> {
    arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(ipc.to_vec()), None)
        .expect("ipc stream")
        .map(|b| b.expect("ipc batch"))
        .collect()
}

/// Column `i` of all batches as strings.
pub fn col_strings(batches: &[RecordBatch], i: usize) -> Vec<String> {
    let mut out = Vec::new();
    for b in batches {
        let c = arrow_cast::cast::cast(b.column(i), &DataType::Utf8).expect("cast to string");
        for j in 0..c.len() {
            out.push(arrow_cast::display::array_value_to_string(&c, j).expect("display"));
        }
    }
    out
}

/// The single value of a one-row, one-column result as u64.
pub fn scalar_u64(batches: &[RecordBatch]) -> u64 {
    let v = col_strings(batches, 0);
    assert_eq!(v.len(), 1, "expected one row, got {v:?}");
    v[0].parse().expect("integer result")
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Array;

    #[test]
    fn points_round_trip_through_ipc() {
        let batches = decode_ipc(&points_ipc(&[3, 9]));
        assert_eq!(col_strings(&batches, 1), ["3", "1"]);
        assert_eq!(col_strings(&batches, 2), ["3", "9"]);
    }

    #[test]
    fn a_map_column_has_per_row_entries() {
        let keys = StringArray::from(vec!["a", "b", "a", "b"]);
        let values = StringArray::from(vec!["1", "2", "3", "4"]);
        let m = map_array(keys, values, 2, 2).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m.value(1).len(), 2);
        assert_eq!(map_field("tags").data_type(), m.data_type());
    }

    #[test]
    fn a_scalar_is_one_row_of_one_column() {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::UInt64, false)]));
        let one =
            RecordBatch::try_new(schema, vec![Arc::new(UInt64Array::from(vec![42]))]).unwrap();
        assert_eq!(scalar_u64(&[one]), 42);
    }
}
