//! Column-first batching: points go straight into per-(shard, measurement)
//! column builders, then each builder becomes one Arrow IPC stream.
//!
//! The hot path (a line of a series already seen in this request) costs one
//! scan of the line, one XXH3 of the raw series bytes and a hash-map probe,
//! the field parse, and appends to plain vectors. Tag parsing, sorting,
//! canonical key and `series_id` only run the first time a request meets a
//! raw series; nothing is heap-allocated per point (arenas and vectors grow
//! amortised).

use crate::cardinality::DbSeries;
use crate::error::{Error, Result};
use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray,
    TimestampNanosecondArray, UInt64Array,
};
use arrow_buffer::{BooleanBufferBuilder, Buffer, NullBufferBuilder, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use bytes::Bytes;
use shardhouse_common::lineproto::{
    self, same_bytes, FieldParser, FieldType, FieldValue, LineProtocolError, Precision,
    SeriesParser,
};
use shardhouse_common::names::{self, NameError, SAMPLES_TABLE};
use shardhouse_common::series::series_id_of_key;
use shardhouse_common::shard::jump_hash;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use xxhash_rust::xxh3::xxh3_64;

/// Hasher for keys that are already hashes (XXH3 of the raw series).
#[derive(Default)]
pub(crate) struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are used; fold anything else in for safety.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

pub(crate) type IdentityMap<V> = HashMap<u64, V, BuildHasherDefault<IdentityHasher>>;

/// Key of a (shard, measurement) table in an [`IdentityMap`]: the pair,
/// spread over all 64 bits by a multiplication so the map's buckets and
/// control bytes (taken from the top bits) differ between tables.
#[inline]
fn table_key(shard: u32, measurement: u32) -> u64 {
    ((u64::from(shard) << 32) | u64::from(measurement)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

const NONE: u32 = u32::MAX;

/// Whether a series may be written under the database's cardinality limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admission {
    Unchecked,
    Admitted,
    Rejected,
}

/// A distinct raw series met in this request.
struct SeriesSlot {
    series_id: u64,
    table: u32,
    /// The series' measurement (its table's, except for Prometheus samples).
    measurement: u32,
    /// Raw series bytes (as written) in `raw_arena`; the memo's identity.
    raw: (u32, u32),
    /// Canonical series key in `key_arena`.
    key: (u32, u32),
    /// Next slot with the same raw hash (collision chain).
    next: u32,
    admission: Admission,
    /// Whether this series was already listed in its table's series batch.
    listed: bool,
}

/// Per-request field types of one measurement (a field has one type).
struct MeasurementSchema {
    name: String,
    /// The name as parsed (bytes), for the last-measurement check.
    raw: Box<[u8]>,
    fields: Vec<(Box<[u8]>, FieldType)>,
}

impl MeasurementSchema {
    #[inline]
    fn find(&self, key: &[u8], hint: usize) -> Option<usize> {
        if let Some((k, _)) = self.fields.get(hint) {
            if &**k == key {
                return Some(hint);
            }
        }
        self.fields.iter().position(|(k, _)| &**k == key)
    }
}

enum ColumnData {
    Float(Vec<f64>),
    Integer(Vec<i64>),
    Unsigned(Vec<u64>),
    String { offsets: Vec<i32>, data: Vec<u8> },
    Boolean(BooleanBufferBuilder),
}

struct FieldColumn {
    name: Box<[u8]>,
    ty: FieldType,
    data: ColumnData,
    nulls: NullBufferBuilder,
    len: usize,
}

impl FieldColumn {
    fn new(name: &[u8], ty: FieldType, rows_before: usize) -> FieldColumn {
        let data = match ty {
            FieldType::Float => ColumnData::Float(Vec::new()),
            FieldType::Integer => ColumnData::Integer(Vec::new()),
            FieldType::Unsigned => ColumnData::Unsigned(Vec::new()),
            FieldType::String => ColumnData::String {
                offsets: vec![0],
                data: Vec::new(),
            },
            FieldType::Boolean => ColumnData::Boolean(BooleanBufferBuilder::new(0)),
        };
        let mut c = FieldColumn {
            name: name.into(),
            ty,
            data,
            nulls: NullBufferBuilder::new(0),
            len: 0,
        };
        // A field first seen at row n is null in the rows before it.
        c.pad_to(rows_before);
        c
    }

    fn push_null(&mut self) {
        match &mut self.data {
            ColumnData::Float(v) => v.push(0.0),
            ColumnData::Integer(v) => v.push(0),
            ColumnData::Unsigned(v) => v.push(0),
            ColumnData::String { offsets, data } => offsets.push(data.len() as i32),
            ColumnData::Boolean(b) => b.append(false),
        }
        self.nulls.append_null();
        self.len += 1;
    }

    #[inline]
    fn pad_to(&mut self, rows: usize) {
        while self.len < rows {
            self.push_null();
        }
    }

    /// Appends a value; the type was checked against the schema before.
    #[inline(always)]
    fn push(&mut self, v: FieldValue<'_>) {
        match (&mut self.data, v) {
            (ColumnData::Float(c), FieldValue::Float(f)) => c.push(f),
            (ColumnData::Integer(c), FieldValue::Integer(i)) => c.push(i),
            (ColumnData::Unsigned(c), FieldValue::Unsigned(u)) => c.push(u),
            (ColumnData::String { offsets, data }, FieldValue::String(s)) => {
                data.extend_from_slice(s.as_bytes());
                offsets.push(data.len() as i32);
            }
            (ColumnData::Boolean(c), FieldValue::Boolean(b)) => c.append(b),
            _ => {
                // Unreachable by construction (types are checked first); a
                // null keeps the columns aligned rather than panicking.
                self.push_null();
                return;
            }
        }
        self.nulls.append_non_null();
        self.len += 1;
    }

    fn finish(&mut self) -> (Field, ArrayRef) {
        let name = String::from_utf8_lossy(&self.name).into_owned();
        let nulls = self.nulls.finish();
        let (ty, array): (DataType, ArrayRef) = match &mut self.data {
            ColumnData::Float(v) => (
                DataType::Float64,
                Arc::new(Float64Array::new(
                    ScalarBuffer::from(std::mem::take(v)),
                    nulls,
                )),
            ),
            ColumnData::Integer(v) => (
                DataType::Int64,
                Arc::new(Int64Array::new(
                    ScalarBuffer::from(std::mem::take(v)),
                    nulls,
                )),
            ),
            ColumnData::Unsigned(v) => (
                DataType::UInt64,
                Arc::new(UInt64Array::new(
                    ScalarBuffer::from(std::mem::take(v)),
                    nulls,
                )),
            ),
            ColumnData::String { offsets, data } => {
                let offsets = OffsetBuffer::new(ScalarBuffer::from(std::mem::take(offsets)));
                let values = Buffer::from_vec(std::mem::take(data));
                (
                    DataType::Utf8,
                    Arc::new(StringArray::new(offsets, values, nulls)),
                )
            }
            ColumnData::Boolean(b) => (
                DataType::Boolean,
                Arc::new(BooleanArray::new(b.finish(), nulls)),
            ),
        };
        (Field::new(name, ty, true), array)
    }
}

/// Column builders of one (shard, measurement).
struct TableBuilder {
    shard: u32,
    measurement: u32,
    time: Vec<i64>,
    series_id: Vec<u64>,
    columns: Vec<FieldColumn>,
    /// Column of each field position of the last point appended: points of
    /// a measurement usually repeat the same fields in the same order, so
    /// the next point checks one name per field instead of searching.
    layout: Vec<u32>,
    /// Slots of the series in this table, for the series batch.
    series: Vec<u32>,
}

impl TableBuilder {
    /// Column named `key`, trying the column used at this field position
    /// by the last point first.
    #[inline(always)]
    fn find_column(&self, key: &[u8], position: usize) -> Option<usize> {
        if let Some(&c) = self.layout.get(position) {
            if same_bytes(&self.columns[c as usize].name, key) {
                return Some(c as usize);
            }
        }
        self.columns.iter().position(|c| same_bytes(&c.name, key))
    }
}

/// Where a field of the point being appended goes (decided before any
/// append, so a rejected point leaves no trace).
#[derive(Debug, Clone, Copy)]
enum FieldTarget {
    /// An existing column of the table.
    Column(u32),
    /// A new column for a field the measurement already has.
    NewColumn,
    /// A field new to the measurement (and so to the table).
    NewField,
}

/// One Arrow batch ready for `Node.Write`.
#[derive(Debug, Clone)]
pub struct ShardBatch {
    pub shard: u32,
    /// The database the router was asked to write to (set by the caller).
    pub database: String,
    /// The table: a measurement, or `_samples` (Prometheus).
    pub measurement: String,
    pub rows: usize,
    pub points_ipc: Bytes,
    pub series_ipc: Bytes,
}

/// Why points of a request were rejected (first one is reported).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RejectReason {
    BadPoint,
    Cardinality,
}

/// The first rejected point of a request.
#[derive(Debug, Clone)]
pub struct Rejection {
    /// 1-based line number (line protocol) or 0-based point index (others).
    pub position: usize,
    pub reason: RejectReason,
    pub message: String,
}

/// Builds the shard batches of one write request.
pub struct RequestBatch<'a> {
    state: BatchState<'a>,
    series_parser: SeriesParser,
    field_parser: FieldParser,
    /// Scratch for structured (non line protocol) points.
    tag_scratch: Vec<(usize, usize, usize, usize)>,
    text_scratch: Vec<u8>,
    key_scratch: Vec<u8>,
    /// Whether structured points may carry NaN and infinite floats
    /// (Prometheus staleness markers); refused otherwise, as in line
    /// protocol.
    keep_non_finite: bool,
}

struct BatchState<'a> {
    shard_count: u32,
    db: Option<&'a DbSeries>,
    default_time: i64,
    precision: Precision,
    measurements: Vec<MeasurementSchema>,
    measurement_ids: HashMap<Box<[u8]>, u32>,
    /// The measurement of the last new series: series of one measurement
    /// usually come together, and this skips hashing its name.
    last_measurement: Option<u32>,
    memo: IdentityMap<u32>,
    slots: Vec<SeriesSlot>,
    raw_arena: Vec<u8>,
    key_arena: Vec<u8>,
    tables: Vec<TableBuilder>,
    /// Tables by [`table_key`] of (shard, measurement).
    table_ids: IdentityMap<u32>,
    /// Prometheus samples: every series' points go to the `_samples` table
    /// (this measurement id), the metric name stays the series' measurement.
    samples_table: Option<u32>,
    points: usize,
    rejected: usize,
    first_rejection: Option<Rejection>,
    rejected_for_cardinality: usize,
    key_scratch: Vec<u8>,
    /// Targets of the fields of the point being appended (reused).
    targets: Vec<FieldTarget>,
    /// Time spent resolving series new to the request, when timing is on.
    timing: bool,
    series_nanos: u64,
}

/// Outcome counters of a request.
#[derive(Debug, Clone, Default)]
pub struct BatchSummary {
    pub points: usize,
    pub rejected: usize,
    pub rejected_for_cardinality: usize,
    pub first_rejection: Option<Rejection>,
}

impl<'a> RequestBatch<'a> {
    /// `default_time` (ns) is used for points without a timestamp;
    /// `db` enforces the database's cardinality limit when given.
    pub fn new(
        shard_count: u32,
        precision: Precision,
        default_time: i64,
        db: Option<&'a DbSeries>,
    ) -> RequestBatch<'a> {
        RequestBatch {
            state: BatchState {
                shard_count: shard_count.max(1),
                db,
                default_time,
                precision,
                measurements: Vec::new(),
                measurement_ids: HashMap::new(),
                last_measurement: None,
                memo: IdentityMap::default(),
                slots: Vec::new(),
                raw_arena: Vec::new(),
                key_arena: Vec::new(),
                tables: Vec::new(),
                table_ids: IdentityMap::default(),
                samples_table: None,
                points: 0,
                rejected: 0,
                first_rejection: None,
                rejected_for_cardinality: 0,
                key_scratch: Vec::new(),
                targets: Vec::new(),
                timing: false,
                series_nanos: 0,
            },
            series_parser: SeriesParser::default(),
            field_parser: FieldParser::default(),
            tag_scratch: Vec::new(),
            text_scratch: Vec::new(),
            key_scratch: Vec::new(),
            keep_non_finite: false,
        }
    }

    /// Puts every point in the `_samples` table (Prometheus remote_write):
    /// one table per database for every metric, instead of a table per
    /// metric name in every shard (docs/storage.md). Call before adding points.
    pub fn samples_table(&mut self) {
        let st = &mut self.state;
        let m = st.measurements.len() as u32;
        st.measurements.push(MeasurementSchema {
            name: SAMPLES_TABLE.to_string(),
            raw: SAMPLES_TABLE.as_bytes().into(),
            fields: Vec::new(),
        });
        st.samples_table = Some(m);
    }

    /// Lets structured points carry NaN and infinite floats (Prometheus
    /// remote_write only: NaN marks stale series). Every other input
    /// refuses them, as InfluxDB does.
    pub fn keep_non_finite_floats(&mut self) {
        self.keep_non_finite = true;
    }

    /// Adds every line of a line protocol body. Bad lines are counted and
    /// the first is remembered; the good ones are kept (partial write).
    pub fn add_line_protocol(&mut self, body: &[u8]) {
        // One UTF-8 check for the whole body instead of one per line: `\n`
        // never occurs inside a multi-byte character, so every line of a
        // valid body is valid. Only a body that fails is checked line by
        // line, to reject just its bad lines (with their numbers).
        let body_is_utf8 = lineproto::is_utf8(body);
        for (line_no, line) in lineproto::lines(body) {
            if let Err(e) = self.add_line_checked(line, !body_is_utf8) {
                self.state.reject(line_no, e);
            }
        }
    }

    /// Adds one line (no newline, no leading blanks).
    pub fn add_line(&mut self, line: &[u8]) -> Result<(), (RejectReason, String)> {
        self.add_line_checked(line, true)
    }

    /// [`Self::add_line`]; `check_utf8` false when the caller has already
    /// validated the line (as part of its body).
    #[inline]
    fn add_line_checked(
        &mut self,
        line: &[u8],
        check_utf8: bool,
    ) -> Result<(), (RejectReason, String)> {
        let bad = |e: LineProtocolError| (RejectReason::BadPoint, e.to_string());
        if check_utf8 && std::str::from_utf8(line).is_err() {
            return Err(bad(LineProtocolError::InvalidUtf8));
        }
        let (raw, rest) = lineproto::split_series(line).map_err(bad)?;
        let hash = xxh3_64(raw);
        let known = self.state.find_slot(hash, raw);
        // A known series has a table: lines of one table usually repeat
        // their field keys, which the parser then recognises instead of
        // scanning (same result either way).
        let fields = match known {
            Some(s) => {
                let table = self.state.slots[s as usize].table as usize;
                self.field_parser.parse_in_layout(rest, table)
            }
            None => self.field_parser.parse(rest),
        }
        .map_err(bad)?;
        let time = match fields.timestamp {
            Some(t) => self.state.precision.to_nanos(t).map_err(bad)?,
            None => self.state.default_time,
        };
        // Series errors come after field errors, as the series of a new
        // raw spelling is only parsed now.
        let slot = match known {
            Some(s) => s,
            None => self
                .state
                .resolve_new_raw(hash, raw, &mut self.series_parser)?,
        };
        self.state.append(slot, time, fields.iter(), fields.len())
    }

    /// Adds a structured point (msgpack, gRPC, remote_write). Tags may be in
    /// any order. `time` is in nanoseconds; `None` means "now".
    pub fn add_point<'v, I>(
        &mut self,
        measurement: &str,
        tags: &[(&str, &str)],
        fields: I,
        time: Option<i64>,
    ) -> Result<(), (RejectReason, String)>
    where
        I: ExactSizeIterator<Item = (&'v [u8], FieldValue<'v>)> + Clone,
    {
        let bad = |m: String| (RejectReason::BadPoint, m);
        if measurement.is_empty() {
            return Err(bad(LineProtocolError::MissingMeasurement.to_string()));
        }
        if fields.len() == 0 {
            return Err(bad(LineProtocolError::MissingFields.to_string()));
        }
        if let Some(t) = time.filter(|&t| !lineproto::nanos_in_range(t)) {
            return Err(bad(LineProtocolError::TimestampOutOfRange(t).to_string()));
        }
        // Validate fields the way the line protocol parser does, NaN and
        // infinities included (refused unless `keep_non_finite_floats`).
        for (i, (k, v)) in fields.clone().enumerate() {
            if k.is_empty() {
                return Err(bad(LineProtocolError::EmptyFieldKey.to_string()));
            }
            if let FieldValue::Float(f) = v {
                if !f.is_finite() && !self.keep_non_finite {
                    return Err(bad(LineProtocolError::InvalidFieldValue {
                        key: lossy(k),
                        value: f.to_string(),
                        why: "NaN and infinities are not stored (as in line protocol); send a \
                              finite number or leave the field out",
                    }
                    .to_string()));
                }
            }
            if lineproto::RESERVED_FIELD_KEYS
                .iter()
                .any(|r| r.as_bytes() == k)
            {
                return Err(bad(
                    LineProtocolError::ReservedFieldKey(lossy(k)).to_string()
                ));
            }
            if fields.clone().take(i).any(|(k2, _)| k2 == k) {
                return Err(bad(LineProtocolError::DuplicateField(lossy(k)).to_string()));
            }
        }
        // Canonical key from sorted tags.
        self.tag_scratch.clear();
        self.text_scratch.clear();
        for (k, v) in tags {
            if k.is_empty() {
                return Err(bad(LineProtocolError::EmptyTagKey.to_string()));
            }
            if v.is_empty() {
                return Err(bad(
                    LineProtocolError::EmptyTagValue(lossy(k.as_bytes())).to_string()
                ));
            }
            names::validate_tag_key(k).map_err(name_error)?;
            let ks = self.text_scratch.len();
            self.text_scratch.extend_from_slice(k.as_bytes());
            let vs = self.text_scratch.len();
            self.text_scratch.extend_from_slice(v.as_bytes());
            self.tag_scratch.push((ks, vs, vs, self.text_scratch.len()));
        }
        let text = &self.text_scratch;
        self.tag_scratch
            .sort_by(|a, b| text[a.0..a.1].cmp(&text[b.0..b.1]));
        if let Some(w) = self
            .tag_scratch
            .windows(2)
            .find(|w| text[w[0].0..w[0].1] == text[w[1].0..w[1].1])
        {
            return Err(bad(LineProtocolError::DuplicateTag(lossy(
                &text[w[0].0..w[0].1],
            ))
            .to_string()));
        }
        let mut key = std::mem::take(&mut self.key_scratch);
        shardhouse_common::series::canonical_key_into(
            &mut key,
            measurement.as_bytes(),
            self.tag_scratch
                .iter()
                .map(|t| (&text[t.0..t.1], &text[t.2..t.3])),
        );
        let slot = self.state.resolve_canonical(&key, measurement.as_bytes());
        self.key_scratch = key;
        let slot = slot?;
        let n = fields.len();
        self.state
            .append(slot, time.unwrap_or(self.state.default_time), fields, n)
    }

    /// Records a rejected structured point at `position` (0-based index).
    pub fn reject(&mut self, position: usize, reason: RejectReason, message: String) {
        self.state.reject_with(position, reason, message);
    }

    /// Measures the time spent on series new to the request (for the
    /// `series_hash_seconds` metric); off by default to keep benches clean.
    pub fn set_timing(&mut self, on: bool) {
        self.state.timing = on;
    }

    /// Seconds spent resolving new series (0 unless timing is on).
    pub fn series_seconds(&self) -> f64 {
        self.state.series_nanos as f64 / 1e9
    }

    /// Points accepted so far.
    pub fn points(&self) -> usize {
        self.state.points
    }

    pub fn summary(&self) -> BatchSummary {
        BatchSummary {
            points: self.state.points,
            rejected: self.state.rejected,
            rejected_for_cardinality: self.state.rejected_for_cardinality,
            first_rejection: self.state.first_rejection.clone(),
        }
    }

    /// Number of distinct series met.
    pub fn distinct_series(&self) -> usize {
        self.state.slots.len()
    }

    /// Encodes every (shard, measurement) builder as Arrow IPC streams.
    pub fn finish(mut self) -> Result<(Vec<ShardBatch>, BatchSummary)> {
        let summary = self.summary();
        let st = &mut self.state;
        let mut out = Vec::with_capacity(st.tables.len());
        for t in &mut st.tables {
            let rows = t.time.len();
            if rows == 0 {
                continue;
            }
            for c in &mut t.columns {
                c.pad_to(rows);
            }
            let mut fields = vec![
                Field::new(
                    "time",
                    DataType::Timestamp(TimeUnit::Nanosecond, None),
                    false,
                ),
                Field::new("series_id", DataType::UInt64, false),
            ];
            let mut arrays: Vec<ArrayRef> = vec![
                Arc::new(TimestampNanosecondArray::new(
                    ScalarBuffer::from(std::mem::take(&mut t.time)),
                    None,
                )),
                Arc::new(UInt64Array::new(
                    ScalarBuffer::from(std::mem::take(&mut t.series_id)),
                    None,
                )),
            ];
            for c in &mut t.columns {
                let (f, a) = c.finish();
                fields.push(f);
                arrays.push(a);
            }
            let points = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)
                .map_err(|e| Error::Internal(format!("building points batch: {e}")))?;
            let points_ipc = encode_ipc(&points)?;

            // One raw spelling per slot: tag orders that differ in the text
            // but not in the series share an id; list each series once.
            let mut listed: Vec<(u64, u32)> = t
                .series
                .iter()
                .map(|&s| (st.slots[s as usize].series_id, s))
                .collect();
            listed.sort_unstable();
            listed.dedup_by_key(|(id, _)| *id);
            let mut ids = Vec::with_capacity(listed.len());
            let mut key_offsets = Vec::with_capacity(listed.len() + 1);
            let mut keys = Vec::new();
            key_offsets.push(0i32);
            for &(_, s) in &listed {
                let slot = &st.slots[s as usize];
                ids.push(slot.series_id);
                keys.extend_from_slice(&st.key_arena[slot.key.0 as usize..slot.key.1 as usize]);
                key_offsets.push(keys.len() as i32);
            }
            let m = &st.measurements[t.measurement as usize].name;
            let measurements: ArrayRef = if st.samples_table.is_some() {
                Arc::new(StringArray::from_iter_values(listed.iter().map(
                    |&(_, s)| {
                        st.measurements[st.slots[s as usize].measurement as usize]
                            .name
                            .as_str()
                    },
                )))
            } else {
                Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
                    m.as_str(),
                    listed.len(),
                )))
            };
            let series = RecordBatch::try_new(
                series_schema(),
                vec![
                    Arc::new(UInt64Array::from(ids)),
                    measurements,
                    Arc::new(StringArray::new(
                        OffsetBuffer::new(ScalarBuffer::from(key_offsets)),
                        Buffer::from_vec(keys),
                        None,
                    )),
                ],
            )
            .map_err(|e| Error::Internal(format!("building series batch: {e}")))?;
            out.push(ShardBatch {
                shard: t.shard,
                database: String::new(),
                measurement: m.clone(),
                rows,
                points_ipc,
                series_ipc: encode_ipc(&series)?,
            });
        }
        Ok((out, summary))
    }
}

/// Schema of `series_ipc`.
pub fn series_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("series_id", DataType::UInt64, false),
        Field::new("measurement", DataType::Utf8, false),
        Field::new("tags", DataType::Utf8, false),
    ]))
}

fn encode_ipc(batch: &RecordBatch) -> Result<Bytes> {
    let mut buf = Vec::with_capacity(batch.get_array_memory_size() + 1024);
    let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut buf, &batch.schema())
        .map_err(|e| Error::Internal(format!("arrow ipc: {e}")))?;
    w.write(batch)
        .map_err(|e| Error::Internal(format!("arrow ipc: {e}")))?;
    w.finish()
        .map_err(|e| Error::Internal(format!("arrow ipc: {e}")))?;
    drop(w);
    Ok(Bytes::from(buf))
}

/// A user's name or value in an error message: short (see
/// [`names::excerpt`]).
fn lossy(b: &[u8]) -> String {
    names::excerpt(b)
}

/// A broken naming rule as a rejection (the message names the rule).
fn name_error(e: NameError) -> (RejectReason, String) {
    (RejectReason::BadPoint, e.to_string())
}

impl BatchState<'_> {
    fn reject(&mut self, line_no: usize, (reason, message): (RejectReason, String)) {
        self.reject_with(line_no, reason, message);
    }

    fn reject_with(&mut self, position: usize, reason: RejectReason, message: String) {
        self.rejected += 1;
        if reason == RejectReason::Cardinality {
            self.rejected_for_cardinality += 1;
        }
        if self.first_rejection.is_none() {
            self.first_rejection = Some(Rejection {
                position,
                reason,
                message,
            });
        }
    }

    #[inline]
    fn find_slot(&self, hash: u64, raw: &[u8]) -> Option<u32> {
        let mut s = *self.memo.get(&hash)?;
        while s != NONE {
            let slot = &self.slots[s as usize];
            if same_bytes(
                &self.raw_arena[slot.raw.0 as usize..slot.raw.1 as usize],
                raw,
            ) {
                return Some(s);
            }
            s = slot.next;
        }
        None
    }

    /// Checks the naming rules ([`names`]) of a measurement not yet met in
    /// this request (a known one passed already).
    fn check_measurement(&self, measurement: &[u8]) -> Result<(), (RejectReason, String)> {
        let known = self
            .last_measurement
            .is_some_and(|m| same_bytes(&self.measurements[m as usize].raw, measurement))
            || self.measurement_ids.contains_key(measurement);
        if known {
            return Ok(());
        }
        names::validate_measurement(measurement).map_err(name_error)
    }

    /// Slot of a raw (as written) series not met before in this request
    /// (`find_slot` said so); `hash` is its XXH3. Checks the naming rules
    /// of its measurement, tags and series key first.
    fn resolve_new_raw(
        &mut self,
        hash: u64,
        raw: &[u8],
        parser: &mut SeriesParser,
    ) -> Result<u32, (RejectReason, String)> {
        let started = self.timing.then(std::time::Instant::now);
        let series = parser
            .parse(raw)
            .map_err(|e| (RejectReason::BadPoint, e.to_string()))?;
        self.check_measurement(series.measurement())?;
        for (k, _) in series.tags() {
            names::validate_tag_key(k).map_err(name_error)?;
        }
        // canonical_key_into clears its buffer: build in a reused scratch
        // vector, then append to the arena.
        series.canonical_key_into(&mut self.key_scratch);
        names::validate_series_key(&self.key_scratch).map_err(name_error)?;
        let k0 = self.key_arena.len();
        self.key_arena.extend_from_slice(&self.key_scratch);
        let measurement = series.measurement();
        let slot = self.insert_slot(hash, raw, (k0, self.key_arena.len()), measurement);
        if let Some(t) = started {
            self.series_nanos += t.elapsed().as_nanos() as u64;
        }
        Ok(slot)
    }

    /// Slot of a series given by its canonical key (structured inputs);
    /// a series new to the request has its measurement and key checked
    /// against the naming rules first (its tags were checked by the caller).
    fn resolve_canonical(
        &mut self,
        key: &[u8],
        measurement: &[u8],
    ) -> Result<u32, (RejectReason, String)> {
        let hash = xxh3_64(key);
        if let Some(s) = self.find_slot(hash, key) {
            return Ok(s);
        }
        self.check_measurement(measurement)?;
        names::validate_series_key(key).map_err(name_error)?;
        let k0 = self.key_arena.len();
        self.key_arena.extend_from_slice(key);
        let k1 = self.key_arena.len();
        Ok(self.insert_slot(hash, key, (k0, k1), measurement))
    }

    fn insert_slot(
        &mut self,
        hash: u64,
        raw: &[u8],
        key: (usize, usize),
        measurement: &[u8],
    ) -> u32 {
        let series_id = series_id_of_key(&self.key_arena[key.0..key.1]);
        let shard = jump_hash(series_id, self.shard_count);
        let last = self
            .last_measurement
            .filter(|&m| same_bytes(&self.measurements[m as usize].raw, measurement));
        let m = match last.or_else(|| self.measurement_ids.get(measurement).copied()) {
            Some(m) => m,
            None => {
                let m = self.measurements.len() as u32;
                self.measurements.push(MeasurementSchema {
                    name: lossy(measurement),
                    raw: measurement.into(),
                    fields: Vec::new(),
                });
                self.measurement_ids.insert(measurement.into(), m);
                m
            }
        };
        self.last_measurement = Some(m);
        let series_measurement = m;
        let m = self.samples_table.unwrap_or(m);
        let table = match self.table_ids.get(&table_key(shard, m)) {
            Some(&t) => t,
            None => {
                let t = self.tables.len() as u32;
                self.tables.push(TableBuilder {
                    shard,
                    measurement: m,
                    time: Vec::new(),
                    series_id: Vec::new(),
                    columns: Vec::new(),
                    layout: Vec::new(),
                    series: Vec::new(),
                });
                self.table_ids.insert(table_key(shard, m), t);
                t
            }
        };
        let r0 = self.raw_arena.len();
        self.raw_arena.extend_from_slice(raw);
        let idx = self.slots.len() as u32;
        let next = self.memo.insert(hash, idx).unwrap_or(NONE);
        self.slots.push(SeriesSlot {
            series_id,
            table,
            measurement: series_measurement,
            raw: (r0 as u32, self.raw_arena.len() as u32),
            key: (key.0 as u32, key.1 as u32),
            next,
            admission: Admission::Unchecked,
            listed: false,
        });
        idx
    }

    /// Type-checks, admits and appends one point of series `slot`.
    #[inline]
    fn append<'v, I>(
        &mut self,
        slot: u32,
        time: i64,
        fields: I,
        n_fields: usize,
    ) -> Result<(), (RejectReason, String)>
    where
        I: Iterator<Item = (&'v [u8], FieldValue<'v>)> + Clone,
    {
        let s = &self.slots[slot as usize];
        let table_idx = s.table as usize;
        let t = &self.tables[table_idx];
        let m = t.measurement as usize;
        // 1. Field types must agree with earlier points of the measurement.
        // A column of the table has the measurement's type of its field, so
        // the measurement's list is only searched for fields the table has
        // not seen yet.
        self.targets.clear();
        for (i, (k, v)) in fields.clone().enumerate() {
            let ty = v.field_type();
            let (want, target) = match t.find_column(k, i) {
                Some(c) => (Some(t.columns[c].ty), FieldTarget::Column(c as u32)),
                None => match self.measurements[m].find(k, i) {
                    Some(j) => (
                        Some(self.measurements[m].fields[j].1),
                        FieldTarget::NewColumn,
                    ),
                    None => {
                        // A field new to the measurement: its key becomes a
                        // column name.
                        names::validate_field_key(k).map_err(name_error)?;
                        (None, FieldTarget::NewField)
                    }
                },
            };
            if let Some(want) = want {
                if want != ty {
                    return Err((
                        RejectReason::BadPoint,
                        format!(
                            "field type conflict: field {:?} of measurement {:?} is {} in an \
                             earlier point of this request, got {}",
                            lossy(k),
                            self.measurements[m].name,
                            want,
                            ty
                        ),
                    ));
                }
            }
            self.targets.push(target);
        }
        // 2. Cardinality: a series new to the database must fit the limit.
        if s.admission != Admission::Admitted {
            let admitted = match (s.admission, self.db) {
                (Admission::Rejected, _) => false,
                (_, None) => true,
                (_, Some(db)) => db.admit(s.series_id),
            };
            let s = &mut self.slots[slot as usize];
            if admitted {
                s.admission = Admission::Admitted;
            } else {
                s.admission = Admission::Rejected;
                let db = self.db.expect("rejected only with a db");
                return Err((
                    RejectReason::Cardinality,
                    format!(
                        "database {:?} reached its series limit of {} (--max-series-per-db); \
                         points of new series are rejected, existing series can still be written",
                        db.name(),
                        db.limit()
                    ),
                ));
            }
        }
        // 3. Append.
        let s = &mut self.slots[slot as usize];
        let t = &mut self.tables[table_idx];
        if !s.listed {
            s.listed = true;
            t.series.push(slot);
        }
        let series_id = s.series_id;
        let row = t.time.len();
        t.layout.resize(n_fields, 0);
        for (i, ((k, v), target)) in fields.zip(&self.targets).enumerate() {
            let c = match *target {
                FieldTarget::Column(c) => c as usize,
                FieldTarget::NewColumn | FieldTarget::NewField => {
                    if let FieldTarget::NewField = target {
                        self.measurements[m].fields.push((k.into(), v.field_type()));
                    }
                    t.columns.push(FieldColumn::new(k, v.field_type(), row));
                    t.columns.len() - 1
                }
            };
            t.layout[i] = c as u32;
            let col = &mut t.columns[c];
            col.pad_to(row);
            col.push(v);
        }
        t.time.push(time);
        t.series_id.push(series_id);
        // Fields absent from this point stay null: padded lazily on the next
        // append of that column or at finish; only pad when the point had
        // fewer fields than the table has columns.
        if n_fields < t.columns.len() {
            for c in &mut t.columns {
                c.pad_to(row + 1);
            }
        }
        self.points += 1;
        Ok(())
    }
}

#[cfg(test)]
#[path = "batch_tests.rs"]
mod tests;
