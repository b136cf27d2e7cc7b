//! Answers as Prometheus 2.x writes them: `{"status":"success","data":...}`
//! or `{"status":"error","errorType":...,"error":...}`, sample values as
//! strings and times as Unix seconds with millisecond fractions.

use crate::engine::{QueryValue, RangeSeries};
use crate::labels::Labels;
use crate::Error;

/// The Prometheus version the API claims: Grafana picks its label calls by
/// it.
pub const BUILD_VERSION: &str = "2.42.0";

/// Prometheus's JSON number for a sample value: Go's shortest repr, with
/// an exponent below 1e-6 and from 1e21 on.
pub fn format_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    let abs = v.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        // Rust writes 1e-7 and 1.5e21; Go writes 1e-07 and 1.5e+21.
        let s = format!("{v:e}");
        let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let (sign, digits) = match exp.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', exp),
        };
        return format!("{mant}e{sign}{digits:0>2}");
    }
    format!("{v}")
}

/// Milliseconds as Unix seconds: `1435781451.781`, `1435781451` when whole.
pub fn format_timestamp(ms: i64) -> String {
    let sign = if ms < 0 { "-" } else { "" };
    let abs = ms.unsigned_abs();
    match abs % 1000 {
        0 => format!("{sign}{}", abs / 1000),
        frac => format!("{sign}{}.{frac:03}", abs / 1000),
    }
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

fn metric_json(l: &Labels) -> String {
    let parts: Vec<String> = l
        .iter()
        .map(|(k, v)| format!("{}:{}", json_str(k), json_str(v)))
        .collect();
    format!("{{{}}}", parts.join(","))
}

fn point_json(t: i64, v: f64) -> String {
    format!("[{},\"{}\"]", format_timestamp(t), format_float(v))
}

fn matrix_json(m: &[RangeSeries]) -> String {
    let series: Vec<String> = m
        .iter()
        .map(|s| {
            let pts: Vec<String> = s.points.iter().map(|(t, v)| point_json(*t, *v)).collect();
            format!(
                "{{\"metric\":{},\"values\":[{}]}}",
                metric_json(&s.labels),
                pts.join(",")
            )
        })
        .collect();
    format!("[{}]", series.join(","))
}

fn warnings_json(warnings: &[String]) -> String {
    if warnings.is_empty() {
        return String::new();
    }
    let w: Vec<String> = warnings.iter().map(|w| json_str(w)).collect();
    format!(",\"warnings\":[{}]", w.join(","))
}

/// The body of a successful `/api/v1/query` or `/api/v1/query_range`.
pub fn success_body(value: &QueryValue, warnings: &[String]) -> String {
    let (kind, result) = match value {
        QueryValue::Scalar(t, v) => ("scalar", point_json(*t, *v)),
        QueryValue::String(t, s) => (
            "string",
            format!("[{},{}]", format_timestamp(*t), json_str(s)),
        ),
        QueryValue::Vector(v) => {
            let items: Vec<String> = v
                .iter()
                .map(|(l, t, x)| {
                    format!(
                        "{{\"metric\":{},\"value\":{}}}",
                        metric_json(l),
                        point_json(*t, *x)
                    )
                })
                .collect();
            ("vector", format!("[{}]", items.join(",")))
        }
        QueryValue::Matrix(m) => ("matrix", matrix_json(m)),
    };
    format!(
        "{{\"status\":\"success\",\"data\":{{\"resultType\":\"{kind}\",\"result\":{result}}}{}}}",
        warnings_json(warnings)
    )
}

/// Prometheus's `errorType` and HTTP status for an error.
pub fn status_of(e: &Error) -> (&'static str, u16) {
    match e {
        Error::BadData(_) => ("bad_data", 400),
        Error::Execution(_) | Error::TooManySamples => ("execution", 422),
        Error::Source(_) => ("execution", 503),
    }
}

/// The body of a failed request, and its HTTP status.
pub fn error_body(e: &Error) -> (u16, String) {
    let (kind, status) = status_of(e);
    (
        status,
        format!(
            "{{\"status\":\"error\",\"errorType\":\"{kind}\",\"error\":{}}}",
            json_str(&e.to_string())
        ),
    )
}

/// `/api/v1/series`: the label sets.
pub fn series_body(series: &[Labels]) -> String {
    let items: Vec<String> = series.iter().map(metric_json).collect();
    format!("{{\"status\":\"success\",\"data\":[{}]}}", items.join(","))
}

/// `/api/v1/labels` and `/api/v1/label/<name>/values`: sorted strings.
pub fn labels_body(names: &[String]) -> String {
    let items: Vec<String> = names.iter().map(|n| json_str(n)).collect();
    format!("{{\"status\":\"success\",\"data\":[{}]}}", items.join(","))
}

/// `/api/v1/status/buildinfo`.
pub fn buildinfo() -> String {
    format!(
        "{{\"status\":\"success\",\"data\":{{\"version\":\"{BUILD_VERSION}\",\"revision\":\"shardhouse\",\"branch\":\"shardhouse\",\"buildUser\":\"shardhouse\",\"buildDate\":\"\",\"goVersion\":\"\"}}}}"
    )
}

/// `/api/v1/format_query`: the query pretty-printed.
pub fn format_query(query: &str) -> Result<String, Error> {
    let expr = crate::engine::parse_query_param(query)?;
    Ok(format!(
        "{{\"status\":\"success\",\"data\":{}}}",
        json_str(&expr.prettify())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_as_go_writes_them() {
        assert_eq!(format_float(1.0), "1");
        assert_eq!(format_float(0.1), "0.1");
        assert_eq!(format_float(1e-7), "1e-07");
        assert_eq!(format_float(1.5e21), "1.5e+21");
        assert_eq!(format_float(123456789.0), "123456789");
        assert_eq!(format_float(f64::NAN), "NaN");
        assert_eq!(format_float(f64::NEG_INFINITY), "-Inf");
    }

    #[test]
    fn timestamps_as_seconds() {
        assert_eq!(format_timestamp(1_435_781_451_781), "1435781451.781");
        assert_eq!(format_timestamp(1_435_781_451_000), "1435781451");
        assert_eq!(format_timestamp(5), "0.005");
        assert_eq!(format_timestamp(-1500), "-1.500");
    }

    #[test]
    fn vector_body() {
        let v = QueryValue::Vector(vec![(
            Labels::from_pairs([("__name__", "up"), ("job", "p")]),
            1000,
            1.0,
        )]);
        assert_eq!(
            success_body(&v, &[]),
            r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":"up","job":"p"},"value":[1,"1"]}]}}"#
        );
    }

    #[test]
    fn error_shape() {
        let (status, body) = error_body(&Error::BadData("1:5: parse error: x".into()));
        assert_eq!(status, 400);
        assert_eq!(
            body,
            r#"{"status":"error","errorType":"bad_data","error":"1:5: parse error: x"}"#
        );
    }
}
