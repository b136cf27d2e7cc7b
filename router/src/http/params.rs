//! Query-string and form decoding (`form_urlencoded`, strict escapes).

use crate::error::{Error, Result};
use shardhouse_common::lineproto::Precision;
use std::collections::HashMap;

pub type Params = HashMap<String, String>;

/// Query parameters, percent-decoded strictly: an invalid escape (`%ZZ`)
/// or one that decodes to invalid UTF-8 is a 400 naming the parameter
/// (a lenient decoder would keep `%ZZ` as text and write to a database of
/// that name). `+` is a space, as in forms.
pub fn parse_params(raw: Option<&str>) -> Result<Params> {
    let Some(raw) = raw else {
        return Ok(Params::new());
    };
    for pair in raw.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if let Err(why) = check_escapes(name) {
            return Err(Error::BadRequest(format!(
                "query parameter name {:?} {why}",
                excerpt(name.as_bytes())
            )));
        }
        if let Err(why) = check_escapes(value) {
            let name: String = form_urlencoded::parse(name.as_bytes())
                .next()
                .map(|(k, _)| k.into_owned())
                .unwrap_or_default();
            return Err(Error::BadRequest(format!(
                "query parameter {:?} {why}",
                excerpt(name.as_bytes())
            )));
        }
    }
    Ok(form_urlencoded::parse(raw.as_bytes())
        .into_owned()
        .collect())
}

/// Why a URL component cannot be decoded (the text follows the
/// parameter's name in the 400's message).
#[derive(Debug, thiserror::Error)]
enum BadEscape {
    #[error("has an invalid percent-escape {bad:?} at byte {at}: encode `%` as `%25`")]
    Invalid { bad: String, at: usize },
    #[error("is not UTF-8 once percent-decoded")]
    NotUtf8,
}

/// Whether every `%` of a URL component starts a valid escape and the
/// decoded bytes are UTF-8.
fn check_escapes(component: &str) -> std::result::Result<(), BadEscape> {
    let b = component.as_bytes();
    for (i, _) in b.iter().enumerate().filter(|(_, &c)| c == b'%') {
        let valid = b.len() > i + 2 && b[i + 1].is_ascii_hexdigit() && b[i + 2].is_ascii_hexdigit();
        if !valid {
            let bad: String = component[i..].chars().take(3).collect();
            return Err(BadEscape::Invalid { bad, at: i });
        }
    }
    if percent_encoding::percent_decode(b).decode_utf8().is_err() {
        return Err(BadEscape::NotUtf8);
    }
    Ok(())
}

fn excerpt(b: &[u8]) -> String {
    shardhouse_common::names::excerpt(b)
}

pub(crate) fn precision_param(params: &HashMap<String, String>, v1: bool) -> Result<Precision> {
    let p = params.get("precision").map_or("", String::as_str);
    Precision::parse(p, v1).ok_or_else(|| {
        Error::BadRequest(format!(
            "invalid precision {:?}: use ns, us, ms or s{}",
            excerpt(p.as_bytes()),
            if v1 { " (v1 also n, u, m, h)" } else { "" }
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    #[test]
    fn query_parameters_are_decoded_strictly() {
        let p = parse_params(Some("db=my+db&q=SELECT+1%2C2&p=%C3%A9")).unwrap();
        assert_eq!(p["db"], "my db");
        assert_eq!(p["q"], "SELECT 1,2");
        assert_eq!(p["p"], "é");
        assert!(parse_params(None).unwrap().is_empty());
        for (raw, want) in [
            (
                "db=%ZZ",
                "query parameter \"db\" has an invalid percent-escape \"%ZZ\" at byte 0",
            ),
            (
                "db=a%2",
                "query parameter \"db\" has an invalid percent-escape",
            ),
            ("precision=s&db=a%", "query parameter \"db\""),
            ("db=%FF", "query parameter \"db\" is not UTF-8"),
            ("d%zb=x", "query parameter name \"d%zb\""),
        ] {
            let e = parse_params(Some(raw)).unwrap_err();
            assert_eq!(e.status(), StatusCode::BAD_REQUEST);
            assert!(e.to_string().contains(want), "{raw}: {e}");
        }
    }
}
