//! Values of `/api/v1/sql` results at the router: what shards answer
//! (Arrow) turned into one dynamic value per cell, so rows from shards whose
//! columns differ in type (a field's type is decided per shard,
//! docs/storage.md) or in presence merge, compare, group and encode alike.

use super::encode::rfc3339_utc;
use crate::error::{Error, Result};
use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use std::cmp::Ordering;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// One cell.
#[derive(Debug, Clone)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    /// Nanoseconds since the epoch (DateTime, DateTime64).
    Time(i128),
    List(Vec<Value>),
    /// Anything else (maps, tuples, dates, decimals), as arrow-json writes it.
    Json(serde_json::Value),
}

impl Value {
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The value as a float, for numbers (and booleans).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Int(v) => Some(*v as f64),
            Value::UInt(v) => Some(*v as f64),
            Value::Float(v) => Some(*v),
            Value::Bool(b) => Some(f64::from(u8::from(*b))),
            _ => None,
        }
    }

    fn is_nan(&self) -> bool {
        matches!(self, Value::Float(f) if f.is_nan())
    }

    /// ClickHouse's truth: non-zero numbers, `true`; NULL is false.
    pub fn truthy(&self) -> bool {
        match self {
            Value::Bool(b) => *b,
            Value::Int(v) => *v != 0,
            Value::UInt(v) => *v != 0,
            Value::Float(v) => *v != 0.0 && !v.is_nan(),
            _ => false,
        }
    }

    fn rank(&self) -> u8 {
        match self {
            Value::Null => 0,
            Value::Bool(_) | Value::Int(_) | Value::UInt(_) | Value::Float(_) => 1,
            Value::Time(_) => 2,
            Value::Str(_) => 3,
            Value::List(_) => 4,
            Value::Json(_) => 5,
        }
    }

    /// Ordering of two non-NULL values: numbers by value across integer and
    /// float types, strings by bytes (as ClickHouse), lists element-wise.
    /// NaN compares equal to itself and after every number here; callers
    /// that sort place NaN and NULL themselves ([`sort_cmp`]).
    pub fn total_cmp(&self, other: &Value) -> Ordering {
        use Value::*;
        match (self, other) {
            (Int(a), Int(b)) => a.cmp(b),
            (UInt(a), UInt(b)) => a.cmp(b),
            (Int(a), UInt(b)) => i128::from(*a).cmp(&i128::from(*b)),
            (UInt(a), Int(b)) => i128::from(*a).cmp(&i128::from(*b)),
            (Str(a), Str(b)) => a.as_bytes().cmp(b.as_bytes()),
            (Time(a), Time(b)) => a.cmp(b),
            (List(a), List(b)) => {
                for (x, y) in a.iter().zip(b) {
                    let o = sort_cmp(x, y, false, false);
                    if o != Ordering::Equal {
                        return o;
                    }
                }
                a.len().cmp(&b.len())
            }
            (Json(a), Json(b)) => a.to_string().cmp(&b.to_string()),
            (a, b) if a.rank() == 1 && b.rank() == 1 => {
                let (x, y) = (a.as_f64().unwrap_or(0.0), b.as_f64().unwrap_or(0.0));
                match (x.is_nan(), y.is_nan()) {
                    (true, true) => Ordering::Equal,
                    (true, false) => Ordering::Greater,
                    (false, true) => Ordering::Less,
                    _ => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
                }
            }
            (a, b) => a.rank().cmp(&b.rank()),
        }
    }
}

/// ClickHouse's ORDER BY of two cells: values in the direction asked, then
/// NaN, then NULL (`NULLS LAST`, the default for ASC and DESC alike); with
/// `NULLS FIRST`, NULL, then NaN, then values.
pub fn sort_cmp(a: &Value, b: &Value, desc: bool, nulls_first: bool) -> Ordering {
    let class = |v: &Value| match v {
        Value::Null => 2,
        v if v.is_nan() => 1,
        _ => 0,
    };
    let (ca, cb) = (class(a), class(b));
    if ca != cb || ca != 0 {
        let o = ca.cmp(&cb);
        return if nulls_first { o.reverse() } else { o };
    }
    let o = a.total_cmp(b);
    if desc {
        o.reverse()
    } else {
        o
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Value::Null, Value::Null) => true,
            (Value::Null, _) | (_, Value::Null) => false,
            (Value::Float(a), Value::Float(b)) => a.to_bits() == b.to_bits() || a == b,
            _ => self.total_cmp(other) == Ordering::Equal && self.rank() == other.rank(),
        }
    }
}
impl Eq for Value {}

impl Hash for Value {
    fn hash<H: Hasher>(&self, h: &mut H) {
        match self {
            Value::Null => 0u8.hash(h),
            Value::Bool(b) => u64::from(*b).hash(h),
            // Integers and integral floats hash alike: they compare equal.
            Value::Int(v) => (*v as f64).to_bits().hash(h),
            Value::UInt(v) => (*v as f64).to_bits().hash(h),
            Value::Float(v) => {
                let v = if *v == 0.0 { 0.0 } else { *v };
                v.to_bits().hash(h)
            }
            Value::Str(s) => s.hash(h),
            Value::Time(t) => t.hash(h),
            Value::List(l) => l.hash(h),
            Value::Json(j) => j.to_string().hash(h),
        }
    }
}

fn prim<T: ArrowPrimitiveType>(a: &dyn Array, f: impl Fn(T::Native) -> Value) -> Vec<Value> {
    a.as_primitive::<T>()
        .iter()
        .map(|v| v.map_or(Value::Null, &f))
        .collect()
}

/// The cells of one column.
pub fn column_values(a: &ArrayRef) -> Result<Vec<Value>> {
    Ok(match a.data_type() {
        DataType::Null => vec![Value::Null; a.len()],
        DataType::Boolean => a
            .as_boolean()
            .iter()
            .map(|v| v.map_or(Value::Null, Value::Bool))
            .collect(),
        DataType::Int8 => prim::<Int8Type>(a, |v| Value::Int(v.into())),
        DataType::Int16 => prim::<Int16Type>(a, |v| Value::Int(v.into())),
        DataType::Int32 => prim::<Int32Type>(a, |v| Value::Int(v.into())),
        DataType::Int64 => prim::<Int64Type>(a, Value::Int),
        DataType::UInt8 => prim::<UInt8Type>(a, |v| Value::UInt(v.into())),
        DataType::UInt16 => prim::<UInt16Type>(a, |v| Value::UInt(v.into())),
        DataType::UInt32 => prim::<UInt32Type>(a, |v| Value::UInt(v.into())),
        DataType::UInt64 => prim::<UInt64Type>(a, Value::UInt),
        DataType::Float32 => prim::<Float32Type>(a, |v| Value::Float(v.into())),
        DataType::Float64 => prim::<Float64Type>(a, Value::Float),
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Binary
        | DataType::LargeBinary
        | DataType::FixedSizeBinary(_) => text_values(a),
        DataType::Timestamp(unit, _) => timestamp_values(a, *unit),
        DataType::Dictionary(_, _) => dictionary_values(a)?,
        DataType::List(_) | DataType::LargeList(_) => list_values(a)?,
        _ => json_values(a)?,
    })
}

/// Strings and binaries (as lossy UTF-8).
fn text_values(a: &ArrayRef) -> Vec<Value> {
    let str_or_null = |v: Option<&str>| v.map_or(Value::Null, |s| Value::Str(s.to_owned()));
    let bytes_or_null = |v: Option<&[u8]>| v.map_or(Value::Null, |s| Value::Str(lossy(s)));
    match a.data_type() {
        DataType::Utf8 => a.as_string::<i32>().iter().map(str_or_null).collect(),
        DataType::LargeUtf8 => a.as_string::<i64>().iter().map(str_or_null).collect(),
        DataType::Binary => a.as_binary::<i32>().iter().map(bytes_or_null).collect(),
        DataType::LargeBinary => a.as_binary::<i64>().iter().map(bytes_or_null).collect(),
        _ => {
            let b = a.as_fixed_size_binary();
            (0..b.len())
                .map(|i| {
                    if b.is_null(i) {
                        Value::Null
                    } else {
                        Value::Str(lossy(b.value(i)))
                    }
                })
                .collect()
        }
    }
}

/// Timestamps as nanoseconds.
fn timestamp_values(a: &ArrayRef, unit: TimeUnit) -> Vec<Value> {
    let nanos = |v: i64, per: i128| Value::Time(i128::from(v) * per);
    match unit {
        TimeUnit::Second => prim::<TimestampSecondType>(a, |v| nanos(v, 1_000_000_000)),
        TimeUnit::Millisecond => prim::<TimestampMillisecondType>(a, |v| nanos(v, 1_000_000)),
        TimeUnit::Microsecond => prim::<TimestampMicrosecondType>(a, |v| nanos(v, 1_000)),
        TimeUnit::Nanosecond => prim::<TimestampNanosecondType>(a, |v| nanos(v, 1)),
    }
}

/// A dictionary's cells: its values, by key.
fn dictionary_values(a: &ArrayRef) -> Result<Vec<Value>> {
    let d = a.as_any_dictionary();
    let values = column_values(d.values())?;
    let keys = d.normalized_keys();
    Ok((0..a.len())
        .map(|i| {
            if a.is_null(i) {
                Value::Null
            } else {
                values.get(keys[i]).cloned().unwrap_or(Value::Null)
            }
        })
        .collect())
}

/// A list column's cells, each a list of its values.
fn list_values(a: &ArrayRef) -> Result<Vec<Value>> {
    let (values, offsets): (Vec<Value>, Vec<usize>) = match a.data_type() {
        DataType::List(_) => {
            let l = a.as_list::<i32>();
            (
                column_values(l.values())?,
                l.offsets().iter().map(|o| *o as usize).collect(),
            )
        }
        _ => {
            let l = a.as_list::<i64>();
            (
                column_values(l.values())?,
                l.offsets().iter().map(|o| *o as usize).collect(),
            )
        }
    };
    Ok((0..a.len())
        .map(|i| {
            if a.is_null(i) {
                Value::Null
            } else {
                Value::List(values[offsets[i]..offsets[i + 1]].to_vec())
            }
        })
        .collect())
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Cells of a column of another type, as arrow-json writes them (after
/// the same timestamp handling as the per-shard encoding).
fn json_values(a: &ArrayRef) -> Result<Vec<Value>> {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "v",
        a.data_type().clone(),
        true,
    )]));
    let internal = |e: &dyn std::fmt::Display| Error::Internal(e.to_string());
    let batch = RecordBatch::try_new(schema, vec![a.clone()]).map_err(|e| internal(&e))?;
    let (_, bytes) = super::encode::encode(&[batch], false)?;
    let rows: Vec<serde_json::Map<String, serde_json::Value>> =
        serde_json::from_slice(&bytes).map_err(|e| internal(&e))?;
    Ok(rows
        .into_iter()
        .map(|mut r| r.remove("v").map_or(Value::Null, Value::Json))
        .collect())
}

/// Rows of a batch.
pub fn batch_rows(b: &RecordBatch) -> Result<Vec<Vec<Value>>> {
    let cols = b
        .columns()
        .iter()
        .map(column_values)
        .collect::<Result<Vec<_>>>()?;
    Ok((0..b.num_rows())
        .map(|i| cols.iter().map(|c| c[i].clone()).collect())
        .collect())
}

fn json_of(v: &Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        Value::Null => J::Null,
        Value::Bool(b) => J::Bool(*b),
        Value::Int(i) => J::from(*i),
        Value::UInt(u) => J::from(*u),
        Value::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
        Value::Str(s) => J::String(s.clone()),
        Value::Time(t) => J::String(time_string(*t)),
        Value::List(l) => J::Array(l.iter().map(json_of).collect()),
        Value::Json(j) => j.clone(),
    }
}

fn time_string(ns: i128) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let nanos = ns.rem_euclid(1_000_000_000) as u32;
    rfc3339_utc(secs.clamp(i64::MIN.into(), i64::MAX.into()) as i64, nanos)
}

/// Result rows as the endpoint answers them: a JSON array of row objects
/// (NULLs omitted, keys in column order), or CSV with a header line.
pub fn encode_rows(names: &[String], rows: &[Vec<Value>], csv: bool) -> (&'static str, Vec<u8>) {
    let mut out = Vec::new();
    if csv {
        let line = |cells: Vec<String>, out: &mut Vec<u8>| {
            out.extend_from_slice(cells.join(",").as_bytes());
            out.push(b'\n');
        };
        line(names.iter().map(|n| csv_cell(n)).collect(), &mut out);
        for r in rows {
            let cells = r
                .iter()
                .map(|v| match v {
                    Value::Null => String::new(),
                    Value::Str(s) => csv_cell(s),
                    Value::Time(t) => time_string(*t),
                    other => match json_of(other) {
                        serde_json::Value::String(s) => csv_cell(&s),
                        j => csv_cell(&j.to_string()),
                    },
                })
                .collect();
            line(cells, &mut out);
        }
        return ("text/csv", out);
    }
    out.push(b'[');
    for (i, r) in rows.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'{');
        let mut first = true;
        for (name, v) in names.iter().zip(r) {
            if v.is_null() {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(
                serde_json::Value::String(name.clone())
                    .to_string()
                    .as_bytes(),
            );
            out.push(b':');
            out.extend_from_slice(json_of(v).to_string().as_bytes());
        }
        out.push(b'}');
    }
    out.push(b']');
    ("application/json", out)
}

fn csv_cell(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Float64Array, Int64Array, StringArray};

    #[test]
    fn nulls_and_nan_sort_last_both_ways() {
        let mut v = vec![
            Value::Null,
            Value::Float(f64::NAN),
            Value::Int(3),
            Value::Float(1.5),
            Value::UInt(2),
        ];
        v.sort_by(|a, b| sort_cmp(a, b, false, false));
        assert_eq!(
            format!("{v:?}"),
            "[Float(1.5), UInt(2), Int(3), Float(NaN), Null]"
        );
        v.sort_by(|a, b| sort_cmp(a, b, true, false));
        assert_eq!(
            format!("{v:?}"),
            "[Int(3), UInt(2), Float(1.5), Float(NaN), Null]"
        );
        v.sort_by(|a, b| sort_cmp(a, b, false, true));
        assert_eq!(
            format!("{v:?}"),
            "[Null, Float(NaN), Float(1.5), UInt(2), Int(3)]"
        );
    }

    #[test]
    fn equal_numbers_of_two_types_group_together() {
        use std::collections::HashSet;
        let s: HashSet<Value> = [
            Value::Int(1),
            Value::UInt(1),
            Value::Float(1.0),
            Value::Int(2),
        ]
        .into_iter()
        .collect();
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn rows_encode_as_json_and_csv() {
        let b = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("a", DataType::Int64, true),
                Field::new("b", DataType::Utf8, true),
                Field::new("c", DataType::Float64, true),
            ])),
            vec![
                Arc::new(Int64Array::from(vec![Some(1), None])),
                Arc::new(StringArray::from(vec![Some("x,y"), Some("z")])),
                Arc::new(Float64Array::from(vec![Some(1.5), None])),
            ],
        )
        .unwrap();
        let rows = batch_rows(&b).unwrap();
        let names: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let (_, json) = encode_rows(&names, &rows, false);
        assert_eq!(
            String::from_utf8(json).unwrap(),
            r#"[{"a":1,"b":"x,y","c":1.5},{"b":"z"}]"#
        );
        let (_, csv) = encode_rows(&names, &rows, true);
        assert_eq!(
            String::from_utf8(csv).unwrap(),
            "a,b,c\n1,\"x,y\",1.5\n,z,\n"
        );
        assert_eq!(encode_rows(&names, &[], false).1, b"[]");
        let t = vec![vec![Value::Time(1_700_000_000_250_000_000)]];
        let (_, j) = encode_rows(&["t".into()], &t, false);
        assert_eq!(
            String::from_utf8(j).unwrap(),
            r#"[{"t":"2023-11-14T22:13:20.25Z"}]"#
        );
    }
}
