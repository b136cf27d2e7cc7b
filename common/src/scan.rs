//! Byte scans a word at a time (SWAR: eight bytes in a `u64`), shared by
//! the line protocol parser and the series key builder: finding the end of
//! a token, recognising digits and converting them, comparing short keys.

/// Bytes that end a field key or escape inside it: `=`, `,`, space, `\`.
pub(crate) static FIELD_KEY_STOP: [bool; 256] = {
    let mut t = [false; 256];
    t[b'=' as usize] = true;
    t[b',' as usize] = true;
    t[b' ' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// Byte equality for short strings (keys), inlined: comparing a field key
/// through a `memcmp` call costs more than the comparison itself.
#[inline(always)]
pub fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n < 8 {
        return a.iter().zip(b).all(|(x, y)| x == y);
    }
    let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("8 bytes"));
    let mut at = 0;
    while at + 8 <= n {
        if word(a, at) != word(b, at) {
            return false;
        }
        at += 8;
    }
    // The rest as the last eight bytes (overlapping the words compared):
    // comparing a remainder slice called `bcmp` (issue 18, 1M-series profile).
    at == n || word(a, n - 8) == word(b, n - 8)
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Eight bytes of `input` from `at` as a little-endian word (first byte
/// lowest), if there are eight.
#[inline(always)]
pub(crate) fn word_at(input: &[u8], at: usize) -> Option<u64> {
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
pub(crate) fn skip_key_bytes(input: &[u8], mut i: usize) -> usize {
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
pub(crate) fn non_digits(word: u64) -> u64 {
    (word.wrapping_sub(0x3030_3030_3030_3030) | word.wrapping_add(0x4646_4646_4646_4646))
        & 0x8080_8080_8080_8080
}

/// Value of the first `k` (1 to 7) bytes of `word`, all ASCII digits.
#[inline(always)]
pub(crate) fn leading_digits_value(word: u64, k: usize) -> u64 {
    // Digit values, moved to the top: the bytes shifted in are zeros (the
    // same value), and the bytes shifted out (after the digits, where a
    // borrow may have started) do not matter.
    digits_value(word.wrapping_sub(0x3030_3030_3030_3030) << (8 * (8 - k) as u32))
}

/// Value of 8 ASCII digits read as a little-endian word, or `None` when
/// one of the bytes is not a digit (the SWAR digit test and conversion
/// used by fast float parsers).
#[inline(always)]
pub(crate) fn eight_digits(word: u64) -> Option<u64> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_bytes_agrees_with_slice_equality() {
        // Every length up to three words, equal and differing at each byte.
        for n in 0..=24usize {
            let a: Vec<u8> = (0..n as u8).map(|i| i.wrapping_mul(37)).collect();
            assert!(same_bytes(&a, &a.clone()), "{n}");
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 0x40;
                assert!(!same_bytes(&a, &b), "{n} differing at {at}");
            }
            assert!(!same_bytes(&a, &a[..n.saturating_sub(1)]) || n == 0);
        }
    }
}
