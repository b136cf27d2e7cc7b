//! Request parameters as Prometheus reads them: from the query string and,
//! for POST, an `application/x-www-form-urlencoded` body; times as RFC 3339
//! or Unix seconds, durations as Prometheus durations or seconds.

use crate::engine::MAX_POINTS_PER_SERIES;
use crate::source::LabelMatcher;
use crate::{Error, Result};

/// Prometheus's `minTime`/`maxTime` (what `/api/v1/series` and the label
/// endpoints use when `start`/`end` are absent), in milliseconds.
pub const MIN_TIME_MS: i64 = -9_223_309_901_257_974;
pub const MAX_TIME_MS: i64 = 9_223_309_901_257_974;

/// Every parameter of a request, query string first then form body, in
/// order (repeated keys such as `match[]` kept).
#[derive(Debug, Clone, Default)]
pub struct Params(pub Vec<(String, String)>);

impl Params {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// Parses the query string and a form body (when the request has one).
pub fn query_params(query: Option<&str>, form_body: Option<&[u8]>) -> Params {
    let mut out: Vec<(String, String)> = Vec::new();
    if let Some(q) = query {
        out.extend(form_urlencoded::parse(q.as_bytes()).into_owned());
    }
    if let Some(b) = form_body {
        out.extend(form_urlencoded::parse(b).into_owned());
    }
    Params(out)
}

#[derive(Debug, Clone, PartialEq)]
pub struct InstantRequest {
    pub query: String,
    pub time_ms: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RangeRequest {
    pub query: String,
    pub start_ms: i64,
    pub end_ms: i64,
    pub step_ms: i64,
}

fn invalid(param: &str, msg: String) -> Error {
    Error::BadData(format!("invalid parameter \"{param}\": {msg}"))
}

impl InstantRequest {
    pub fn from_params(p: &Params, now_ms: i64) -> Result<Self> {
        let time_ms = match p.get("time") {
            Some(t) if !t.is_empty() => parse_time(t).map_err(|e| invalid("time", e))?,
            _ => now_ms,
        };
        if let Some(t) = p.get("timeout").filter(|t| !t.is_empty()) {
            parse_duration(t).map_err(|e| invalid("timeout", e))?;
        }
        Ok(InstantRequest {
            query: p.get("query").unwrap_or("").to_string(),
            time_ms,
        })
    }
}

impl RangeRequest {
    pub fn from_params(p: &Params) -> Result<Self> {
        let time = |k: &str| parse_time(p.get(k).unwrap_or("")).map_err(|e| invalid(k, e));
        let start_ms = time("start")?;
        let end_ms = time("end")?;
        if end_ms < start_ms {
            return Err(invalid(
                "end",
                "end timestamp must not be before start time".into(),
            ));
        }
        let step_ms =
            parse_duration(p.get("step").unwrap_or("")).map_err(|e| invalid("step", e))?;
        if step_ms <= 0 {
            return Err(invalid(
                "step",
                "zero or negative query resolution step widths are not accepted. Try a positive integer".into(),
            ));
        }
        if (end_ms - start_ms) / step_ms > MAX_POINTS_PER_SERIES {
            return Err(Error::BadData(
                "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)".into(),
            ));
        }
        if let Some(t) = p.get("timeout").filter(|t| !t.is_empty()) {
            parse_duration(t).map_err(|e| invalid("timeout", e))?;
        }
        Ok(RangeRequest {
            query: p.get("query").unwrap_or("").to_string(),
            start_ms,
            end_ms,
            step_ms,
        })
    }
}

/// A time: Unix seconds with a fraction (rounded to the millisecond) or
/// RFC 3339, as Prometheus's `parseTime`.
pub fn parse_time(s: &str) -> std::result::Result<i64, String> {
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() {
            let whole = secs.trunc();
            let frac = ((secs - whole) * 1000.0).round();
            return Ok(whole as i64 * 1000 + frac as i64);
        }
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(t.timestamp_millis());
    }
    match s {
        "-292273086-05-16T16:47:06Z" => Ok(MIN_TIME_MS),
        "292277025-08-18T07:12:54.999999999Z" => Ok(MAX_TIME_MS),
        _ => Err(format!("cannot parse {s:?} to a valid timestamp")),
    }
}

/// A duration: seconds as a float, or a Prometheus duration (`1h30m`,
/// `5m`, `250ms`), in milliseconds.
pub fn parse_duration(s: &str) -> std::result::Result<i64, String> {
    if let Ok(secs) = s.parse::<f64>() {
        let ms = secs * 1000.0;
        if ms.is_finite() && ms.abs() < i64::MAX as f64 {
            return Ok(ms.round() as i64);
        }
        return Err(format!(
            "cannot parse {s:?} to a valid duration. It overflows int64"
        ));
    }
    promql_parser::util::parse_duration(s)
        .map(|d| d.as_millis() as i64)
        .map_err(|_| format!("cannot parse {s:?} to a valid duration"))
}

/// The `match[]` selectors of `/api/v1/series` and the label endpoints,
/// each a set of matchers; a bad selector is `bad_data`.
pub fn match_sets(p: &Params) -> Result<Vec<Vec<LabelMatcher>>> {
    p.all("match[]")
        .into_iter()
        .map(|m| {
            let expr = crate::engine::parse(m)?;
            match expr {
                promql_parser::parser::Expr::VectorSelector(vs)
                    if vs.offset.is_none() && vs.at.is_none() =>
                {
                    crate::engine::selector_matchers(&vs)
                }
                _ => Err(Error::BadData(format!(
                    "invalid parameter \"match[]\": 1:1: parse error: expected vector selector in {m:?}"
                ))),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_in_both_forms() {
        assert_eq!(parse_time("1435781451.781").unwrap(), 1_435_781_451_781);
        assert_eq!(
            parse_time("2015-07-01T20:10:51.781Z").unwrap(),
            1_435_781_451_781
        );
        assert_eq!(parse_time("1").unwrap(), 1000);
        assert!(parse_time("yesterday")
            .unwrap_err()
            .contains("cannot parse \"yesterday\""));
    }

    #[test]
    fn durations_in_both_forms() {
        assert_eq!(parse_duration("15").unwrap(), 15_000);
        assert_eq!(parse_duration("0.5").unwrap(), 500);
        assert_eq!(parse_duration("1m30s").unwrap(), 90_000);
        assert!(parse_duration("5x").is_err());
    }

    #[test]
    fn range_request_checks() {
        let p = query_params(Some("query=up&start=0&end=100&step=0"), None);
        let e = RangeRequest::from_params(&p).unwrap_err().to_string();
        assert!(
            e.starts_with("invalid parameter \"step\": zero or negative"),
            "{e}"
        );
        let p = query_params(Some("query=up&start=10&end=0&step=1"), None);
        assert!(RangeRequest::from_params(&p).is_err());
        let p = query_params(Some("query=up&start=0&end=100000&step=1"), None);
        assert!(RangeRequest::from_params(&p)
            .unwrap_err()
            .to_string()
            .contains("11,000"));
        let p = query_params(
            Some("start=0&end=60"),
            Some(b"query=rate(x%5B5m%5D)&step=15s"),
        );
        let r = RangeRequest::from_params(&p).unwrap();
        assert_eq!(
            (r.query.as_str(), r.end_ms, r.step_ms),
            ("rate(x[5m])", 60_000, 15_000)
        );
    }
}
