//! Field values and timestamps from their text: the general parsers and
//! the fast paths for the common plain decimal and timestamp.

use super::error::{LineProtocolError, Result};
use super::text::{lossy, Text};
use crate::scan::{eight_digits, leading_digits_value, non_digits, word_at};

#[derive(Debug, Clone, Copy)]
pub(super) enum RawValue {
    Float(f64),
    Integer(i64),
    Unsigned(u64),
    String(Text),
    Boolean(bool),
}

#[inline]
pub(super) fn parse_scalar(key: &[u8], v: &[u8]) -> Result<RawValue> {
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
pub(super) fn fast_decimal(v: &[u8]) -> Option<f64> {
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

pub(super) fn is_integer_text(s: &str) -> bool {
    let d = s.strip_prefix(['-', '+']).unwrap_or(s);
    !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())
}

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
pub(super) fn scan_plain_decimal(input: &[u8], start: usize) -> Option<(f64, usize)> {
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

/// Powers of ten as integers, for joining integer and fraction digits.
const POW10_U64: [u64; 8] = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000];

/// [`scan_plain_decimal`] for the usual short value (at most 7 integer and
/// 7 fraction digits with 8 readable bytes after each part), a word at a
/// time and without a loop, so a value's length costs no mispredicted
/// branch. Returns `None` whenever it is not sure, and the caller then
/// runs [`scan_plain_decimal`]; both compute `mantissa / 10^scale` from the
/// same digits, so the results are identical.
#[inline(always)]
pub(super) fn scan_short_decimal(input: &[u8], start: usize) -> Option<(f64, usize)> {
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

/// The common timestamp: 1 to 19 digits up to the end of the line, within
/// int64. Anything else (a sign, trailing blanks, errors) returns `None`
/// and takes the general path, which gives the same value or the error.
#[inline]
pub(super) fn fast_timestamp(t: &[u8]) -> Option<i64> {
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
pub(super) fn parse_timestamp(t: &[u8]) -> Result<i64> {
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
