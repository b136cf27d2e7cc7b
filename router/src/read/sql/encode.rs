//! Writing an answer for the client: JSON rows or CSV, with every
//! timestamp column (at any depth of lists, maps and structs) rendered as
//! an RFC 3339 UTC string whatever its time zone label. Pure functions
//! over Arrow batches, apart from the fan-out in the parent module.

use crate::error::{Error, Result};
use arrow_array::cast::AsArray;
use arrow_array::types::{
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType,
};
use arrow_array::{
    Array, ArrayRef, ArrowPrimitiveType, FixedSizeListArray, LargeListArray, ListArray, MapArray,
    RecordBatch, StringArray, StructArray,
};
use arrow_schema::{DataType, FieldRef, Fields, Schema, TimeUnit};
use std::sync::Arc;

/// Encodes merged batches as JSON rows or CSV. Timestamps (at any depth)
/// are written as RFC 3339 UTC strings whatever their time zone label
/// (chDB labels DateTime64 with the machine's zone) and whatever the
/// router's `TZ`.
pub fn encode(batches: &[RecordBatch], csv: bool) -> Result<(&'static str, Vec<u8>)> {
    let err = |e: arrow_schema::ArrowError| Error::Internal(format!("encoding result: {e}"));
    let batches = batches
        .iter()
        .map(timestamps_as_utc_strings)
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    if csv {
        let mut w = arrow_csv::WriterBuilder::new()
            .with_header(true)
            .build(Vec::new());
        for b in &batches {
            w.write(b).map_err(err)?;
        }
        return Ok(("text/csv", w.into_inner()));
    }
    let mut w = arrow_json::ArrayWriter::new(Vec::new());
    let refs: Vec<&RecordBatch> = batches.iter().collect();
    w.write_batches(&refs).map_err(err)?;
    w.finish().map_err(err)?;
    let mut out = w.into_inner();
    if out.is_empty() {
        out = b"[]".to_vec();
    }
    Ok(("application/json", out))
}

/// RFC 3339 in UTC of `secs` + `nanos` since the epoch:
/// `2023-11-14T22:13:20Z`, with the fraction's digits up to the last
/// non-zero one (`.5`, `.000001`) when it is not zero (Go's RFC3339Nano,
/// as InfluxDB answers).
pub fn rfc3339_utc(secs: i64, nanos: u32) -> String {
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // Days to civil date (Howard Hinnant's algorithm, proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let mut out = format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        sod / 3_600,
        sod % 3_600 / 60,
        sod % 60
    );
    if nanos > 0 {
        let frac = format!("{nanos:09}");
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

fn contains_timestamp(dt: &DataType) -> bool {
    match dt {
        DataType::Timestamp(..) => true,
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => contains_timestamp(f.data_type()),
        DataType::Struct(fields) => fields.iter().any(|f| contains_timestamp(f.data_type())),
        _ => false,
    }
}

fn utc_strings<T: ArrowPrimitiveType<Native = i64>>(a: &dyn Array, per_sec: i64) -> ArrayRef {
    let nanos_per_unit = 1_000_000_000 / per_sec;
    let strings: StringArray = a
        .as_primitive::<T>()
        .iter()
        .map(|v| {
            v.map(|v| {
                let nanos = v.rem_euclid(per_sec) * nanos_per_unit;
                rfc3339_utc(v.div_euclid(per_sec), nanos as u32)
            })
        })
        .collect();
    Arc::new(strings)
}

fn with_type(f: &FieldRef, dt: &DataType) -> FieldRef {
    Arc::new(f.as_ref().clone().with_data_type(dt.clone()))
}

/// `a` with every Timestamp, at any depth, replaced by RFC 3339 UTC strings.
fn timestamps_to_strings(a: &ArrayRef) -> Result<ArrayRef, arrow_schema::ArrowError> {
    if !contains_timestamp(a.data_type()) {
        return Ok(a.clone());
    }
    Ok(match a.data_type() {
        DataType::Timestamp(TimeUnit::Second, _) => utc_strings::<TimestampSecondType>(a, 1),
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            utc_strings::<TimestampMillisecondType>(a, 1_000)
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            utc_strings::<TimestampMicrosecondType>(a, 1_000_000)
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            utc_strings::<TimestampNanosecondType>(a, 1_000_000_000)
        }
        DataType::List(f) => {
            let l = a.as_list::<i32>();
            let values = timestamps_to_strings(l.values())?;
            Arc::new(ListArray::try_new(
                with_type(f, values.data_type()),
                l.offsets().clone(),
                values,
                l.nulls().cloned(),
            )?)
        }
        DataType::LargeList(f) => {
            let l = a.as_list::<i64>();
            let values = timestamps_to_strings(l.values())?;
            Arc::new(LargeListArray::try_new(
                with_type(f, values.data_type()),
                l.offsets().clone(),
                values,
                l.nulls().cloned(),
            )?)
        }
        DataType::FixedSizeList(f, size) => {
            let l = a.as_fixed_size_list();
            let values = timestamps_to_strings(l.values())?;
            Arc::new(FixedSizeListArray::try_new(
                with_type(f, values.data_type()),
                *size,
                values,
                l.nulls().cloned(),
            )?)
        }
        DataType::Struct(fields) => {
            let s = a.as_struct();
            let columns = s
                .columns()
                .iter()
                .map(timestamps_to_strings)
                .collect::<Result<Vec<_>, _>>()?;
            let fields: Fields = fields
                .iter()
                .zip(&columns)
                .map(|(f, c)| with_type(f, c.data_type()))
                .collect();
            Arc::new(StructArray::try_new(fields, columns, s.nulls().cloned())?)
        }
        DataType::Map(f, sorted) => {
            let m = a.as_map();
            let entries: ArrayRef = Arc::new(m.entries().clone());
            let entries = timestamps_to_strings(&entries)?;
            Arc::new(MapArray::try_new(
                with_type(f, entries.data_type()),
                m.offsets().clone(),
                entries.as_struct().clone(),
                m.nulls().cloned(),
                *sorted,
            )?)
        }
        _ => a.clone(),
    })
}

/// `batch` with its timestamp columns as RFC 3339 UTC strings.
fn timestamps_as_utc_strings(batch: &RecordBatch) -> Result<RecordBatch, arrow_schema::ArrowError> {
    let schema = batch.schema();
    if !schema
        .fields()
        .iter()
        .any(|f| contains_timestamp(f.data_type()))
    {
        return Ok(batch.clone());
    }
    let columns = batch
        .columns()
        .iter()
        .map(timestamps_to_strings)
        .collect::<Result<Vec<_>, _>>()?;
    let fields: Vec<FieldRef> = schema
        .fields()
        .iter()
        .zip(&columns)
        .map(|(f, c)| with_type(f, c.data_type()))
        .collect();
    RecordBatch::try_new(
        Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone())),
        columns,
    )
}
