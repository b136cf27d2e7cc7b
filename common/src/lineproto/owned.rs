//! Owned points, for tests, tools and fuzzing.

use super::error::{LineProtocolError, Result};
use super::field_parser::FieldParser;
use super::field_value::FieldValue;
use super::lines::lines;
use super::series_parser::{split_series, SeriesParser};

/// An owned, fully parsed point: convenient for tests, tools and fuzzing;
/// the hot path uses the borrowing parsers instead.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnedPoint {
    pub measurement: String,
    /// Sorted by key.
    pub tags: Vec<(String, String)>,
    pub fields: Vec<(String, OwnedFieldValue)>,
    pub timestamp: Option<i64>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum OwnedFieldValue {
    Float(f64),
    Integer(i64),
    Unsigned(u64),
    String(String),
    Boolean(bool),
}

impl From<FieldValue<'_>> for OwnedFieldValue {
    fn from(v: FieldValue<'_>) -> Self {
        match v {
            FieldValue::Float(f) => OwnedFieldValue::Float(f),
            FieldValue::Integer(i) => OwnedFieldValue::Integer(i),
            FieldValue::Unsigned(u) => OwnedFieldValue::Unsigned(u),
            FieldValue::String(s) => OwnedFieldValue::String(s.to_owned()),
            FieldValue::Boolean(b) => OwnedFieldValue::Boolean(b),
        }
    }
}

/// Parses one line (no newline) into an [`OwnedPoint`].
pub fn parse_line(line: &[u8]) -> Result<OwnedPoint> {
    if std::str::from_utf8(line).is_err() {
        return Err(LineProtocolError::InvalidUtf8);
    }
    let (series_raw, rest) = split_series(line)?;
    let mut sp = SeriesParser::default();
    let series = sp.parse(series_raw)?;
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let measurement = s(series.measurement());
    let tags = series.tags().map(|(k, v)| (s(k), s(v))).collect();
    let mut fp = FieldParser::default();
    let fields = fp.parse(rest)?;
    Ok(OwnedPoint {
        measurement,
        tags,
        fields: fields.iter().map(|(k, v)| (s(k), v.into())).collect(),
        timestamp: fields.timestamp,
    })
}

/// Parses every line of a body; errors carry their 1-based line number.
/// Never panics, whatever the input (the fuzz target relies on it).
pub fn parse_body(body: &[u8]) -> Vec<(usize, Result<OwnedPoint>)> {
    lines(body).map(|(n, l)| (n, parse_line(l))).collect()
}
