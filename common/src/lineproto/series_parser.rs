//! The series part of a line (`measurement,tag=value...`).

use super::error::{LineProtocolError, Result};
use super::text::{lossy, text_of, Text, KEY_ESCAPES, MEASUREMENT_ESCAPES};
use crate::scan::find_any;

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
