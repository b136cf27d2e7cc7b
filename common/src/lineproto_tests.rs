//! Line protocol conformance: every escaping and type rule, valid and invalid.

use super::*;
use OwnedFieldValue::*;

fn p(
    m: &str,
    tags: &[(&str, &str)],
    fields: &[(&str, OwnedFieldValue)],
    ts: Option<i64>,
) -> OwnedPoint {
    OwnedPoint {
        measurement: m.into(),
        tags: tags
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        fields: fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        timestamp: ts,
    }
}

#[test]
fn valid_lines_parse_as_expected() {
    let cases: Vec<(&str, OwnedPoint)> = vec![
        // Basics and the optional timestamp.
        ("cpu value=1", p("cpu", &[], &[("value", Float(1.0))], None)),
        (
            "cpu value=1 1700000000000000000",
            p(
                "cpu",
                &[],
                &[("value", Float(1.0))],
                Some(1_700_000_000_000_000_000),
            ),
        ),
        (
            "cpu value=1 -5",
            p("cpu", &[], &[("value", Float(1.0))], Some(-5)),
        ),
        (
            "cpu value=1   123  ",
            p("cpu", &[], &[("value", Float(1.0))], Some(123)),
        ),
        (
            "cpu,host=a,region=eu usage=0.5,idle=99.5 10",
            p(
                "cpu",
                &[("host", "a"), ("region", "eu")],
                &[("usage", Float(0.5)), ("idle", Float(99.5))],
                Some(10),
            ),
        ),
        // Tags come back sorted by key whatever the written order.
        (
            "cpu,region=eu,host=a,az=1 v=1",
            p(
                "cpu",
                &[("az", "1"), ("host", "a"), ("region", "eu")],
                &[("v", Float(1.0))],
                None,
            ),
        ),
        // Floats.
        ("m f=-1.5e10", p("m", &[], &[("f", Float(-1.5e10))], None)),
        ("m f=1E-3", p("m", &[], &[("f", Float(1e-3))], None)),
        ("m f=.5", p("m", &[], &[("f", Float(0.5))], None)),
        ("m f=+2", p("m", &[], &[("f", Float(2.0))], None)),
        ("m f=1.", p("m", &[], &[("f", Float(1.0))], None)),
        // Integers and unsigned integers.
        ("m i=42i", p("m", &[], &[("i", Integer(42))], None)),
        ("m i=-42i", p("m", &[], &[("i", Integer(-42))], None)),
        (
            "m i=9223372036854775807i",
            p("m", &[], &[("i", Integer(i64::MAX))], None),
        ),
        (
            "m i=-9223372036854775808i",
            p("m", &[], &[("i", Integer(i64::MIN))], None),
        ),
        ("m u=42u", p("m", &[], &[("u", Unsigned(42))], None)),
        (
            "m u=18446744073709551615u",
            p("m", &[], &[("u", Unsigned(u64::MAX))], None),
        ),
        // Booleans, every spelling.
        (
            "m a=t,b=T,c=true,d=True,e=TRUE",
            p(
                "m",
                &[],
                &[
                    ("a", Boolean(true)),
                    ("b", Boolean(true)),
                    ("c", Boolean(true)),
                    ("d", Boolean(true)),
                    ("e", Boolean(true)),
                ],
                None,
            ),
        ),
        (
            "m a=f,b=F,c=false,d=False,e=FALSE",
            p(
                "m",
                &[],
                &[
                    ("a", Boolean(false)),
                    ("b", Boolean(false)),
                    ("c", Boolean(false)),
                    ("d", Boolean(false)),
                    ("e", Boolean(false)),
                ],
                None,
            ),
        ),
        // Strings: spaces, commas, equals literal; \" and \\ escapes; other
        // backslashes literal.
        (
            r#"m s="hello, world = yes" 1"#,
            p(
                "m",
                &[],
                &[("s", String("hello, world = yes".into()))],
                Some(1),
            ),
        ),
        (
            r#"m s="say \"hi\"""#,
            p("m", &[], &[("s", String(r#"say "hi""#.into()))], None),
        ),
        (
            r#"m s="back\\slash""#,
            p("m", &[], &[("s", String(r"back\slash".into()))], None),
        ),
        (
            r#"m s="lit\nnot newline""#,
            p("m", &[], &[("s", String(r"lit\nnot newline".into()))], None),
        ),
        (r#"m s="""#, p("m", &[], &[("s", String("".into()))], None)),
        (
            r#"m s="a b",x=1i"#,
            p(
                "m",
                &[],
                &[("s", String("a b".into())), ("x", Integer(1))],
                None,
            ),
        ),
        (
            r#"m s="ünïcødé ✓""#,
            p("m", &[], &[("s", String("ünïcødé ✓".into()))], None),
        ),
        // Measurement escapes: comma and space; `=` needs none; `\\` is one
        // backslash; any other backslash is literal.
        (
            r"disk\ free,path=/ v=1",
            p("disk free", &[("path", "/")], &[("v", Float(1.0))], None),
        ),
        (r"a\,b v=1", p("a,b", &[], &[("v", Float(1.0))], None)),
        (r"a=b v=1", p("a=b", &[], &[("v", Float(1.0))], None)),
        (r"my\\m v=1", p(r"my\m", &[], &[("v", Float(1.0))], None)),
        (r"my\m v=1", p(r"my\m", &[], &[("v", Float(1.0))], None)),
        // Tag key/value escapes: comma, equals, space.
        (
            r"m,k\ 1=v\ 1,k\,2=v\,2,k\=3=v\=3 f=1",
            p(
                "m",
                &[("k 1", "v 1"), ("k,2", "v,2"), ("k=3", "v=3")],
                &[("f", Float(1.0))],
                None,
            ),
        ),
        (
            r"m,path=C:\dir\file f=1",
            p("m", &[("path", r"C:\dir\file")], &[("f", Float(1.0))], None),
        ),
        // Field key escapes.
        (
            r"m f\ 1=1,f\,2=2,f\=3=3",
            p(
                "m",
                &[],
                &[
                    ("f 1", Float(1.0)),
                    ("f,2", Float(2.0)),
                    ("f=3", Float(3.0)),
                ],
                None,
            ),
        ),
        // Quotes inside tag values are literal.
        (
            r#"m,q="x" f=1"#,
            p("m", &[("q", "\"x\"")], &[("f", Float(1.0))], None),
        ),
    ];
    for (line, want) in cases {
        match parse_line(line.as_bytes()) {
            Ok(got) => assert_eq!(got, want, "line {line:?}"),
            Err(e) => panic!("line {line:?} should parse, got error: {e}"),
        }
    }
}

#[test]
fn invalid_lines_are_rejected_with_a_reason() {
    use LineProtocolError as E;
    let cases: Vec<(&str, E)> = vec![
        ("cpu", E::MissingFields),
        ("cpu ", E::MissingFields),
        ("cpu,host=a", E::MissingFields),
        (" value=1", E::MissingMeasurement),
        ("value=1", E::MissingFields),
        (",host=a v=1", E::MissingMeasurement),
        ("cpu,host v=1", E::InvalidTag("host".into())),
        ("cpu,=a v=1", E::EmptyTagKey),
        ("cpu,host= v=1", E::EmptyTagValue("host".into())),
        ("cpu, v=1", E::InvalidTag("".into())),
        ("cpu,b=1,a=2,b=3 v=1", E::DuplicateTag("b".into())),
        ("cpu value", E::InvalidField("value".into())),
        ("cpu =1", E::EmptyFieldKey),
        ("cpu value=", E::EmptyFieldValue("value".into())),
        ("cpu value=1,", E::MissingFields),
        ("cpu a=1,a=2", E::DuplicateField("a".into())),
        ("cpu time=1", E::ReservedFieldKey("time".into())),
        ("cpu series_id=1i", E::ReservedFieldKey("series_id".into())),
        (r#"cpu s="open"#, E::UnterminatedString("s".into())),
        (r#"cpu s="a\""#, E::UnterminatedString("s".into())),
        ("cpu v=1 abc", E::InvalidTimestamp("abc".into())),
        ("cpu v=1 1.5", E::InvalidTimestamp("1.5".into())),
        (
            "cpu v=1 99999999999999999999",
            E::TimestampTooLarge("99999999999999999999".into()),
        ),
        (
            "cpu v=1 -9223372036854775809",
            E::TimestampTooLarge("-9223372036854775809".into()),
        ),
        ("cpu v=1 1 2", E::TrailingText("2".into())),
    ];
    for (line, want) in cases {
        match parse_line(line.as_bytes()) {
            Ok(p) => panic!("line {line:?} should fail, parsed as {p:?}"),
            Err(e) => assert_eq!(e, want, "line {line:?}"),
        }
    }
}

#[test]
fn invalid_field_values_name_key_value_and_reason() {
    let cases: &[(&str, &str, &str, &str)] = &[
        ("m v=abc", "v", "abc", "expected a number"),
        ("m v=1.2.3", "v", "1.2.3", "invalid number"),
        ("m v=inf", "v", "inf", "expected a number"),
        ("m v=nan", "v", "nan", "expected a number"),
        ("m v=1e400", "v", "1e400", "float out of range"),
        ("m v=1x", "v", "1x", "invalid number"),
        ("m v=1.5i", "v", "1.5i", "invalid integer"),
        ("m v=i", "v", "i", "expected a number"),
        ("m v=-i", "v", "-i", "invalid integer"),
        (
            "m v=9223372036854775808i",
            "v",
            "9223372036854775808i",
            "out of int64 range",
        ),
        ("m v=-1u", "v", "-1u", "cannot be negative"),
        (
            "m v=18446744073709551616u",
            "v",
            "18446744073709551616u",
            "out of uint64 range",
        ),
        ("m v=yes", "v", "yes", "expected a number"),
        ("m v=tru", "v", "tru", "expected a number"),
        (r#"m s="a"b"#, "s", r#""a"b"#, "after the closing quote"),
    ];
    for (line, key, value, why) in cases {
        let err = parse_line(line.as_bytes()).expect_err(line);
        match &err {
            LineProtocolError::InvalidFieldValue {
                key: k, value: v, ..
            } => {
                assert_eq!((k.as_str(), v.as_str()), (*key, *value), "line {line:?}");
                assert!(
                    err.to_string().contains(why),
                    "line {line:?}: {err} should mention {why:?}"
                );
            }
            other => panic!("line {line:?}: expected InvalidFieldValue, got {other:?}"),
        }
    }
}

#[test]
fn body_iteration_numbers_lines_and_skips_blanks_and_comments() {
    let body = b"# comment\n\ncpu v=1\r\n  mem v=2i\nbad\n\t# indented comment\ndisk v=t";
    let got = parse_body(body);
    let numbers: Vec<usize> = got.iter().map(|(n, _)| *n).collect();
    assert_eq!(numbers, vec![3, 4, 5, 7]);
    assert!(got[0].1.is_ok() && got[1].1.is_ok() && got[3].1.is_ok());
    assert_eq!(got[2].1, Err(LineProtocolError::MissingFields));
    assert_eq!(
        parse_line(b"cpu v=1\xff"),
        Err(LineProtocolError::InvalidUtf8)
    );
}

#[test]
fn precisions_scale_and_overflow_is_an_error() {
    assert_eq!(Precision::parse("ms", false), Some(Precision::Millisecond));
    assert_eq!(Precision::parse("m", false), None);
    assert_eq!(Precision::parse("m", true), Some(Precision::Minute));
    assert_eq!(Precision::parse("h", true), Some(Precision::Hour));
    assert_eq!(Precision::parse("n", true), Some(Precision::Nanosecond));
    assert_eq!(Precision::parse("u", true), Some(Precision::Microsecond));
    assert_eq!(Precision::parse("x", true), None);
    assert_eq!(Precision::Second.to_nanos(2), Ok(2_000_000_000));
    assert_eq!(Precision::Microsecond.to_nanos(-3), Ok(-3_000));
    assert_eq!(Precision::Hour.to_nanos(1), Ok(3_600_000_000_000));
    assert_eq!(
        Precision::Second.to_nanos(i64::MAX / 10),
        Err(LineProtocolError::TimestampOutOfRange(i64::MAX / 10))
    );
}

/// Issue 12: `-9223372036854775808` is an int64, so it parses; as a time
/// it is outside InfluxDB's range (whose two lowest values are sentinels),
/// and the error says so instead of "expected an integer".
#[test]
fn int64_extremes_parse_and_influxdb_range_is_enforced() {
    let p = parse_line(b"cpu v=1 -9223372036854775808").unwrap();
    assert_eq!(p.timestamp, Some(i64::MIN));
    let p = parse_line(b"cpu v=1 9223372036854775807").unwrap();
    assert_eq!(p.timestamp, Some(i64::MAX));
    let ns = Precision::Nanosecond;
    for out in [i64::MIN, i64::MIN + 1, i64::MAX] {
        let e = ns.to_nanos(out).unwrap_err();
        assert_eq!(e, LineProtocolError::TimestampOutOfRange(out));
        let msg = e.to_string();
        assert!(
            msg.contains("out of range") && !msg.contains("expected an integer"),
            "{msg}"
        );
        assert!(msg.contains("-9223372036854775806"), "{msg}");
    }
    for ok in [MIN_NANOS, -1, 0, MAX_NANOS] {
        assert_eq!(ns.to_nanos(ok), Ok(ok));
    }
}

#[test]
fn tag_order_does_not_change_series_id_through_the_parser() {
    let ids: Vec<u64> = [
        "cpu,host=a,region=eu,az=1 v=1",
        "cpu,az=1,host=a,region=eu v=2",
        "cpu,region=eu,az=1,host=a v=3 123",
    ]
    .iter()
    .map(|line| {
        let (raw, _) = split_series(line.as_bytes()).unwrap();
        let mut sp = SeriesParser::default();
        let s = sp.parse(raw).unwrap();
        let mut key = Vec::new();
        s.canonical_key_into(&mut key);
        crate::series::series_id_of_key(&key)
    })
    .collect();
    assert_eq!(ids[0], ids[1]);
    assert_eq!(ids[0], ids[2]);
    assert_eq!(
        ids[0],
        crate::series::series_id("cpu", &[("az", "1"), ("host", "a"), ("region", "eu")])
    );
    // And escaped input reaches the frozen vector of common::series.
    let (raw, _) = split_series(br"disk\ free,path=/var\,log,k\=v=x\ y f=1").unwrap();
    let mut sp = SeriesParser::default();
    let s = sp.parse(raw).unwrap();
    let mut key = Vec::new();
    s.canonical_key_into(&mut key);
    assert_eq!(key, br"disk\ free,k\=v=x\ y,path=/var\,log");
    assert_eq!(crate::series::series_id_of_key(&key), 0x0cb6819c17ffda86);
}

#[test]
fn fuzz_corpus_never_panics() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/lineproto");
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("fuzz corpus missing at {}: {e}", dir.display()));
    let mut n = 0;
    for entry in entries {
        let path = entry.unwrap().path();
        let body = std::fs::read(&path).unwrap();
        let _ = parse_body(&body);
        n += 1;
    }
    assert!(
        n >= 10,
        "expected a seed corpus of at least 10 files, found {n}"
    );
}

#[test]
fn float_fast_path_matches_the_general_parser() {
    let mut x: u64 = 12345;
    let mut samples: Vec<std::string::String> = vec![
        "0.1".into(),
        "-0.3".into(),
        "123456789012345".into(),
        "1.23456789012345".into(),
        "999999999999999.".into(),
        ".000000000000001".into(),
        "+7.25".into(),
        "-0".into(),
    ];
    for _ in 0..20_000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let digits = (x >> 40) % 1_000_000_000_000;
        let scale = ((x >> 20) % 13) as usize;
        let s = format!("{digits}");
        let s = if scale > 0 && scale < s.len() {
            format!("{}.{}", &s[..s.len() - scale], &s[s.len() - scale..])
        } else {
            s
        };
        samples.push(if x & 1 == 1 { format!("-{s}") } else { s });
    }
    for s in samples {
        let want: f64 = s.parse().unwrap();
        let got = fast_decimal(s.as_bytes()).unwrap_or_else(|| panic!("{s} takes the fast path"));
        assert_eq!(got.to_bits(), want.to_bits(), "{s}");
    }
    assert_eq!(fast_decimal(b"1e5"), None);
    assert_eq!(
        fast_decimal(b"1234567890123456"),
        None,
        "16 digits go the general way"
    );
}

/// Tiny deterministic generator for the differential tests.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
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

fn random_line(rng: &mut Rng) -> Vec<u8> {
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

/// Debug text compares floats bit for bit (`-0.0` differs from `0.0`).
fn outcome(r: &Result<OwnedPoint>) -> std::string::String {
    format!("{r:?}")
}

#[test]
fn fast_parser_agrees_with_the_reference_parser() {
    let mut rng = Rng(2024);
    let mut accepted = 0;
    let mut rejected = 0;
    for _ in 0..200_000 {
        let line = random_line(&mut rng);
        let got = parse_line(&line);
        let want = super::reference::parse_line(&line);
        assert_eq!(
            outcome(&got),
            outcome(&want),
            "line {:?}",
            std::string::String::from_utf8_lossy(&line)
        );
        match got {
            Ok(_) => accepted += 1,
            Err(_) => rejected += 1,
        }
    }
    // The generator must reach both outcomes often, or the test proves little.
    assert!(
        accepted > 20_000 && rejected > 20_000,
        "{accepted} accepted, {rejected} rejected"
    );
}

#[test]
fn plain_decimals_agree_with_the_standard_parser() {
    let mut rng = Rng(99);
    for _ in 0..100_000 {
        let digits = rng.next() % 10u64.pow(1 + rng.below(17) as u32);
        let s = digits.to_string();
        let dot = rng.below(s.len() + 2);
        let mut v = if dot <= s.len() {
            format!("{}.{}", &s[..dot], &s[dot..])
        } else {
            s
        };
        match rng.below(3) {
            0 => v.insert(0, '-'),
            1 => v.insert(0, '+'),
            _ => {}
        }
        let line = format!("m v={v},w={v} 1");
        let want: f64 = v.parse().unwrap();
        let p = parse_line(line.as_bytes()).unwrap();
        for (_, got) in &p.fields {
            match got {
                Float(f) => assert_eq!(f.to_bits(), want.to_bits(), "{v}"),
                other => panic!("{v} parsed as {other:?}"),
            }
        }
    }
}

#[test]
fn line_iteration_agrees_with_the_reference() {
    let mut rng = Rng(7);
    const PIECES: &[&str] = &[
        "cpu v=1", "\n", "\r\n", "\r", " ", "\t", "#c", "", "\n\n", "x",
    ];
    for _ in 0..20_000 {
        let mut body = std::string::String::new();
        for _ in 0..rng.below(8) {
            body.push_str(rng.pick(PIECES));
        }
        let got: Vec<_> = lines(body.as_bytes()).collect();
        let want: Vec<_> = super::reference::lines(body.as_bytes()).collect();
        assert_eq!(got, want, "body {body:?}");
    }
}

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
fn fuzz_corpus_parses_like_the_reference() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/lineproto");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let body = std::fs::read(&path).unwrap();
        let got = format!("{:?}", parse_body(&body));
        let want = format!("{:?}", super::reference::parse_body(&body));
        assert_eq!(got, want, "{}", path.display());
        n += 1;
    }
    assert!(n >= 16, "corpus of {n} files");
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

/// Everything a parse tells its caller, as text (floats bit for bit).
fn parsed_text(r: Result<Fields<'_>>) -> std::string::String {
    match r {
        Ok(f) => format!("{:?} {:?}", f.iter().collect::<Vec<_>>(), f.timestamp),
        Err(e) => format!("{e:?}"),
    }
}

#[test]
fn layout_slots_never_change_what_a_line_parses_to() {
    let mut rng = Rng(31);
    let mut with_layouts = FieldParser::default();
    let mut plain = FieldParser::default();
    // Lines come back often (as a series' lines do) with other values, so
    // the remembered keys are hit, missed, and half hit.
    let mut pool: Vec<Vec<u8>> = (0..6).map(|_| random_line(&mut rng)).collect();
    let mut repeated = 0;
    let mut previous: Vec<Option<std::string::String>> = vec![None; 4];
    for _ in 0..200_000 {
        let line = match rng.below(10) {
            0 => {
                let at = rng.below(pool.len());
                pool[at] = random_line(&mut rng);
                pool[at].clone()
            }
            1 => {
                let mut l = pool[rng.below(pool.len())].clone();
                if !l.is_empty() {
                    let at = rng.below(l.len());
                    l[at] = b" ,=\\\"1.ia"[rng.below(9)];
                }
                l
            }
            _ => pool[rng.below(pool.len())].clone(),
        };
        let Ok((_, rest)) = split_series(&line) else {
            continue;
        };
        let slot = rng.below(4);
        let want = parsed_text(plain.parse(rest));
        let got = parsed_text(with_layouts.parse_in_layout(rest, slot));
        assert_eq!(
            got,
            want,
            "line {:?}",
            std::string::String::from_utf8_lossy(&line)
        );
        if want.starts_with('[') {
            let keys: Vec<_> = plain
                .parse(rest)
                .map(|f| f.iter().map(|(k, _)| k.to_vec()).collect::<Vec<_>>())
                .unwrap();
            let keys = format!("{keys:?}");
            if previous[slot].as_ref() == Some(&keys) {
                repeated += 1;
            }
            previous[slot] = Some(keys);
        }
    }
    assert!(
        repeated > 20_000,
        "only {repeated} lines repeated their slot's keys"
    );
}
