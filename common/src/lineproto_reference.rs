//! The line protocol parser as it was before the single-pass rewrite
//! (issue #4), kept verbatim for tests only: the differential tests in
//! `lineproto_tests.rs` check that the fast parser accepts and rejects
//! exactly the same lines, with the same values and the same errors.
#![allow(dead_code)]

// Helpers the rewrite left unchanged are shared, not copied: the
// differential tests exercise the scanning and tokenizing that changed.
use super::{
    fast_decimal, is_integer_text, lossy, parse_timestamp, FieldValue, LineProtocolError,
    OwnedPoint, Result, RESERVED_FIELD_KEYS,
};

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

/// Iterates the lines of a body as `(line_number, line)`, 1-based, skipping
/// empty lines and `#` comments, with a trailing `\r` and leading blanks
/// removed.
pub fn lines(body: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    body.split(|&b| b == b'\n')
        .enumerate()
        .filter_map(|(i, line)| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let start = line.iter().position(|&b| b != b' ' && b != b'\t')?;
            let line = &line[start..];
            if line[0] == b'#' {
                None
            } else {
                Some((i + 1, line))
            }
        })
}

/// Splits a line at its first unescaped space: `(raw series, rest)`. The raw
/// series (`measurement,tag=value...`, still escaped) identifies a series as
/// written and can key a cache; `rest` holds fields and timestamp.
#[inline]
pub fn split_series(line: &[u8]) -> Result<(&[u8], &[u8])> {
    let mut i = 0;
    while i < line.len() {
        match line[i] {
            b'\\' => i += 2,
            b' ' => {
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
            _ => i += 1,
        }
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
        while i < raw.len() {
            match raw[i] {
                b'\\' => {
                    escaped = true;
                    i += 2;
                }
                b',' => break,
                _ => i += 1,
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
            while i < raw.len() {
                match raw[i] {
                    b'\\' => {
                        k_esc = true;
                        i += 2;
                    }
                    b'=' => {
                        eq = Some(i);
                        break;
                    }
                    b',' => break,
                    _ => i += 1,
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
            while i < raw.len() {
                match raw[i] {
                    b'\\' => {
                        v_esc = true;
                        i += 2;
                    }
                    b',' => break,
                    _ => i += 1,
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
    pub fn len(&self) -> usize {
        self.parser.fields.len()
    }

    pub fn is_empty(&self) -> bool {
        self.parser.fields.is_empty()
    }

    /// Fields in line order as `(unescaped key, value)`.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&'p [u8], FieldValue<'p>)> + Clone + '_ {
        let (input, scratch) = (self.input, self.parser.scratch.as_slice());
        self.parser.fields.iter().map(move |(k, v)| {
            let value = match *v {
                RawValue::Float(f) => FieldValue::Float(f),
                RawValue::Integer(i) => FieldValue::Integer(i),
                RawValue::Unsigned(u) => FieldValue::Unsigned(u),
                RawValue::Boolean(b) => FieldValue::Boolean(b),
                // The line was checked to be UTF-8 and unescaping only removes
                // ASCII backslashes, so this cannot fail; stay safe anyway.
                RawValue::String(t) => {
                    FieldValue::String(std::str::from_utf8(t.get(input, scratch)).unwrap_or(""))
                }
            };
            (k.get(input, scratch), value)
        })
    }
}

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

impl FieldParser {
    /// Parses `rest` (the part after the series, from [`split_series`]):
    /// `field=value[,field=value...][ timestamp]`. `rest` must be UTF-8.
    pub fn parse<'p>(&'p mut self, rest: &'p [u8]) -> Result<Fields<'p>> {
        self.fields.clear();
        self.scratch.clear();
        let input = rest;
        let n = input.len();
        let mut pos = 0;
        loop {
            // Key: up to an unescaped '='.
            let k_start = pos;
            let mut i = pos;
            let mut k_esc = false;
            let mut eq = None;
            while i < n {
                match input[i] {
                    b'\\' => {
                        k_esc = true;
                        i += 2;
                    }
                    b'=' => {
                        eq = Some(i);
                        break;
                    }
                    b',' | b' ' => break,
                    _ => i += 1,
                }
            }
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
            let (value, v_end) = if v_start < n && input[v_start] == b'"' {
                // Quoted string: `\"` and `\\` are escapes; spaces, commas
                // and equals signs are literal.
                let s_start = v_start + 1;
                let mut i = s_start;
                let mut esc = false;
                let mut close = None;
                while i < n {
                    match input[i] {
                        b'\\' if i + 1 < n && matches!(input[i + 1], b'"' | b'\\') => {
                            esc = true;
                            i += 2;
                        }
                        b'"' => {
                            close = Some(i);
                            break;
                        }
                        _ => i += 1,
                    }
                }
                let Some(close) = close else {
                    return Err(LineProtocolError::UnterminatedString(lossy(
                        key.get(input, &self.scratch),
                    )));
                };
                let text = text_of(&mut self.scratch, input, s_start, close, esc, b"\"\\");
                (RawValue::String(text), close + 1)
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
            {
                let k = key.get(input, &self.scratch);
                if RESERVED_FIELD_KEYS.iter().any(|r| r.as_bytes() == k) {
                    return Err(LineProtocolError::ReservedFieldKey(lossy(k)));
                }
                // Lines carry a handful of fields: a linear scan beats hashing.
                if self
                    .fields
                    .iter()
                    .any(|(t, _)| t.get(input, &self.scratch) == k)
                {
                    return Err(LineProtocolError::DuplicateField(lossy(k)));
                }
            }
            self.fields.push((key, value));
            if v_end >= n {
                pos = n;
                break;
            }
            match input[v_end] {
                b',' => pos = v_end + 1,
                b' ' => {
                    pos = v_end;
                    break;
                }
                _ => {
                    // A closing quote followed by something other than ',' / ' '.
                    return Err(LineProtocolError::InvalidFieldValue {
                        key: lossy(key.get(input, &self.scratch)),
                        value: lossy(&input[v_start..(v_end + 1).min(n)]),
                        why: "unexpected text after the closing quote",
                    });
                }
            }
        }
        // Optional timestamp.
        while pos < n && input[pos] == b' ' {
            pos += 1;
        }
        let timestamp = if pos < n {
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
        } else {
            None
        };
        Ok(Fields {
            input,
            parser: self,
            timestamp,
        })
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
