//! A deterministic generator of line-protocol lines, valid and broken, for
//! the differential tests.

/// Tiny deterministic generator for the differential tests.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub(super) fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// Pieces that exercise every branch of the parsers: escapes, quotes,
/// non-ASCII text, every value type, edge numbers and broken syntax. The
/// first `*_VALID` entries of each list are valid on their own, so clean
/// lines (half of them) mostly parse.
const NAMES: &[&str] = &[
    "cpu",
    "m",
    "disk\\ free",
    "a\\,b",
    "a=b",
    "ünï",
    "my\\\\m",
    "k\\=v",
    "x\\",
    "",
    "#c",
];
const NAMES_VALID: usize = 8;
const TAG_TEXT: &[&str] = &[
    "host",
    "a",
    "eu-west",
    "v\\ 1",
    "k\\,2",
    "k\\=3",
    "C:\\dir\\file",
    "\"x\"",
    "ü✓",
    "b",
    "time",
    "",
    "=",
];
const TAG_TEXT_VALID: usize = 11;
const FIELD_KEYS: &[&str] = &[
    "v",
    "value",
    "usage_idle",
    "f\\ 1",
    "f\\,2",
    "f\\=3",
    "ü",
    "a",
    "time",
    "series_id",
    "",
    "x\\",
];
const FIELD_KEYS_VALID: usize = 8;
const VALUES: &[&str] = &[
    "1",
    "-1.5",
    "123.456",
    "+2",
    "1.",
    ".5",
    "-0",
    "0.000000000000001",
    "123456789012345",
    "1234567890123456",
    "1.23456789012345678",
    "-1.5e10",
    "1E-3",
    "42i",
    "-42i",
    "9223372036854775807i",
    "42u",
    "t",
    "TRUE",
    "False",
    "\"hello, world = yes\"",
    "\"say \\\"hi\\\"\"",
    "\"back\\\\slash\"",
    "\"ünïcødé ✓\"",
    "\"\"",
    "1e400",
    "1.2.3",
    "1x",
    "inf",
    "nan",
    "-",
    ".",
    "9223372036854775808i",
    "1.5i",
    "i",
    "-1u",
    "18446744073709551616u",
    "tru",
    "yes",
    "\"open",
    "\"a\"b",
    "\"a\\\"",
    "",
];
const VALUES_VALID: usize = 25;
const TIMESTAMPS: &[&str] = &[
    "",
    " 1700000000000000000",
    " 9223372036854775807",
    " 12345678",
    " 1234567",
    " 123456789",
    " -5",
    " 0",
    " 123  ",
    " 12\t",
    "  7",
    " 9223372036854775808",
    " 99999999999999999999",
    " 1.5",
    " abc",
    " 1 2",
    " 1234567a",
    " 12345678a",
];
const TIMESTAMPS_VALID: usize = 11;

pub(super) fn random_line(rng: &mut Rng) -> Vec<u8> {
    let clean = rng.below(2) == 0;
    let pick = |rng: &mut Rng, items: &[&'static str], valid: usize| {
        if clean {
            items[rng.below(valid)]
        } else {
            rng.pick(items)
        }
    };
    let mut line = std::string::String::new();
    line.push_str(pick(rng, NAMES, NAMES_VALID));
    for _ in 0..rng.below(4) {
        line.push(',');
        line.push_str(pick(rng, TAG_TEXT, TAG_TEXT_VALID));
        if clean || rng.below(10) > 0 {
            line.push('=');
        }
        line.push_str(pick(rng, TAG_TEXT, TAG_TEXT_VALID));
    }
    line.push_str(if rng.below(8) == 0 { "  " } else { " " });
    for i in 0..1 + rng.below(4) {
        if i > 0 {
            line.push(',');
        }
        line.push_str(pick(rng, FIELD_KEYS, FIELD_KEYS_VALID));
        if clean || rng.below(12) > 0 {
            line.push('=');
        }
        line.push_str(pick(rng, VALUES, VALUES_VALID));
    }
    line.push_str(pick(rng, TIMESTAMPS, TIMESTAMPS_VALID));
    let mut bytes = line.into_bytes();
    if clean {
        return bytes;
    }
    // Mutations reach what the grammar does not: stray specials, cut lines,
    // invalid UTF-8.
    for _ in 0..rng.below(3) {
        const SPECIAL: &[u8] = b" ,=\\\"\t#0.-iu\xff\xc3";
        let at = rng.below(bytes.len() + 1);
        match rng.below(3) {
            0 => bytes.insert(at, SPECIAL[rng.below(SPECIAL.len())]),
            1 if at < bytes.len() => {
                bytes.remove(at);
            }
            _ => bytes.truncate(at),
        }
    }
    bytes
}
