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

use std::fmt;

/// Why a line was rejected. The `Display` text is what clients see after
/// `line N: `, so it says what is wrong and, where useful, how to fix it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LineProtocolError {
    #[error("line is not valid UTF-8; send UTF-8 text")]
    InvalidUtf8,
    #[error("missing measurement name")]
    MissingMeasurement,
    #[error("missing fields: a point needs at least one field (`key=value`) after a space")]
    MissingFields,
    #[error("invalid tag {0:?}: expected `key=value`")]
    InvalidTag(String),
    #[error("empty tag key")]
    EmptyTagKey,
    #[error("missing value for tag {0:?}")]
    EmptyTagValue(String),
    #[error("duplicate tag key {0:?}")]
    DuplicateTag(String),
    #[error("invalid field {0:?}: expected `key=value`")]
    InvalidField(String),
    #[error("empty field key")]
    EmptyFieldKey,
    #[error("missing value for field {0:?}")]
    EmptyFieldValue(String),
    #[error("duplicate field key {0:?}")]
    DuplicateField(String),
    #[error("field key {0:?} is reserved (the fact table uses it); rename the field")]
    ReservedFieldKey(String),
    #[error("invalid value {value:?} for field {key:?}: {why}")]
    InvalidFieldValue {
        key: String,
        value: String,
        why: &'static str,
    },
    #[error("unterminated string value for field {0:?}: missing closing `\"`")]
    UnterminatedString(String),
    #[error("invalid timestamp {0:?}: expected an integer")]
    InvalidTimestamp(String),
    #[error(
        "timestamp {0} is out of range: in nanoseconds (after precision) it must be between \
         -9223372036854775806 and 9223372036854775806, as in InfluxDB"
    )]
    TimestampOutOfRange(i64),
    #[error(
        "timestamp {0} is out of range: it does not fit in int64 (InfluxDB's range is \
         -9223372036854775806 to 9223372036854775806 ns)"
    )]
    TimestampTooLarge(String),
    #[error("unexpected text {0:?} after the timestamp")]
    TrailingText(String),
}

pub type Result<T, E = LineProtocolError> = std::result::Result<T, E>;

/// Timestamp precision of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    #[default]
    Nanosecond,
    Microsecond,
    Millisecond,
    Second,
    Minute,
    Hour,
}

impl Precision {
    /// v2 names: `ns`, `us`, `ms`, `s`. v1 also accepts `n`, `u`, `m`, `h`
    /// (and `ns`/`us`/`ms`/`s`). Returns `None` for anything else.
    pub fn parse(s: &str, allow_v1: bool) -> Option<Precision> {
        Some(match s {
            "" | "ns" => Precision::Nanosecond,
            "us" | "µs" => Precision::Microsecond,
            "ms" => Precision::Millisecond,
            "s" => Precision::Second,
            "n" if allow_v1 => Precision::Nanosecond,
            "u" if allow_v1 => Precision::Microsecond,
            "m" if allow_v1 => Precision::Minute,
            "h" if allow_v1 => Precision::Hour,
            _ => return None,
        })
    }

    /// Nanoseconds per unit.
    pub fn nanos_per_unit(self) -> i64 {
        match self {
            Precision::Nanosecond => 1,
            Precision::Microsecond => 1_000,
            Precision::Millisecond => 1_000_000,
            Precision::Second => 1_000_000_000,
            Precision::Minute => 60_000_000_000,
            Precision::Hour => 3_600_000_000_000,
        }
    }

    /// `ts` in this precision as nanoseconds, or an error when it is
    /// outside [`MIN_NANOS`]..=[`MAX_NANOS`] (InfluxDB's range).
    #[inline]
    pub fn to_nanos(self, ts: i64) -> Result<i64> {
        ts.checked_mul(self.nanos_per_unit())
            .filter(|t| nanos_in_range(*t))
            .ok_or(LineProtocolError::TimestampOutOfRange(ts))
    }
}

/// Earliest time a point may have, in nanoseconds since the epoch:
/// InfluxDB's `MinNanoTime` (`i64::MIN + 2`; InfluxDB keeps the two lowest
/// values as sentinels).
pub const MIN_NANOS: i64 = i64::MIN + 2;
/// Latest time a point may have: InfluxDB's `MaxNanoTime` (`i64::MAX - 1`).
pub const MAX_NANOS: i64 = i64::MAX - 1;

/// Whether a time in nanoseconds is within InfluxDB's range.
#[inline]
pub fn nanos_in_range(t: i64) -> bool {
    (MIN_NANOS..=MAX_NANOS).contains(&t)
}

impl Precision {}

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

/// A token: either a range of the input or of the parser's scratch buffer
/// (when it had escapes to remove).
#[derive(Debug, Clone, Copy)]
enum Text {
    Input(u32, u32),
    Scratch(u32, u32),
}

impl Text {
    #[inline]
    fn get<'s>(self, input: &'s [u8], scratch: &'s [u8]) -> &'s [u8] {
        match self {
            Text::Input(s, e) => &input[s as usize..e as usize],
            Text::Scratch(s, e) => &scratch[s as usize..e as usize],
        }
    }
}

/// Bytes that a backslash escapes in a measurement.
const MEASUREMENT_ESCAPES: &[u8] = b", \\";
/// Bytes that a backslash escapes in tag keys, tag values and field keys.
const KEY_ESCAPES: &[u8] = b",= \\";

/// Copies `raw` into `scratch` without the escaping backslashes.
fn unescape_into(scratch: &mut Vec<u8>, raw: &[u8], escapes: &[u8]) -> Text {
    let start = scratch.len();
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if b == b'\\' && i + 1 < raw.len() && escapes.contains(&raw[i + 1]) {
            scratch.push(raw[i + 1]);
            i += 2;
        } else {
            scratch.push(b);
            i += 1;
        }
    }
    Text::Scratch(start as u32, scratch.len() as u32)
}

fn text_of(
    scratch: &mut Vec<u8>,
    input: &[u8],
    start: usize,
    end: usize,
    escaped: bool,
    escapes: &[u8],
) -> Text {
    if escaped {
        unescape_into(scratch, &input[start..end], escapes)
    } else {
        Text::Input(start as u32, end as u32)
    }
}

/// Error messages stay short even for absurd lines: at most 64 characters
/// of a value, then `…(N bytes)`.
fn lossy(b: &[u8]) -> String {
    crate::names::excerpt(b)
}

/// Whether `body` is valid UTF-8 (exactly `std::str::from_utf8(body).is_ok()`),
/// checked with SIMD: a whole request body is validated once this way, and
/// only a body that fails is checked again line by line.
#[inline]
pub fn is_utf8(body: &[u8]) -> bool {
    simdutf8::basic::from_utf8(body).is_ok()
}

/// Iterates the lines of a body as `(line_number, line)`, 1-based, skipping
/// empty lines and `#` comments, with a trailing `\r` and leading blanks
/// removed.
pub fn lines(body: &[u8]) -> Lines<'_> {
    Lines {
        body,
        pos: 0,
        line_no: 0,
    }
}

/// Iterator returned by [`lines`].
#[derive(Debug, Clone)]
pub struct Lines<'a> {
    body: &'a [u8],
    /// Start of the next line; `body.len() + 1` once the last line is out.
    pos: usize,
    line_no: usize,
}

impl<'a> Iterator for Lines<'a> {
    type Item = (usize, &'a [u8]);

    #[inline]
    fn next(&mut self) -> Option<(usize, &'a [u8])> {
        let body = self.body;
        while self.pos <= body.len() {
            let start = self.pos;
            let end = match memchr::memchr(b'\n', &body[start..]) {
                Some(i) => start + i,
                None => body.len(),
            };
            self.pos = end + 1;
            self.line_no += 1;
            let line = &body[start..end];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Some(first) = line.iter().position(|&b| b != b' ' && b != b'\t') else {
                continue;
            };
            let line = &line[first..];
            if line[0] != b'#' {
                return Some((self.line_no, line));
            }
        }
        None
    }
}

/// Splits a line at its first unescaped space: `(raw series, rest)`. The raw
/// series (`measurement,tag=value...`, still escaped) identifies a series as
/// written and can key a cache; `rest` holds fields and timestamp.
#[inline]
pub fn split_series(line: &[u8]) -> Result<(&[u8], &[u8])> {
    let mut i = 0;
    // Jump between spaces and backslashes: the bytes in between are plain.
    while let Some(off) = memchr::memchr2(b' ', b'\\', line.get(i..).unwrap_or_default()) {
        i += off;
        if line[i] == b'\\' {
            i += 2;
            continue;
        }
        if i == 0 {
            return Err(LineProtocolError::MissingMeasurement);
        }
        let mut j = i;
        while j < line.len() && line[j] == b' ' {
            j += 1;
        }
        if j == line.len() {
            return Err(LineProtocolError::MissingFields);
        }
        return Ok((&line[..i], &line[j..]));
    }
    if line.is_empty() || line[0] == b',' {
        Err(LineProtocolError::MissingMeasurement)
    } else {
        Err(LineProtocolError::MissingFields)
    }
}

/// Parses the series part of a line into measurement and key-sorted tags.
#[derive(Debug, Default)]
pub struct SeriesParser {
    measurement: Option<Text>,
    tags: Vec<(Text, Text)>,
    scratch: Vec<u8>,
}

/// A parsed series, borrowing the parser and the input.
#[derive(Debug)]
pub struct Series<'p> {
    input: &'p [u8],
    parser: &'p SeriesParser,
}

impl<'p> Series<'p> {
    /// Unescaped measurement name.
    pub fn measurement(&self) -> &'p [u8] {
        self.parser
            .measurement
            .expect("set by parse")
            .get(self.input, &self.parser.scratch)
    }

    /// Unescaped tags sorted by key (byte order), without duplicates.
    pub fn tags(&self) -> impl ExactSizeIterator<Item = (&'p [u8], &'p [u8])> + Clone + '_ {
        let (input, scratch) = (self.input, self.parser.scratch.as_slice());
        self.parser
            .tags
            .iter()
            .map(move |(k, v)| (k.get(input, scratch), v.get(input, scratch)))
    }

    /// Writes the canonical series key (see `crate::series`) into `out`.
    pub fn canonical_key_into(&self, out: &mut Vec<u8>) {
        crate::series::canonical_key_into(out, self.measurement(), self.tags());
    }
}

impl SeriesParser {
    /// Parses a raw series (from [`split_series`]); `raw` must be UTF-8.
    pub fn parse<'p>(&'p mut self, raw: &'p [u8]) -> Result<Series<'p>> {
        self.tags.clear();
        self.scratch.clear();
        self.measurement = None;
        // Measurement: up to the first unescaped comma.
        let mut i = 0;
        let mut escaped = false;
        loop {
            i = find_any(raw, i, [b',', b'\\']);
            if i < raw.len() && raw[i] == b'\\' {
                escaped = true;
                i += 2;
            } else {
                break;
            }
        }
        let m_end = i.min(raw.len());
        if m_end == 0 {
            return Err(LineProtocolError::MissingMeasurement);
        }
        self.measurement = Some(text_of(
            &mut self.scratch,
            raw,
            0,
            m_end,
            escaped,
            MEASUREMENT_ESCAPES,
        ));
        let mut pos = m_end;
        while pos < raw.len() {
            // raw[pos] == ',': a tag follows.
            let k_start = pos + 1;
            let mut i = k_start;
            let mut k_esc = false;
            let mut eq = None;
            loop {
                i = find_any(raw, i, [b'=', b',', b'\\']);
                if i >= raw.len() {
                    break;
                }
                match raw[i] {
                    b'\\' => {
                        k_esc = true;
                        i += 2;
                    }
                    b'=' => {
                        eq = Some(i);
                        break;
                    }
                    _ => break,
                }
            }
            let Some(eq) = eq else {
                return Err(LineProtocolError::InvalidTag(lossy(
                    &raw[k_start..i.min(raw.len())],
                )));
            };
            if eq == k_start {
                return Err(LineProtocolError::EmptyTagKey);
            }
            let v_start = eq + 1;
            let mut i = v_start;
            let mut v_esc = false;
            loop {
                i = find_any(raw, i, [b',', b'\\']);
                if i < raw.len() && raw[i] == b'\\' {
                    v_esc = true;
                    i += 2;
                } else {
                    break;
                }
            }
            let v_end = i.min(raw.len());
            let key = text_of(&mut self.scratch, raw, k_start, eq, k_esc, KEY_ESCAPES);
            if v_end == v_start {
                return Err(LineProtocolError::EmptyTagValue(lossy(
                    key.get(raw, &self.scratch),
                )));
            }
            let value = text_of(&mut self.scratch, raw, v_start, v_end, v_esc, KEY_ESCAPES);
            self.tags.push((key, value));
            pos = v_end;
        }
        // Writers usually send tags sorted already; only sort when needed.
        let scratch = &self.scratch;
        let sorted = self
            .tags
            .windows(2)
            .all(|w| w[0].0.get(raw, scratch) < w[1].0.get(raw, scratch));
        if !sorted {
            self.tags
                .sort_by(|a, b| a.0.get(raw, scratch).cmp(b.0.get(raw, scratch)));
            if let Some(w) = self
                .tags
                .windows(2)
                .find(|w| w[0].0.get(raw, scratch) == w[1].0.get(raw, scratch))
            {
                return Err(LineProtocolError::DuplicateTag(lossy(
                    w[0].0.get(raw, scratch),
                )));
            }
        }
        Ok(Series {
            input: raw,
            parser: self,
        })
    }
}

#[derive(Debug, Clone, Copy)]
enum RawValue {
    Float(f64),
    Integer(i64),
    Unsigned(u64),
    String(Text),
    Boolean(bool),
}

/// Parses the fields and timestamp part of a line.
#[derive(Debug, Default)]
pub struct FieldParser {
    fields: Vec<(Text, RawValue)>,
    scratch: Vec<u8>,
    /// Field keys of the last line parsed in each layout slot (see
    /// [`FieldParser::parse_in_layout`]).
    layouts: Vec<KeyLayout>,
}

/// The field keys of a line that parsed, in order, when every one was
/// written without escapes. Such keys contain none of `=`, `,`, space and
/// `\`, are distinct and are not reserved, so a later line that spells the
/// same key at the same position is known to parse it the same way.
#[derive(Debug, Default)]
struct KeyLayout {
    bytes: Vec<u8>,
    ends: Vec<u32>,
}

impl KeyLayout {
    #[inline(always)]
    fn key(&self, i: usize) -> Option<&[u8]> {
        let end = *self.ends.get(i)? as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        Some(&self.bytes[start..end])
    }

    fn len(&self) -> usize {
        self.ends.len()
    }
}

/// Parsed fields and timestamp, borrowing the parser and the input.
#[derive(Debug)]
pub struct Fields<'p> {
    input: &'p [u8],
    parser: &'p FieldParser,
    /// Timestamp as written (not yet scaled by precision).
    pub timestamp: Option<i64>,
}

impl<'p> Fields<'p> {
    #[inline]
    pub fn len(&self) -> usize {
        self.parser.fields.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.parser.fields.is_empty()
    }

    /// Fields in line order as `(unescaped key, value)`.
    #[inline]
    pub fn iter(&self) -> FieldIter<'p> {
        FieldIter {
            fields: self.parser.fields.iter(),
            input: self.input,
            scratch: &self.parser.scratch,
        }
    }
}

/// Iterator of [`Fields::iter`]. A named type with an inlined `next` (not
/// a closure) so that callers in other crates build each value in
/// registers instead of through a call and a round trip in memory.
#[derive(Debug, Clone)]
pub struct FieldIter<'p> {
    fields: std::slice::Iter<'p, (Text, RawValue)>,
    input: &'p [u8],
    scratch: &'p [u8],
}

impl<'p> Iterator for FieldIter<'p> {
    type Item = (&'p [u8], FieldValue<'p>);

    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        let (k, v) = self.fields.next()?;
        let value = match *v {
            RawValue::Float(f) => FieldValue::Float(f),
            RawValue::Integer(i) => FieldValue::Integer(i),
            RawValue::Unsigned(u) => FieldValue::Unsigned(u),
            RawValue::Boolean(b) => FieldValue::Boolean(b),
            // The line was checked to be UTF-8 and unescaping only removes
            // ASCII backslashes, so this cannot fail; stay safe anyway.
            RawValue::String(t) => FieldValue::String(
                std::str::from_utf8(t.get(self.input, self.scratch)).unwrap_or(""),
            ),
        };
        Some((k.get(self.input, self.scratch), value))
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.fields.size_hint()
    }
}

impl ExactSizeIterator for FieldIter<'_> {}

#[inline]
fn parse_scalar(key: &[u8], v: &[u8]) -> Result<RawValue> {
    let bad = |why: &'static str| LineProtocolError::InvalidFieldValue {
        key: lossy(key),
        value: lossy(v),
        why,
    };
    let last = *v.last().expect("non-empty value");
    match v[0] {
        b'0'..=b'9' | b'-' | b'+' | b'.' => {}
        _ => {
            return match v {
                b"t" | b"T" | b"true" | b"True" | b"TRUE" => Ok(RawValue::Boolean(true)),
                b"f" | b"F" | b"false" | b"False" | b"FALSE" => Ok(RawValue::Boolean(false)),
                _ => Err(bad(
                    "expected a number, a quoted string or a boolean (t, true, f, false)",
                )),
            };
        }
    }
    // SAFETY-free: the line was validated as UTF-8 and these are ASCII checks.
    let text = std::str::from_utf8(v).map_err(|_| bad("not UTF-8"))?;
    match last {
        b'i' => {
            let digits = &text[..text.len() - 1];
            if !is_integer_text(digits) {
                return Err(bad("invalid integer"));
            }
            digits
                .parse::<i64>()
                .map(RawValue::Integer)
                .map_err(|_| bad("integer out of int64 range"))
        }
        b'u' => {
            let digits = &text[..text.len() - 1];
            if digits.starts_with('-') {
                return Err(bad("unsigned integer cannot be negative"));
            }
            if !is_integer_text(digits) {
                return Err(bad("invalid unsigned integer"));
            }
            digits
                .parse::<u64>()
                .map(RawValue::Unsigned)
                .map_err(|_| bad("unsigned integer out of uint64 range"))
        }
        _ => {
            if let Some(f) = fast_decimal(v) {
                return Ok(RawValue::Float(f));
            }
            // Rust's float parser also accepts `inf`/`nan`; line protocol does not.
            if !v
                .iter()
                .all(|b| matches!(b, b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-'))
            {
                return Err(bad("invalid number"));
            }
            match text.parse::<f64>() {
                Ok(f) if f.is_finite() => Ok(RawValue::Float(f)),
                Ok(_) => Err(bad("float out of range")),
                Err(_) => Err(bad("invalid number")),
            }
        }
    }
}

/// Exact fast path for plain decimals (`-12.345`): at most 15 significant
/// digits fit a u64 exactly and convert to f64 exactly, and 10^k (k <= 22)
/// is exact too, so one division gives the correctly rounded result
/// (Clinger's fast path). Anything else (exponents, long mantissas) returns
/// `None` and goes through the general parser.
#[inline]
fn fast_decimal(v: &[u8]) -> Option<f64> {
    let (neg, digits) = match v.first()? {
        b'-' => (true, &v[1..]),
        b'+' => (false, &v[1..]),
        _ => (false, v),
    };
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    let mut mantissa: u64 = 0;
    let mut n_digits = 0usize;
    let mut frac: Option<usize> = None;
    for (i, &b) in digits.iter().enumerate() {
        match b {
            b'0'..=b'9' => {
                mantissa = mantissa * 10 + u64::from(b - b'0');
                n_digits += 1;
            }
            b'.' if frac.is_none() => frac = Some(i),
            _ => return None,
        }
    }
    if n_digits == 0 || n_digits > 15 {
        return None;
    }
    let scale = frac.map_or(0, |dot| digits.len() - dot - 1);
    let f = mantissa as f64 / POW10[scale];
    Some(if neg { -f } else { f })
}

fn is_integer_text(s: &str) -> bool {
    let d = s.strip_prefix(['-', '+']).unwrap_or(s);
    !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())
}

/// Bytes that end a field key or escape inside it: `=`, `,`, space, `\`.
static FIELD_KEY_STOP: [bool; 256] = {
    let mut t = [false; 256];
    t[b'=' as usize] = true;
    t[b',' as usize] = true;
    t[b' ' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// Powers of ten that are exact in f64 (used with mantissas below 2^53).
const POW10: [f64; 16] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

/// An optional leading sign of a decimal: (negative, index after it).
#[inline(always)]
fn scan_sign(input: &[u8], i: usize) -> (bool, usize) {
    match input.get(i) {
        Some(b'-') => (true, i + 1),
        Some(b'+') => (false, i + 1),
        _ => (false, i),
    }
}

/// Scans an unquoted value starting at `start` and, when it is a plain
/// decimal (`[+-]digits[.digits]`, at most 15 significant digits) that ends
/// at `,`, space or the end of input, returns it with its end position.
/// This is the [`fast_decimal`] computation fused with the search for the
/// value's end, so the common value is read once. Anything else returns
/// `None` and goes through [`parse_scalar`], which gives the same result
/// (or the error) for every value.
#[inline(always)]
fn scan_plain_decimal(input: &[u8], start: usize) -> Option<(f64, usize)> {
    let n = input.len();
    let (neg, mut i) = scan_sign(input, start);
    let mut mantissa: u64 = 0;
    let mut n_digits = 0usize;
    let mut dot = usize::MAX;
    while i < n {
        let b = input[i];
        let d = b.wrapping_sub(b'0');
        if d < 10 {
            mantissa = mantissa.wrapping_mul(10).wrapping_add(u64::from(d));
            n_digits += 1;
        } else if b == b',' || b == b' ' {
            break;
        } else if b == b'.' && dot == usize::MAX {
            dot = i;
        } else {
            return None;
        }
        i += 1;
    }
    if n_digits == 0 || n_digits > 15 {
        return None;
    }
    let scale = if dot == usize::MAX { 0 } else { i - dot - 1 };
    let f = mantissa as f64 / POW10[scale];
    Some((if neg { -f } else { f }, i))
}

/// Byte equality for short strings (keys), inlined: comparing a field key
/// through a `memcmp` call costs more than the comparison itself.
#[inline(always)]
pub fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut a8 = a.chunks_exact(8);
    let mut b8 = b.chunks_exact(8);
    for (x, y) in (&mut a8).zip(&mut b8) {
        if x != y {
            return false;
        }
    }
    a8.remainder() == b8.remainder()
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Eight bytes of `input` from `at` as a little-endian word (first byte
/// lowest), if there are eight.
#[inline(always)]
fn word_at(input: &[u8], at: usize) -> Option<u64> {
    let bytes = input.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

/// Marks (0x80) the bytes of `word` equal to `b`. Only the lowest mark is
/// exact (borrows can mark bytes above a match), which is all the callers
/// use: they want the first match.
#[inline(always)]
fn match_byte(word: u64, b: u8) -> u64 {
    let x = word ^ (ONES * u64::from(b));
    x.wrapping_sub(ONES) & !x & HIGHS
}

/// Index of the first byte at or after `i` that ends or escapes a field
/// key (`=`, `,`, space, `\`), or `input.len()`. Eight bytes per step: keys
/// are usually 4 to 16 bytes, and a byte loop pays a mispredicted exit
/// per key.
#[inline(always)]
fn skip_key_bytes(input: &[u8], mut i: usize) -> usize {
    while let Some(w) = word_at(input, i) {
        let m =
            match_byte(w, b'=') | match_byte(w, b',') | match_byte(w, b' ') | match_byte(w, b'\\');
        if m != 0 {
            return i + (m.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < input.len() && !FIELD_KEY_STOP[input[i] as usize] {
        i += 1;
    }
    i
}

/// Index of the first byte at or after `i` equal to one of `set`, or
/// `input.len()` (or `i` when `i` is already past the end). Eight bytes per
/// step; for the short tokens of a series (measurement, tag keys and
/// values) this avoids a mispredicted loop exit per token.
#[inline(always)]
pub(crate) fn find_any<const N: usize>(input: &[u8], mut i: usize, set: [u8; N]) -> usize {
    while let Some(w) = word_at(input, i) {
        let m = set.iter().fold(0, |m, &b| m | match_byte(w, b));
        if m != 0 {
            return i + (m.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < input.len() && !set.contains(&input[i]) {
        i += 1;
    }
    i
}

/// Marks (0x80) the bytes of `word` that are not ASCII digits: a byte
/// below `0` borrows in the subtraction, one above `9` reaches 0x80 in the
/// addition (or, from 0xBA up, in the subtraction). Zero iff all eight are
/// digits; the lowest mark is exact (a borrow or carry only starts at a
/// non-digit and only moves up), which is all the callers use.
#[inline(always)]
fn non_digits(word: u64) -> u64 {
    (word.wrapping_sub(0x3030_3030_3030_3030) | word.wrapping_add(0x4646_4646_4646_4646))
        & 0x8080_8080_8080_8080
}

/// Value of the first `k` (1 to 7) bytes of `word`, all ASCII digits.
#[inline(always)]
fn leading_digits_value(word: u64, k: usize) -> u64 {
    // Digit values, moved to the top: the bytes shifted in are zeros (the
    // same value), and the bytes shifted out (after the digits, where a
    // borrow may have started) do not matter.
    digits_value(word.wrapping_sub(0x3030_3030_3030_3030) << (8 * (8 - k) as u32))
}

/// Powers of ten as integers, for joining integer and fraction digits.
const POW10_U64: [u64; 8] = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000];

/// [`scan_plain_decimal`] for the usual short value (at most 7 integer and
/// 7 fraction digits with 8 readable bytes after each part), a word at a
/// time and without a loop, so a value's length costs no mispredicted
/// branch. Returns `None` whenever it is not sure, and the caller then
/// runs [`scan_plain_decimal`]; both compute `mantissa / 10^scale` from the
/// same digits, so the results are identical.
#[inline(always)]
fn scan_short_decimal(input: &[u8], start: usize) -> Option<(f64, usize)> {
    let (neg, i) = scan_sign(input, start);
    let w = word_at(input, i)?;
    let int_len = (non_digits(w).trailing_zeros() / 8) as usize;
    if int_len == 8 {
        return None;
    }
    let int_part = if int_len == 0 {
        0
    } else {
        leading_digits_value(w, int_len)
    };
    let mut end = i + int_len;
    let (mantissa, n_digits, scale) = if input[end] == b'.' {
        let w = word_at(input, end + 1)?;
        let frac_len = (non_digits(w).trailing_zeros() / 8) as usize;
        if frac_len == 8 {
            return None;
        }
        let frac = if frac_len == 0 {
            0
        } else {
            leading_digits_value(w, frac_len)
        };
        end += 1 + frac_len;
        (
            int_part * POW10_U64[frac_len] + frac,
            int_len + frac_len,
            frac_len,
        )
    } else {
        (int_part, int_len, 0)
    };
    if n_digits == 0 || !matches!(input.get(end), None | Some(b',' | b' ')) {
        return None;
    }
    let f = mantissa as f64 / POW10[scale];
    Some((if neg { -f } else { f }, end))
}

impl FieldParser {
    /// Parses `rest` (the part after the series, from [`split_series`]):
    /// `field=value[,field=value...][ timestamp]`. `rest` must be UTF-8.
    ///
    /// One pass: each key is scanned to its `=`, each value is classified
    /// while it is scanned (plain decimals are converted on the way), and
    /// only unusual values (integers, booleans, exponents, long mantissas)
    /// are looked at a second time.
    pub fn parse<'p>(&'p mut self, rest: &'p [u8]) -> Result<Fields<'p>> {
        let (timestamp, _) = self.parse_fields(rest, &KeyLayout::default())?;
        Ok(Fields {
            input: rest,
            parser: self,
            timestamp,
        })
    }

    /// [`Self::parse`] for a caller that groups lines (the router: by
    /// (shard, measurement) table) into layout slots `0, 1, 2, ...`. The
    /// parser remembers the field keys of the last line of each slot; when
    /// a line repeats them in the same order, each key is recognised with
    /// one comparison instead of being scanned, and the reserved-key and
    /// duplicate checks are skipped (they passed for the same keys). The
    /// result is always the same as [`Self::parse`]: a slot only skips work.
    pub fn parse_in_layout<'p>(&'p mut self, rest: &'p [u8], slot: usize) -> Result<Fields<'p>> {
        if self.layouts.len() <= slot {
            self.layouts.resize_with(slot + 1, KeyLayout::default);
        }
        let mut layout = std::mem::take(&mut self.layouts[slot]);
        let parsed = self.parse_fields(rest, &layout);
        if let Ok((_, false)) = parsed {
            // Other keys than last time: remember these, if all are plain.
            layout.bytes.clear();
            layout.ends.clear();
            for (key, _) in &self.fields {
                let Text::Input(s, e) = *key else {
                    layout.bytes.clear();
                    layout.ends.clear();
                    break;
                };
                layout
                    .bytes
                    .extend_from_slice(&rest[s as usize..e as usize]);
                layout.ends.push(layout.bytes.len() as u32);
            }
        }
        self.layouts[slot] = layout;
        let (timestamp, _) = parsed?;
        Ok(Fields {
            input: rest,
            parser: self,
            timestamp,
        })
    }

    /// Parses into `self.fields`; returns the timestamp and whether the
    /// keys were exactly those of `layout`.
    #[inline(always)]
    fn parse_fields(&mut self, rest: &[u8], layout: &KeyLayout) -> Result<(Option<i64>, bool)> {
        self.fields.clear();
        self.scratch.clear();
        let input = rest;
        let n = input.len();
        let mut pos = 0;
        // Whether every key so far was the layout's key at its position.
        let mut as_layout = true;
        loop {
            let k_start = pos;
            let known = if as_layout {
                layout.key(self.fields.len()).filter(|k| {
                    let end = pos + k.len();
                    end < n && input[end] == b'=' && same_bytes(&input[pos..end], k)
                })
            } else {
                None
            };
            if let Some(k) = known {
                // The layout's key, followed by '=': exactly what the scan
                // below would find, and checked before.
                let eq = pos + k.len();
                let key = Text::Input(pos as u32, eq as u32);
                let (value, v_end) = self.parse_value(input, key, eq + 1)?;
                self.fields.push((key, value));
                match self.after_value(input, key, eq + 1, v_end)? {
                    Some(next) => {
                        pos = next;
                        continue;
                    }
                    None => {
                        pos = v_end.min(n);
                        break;
                    }
                }
            }
            as_layout = false;
            // Key: up to an unescaped '='.
            let mut i = pos;
            let mut k_esc = false;
            let eq = loop {
                i = skip_key_bytes(input, i);
                if i >= n {
                    break None;
                }
                match input[i] {
                    b'=' => break Some(i),
                    b'\\' => {
                        k_esc = true;
                        i += 2;
                    }
                    _ => break None,
                }
            };
            let Some(eq) = eq else {
                let end = i.min(n);
                if end == k_start {
                    return Err(LineProtocolError::MissingFields);
                }
                return Err(LineProtocolError::InvalidField(lossy(&input[k_start..end])));
            };
            if eq == k_start {
                return Err(LineProtocolError::EmptyFieldKey);
            }
            let key = text_of(&mut self.scratch, input, k_start, eq, k_esc, KEY_ESCAPES);
            let v_start = eq + 1;
            let (value, v_end) = self.parse_value(input, key, v_start)?;
            {
                let k = key.get(input, &self.scratch);
                if is_reserved_field_key(k) {
                    return Err(LineProtocolError::ReservedFieldKey(lossy(k)));
                }
                // Lines carry a handful of fields: a linear scan beats hashing.
                if self
                    .fields
                    .iter()
                    .any(|(t, _)| same_bytes(t.get(input, &self.scratch), k))
                {
                    return Err(LineProtocolError::DuplicateField(lossy(k)));
                }
            }
            self.fields.push((key, value));
            match self.after_value(input, key, v_start, v_end)? {
                Some(next) => pos = next,
                None => {
                    pos = v_end.min(n);
                    break;
                }
            }
        }
        // Optional timestamp.
        while pos < n && input[pos] == b' ' {
            pos += 1;
        }
        let timestamp = if pos == n {
            None
        } else if let Some(t) = fast_timestamp(&input[pos..]) {
            Some(t)
        } else {
            let t_start = pos;
            while pos < n && input[pos] != b' ' {
                pos += 1;
            }
            let t = &input[t_start..pos];
            while pos < n && (input[pos] == b' ' || input[pos] == b'\t') {
                pos += 1;
            }
            if pos < n {
                return Err(LineProtocolError::TrailingText(lossy(&input[pos..])));
            }
            Some(parse_timestamp(t)?)
        };
        Ok((timestamp, as_layout && self.fields.len() == layout.len()))
    }

    /// Parses the value of field `key` that starts at `v_start`: the value
    /// and the index just after it.
    #[inline(always)]
    fn parse_value(
        &mut self,
        input: &[u8],
        key: Text,
        v_start: usize,
    ) -> Result<(RawValue, usize)> {
        let n = input.len();
        let (value, v_end) = if v_start < n && input[v_start] == b'"' {
            // Quoted string: `\"` and `\\` are escapes; spaces, commas
            // and equals signs are literal.
            let s_start = v_start + 1;
            let mut i = s_start;
            let mut esc = false;
            let mut close = None;
            while let Some(off) = memchr::memchr2(b'"', b'\\', &input[i..]) {
                i += off;
                if input[i] == b'"' {
                    close = Some(i);
                    break;
                }
                if i + 1 < n && matches!(input[i + 1], b'"' | b'\\') {
                    esc = true;
                    i += 2;
                } else {
                    i += 1;
                }
            }
            let Some(close) = close else {
                return Err(LineProtocolError::UnterminatedString(lossy(
                    key.get(input, &self.scratch),
                )));
            };
            let text = text_of(&mut self.scratch, input, s_start, close, esc, b"\"\\");
            (RawValue::String(text), close + 1)
        } else if let Some((f, end)) =
            scan_short_decimal(input, v_start).or_else(|| scan_plain_decimal(input, v_start))
        {
            (RawValue::Float(f), end)
        } else {
            let mut i = v_start;
            while i < n && input[i] != b',' && input[i] != b' ' {
                i += 1;
            }
            if i == v_start {
                return Err(LineProtocolError::EmptyFieldValue(lossy(
                    key.get(input, &self.scratch),
                )));
            }
            let value = parse_scalar(key.get(input, &self.scratch), &input[v_start..i])?;
            (value, i)
        };
        Ok((value, v_end))
    }

    /// What follows a value that ends at `v_end`: `Some(start of the next
    /// key)` after a comma, `None` at a space or the end of the fields, or
    /// the error for a closing quote followed by other text.
    #[inline(always)]
    fn after_value(
        &self,
        input: &[u8],
        key: Text,
        v_start: usize,
        v_end: usize,
    ) -> Result<Option<usize>> {
        let n = input.len();
        if v_end >= n {
            return Ok(None);
        }
        match input[v_end] {
            b',' => Ok(Some(v_end + 1)),
            b' ' => Ok(None),
            _ => Err(LineProtocolError::InvalidFieldValue {
                key: lossy(key.get(input, &self.scratch)),
                value: lossy(&input[v_start..(v_end + 1).min(n)]),
                why: "unexpected text after the closing quote",
            }),
        }
    }
}

#[inline]
fn is_reserved_field_key(k: &[u8]) -> bool {
    // Length first: most keys are neither 4 nor 9 bytes long.
    matches!(k.len(), 4 | 9)
        && RESERVED_FIELD_KEYS
            .iter()
            .any(|r| same_bytes(r.as_bytes(), k))
}

/// Value of 8 ASCII digits read as a little-endian word, or `None` when
/// one of the bytes is not a digit (the SWAR digit test and conversion
/// used by fast float parsers).
#[inline(always)]
fn eight_digits(word: u64) -> Option<u64> {
    if non_digits(word) != 0 {
        return None;
    }
    Some(eight_digits_value(word))
}

/// Value of 8 ASCII digits read as a little-endian word.
#[inline(always)]
fn eight_digits_value(word: u64) -> u64 {
    digits_value(word.wrapping_sub(0x3030_3030_3030_3030))
}

/// Value of eight digit values (0 to 9, one per byte, the first digit in
/// the lowest byte).
#[inline(always)]
fn digits_value(digits: u64) -> u64 {
    // The first digit is the lowest byte: fold pairs, then quads, then halves.
    let v = digits.wrapping_mul(10).wrapping_add(digits >> 8);
    let lo = (v & 0x0000_00FF_0000_00FF).wrapping_mul(100 + (1_000_000 << 32));
    let hi = ((v >> 16) & 0x0000_00FF_0000_00FF).wrapping_mul(1 + (10_000 << 32));
    lo.wrapping_add(hi) >> 32
}

/// The common timestamp: 1 to 19 digits up to the end of the line, within
/// int64. Anything else (a sign, trailing blanks, errors) returns `None`
/// and takes the general path, which gives the same value or the error.
#[inline]
fn fast_timestamp(t: &[u8]) -> Option<i64> {
    if t.is_empty() || t.len() > 19 {
        return None;
    }
    let mut v: u64 = 0;
    let mut rest = t;
    while let Some((chunk, tail)) = rest.split_first_chunk::<8>() {
        v = v * 100_000_000 + eight_digits(u64::from_le_bytes(*chunk))?;
        rest = tail;
    }
    for &b in rest {
        let d = b.wrapping_sub(b'0');
        if d >= 10 {
            return None;
        }
        v = v * 10 + u64::from(d);
    }
    i64::try_from(v).ok()
}

#[inline]
fn parse_timestamp(t: &[u8]) -> Result<i64> {
    let (neg, digits) = match t.first() {
        Some(b'-') => (true, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(LineProtocolError::InvalidTimestamp(lossy(t)));
    }
    if digits.len() > 19 {
        return Err(LineProtocolError::TimestampTooLarge(lossy(t)));
    }
    // Accumulated with the sign so that i64::MIN parses too (an int64; the
    // range check comes with the precision, in `Precision::to_nanos`).
    let mut v: i64 = 0;
    for &d in digits {
        let d = i64::from(d - b'0');
        v = v
            .checked_mul(10)
            .and_then(|v| {
                if neg {
                    v.checked_sub(d)
                } else {
                    v.checked_add(d)
                }
            })
            .ok_or_else(|| LineProtocolError::TimestampTooLarge(lossy(t)))?;
    }
    Ok(v)
}

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

#[cfg(test)]
#[path = "lineproto_reference.rs"]
mod reference;

#[cfg(test)]
#[path = "lineproto_tests.rs"]
mod tests;
