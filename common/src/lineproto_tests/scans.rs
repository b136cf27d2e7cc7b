//! The word-at-a-time scans (digits, key stops, decimals, timestamps, UTF-8)
//! against their byte-at-a-time equivalents.

use super::generator::Rng;
use crate::lineproto::*;

#[test]
fn timestamps_on_the_fast_path_match_the_general_path() {
    for t in [
        "0",
        "7",
        "12345678",
        "123456789",
        "1234567812345678",
        "1700000000000000000",
        "9223372036854775807",
    ] {
        assert_eq!(
            fast_timestamp(t.as_bytes()),
            parse_timestamp(t.as_bytes()).ok(),
            "{t}"
        );
    }
    for t in [
        "9223372036854775808",
        "9999999999999999999",
        "1234567a",
        "12345678/",
        ":",
        "",
        "-1",
    ] {
        assert_eq!(
            fast_timestamp(t.as_bytes()),
            None,
            "{t:?} leaves the fast path"
        );
    }
}

#[test]
fn word_digit_test_finds_the_first_non_digit() {
    // Every byte value at every position, after digits and before any bytes.
    let mut rng = Rng(3);
    for b in 0..=255u8 {
        for pos in 0..8 {
            for _ in 0..8 {
                let mut bytes = [0u8; 8];
                for (i, x) in bytes.iter_mut().enumerate() {
                    *x = if i < pos {
                        b'0' + rng.below(10) as u8
                    } else {
                        rng.below(256) as u8
                    };
                }
                bytes[pos] = b;
                let word = u64::from_le_bytes(bytes);
                let first = bytes.iter().position(|x| !x.is_ascii_digit()).unwrap_or(8);
                assert_eq!(
                    (non_digits(word).trailing_zeros() / 8) as usize,
                    first,
                    "{bytes:?}"
                );
                assert_eq!(eight_digits(word).is_some(), first == 8, "{bytes:?}");
            }
        }
    }
}

#[test]
fn key_scan_finds_the_first_stop_byte() {
    let mut rng = Rng(5);
    const BYTES: &[u8] = b"ab_=, \\\xc3\xbc\x7f\x80\xff9";
    for _ in 0..50_000 {
        let len = rng.below(24);
        let input: Vec<u8> = (0..len).map(|_| BYTES[rng.below(BYTES.len())]).collect();
        let start = rng.below(len + 1);
        let want = (start..len)
            .find(|&i| FIELD_KEY_STOP[input[i] as usize])
            .unwrap_or(len);
        assert_eq!(
            skip_key_bytes(&input, start),
            want,
            "{input:?} from {start}"
        );
    }
}

#[test]
fn word_decimal_scan_agrees_with_the_byte_scan() {
    let mut rng = Rng(11);
    const BYTES: &[u8] = b"0123456789012345678901234567890123456789..-+, ie";
    let mut fast = 0;
    for _ in 0..300_000 {
        let len = rng.below(20);
        let input: Vec<u8> = (0..len).map(|_| BYTES[rng.below(BYTES.len())]).collect();
        let start = rng.below(len + 1);
        if let Some((f, end)) = scan_short_decimal(&input, start) {
            fast += 1;
            let (g, end2) = scan_plain_decimal(&input, start)
                .unwrap_or_else(|| panic!("{input:?} from {start}: byte scan refuses"));
            assert_eq!(
                (f.to_bits(), end),
                (g.to_bits(), end2),
                "{input:?} from {start}"
            );
        }
    }
    assert!(fast > 10_000, "the word scan took only {fast} values");
}

#[test]
fn body_utf8_check_agrees_with_the_standard_library() {
    let mut rng = Rng(23);
    // ASCII, 2/3/4-byte characters, their pieces, overlongs, surrogates.
    const PIECES: &[&[u8]] = &[
        b"cpu v=1\n",
        b"a",
        "ü".as_bytes(),
        "✓".as_bytes(),
        "𝄞".as_bytes(),
        b"\xc3",
        b"\xe2\x9c",
        b"\xf0\x9d\x84",
        b"\x80",
        b"\xc0\xaf",
        b"\xed\xa0\x80",
        b"\xf4\x90\x80\x80",
        b"\xff",
    ];
    for _ in 0..50_000 {
        let mut body = Vec::new();
        // Long ASCII runs reach the vectorised path, short ones the tail.
        for _ in 0..rng.below(40) {
            let piece = if rng.below(4) == 0 {
                PIECES[rng.below(PIECES.len())]
            } else {
                PIECES[rng.below(4)]
            };
            body.extend_from_slice(piece);
        }
        assert_eq!(
            is_utf8(&body),
            std::str::from_utf8(&body).is_ok(),
            "{body:?}"
        );
    }
}
