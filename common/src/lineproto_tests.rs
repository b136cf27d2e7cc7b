//! Line protocol conformance: every escaping and type rule, valid and invalid.

use super::*;
use OwnedFieldValue::*;

// Declared by path: this file is itself `lineproto`'s `#[path]` test module.
#[path = "lineproto_tests/differential.rs"]
mod differential;
#[path = "lineproto_tests/generator.rs"]
mod generator;
#[path = "lineproto_tests/scans.rs"]
mod scans;

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
