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
    /// Whether the last raw series is its own canonical key.
    raw_is_key: bool,
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

    /// Whether the raw series, as written, is already its canonical key
    /// (no backslash, tags sorted, no `=` inside a tag value): most
    /// writers send exactly that, and then the key need not be rebuilt and
    /// the `series_id` is the XXH3 of the raw bytes. `false` only means
    /// "build it": it may still be equal.
    pub fn raw_is_canonical_key(&self) -> bool {
        self.parser.raw_is_key
    }
}

impl SeriesParser {
    /// Parses a raw series (from [`split_series`]); `raw` must be UTF-8.
    pub fn parse<'p>(&'p mut self, raw: &'p [u8]) -> Result<Series<'p>> {
        self.tags.clear();
        self.scratch.clear();
        self.measurement = None;
        self.raw_is_key = false;
        let m = scan_measurement(raw);
        if m.end == 0 {
            return Err(LineProtocolError::MissingMeasurement);
        }
        self.measurement = Some(text_of(
            &mut self.scratch,
            raw,
            0,
            m.end,
            m.escaped,
            MEASUREMENT_ESCAPES,
        ));
        let (mut any_escape, mut odd) = (m.escaped, m.odd);
        let mut pos = m.end;
        while pos < raw.len() {
            // raw[pos] == ',': a tag follows.
            let tag = self.parse_tag(raw, pos + 1)?;
            any_escape |= tag.escaped;
            odd |= tag.odd;
            pos = tag.end;
        }
        let sorted = self.sort_tags(raw)?;
        self.raw_is_key = sorted && !any_escape && !odd;
        Ok(Series {
            input: raw,
            parser: self,
        })
    }

    /// Parses the tag whose key starts at `k_start` into `self.tags`; the
    /// scan ends where the tag's value does.
    #[inline]
    fn parse_tag(&mut self, raw: &[u8], k_start: usize) -> Result<Scan> {
        let k = scan_tag_key(raw, k_start).map_err(|stop| {
            LineProtocolError::InvalidTag(lossy(&raw[k_start..stop.min(raw.len())]))
        })?;
        let eq = k.end;
        if eq == k_start {
            return Err(LineProtocolError::EmptyTagKey);
        }
        let v_start = eq + 1;
        let v = scan_tag_value(raw, v_start);
        let key = text_of(&mut self.scratch, raw, k_start, eq, k.escaped, KEY_ESCAPES);
        if v.end == v_start {
            return Err(LineProtocolError::EmptyTagValue(lossy(
                key.get(raw, &self.scratch),
            )));
        }
        let value = text_of(
            &mut self.scratch,
            raw,
            v_start,
            v.end,
            v.escaped,
            KEY_ESCAPES,
        );
        self.tags.push((key, value));
        Ok(Scan {
            end: v.end,
            escaped: k.escaped | v.escaped,
            odd: k.odd | v.odd,
        })
    }

    /// Sorts the tags by key and refuses a key given twice; returns whether
    /// they were sorted as written.
    #[inline]
    fn sort_tags(&mut self, raw: &[u8]) -> Result<bool> {
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
        Ok(sorted)
    }
}

/// Where the scan of one part of a raw series stopped, whether it met an
/// escape, and whether it met a byte that a canonical key would escape
/// where the raw series has it unescaped (a space, only in a caller's
/// unsplit line; `=` in a tag value): `odd` says the key must be built.
#[derive(Debug, Clone, Copy)]
struct Scan {
    end: usize,
    escaped: bool,
    odd: bool,
}

/// The measurement: up to the first unescaped comma (or the end).
#[inline]
fn scan_measurement(raw: &[u8]) -> Scan {
    let mut i = 0;
    let mut escaped = false;
    let mut odd = false;
    loop {
        i = find_any(raw, i, [b',', b'\\', b' ']);
        match raw.get(i) {
            Some(b'\\') => {
                escaped = true;
                i += 2;
            }
            Some(b' ') => {
                odd = true;
                i += 1;
            }
            _ => break,
        }
    }
    Scan {
        end: i.min(raw.len()),
        escaped,
        odd,
    }
}

/// A tag key from `start` up to its unescaped `=` (`end` is the `=`), or
/// `Err(where the key stopped)` when a comma or the end comes first.
#[inline]
fn scan_tag_key(raw: &[u8], start: usize) -> std::result::Result<Scan, usize> {
    let mut i = start;
    let mut escaped = false;
    let mut odd = false;
    loop {
        i = find_any(raw, i, [b'=', b',', b'\\', b' ']);
        if i >= raw.len() {
            return Err(i);
        }
        match raw[i] {
            b'\\' => {
                escaped = true;
                i += 2;
            }
            b' ' => {
                odd = true;
                i += 1;
            }
            b'=' => {
                return Ok(Scan {
                    end: i,
                    escaped,
                    odd,
                })
            }
            _ => return Err(i),
        }
    }
}

/// A tag value from `start` up to the next unescaped comma (or the end).
#[inline]
fn scan_tag_value(raw: &[u8], start: usize) -> Scan {
    let mut i = start;
    let mut escaped = false;
    let mut odd = false;
    loop {
        i = find_any(raw, i, [b',', b'\\', b'=', b' ']);
        match raw.get(i) {
            Some(b'\\') => {
                escaped = true;
                i += 2;
            }
            Some(b'=' | b' ') => {
                odd = true;
                i += 1;
            }
            _ => break,
        }
    }
    Scan {
        end: i.min(raw.len()),
        escaped,
        odd,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(p: &mut SeriesParser, raw: &[u8]) -> Option<(bool, Vec<u8>)> {
        let s = p.parse(raw).ok()?;
        let mut key = Vec::new();
        s.canonical_key_into(&mut key);
        Some((s.raw_is_canonical_key(), key))
    }

    #[test]
    fn raw_is_the_key_only_when_it_equals_the_built_key() {
        let mut p = SeriesParser::default();
        for (raw, want) in [
            ("cpu", true),
            ("cpu,host=a,region=eu", true),
            ("cpu,region=eu,host=a", false), // unsorted
            ("cpu,host=a=b", false),         // `=` in a value is escaped
            ("c=pu,host=a", true),           // `=` in a measurement stays
            ("cpu,host=a b", false),         // a space is escaped
            ("cpu,host=a\\,b", false),       // an escape
            ("cpu,host=a\\b", false),        // a literal backslash
        ] {
            let (is_key, key) = canonical(&mut p, raw.as_bytes()).unwrap();
            assert_eq!(is_key, want, "{raw}");
            if is_key {
                assert_eq!(key, raw.as_bytes());
            }
        }
        // Random spellings: whenever the parser says so, the raw bytes are
        // the canonical key byte for byte.
        let alphabet = b"ab,=\\ xz";
        let mut x: u64 = 11;
        let mut claimed = 0;
        for _ in 0..200_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let len = 1 + (x >> 60) as usize;
            let raw: Vec<u8> = (0..len)
                .map(|i| alphabet[((x >> (i * 3 % 58)) & 7) as usize])
                .collect();
            if let Some((true, key)) = canonical(&mut p, &raw) {
                claimed += 1;
                assert_eq!(key, raw, "{:?}", String::from_utf8_lossy(&raw));
            }
        }
        assert!(claimed > 1_000, "the property was exercised: {claimed}");
    }
}
