//! JSON exactly as Go's `encoding/json` writes it (InfluxDB 1.8 marshals
//! its `/query` responses with it): object keys in the order given, HTML
//! characters escaped, floats in Go's format, `MarshalIndent` with four
//! spaces for `pretty=true`.

/// A JSON value with its object keys in output order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    /// Already formatted.
    Number(String),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(&'static str, Json)>),
    /// An object with owned keys (tags).
    Map(Vec<(String, Json)>),
}

impl Json {
    pub fn write(&self, out: &mut String, pretty: bool) {
        if pretty {
            self.write_indented(out, 0);
        } else {
            self.write_compact(out);
        }
    }

    fn write_compact(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Number(n) => out.push_str(n),
            Json::String(s) => write_string(out, s),
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write_compact(out);
                }
                out.push(']');
            }
            Json::Object(fields) => write_object(out, fields.iter().map(|(k, v)| (*k, v)), None),
            Json::Map(fields) => {
                write_object(out, fields.iter().map(|(k, v)| (k.as_str(), v)), None)
            }
        }
    }

    fn write_indented(&self, out: &mut String, depth: usize) {
        match self {
            Json::Array(items) if !items.is_empty() => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    newline(out, depth + 1);
                    item.write_indented(out, depth + 1);
                }
                newline(out, depth);
                out.push(']');
            }
            Json::Object(fields) if !fields.is_empty() => {
                write_object(out, fields.iter().map(|(k, v)| (*k, v)), Some(depth))
            }
            Json::Map(fields) if !fields.is_empty() => write_object(
                out,
                fields.iter().map(|(k, v)| (k.as_str(), v)),
                Some(depth),
            ),
            other => other.write_compact(out),
        }
    }
}

fn newline(out: &mut String, depth: usize) {
    out.push('\n');
    for _ in 0..depth {
        out.push_str("    ");
    }
}

fn write_object<'a>(
    out: &mut String,
    fields: impl Iterator<Item = (&'a str, &'a Json)>,
    depth: Option<usize>,
) {
    out.push('{');
    let mut any = false;
    for (i, (key, value)) in fields.enumerate() {
        any = true;
        if i > 0 {
            out.push(',');
        }
        if let Some(d) = depth {
            newline(out, d + 1);
        }
        write_string(out, key);
        out.push(':');
        match depth {
            Some(d) => {
                out.push(' ');
                value.write_indented(out, d + 1);
            }
            None => value.write_compact(out),
        }
    }
    if let (Some(d), true) = (depth, any) {
        newline(out, d);
    }
    out.push('}');
}

/// A string as Go 1.x `encoding/json` escapes it (the Go InfluxDB 1.8 was
/// built with): `"` and `\`, `\n` `\r` `\t`, other control characters as
/// `\u00XX`, and `<` `>` `&` U+2028 U+2029 as `\uXXXX`.
pub(crate) fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A float as Go's `encoding/json` writes it: shortest round-trip digits,
/// positional between 1e-6 and 1e21, else exponent form (`1e+21`,
/// `1e-7`). Infinities cannot be written: `Err` holds Go's name for the
/// value (`+Inf`), for the `json: unsupported value` error.
pub(crate) fn go_float(f: f64) -> Result<String, &'static str> {
    if f.is_nan() {
        return Err("NaN");
    }
    if f.is_infinite() {
        return Err(if f > 0.0 { "+Inf" } else { "-Inf" });
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let text = format!("{f:e}");
        let (mantissa, exponent) = text.split_once('e').expect("LowerExp writes an exponent");
        let exponent: i32 = exponent
            .parse()
            .expect("LowerExp writes an integer exponent");
        return Ok(if exponent < 0 {
            format!("{mantissa}e-{}", -exponent)
        } else {
            format!("{mantissa}e+{exponent:02}")
        });
    }
    Ok(format!("{f}"))
}

/// A float as Go's `strconv.FormatFloat(f, 'f', -1, 64)` (InfluxDB's CSV).
pub(crate) fn go_float_positional(f: f64) -> String {
    if f.is_nan() {
        "NaN".to_string()
    } else if f.is_infinite() {
        if f > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        format!("{f}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_match_go() {
        let cases = [
            (1.0, "1"),
            (2.5, "2.5"),
            (-0.0, "-0"),
            (0.1, "0.1"),
            (1e20, "100000000000000000000"),
            (1e21, "1e+21"),
            (1.5e300, "1.5e+300"),
            (0.000001, "0.000001"),
            (1e-7, "1e-7"),
            (-2.5e-10, "-2.5e-10"),
            (5e-324, "5e-324"),
            (std::f64::consts::FRAC_1_SQRT_2, "0.7071067811865476"),
            (123456789.125, "123456789.125"),
        ];
        for (f, want) in cases {
            assert_eq!(go_float(f).unwrap(), want, "{f}");
        }
        assert_eq!(go_float(f64::INFINITY), Err("+Inf"));
        assert_eq!(go_float_positional(1e21), "1000000000000000000000");
        assert_eq!(go_float_positional(f64::NEG_INFINITY), "-Inf");
    }

    #[test]
    fn strings_escape_like_go() {
        let mut out = String::new();
        write_string(&mut out, "a\"b\\c\n\t<x>&\u{1}\u{7f}\u{2028}é");
        assert_eq!(
            out,
            r#""a\"b\\c\n\t\u003cx\u003e\u0026\u0001\u{7f}\u2028é""#.replace("\\u{7f}", "\u{7f}")
        );
    }

    #[test]
    fn indentation_matches_marshal_indent() {
        let json = Json::Object(vec![
            ("a", Json::Array(vec![Json::Number("1".into()), Json::Null])),
            ("b", Json::Array(vec![])),
            ("c", Json::Map(vec![])),
        ]);
        let mut out = String::new();
        json.write(&mut out, true);
        assert_eq!(
            out,
            "{\n    \"a\": [\n        1,\n        null\n    ],\n    \"b\": [],\n    \"c\": {}\n}"
        );
    }
}
