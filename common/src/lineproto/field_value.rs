//! Field values as the parsers hand them out, and their types.

use std::fmt;

/// Type of a field value; a field keeps one type per measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldType {
    Float,
    Integer,
    Unsigned,
    String,
    Boolean,
}

impl fmt::Display for FieldType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FieldType::Float => "float",
            FieldType::Integer => "integer",
            FieldType::Unsigned => "unsigned",
            FieldType::String => "string",
            FieldType::Boolean => "boolean",
        })
    }
}

/// A parsed field value. Strings are unescaped UTF-8.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FieldValue<'a> {
    Float(f64),
    Integer(i64),
    Unsigned(u64),
    String(&'a str),
    Boolean(bool),
}

impl FieldValue<'_> {
    pub fn field_type(&self) -> FieldType {
        match self {
            FieldValue::Float(_) => FieldType::Float,
            FieldValue::Integer(_) => FieldType::Integer,
            FieldValue::Unsigned(_) => FieldType::Unsigned,
            FieldValue::String(_) => FieldType::String,
            FieldValue::Boolean(_) => FieldType::Boolean,
        }
    }
}

/// Field keys that would collide with the fact table's own columns.
pub const RESERVED_FIELD_KEYS: [&str; 2] = ["time", "series_id"];
