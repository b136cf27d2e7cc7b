//! Column builders of one (shard, measurement) table: plain vectors a
//! point is appended to, turned into Arrow arrays without copying.

use arrow_array::{ArrayRef, BooleanArray, Float64Array, Int64Array, StringArray, UInt64Array};
use arrow_buffer::{BooleanBufferBuilder, Buffer, NullBufferBuilder, OffsetBuffer, ScalarBuffer};
use shardhouse_common::lineproto::{same_bytes, FieldType, FieldValue};
use std::sync::Arc;

enum ColumnData {
    Float(Vec<f64>),
    Integer(Vec<i64>),
    Unsigned(Vec<u64>),
    String { offsets: Vec<i32>, data: Vec<u8> },
    Boolean(BooleanBufferBuilder),
}

pub(super) struct FieldColumn {
    pub(super) name: Box<[u8]>,
    pub(super) ty: FieldType,
    data: ColumnData,
    nulls: NullBufferBuilder,
    len: usize,
}

impl FieldColumn {
    /// A column for `rows_hint` rows (it grows past them if needed).
    pub(super) fn new(
        name: &[u8],
        ty: FieldType,
        rows_before: usize,
        rows_hint: usize,
    ) -> FieldColumn {
        let data = match ty {
            FieldType::Float => ColumnData::Float(Vec::with_capacity(rows_hint)),
            FieldType::Integer => ColumnData::Integer(Vec::with_capacity(rows_hint)),
            FieldType::Unsigned => ColumnData::Unsigned(Vec::with_capacity(rows_hint)),
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
            nulls: NullBufferBuilder::new(rows_hint),
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
    pub(super) fn pad_to(&mut self, rows: usize) {
        while self.len < rows {
            self.push_null();
        }
    }

    /// Appends a value; the type was checked against the schema before.
    #[inline(always)]
    pub(super) fn push(&mut self, v: FieldValue<'_>) {
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

    /// The column's name and its values as an Arrow array (its type is
    /// the field's; the wire schema makes every field column nullable).
    pub(super) fn finish(&mut self) -> (String, ArrayRef) {
        let name = String::from_utf8_lossy(&self.name).into_owned();
        let nulls = self.nulls.finish();
        let array: ArrayRef = match &mut self.data {
            ColumnData::Float(v) => Arc::new(Float64Array::new(
                ScalarBuffer::from(std::mem::take(v)),
                nulls,
            )),
            ColumnData::Integer(v) => Arc::new(Int64Array::new(
                ScalarBuffer::from(std::mem::take(v)),
                nulls,
            )),
            ColumnData::Unsigned(v) => Arc::new(UInt64Array::new(
                ScalarBuffer::from(std::mem::take(v)),
                nulls,
            )),
            ColumnData::String { offsets, data } => {
                let offsets = OffsetBuffer::new(ScalarBuffer::from(std::mem::take(offsets)));
                let values = Buffer::from_vec(std::mem::take(data));
                Arc::new(StringArray::new(offsets, values, nulls))
            }
            ColumnData::Boolean(b) => Arc::new(BooleanArray::new(b.finish(), nulls)),
        };
        (name, array)
    }
}

/// Column builders of one (shard, measurement).
pub(super) struct TableBuilder {
    pub(super) shard: u32,
    pub(super) measurement: u32,
    pub(super) time: Vec<i64>,
    pub(super) series_id: Vec<u64>,
    pub(super) columns: Vec<FieldColumn>,
    /// Column of each field position of the last point appended: points of
    /// a measurement usually repeat the same fields in the same order, so
    /// the next point checks one name per field instead of searching.
    pub(super) layout: Vec<u32>,
    /// Slots of the series in this table, for the series batch.
    pub(super) series: Vec<u32>,
    /// Rows expected (columns start with that capacity).
    pub(super) rows_hint: usize,
}

impl TableBuilder {
    /// An empty table sized for `rows_hint` rows: growing each column
    /// from nothing cost a reallocation and copy per doubling, per column,
    /// per table (64 tables of ~80 rows per 5,000-line body at 1M series).
    pub(super) fn new(shard: u32, measurement: u32, rows_hint: usize) -> TableBuilder {
        TableBuilder {
            shard,
            measurement,
            time: Vec::with_capacity(rows_hint),
            series_id: Vec::with_capacity(rows_hint),
            columns: Vec::new(),
            layout: Vec::new(),
            series: Vec::with_capacity(rows_hint),
            rows_hint,
        }
    }

    /// Column named `key`, trying the column used at this field position
    /// by the last point first.
    #[inline(always)]
    pub(super) fn find_column(&self, key: &[u8], position: usize) -> Option<usize> {
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
pub(super) enum FieldTarget {
    /// An existing column of the table.
    Column(u32),
    /// A new column for a field the measurement already has.
    NewColumn,
    /// A field new to the measurement (and so to the table).
    NewField,
}
