//! The one place HTTP answers to errors and writes are built: JSON
//! `{"code","message"}` with the message bounded, `X-Influxdb-Error`,
//! `Retry-After` on 429, and the request counters.

use crate::error::{Error, Result};
use crate::metrics;
use crate::write::WriteOutcome;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use shardhouse_common::status::retry_after_secs;
use std::time::Instant;

/// Longest `X-Influxdb-Error` header: clients refuse long header lines
/// (a 100 KiB one made them fail without showing the body).
pub const MAX_ERROR_HEADER_BYTES: usize = 1024;
/// Longest error message in a JSON body.
pub const MAX_ERROR_MESSAGE_BYTES: usize = 8 * 1024;

/// `msg` cut to at most `max` bytes (at a character boundary), with
/// `…(truncated, N bytes)` when cut.
pub fn bounded(msg: &str, max: usize) -> String {
    if msg.len() <= max {
        return msg.to_owned();
    }
    let suffix = format!("…(truncated, {} bytes)", msg.len());
    let mut cut = max.saturating_sub(suffix.len());
    while !msg.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{suffix}", &msg[..cut])
}

/// The `X-Influxdb-Error` value for `msg`: bounded to
/// [`MAX_ERROR_HEADER_BYTES`], control characters as spaces, UTF-8 kept
/// (header values may carry any byte but controls).
pub fn error_header(msg: &str) -> HeaderValue {
    let text: String = bounded(msg, MAX_ERROR_HEADER_BYTES)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    HeaderValue::from_bytes(text.as_bytes()).unwrap_or_else(|_| HeaderValue::from_static("error"))
}

/// The one place error answers are built: JSON `{"code","message"}` with
/// the message bounded, and the `X-Influxdb-Error` header.
pub fn json_error(status: StatusCode, code: &str, msg: &str) -> Response {
    let body = serde_json::json!({
        "code": code,
        "message": bounded(msg, MAX_ERROR_MESSAGE_BYTES),
    })
    .to_string();
    let mut resp = (status, body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert("x-influxdb-error", error_header(msg));
    resp
}

/// InfluxDB-style error answer: JSON `{"code","message"}`, `Retry-After`
/// on 429, `X-Influxdb-Error` for v1 clients.
pub fn error_response(endpoint: &'static str, e: &Error) -> Response {
    let status = e.status();
    if let Some(reason) = e.reject_reason() {
        metrics::REJECTED.with_label_values(&[reason]).inc();
    }
    metrics::REQUESTS
        .with_label_values(&[endpoint, status.as_str()])
        .inc();
    let msg = bounded(&e.to_string(), MAX_ERROR_MESSAGE_BYTES);
    if status.is_server_error() {
        tracing::warn!(endpoint, error = %msg, "write failed");
    } else {
        tracing::debug!(endpoint, error = %msg, "write refused");
    }
    let mut resp = json_error(status, e.influx_code(), &msg);
    let h = resp.headers_mut();
    if let Some(d) = e.retry_after() {
        h.insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs(d)));
    }
    resp
}

fn no_content(endpoint: &'static str) -> Response {
    metrics::REQUESTS
        .with_label_values(&[endpoint, "204"])
        .inc();
    StatusCode::NO_CONTENT.into_response()
}

/// Answer for a finished write: 204, or 400 naming the first bad point.
pub(crate) fn write_response(
    endpoint: &'static str,
    unit: &str,
    r: Result<WriteOutcome>,
    started: Instant,
) -> Response {
    metrics::WRITE_SECONDS
        .with_label_values(&[endpoint])
        .observe(started.elapsed().as_secs_f64());
    match r {
        Ok(o) => match o.partial_error(unit) {
            None => no_content(endpoint),
            Some(e) => {
                let bad = o.summary.rejected - o.summary.rejected_for_cardinality;
                if bad > 0 {
                    metrics::REJECTED
                        .with_label_values(&["bad_request"])
                        .inc_by(bad as u64);
                }
                metrics::REQUESTS
                    .with_label_values(&[endpoint, "400"])
                    .inc();
                json_error(StatusCode::BAD_REQUEST, "invalid", &e.to_string())
            }
        },
        Err(e) => error_response(endpoint, &e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_headers_and_messages_are_bounded() {
        let long = format!("bad {}", "x".repeat(100 * 1024));
        let h = error_header(&long);
        assert!(h.len() <= MAX_ERROR_HEADER_BYTES, "{}", h.len());
        // UTF-8 bytes (the `…`), as InfluxDB sends names.
        assert!(String::from_utf8_lossy(h.as_bytes()).ends_with("bytes)"));
        let resp = json_error(StatusCode::BAD_REQUEST, "invalid", &long);
        assert!(resp.headers()["x-influxdb-error"].len() <= MAX_ERROR_HEADER_BYTES);
        // UTF-8 and control characters survive as header bytes.
        let h = error_header("measurement \"é\"\nline 2");
        assert_eq!(h.as_bytes(), "measurement \"é\" line 2".as_bytes());
        assert_eq!(bounded("short", 10), "short");
        let b = bounded(&"é".repeat(100), 50);
        assert!(
            b.len() <= 50 && b.ends_with("(truncated, 200 bytes)"),
            "{b}"
        );
    }
}
