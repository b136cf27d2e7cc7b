//! The write wire format, written once: the Arrow schemas of a points batch
//! and of a series batch, Arrow IPC stream encode and decode, and the one
//! shape of a write (a list of [`TableBatch`]es).
//!
//! The router builds batches with these schemas, the node admits and logs
//! them, the engine applies them: one definition, so the three cannot
//! disagree on a column's name, type or nullability. The bytes are carried
//! from router to chDB without re-encoding (docs/architecture.md).
//!
//! Failures are Arrow's own (a malformed stream, columns that do not match
//! their schema): the functions return [`ArrowError`] and each caller maps
//! it into its crate's error.

use crate::proto::{StorageOp, TableBatch, WalEntry, WriteRequest};
use arrow_array::{
    Array, ArrayRef, RecordBatch, StringArray, TimestampNanosecondArray, UInt64Array,
};
use arrow_buffer::ScalarBuffer;
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef, TimeUnit};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// The time column of a points batch (ns since the epoch, no time zone).
pub const TIME: &str = "time";
/// The series column of a points batch and of a series batch.
pub const SERIES_ID: &str = "series_id";
/// The series batch's measurement column (the series' own measurement,
/// which for Prometheus samples differs from the `_samples` table name).
pub const MEASUREMENT: &str = "measurement";
/// The series batch's canonical series key text (docs/series_id.md).
pub const TAGS: &str = "tags";

/// The Arrow type of the `time` column.
pub fn time_type() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, None)
}

/// Schema of a points batch: `time` and `series_id` (non-null), then one
/// nullable column per field (a point need not carry every field of its
/// table), in the order given.
pub fn points_schema<N: Into<String>>(
    fields: impl IntoIterator<Item = (N, DataType)>,
) -> SchemaRef {
    let fields = fields.into_iter();
    let mut columns = Vec::with_capacity(2 + fields.size_hint().0);
    columns.push(Field::new(TIME, time_type(), false));
    columns.push(Field::new(SERIES_ID, DataType::UInt64, false));
    columns.extend(fields.map(|(name, ty)| Field::new(name, ty, true)));
    Arc::new(Schema::new(columns))
}

/// A points batch from its columns: `time` and `series_id` become the two
/// leading non-null columns, each field column keeps its array's type.
/// Every column must have as many rows as `time`.
pub fn points_batch(
    time: Vec<i64>,
    series_id: Vec<u64>,
    fields: Vec<(String, ArrayRef)>,
) -> Result<RecordBatch, ArrowError> {
    let schema = points_schema(
        fields
            .iter()
            .map(|(name, array)| (name.as_str(), array.data_type().clone())),
    );
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(2 + fields.len());
    columns.push(Arc::new(TimestampNanosecondArray::new(
        ScalarBuffer::from(time),
        None,
    )));
    columns.push(Arc::new(UInt64Array::new(
        ScalarBuffer::from(series_id),
        None,
    )));
    columns.extend(fields.into_iter().map(|(_, array)| array));
    RecordBatch::try_new(schema, columns)
}

/// Schema of a series batch: `series_id`, `measurement`, `tags`, all
/// non-null. Built once per process; callers share it.
pub fn series_schema() -> SchemaRef {
    static SCHEMA: OnceLock<SchemaRef> = OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            Arc::new(Schema::new(vec![
                Field::new(SERIES_ID, DataType::UInt64, false),
                Field::new(MEASUREMENT, DataType::Utf8, false),
                Field::new(TAGS, DataType::Utf8, false),
            ]))
        })
        .clone()
}

/// A series batch: one row per series, its measurement and its canonical
/// key text. The three columns must have the same length.
pub fn series_batch(
    series_id: UInt64Array,
    measurement: StringArray,
    tags: StringArray,
) -> Result<RecordBatch, ArrowError> {
    RecordBatch::try_new(
        series_schema(),
        vec![Arc::new(series_id), Arc::new(measurement), Arc::new(tags)],
    )
}

/// Arrow IPC stream bytes of one batch (schema, batch, end of stream).
pub fn encode_batch(batch: &RecordBatch) -> Result<Vec<u8>, ArrowError> {
    encode_stream(&batch.schema(), std::slice::from_ref(batch))
}

/// Arrow IPC stream bytes of `batches`, which all have `schema` (none:
/// a stream of the schema alone).
///
/// The router encodes two streams per (shard, table) of every write (128
/// per 5,000-line body at 64 shards): building each stream's schema
/// message and a fresh flatbuffer builder cost the front door ~30 ns per
/// point at 1M series (bench-frontdoor 602-610 -> 574-582 ns/point). Each thread keeps, per schema, the schema
/// message's bytes and a writer past its schema ([`StreamCache`]); the
/// bytes are the same as a new `StreamWriter`'s (tested).
pub fn encode_stream(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<Vec<u8>, ArrowError> {
    if !StreamCache::can_keep(schema) {
        return encode_stream_once(schema, batches);
    }
    STREAMS.with_borrow_mut(|cache| cache.encode(schema, batches))
}

/// What [`encode_stream`] does for a schema it does not keep.
fn encode_stream_once(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<Vec<u8>, ArrowError> {
    // Sized up front: growing the buffer while writing re-copied the
    // columns (the router encodes every table of every request).
    let size: usize = batches.iter().map(|b| b.get_array_memory_size()).sum();
    let mut out = Vec::with_capacity(size + 1024);
    let mut writer = StreamWriter::try_new(&mut out, schema)?;
    for b in batches {
        writer.write(b)?;
    }
    writer.finish()?;
    drop(writer);
    Ok(out)
}

thread_local! {
    static STREAMS: std::cell::RefCell<StreamCache> = std::cell::RefCell::default();
}

/// End of an IPC stream (metadata version 5): the continuation marker and
/// a zero length.
const END_OF_STREAM: [u8; 8] = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];

/// Per schema: its encoded schema message, and a writer that has already
/// written it (so it writes only batch messages, reusing its flatbuffer
/// builder).
#[derive(Default)]
struct StreamCache {
    schemas: HashMap<Schema, KeptStream>,
}

struct KeptStream {
    schema_message: Vec<u8>,
    /// Writes into its own `Vec`, which holds one stream at a time: the
    /// schema message is put there, the writer appends the batches, the
    /// end of stream is appended, and the bytes are taken out.
    writer: StreamWriter<Vec<u8>>,
}

impl StreamCache {
    /// Schemas a thread may keep at once; past it the cache starts over
    /// (a router sees two per table and field set in use).
    const MAX_SCHEMAS: usize = 256;

    /// Dictionary columns carry state from one batch to the next in a
    /// writer: a stream with them is encoded from scratch.
    fn can_keep(schema: &Schema) -> bool {
        !schema
            .fields()
            .iter()
            .any(|f| matches!(f.data_type(), DataType::Dictionary(..)) || f.data_type().is_nested())
    }

    /// One lookup of `schema` per stream (it is hashed field by field).
    fn encode(
        &mut self,
        schema: &SchemaRef,
        batches: &[RecordBatch],
    ) -> Result<Vec<u8>, ArrowError> {
        let Some(kept) = self.schemas.get_mut(schema.as_ref()) else {
            let mut kept = KeptStream::new(schema)?;
            let bytes = kept.stream(batches)?;
            if self.schemas.len() >= Self::MAX_SCHEMAS {
                self.schemas.clear();
            }
            self.schemas.insert(schema.as_ref().clone(), kept);
            return Ok(bytes);
        };
        let bytes = kept.stream(batches);
        if bytes.is_err() {
            // The writer may be left mid-message: never reuse it.
            self.schemas.remove(schema.as_ref());
        }
        bytes
    }
}

impl KeptStream {
    fn new(schema: &SchemaRef) -> Result<KeptStream, ArrowError> {
        let mut writer = StreamWriter::try_new(Vec::new(), schema)?;
        let schema_message = std::mem::take(writer.get_mut());
        Ok(KeptStream {
            schema_message,
            writer,
        })
    }

    /// The stream of `batches`: the kept schema message, the batches, the
    /// end-of-stream marker.
    fn stream(&mut self, batches: &[RecordBatch]) -> Result<Vec<u8>, ArrowError> {
        let size: usize = batches.iter().map(|b| b.get_array_memory_size()).sum();
        let out = self.writer.get_mut();
        *out = Vec::with_capacity(size + self.schema_message.len() + 1024);
        out.extend_from_slice(&self.schema_message);
        for b in batches {
            self.writer.write(b)?;
        }
        let out = self.writer.get_mut();
        out.extend_from_slice(&END_OF_STREAM);
        Ok(std::mem::take(out))
    }
}

/// Every batch of an Arrow IPC stream, with the stream's schema. Empty
/// bytes are an empty stream (no schema, no batches): a write may carry
/// no series batch.
pub fn decode_stream(bytes: &[u8]) -> Result<(Option<SchemaRef>, Vec<RecordBatch>), ArrowError> {
    if bytes.is_empty() {
        return Ok((None, Vec::new()));
    }
    let reader = StreamReader::try_new(std::io::Cursor::new(bytes), None)?;
    let schema = reader.schema();
    let batches = reader.collect::<Result<Vec<_>, _>>()?;
    Ok((Some(schema), batches))
}

/// The tables of a write, taken out of `req`: the one shape of a write.
///
/// `Node.Write` accepts a single table in the request's own fields
/// (`measurement`, `points_ipc`, `series_ipc`, `database`) or any number in
/// `tables` (docs/api.md); this is the only place that reads the former.
/// A request with neither yields one empty table, which admission rejects
/// with a message naming what is missing.
pub fn write_tables(req: &mut WriteRequest) -> Vec<TableBatch> {
    let mut tables = std::mem::take(&mut req.tables);
    if !req.points_ipc.is_empty() || tables.is_empty() {
        tables.push(TableBatch {
            measurement: std::mem::take(&mut req.measurement),
            points_ipc: std::mem::take(&mut req.points_ipc),
            series_ipc: std::mem::take(&mut req.series_ipc),
            database: std::mem::take(&mut req.database),
        });
    }
    tables
}

/// The log entry of a write: every table, each naming its database,
/// committed under one index.
pub fn write_entry(request_id: String, tables: Vec<TableBatch>) -> WalEntry {
    WalEntry {
        request_id,
        tables,
        op: None,
    }
}

/// The log entry of a storage operation (a barrier applied in log order).
pub fn op_entry(op: StorageOp) -> WalEntry {
    WalEntry {
        op: Some(op),
        ..WalEntry::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float64Type, TimestampNanosecondType, UInt64Type};
    use arrow_array::{BooleanArray, Float64Array};
    use prost::Message as _;

    fn table(measurement: &str, database: &str) -> TableBatch {
        TableBatch {
            measurement: measurement.into(),
            points_ipc: vec![1, 2, 3].into(),
            series_ipc: vec![4].into(),
            database: database.into(),
        }
    }

    #[test]
    fn points_schema_leads_with_time_and_series_id_then_nullable_fields() {
        let s = points_schema([("usage", DataType::Float64), ("up", DataType::Boolean)]);
        let names: Vec<&str> = s.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["time", "series_id", "usage", "up"]);
        assert_eq!(s.field(0).data_type(), &time_type());
        assert_eq!(s.field(1).data_type(), &DataType::UInt64);
        assert!(!s.field(0).is_nullable() && !s.field(1).is_nullable());
        assert!(s.field(2).is_nullable() && s.field(3).is_nullable());
        assert_eq!(s.field(3).data_type(), &DataType::Boolean);
    }

    #[test]
    fn points_batch_round_trips_through_ipc() {
        let usage: ArrayRef = Arc::new(Float64Array::from(vec![Some(1.5), None]));
        let up: ArrayRef = Arc::new(BooleanArray::from(vec![None, Some(true)]));
        let batch = points_batch(
            vec![10, 20],
            vec![7, 8],
            vec![("usage".into(), usage), ("up".into(), up)],
        )
        .unwrap();
        let bytes = encode_batch(&batch).unwrap();
        let (schema, batches) = decode_stream(&bytes).unwrap();
        assert_eq!(schema.unwrap(), batch.schema());
        assert_eq!(batches, vec![batch.clone()]);
        let b = &batches[0];
        assert_eq!(
            b.column(0)
                .as_primitive::<TimestampNanosecondType>()
                .values(),
            &[10, 20]
        );
        assert_eq!(b.column(1).as_primitive::<UInt64Type>().values(), &[7, 8]);
        assert!(b.column(2).as_primitive::<Float64Type>().is_null(1));
        assert!(b.column(3).as_boolean().value(1));
    }

    fn points(rows: usize, usage_nulls: bool) -> RecordBatch {
        let usage: ArrayRef = Arc::new(Float64Array::from_iter(
            (0..rows).map(|i| (!usage_nulls || i % 3 != 0).then_some(i as f64 / 7.0)),
        ));
        let up: ArrayRef = Arc::new(BooleanArray::from_iter((0..rows).map(|i| Some(i % 2 == 0))));
        points_batch(
            (0..rows as i64).collect(),
            (0..rows as u64).map(|i| i * 31).collect(),
            vec![("usage".into(), usage), ("up".into(), up)],
        )
        .unwrap()
    }

    /// What a new `StreamWriter` writes: the bytes the kept writers must
    /// give, call after call, schema after schema.
    fn fresh_stream(schema: &SchemaRef, batches: &[RecordBatch]) -> Vec<u8> {
        encode_stream_once(schema, batches).unwrap()
    }

    #[test]
    fn a_kept_writer_writes_the_bytes_of_a_new_stream_writer() {
        let series = series_batch(
            UInt64Array::from(vec![1, 2, 3]),
            StringArray::from(vec!["cpu", "cpu", "up"]),
            StringArray::from(vec!["cpu,host=a", "cpu,host=b", "up,job=x"]),
        )
        .unwrap();
        let other = points_schema([("v", DataType::Int64)]);
        let cases: Vec<(SchemaRef, Vec<RecordBatch>)> = vec![
            (points(5, true).schema(), vec![points(5, true)]),
            (series.schema(), vec![series.clone()]),
            (
                points(1, false).schema(),
                vec![points(1, false), points(9, true)],
            ),
            (other.clone(), vec![]),
            (points(0, false).schema(), vec![points(0, false)]),
        ];
        // Twice over, interleaved: the second round reuses every writer.
        for round in 0..2 {
            for (schema, batches) in &cases {
                let want = fresh_stream(schema, batches);
                let got = encode_stream(schema, batches).unwrap();
                assert_eq!(got, want, "round {round}, schema {schema:?}");
                let (decoded_schema, decoded) = decode_stream(&got).unwrap();
                assert_eq!(decoded_schema.as_ref(), Some(schema));
                assert_eq!(&decoded, batches);
            }
        }
    }

    #[test]
    fn a_dictionary_column_is_encoded_from_scratch_each_time() {
        use arrow_array::{types::Int32Type, DictionaryArray};
        let dict: DictionaryArray<Int32Type> = vec!["a", "b", "a"].into_iter().collect();
        let schema = Arc::new(Schema::new(vec![Field::new(
            "d",
            dict.data_type().clone(),
            false,
        )]));
        assert!(!StreamCache::can_keep(&schema));
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(dict)]).unwrap();
        for _ in 0..2 {
            let bytes = encode_stream(&schema, std::slice::from_ref(&batch)).unwrap();
            assert_eq!(decode_stream(&bytes).unwrap().1, vec![batch.clone()]);
        }
    }

    #[test]
    fn a_field_column_of_the_wrong_length_is_an_error() {
        let short: ArrayRef = Arc::new(Float64Array::from(vec![1.0]));
        let err = points_batch(vec![1, 2], vec![1, 1], vec![("v".into(), short)]).unwrap_err();
        assert!(err.to_string().contains("length"), "{err}");
    }

    #[test]
    fn series_batch_round_trips_and_shares_one_schema() {
        let batch = series_batch(
            UInt64Array::from(vec![1, 2]),
            StringArray::from(vec!["cpu", "up"]),
            StringArray::from(vec!["cpu,host=a", "up,job=x"]),
        )
        .unwrap();
        assert!(Arc::ptr_eq(&series_schema(), &batch.schema()));
        let (schema, batches) = decode_stream(&encode_batch(&batch).unwrap()).unwrap();
        assert_eq!(schema.unwrap().as_ref(), series_schema().as_ref());
        assert_eq!(batches[0].column(2).as_string::<i32>().value(1), "up,job=x");
    }

    #[test]
    fn empty_bytes_are_an_empty_stream_and_garbage_is_an_error() {
        let (schema, batches) = decode_stream(&[]).unwrap();
        assert!(schema.is_none() && batches.is_empty());
        assert!(decode_stream(b"not an arrow stream").is_err());
    }

    #[test]
    fn a_stream_of_no_batches_keeps_its_schema() {
        let schema = points_schema([("v", DataType::Int64)]);
        let bytes = encode_stream(&schema, &[]).unwrap();
        let (got, batches) = decode_stream(&bytes).unwrap();
        assert_eq!(got.unwrap(), schema);
        assert!(batches.is_empty());
    }

    #[test]
    fn a_single_table_write_becomes_one_table() {
        let mut req = WriteRequest {
            shard: 3,
            request_id: "r".into(),
            measurement: "cpu".into(),
            points_ipc: vec![9].into(),
            series_ipc: vec![8].into(),
            database: "db".into(),
            ..WriteRequest::default()
        };
        let tables = write_tables(&mut req);
        assert_eq!(
            tables,
            vec![TableBatch {
                measurement: "cpu".into(),
                points_ipc: vec![9].into(),
                series_ipc: vec![8].into(),
                database: "db".into(),
            }]
        );
        // Routing fields stay; the table's fields moved out.
        assert_eq!((req.shard, req.request_id.as_str()), (3, "r"));
        assert!(req.points_ipc.is_empty() && req.tables.is_empty());
    }

    #[test]
    fn a_coalesced_write_keeps_its_tables_in_order() {
        let mut req = WriteRequest {
            tables: vec![table("cpu", "a"), table("mem", "b")],
            ..WriteRequest::default()
        };
        assert_eq!(
            write_tables(&mut req),
            vec![table("cpu", "a"), table("mem", "b")]
        );
    }

    #[test]
    fn both_shapes_in_one_write_are_all_its_tables() {
        let mut req = WriteRequest {
            tables: vec![table("cpu", "a")],
            measurement: "mem".into(),
            points_ipc: vec![1, 2, 3].into(),
            series_ipc: vec![4].into(),
            database: "b".into(),
            ..WriteRequest::default()
        };
        assert_eq!(
            write_tables(&mut req),
            vec![table("cpu", "a"), table("mem", "b")]
        );
    }

    #[test]
    fn an_empty_write_is_one_empty_table_for_admission_to_reject() {
        let tables = write_tables(&mut WriteRequest::default());
        assert_eq!(tables, vec![TableBatch::default()]);
    }

    #[test]
    fn log_entries_carry_tables_or_an_operation() {
        let entry = write_entry("r".into(), vec![table("cpu", "a")]);
        let decoded = WalEntry::decode(entry.encode_to_vec().as_slice()).unwrap();
        assert_eq!(decoded.tables, vec![table("cpu", "a")]);
        assert_eq!(decoded.request_id, "r");
        assert!(decoded.op.is_none());

        let op = StorageOp {
            op: Some(crate::proto::storage_op::Op::DropDatabase(
                crate::proto::DropDatabase {
                    database: "a".into(),
                },
            )),
        };
        let decoded = WalEntry::decode(op_entry(op.clone()).encode_to_vec().as_slice()).unwrap();
        assert_eq!(decoded.op, Some(op));
        assert!(decoded.tables.is_empty());
    }

    #[test]
    fn a_layout_1_single_table_entry_decodes_to_no_tables() {
        // Fields 2-4 of WalEntry held layout 1's single table; they are
        // reserved now. Such an entry must not turn into a table without a
        // database: it decodes to nothing, which the node rejects.
        let mut bytes = Vec::new();
        prost::encoding::string::encode(1, &"r".to_string(), &mut bytes);
        prost::encoding::string::encode(2, &"cpu".to_string(), &mut bytes);
        prost::encoding::bytes::encode(3, &vec![1u8, 2], &mut bytes);
        prost::encoding::bytes::encode(4, &vec![3u8], &mut bytes);
        let decoded = WalEntry::decode(bytes.as_slice()).unwrap();
        assert_eq!(decoded.request_id, "r");
        assert!(decoded.tables.is_empty() && decoded.op.is_none());
    }
}
