//! Bounded random testing with a fixed seed: token soup and single-character
//! mutations of the conformance inputs. Nothing may panic; whatever parses
//! must round-trip through `Display`; errors must point inside the input.

use shardhouse_influxql::parse;

use crate::{all_invalid, all_valid, round_trip};

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const VOCABULARY: &[&str] = &[
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP",
    "BY",
    "ORDER",
    "LIMIT",
    "OFFSET",
    "SLIMIT",
    "SOFFSET",
    "SHOW",
    "TAG",
    "KEYS",
    "VALUES",
    "WITH",
    "KEY",
    "MEASUREMENTS",
    "MEASUREMENT",
    "FIELD",
    "SERIES",
    "CARDINALITY",
    "EXACT",
    "DATABASES",
    "RETENTION",
    "POLICIES",
    "POLICY",
    "ON",
    "CREATE",
    "DROP",
    "DELETE",
    "DATABASE",
    "DURATION",
    "REPLICATION",
    "SHARD",
    "NAME",
    "INF",
    "DEFAULT",
    "ALTER",
    "EXPLAIN",
    "ANALYZE",
    "INTO",
    "AS",
    "AND",
    "OR",
    "IN",
    "DESC",
    "ASC",
    "DISTINCT",
    "true",
    "false",
    "time",
    "now",
    "fill",
    "tz",
    "null",
    "none",
    "linear",
    "previous",
    "mean",
    "count",
    "top",
    "percentile",
    "derivative",
    "moving_average",
    "host",
    "value",
    "cpu",
    "\"quoted id\"",
    "\"a\\\"b\"",
    "'str'",
    "'it\\'s'",
    "'2024-01-01T00:00:00Z'",
    "0",
    "1",
    "42",
    "-1",
    "1.5",
    ".5",
    "18446744073709551616",
    "10s",
    "1m",
    "1h",
    "100ms",
    "1µ",
    "1d",
    "1w",
    "1795385275890ms",
    "/re/",
    "/a\\/b/",
    "/(/",
    "$p",
    "$",
    "(",
    ")",
    ",",
    ";",
    ".",
    "..",
    ":",
    "::",
    "::field",
    "::tag",
    ":MEASUREMENT",
    "*",
    "+",
    "-",
    "/",
    "%",
    "&",
    "|",
    "^",
    "=",
    "!=",
    "<>",
    "<",
    "<=",
    ">",
    ">=",
    "=~",
    "!~",
    "!",
    "--",
    "/*",
    "*/",
    "'",
    "\"",
    "\\",
    "\n",
    "é",
    "🙂",
    "\u{0}",
];

fn check(input: &str) {
    match parse(input) {
        Ok(_) => {
            if let Err(e) = round_trip(input) {
                panic!("{e}");
            }
        }
        Err(e) => {
            let offset = e.position.offset;
            assert!(
                offset <= input.len() && input.is_char_boundary(offset),
                "{input:?}: error offset {offset} outside the input: {e}"
            );
            assert!(e.position.line >= 1 && e.position.column >= 1);
            assert!(!e.to_string().is_empty());
        }
    }
}

#[test]
fn random_token_soup_never_panics() {
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    for _ in 0..20_000 {
        let len = 1 + rng.below(24);
        let mut input = String::new();
        if rng.below(2) == 0 {
            input.push_str(rng.pick::<&str>(&["SELECT ", "SHOW ", "CREATE ", "DROP ", "DELETE "]));
        }
        for _ in 0..len {
            input.push_str(rng.pick::<&str>(VOCABULARY));
            input.push_str(rng.pick::<&str>(&[" ", " ", " ", "", "\t", "\n"]));
        }
        check(&input);
    }
}

#[test]
fn mutated_conformance_inputs_never_panic() {
    let mut rng = Rng(0xC0FF_EE00_1234_5678);
    let mut inputs: Vec<&str> = all_valid().iter().map(|(i, _)| *i).collect();
    inputs.extend(all_invalid().iter().map(|(i, ..)| *i));
    let pool: Vec<char> = "()[],;.:*+-/%&|^=!<>~'\"\\$ _aZ09µé\n".chars().collect();
    for _ in 0..20_000 {
        let mut chars: Vec<char> = rng.pick(&inputs).chars().collect();
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(chars.len() + 1);
            match rng.below(3) {
                0 => chars.insert(at, *rng.pick(&pool)),
                1 if at < chars.len() => {
                    chars.remove(at);
                }
                _ if at < chars.len() => chars[at] = *rng.pick(&pool),
                _ => {}
            }
        }
        check(&chars.into_iter().collect::<String>());
    }
}
