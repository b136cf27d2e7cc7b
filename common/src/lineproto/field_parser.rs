//! The fields and timestamp part of a line.

use super::error::{LineProtocolError, Result};
use super::field_value::{FieldValue, RESERVED_FIELD_KEYS};
use super::text::{lossy, text_of, Text, KEY_ESCAPES};
use super::values::{
    fast_timestamp, parse_scalar, parse_timestamp, scan_plain_decimal, scan_short_decimal, RawValue,
};
use crate::scan::{same_bytes, skip_key_bytes};

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

impl FieldParser {
    /// Parses `rest` (the part after the series, from [`split_series`](super::split_series)):
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
            let known = if as_layout {
                layout_key_at(input, pos, layout, self.fields.len())
            } else {
                None
            };
            if let Some(eq) = known {
                // The layout's key, followed by '=': exactly what the scan
                // below would find, and checked before.
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
            let (eq, k_esc) = scan_field_key(input, pos)?;
            let key = text_of(&mut self.scratch, input, pos, eq, k_esc, KEY_ESCAPES);
            let v_start = eq + 1;
            let (value, v_end) = self.parse_value(input, key, v_start)?;
            self.check_new_key(input, key)?;
            self.fields.push((key, value));
            match self.after_value(input, key, v_start, v_end)? {
                Some(next) => pos = next,
                None => {
                    pos = v_end.min(n);
                    break;
                }
            }
        }
        let timestamp = trailing_timestamp(input, pos)?;
        Ok((timestamp, as_layout && self.fields.len() == layout.len()))
    }

    /// Refuses a scanned key that is reserved or that the line already has.
    #[inline(always)]
    fn check_new_key(&self, input: &[u8], key: Text) -> Result<()> {
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
        Ok(())
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

/// The index of the `=` after the key at `pos` when that key is `layout`'s
/// key number `index`, spelled the same.
#[inline(always)]
fn layout_key_at(input: &[u8], pos: usize, layout: &KeyLayout, index: usize) -> Option<usize> {
    let k = layout.key(index)?;
    let end = pos + k.len();
    (end < input.len() && input[end] == b'=' && same_bytes(&input[pos..end], k)).then_some(end)
}

/// Scans the field key at `k_start` up to its unescaped `=`: the `=`'s
/// index and whether the key had escapes.
#[inline(always)]
fn scan_field_key(input: &[u8], k_start: usize) -> Result<(usize, bool)> {
    let n = input.len();
    let mut i = k_start;
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
    Ok((eq, k_esc))
}

/// The optional timestamp after the fields, which end at `pos`.
#[inline(always)]
fn trailing_timestamp(input: &[u8], mut pos: usize) -> Result<Option<i64>> {
    let n = input.len();
    while pos < n && input[pos] == b' ' {
        pos += 1;
    }
    if pos == n {
        return Ok(None);
    }
    if let Some(t) = fast_timestamp(&input[pos..]) {
        return Ok(Some(t));
    }
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
    parse_timestamp(t).map(Some)
}

#[inline]
fn is_reserved_field_key(k: &[u8]) -> bool {
    // Length first: most keys are neither 4 nor 9 bytes long.
    matches!(k.len(), 4 | 9)
        && RESERVED_FIELD_KEYS
            .iter()
            .any(|r| same_bytes(r.as_bytes(), k))
}
