//! InfluxDB line protocol, parsed without per-point heap allocation.
//!
//! A line is `measurement[,tag=value...] field=value[,field=value...] [timestamp]`.
//! The parser is split in pieces so a caller that already knows a series
//! (by its raw bytes) can skip tag parsing, sorting and hashing:
//!
//! 1. [`split_series`] finds the raw series part (`measurement,tags`) of a line;
//! 2. [`SeriesParser::parse`] unescapes the measurement and tags and sorts
//!    the tags by key (only needed the first time a series is seen);
//! 3. [`FieldParser::parse`] parses the fields and the optional timestamp.
//!
//! Both parsers keep their buffers between lines; tokens without escapes are
//! borrowed from the input, escaped ones are unescaped into a reused scratch
//! buffer.
//!
//! Escaping (as InfluxDB documents it): in measurements `\,` `\ ` and `\\`;
//! in tag keys, tag values and field keys also `\=`; any other backslash is a
//! literal backslash. String field values are in double quotes where `\"`
//! and `\\` are escapes. Lines are separated by `\n` (a trailing `\r` is
//! ignored); empty lines and lines starting with `#` are skipped.

mod error;
mod field_parser;
mod field_value;
mod lines;
mod owned;
mod precision;
mod series_parser;
mod text;
mod values;

pub use crate::scan::same_bytes;
pub use error::{LineProtocolError, Result};
pub use field_parser::{FieldIter, FieldParser, Fields};
pub use field_value::{FieldType, FieldValue, RESERVED_FIELD_KEYS};
pub use lines::{is_utf8, lines, Lines};
pub use owned::{parse_body, parse_line, OwnedFieldValue, OwnedPoint};
pub use precision::{nanos_in_range, Precision, MAX_NANOS, MIN_NANOS};
pub use series_parser::{split_series, Series, SeriesParser};

// The reference parser and the conformance tests below reach these
// helpers as `super::…`.
#[cfg(test)]
use {
    crate::scan::{eight_digits, non_digits, skip_key_bytes, FIELD_KEY_STOP},
    text::lossy,
    values::{
        fast_decimal, fast_timestamp, is_integer_text, parse_timestamp, scan_plain_decimal,
        scan_short_decimal,
    },
};

#[cfg(test)]
#[path = "lineproto_reference.rs"]
mod reference;

#[cfg(test)]
#[path = "lineproto_tests.rs"]
mod tests;
