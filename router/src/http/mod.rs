//! HTTP front door: InfluxDB v1/v2 writes, msgpack, Prometheus
//! remote_write, SQL read-back, ping/health/ready/metrics. One module per
//! concern: [`write`], [`auth`], [`sql`], [`health`], request [`body`]
//! reading and query [`params`]; the InfluxQL `/query` handler is
//! `crate::influx`. Error answers are built here, once.

mod auth;
mod body;
mod health;
mod params;
mod sql;
mod write;

pub(crate) use auth::presented_token;
pub(crate) use auth::{admit_write, authorize, charge_write, permit_statements};
pub(crate) use body::{content_encoding, read_body, read_raw_body};
pub use health::{go_duration, health_body};
pub use params::{parse_params, Params};
pub use write::decode_msgpack;

use crate::error::Error;
use crate::ingest::Router;
use crate::{influx, metrics, storage_admin};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use shardhouse_common::status::retry_after_secs;
use std::sync::Arc;

pub fn app(router: Arc<Router>) -> axum::Router {
    axum::Router::new()
        .route("/write", post(write::write_v1))
        .route("/api/v2/write", post(write::write_v2))
        .route("/api/v1/write/msgpack", post(write::write_msgpack))
        .route("/api/v1/prom/write", post(write::write_prom))
        .route("/api/v1/sql", get(sql::sql).post(sql::sql))
        .route("/query", get(influx::handler).post(influx::handler))
        .route(
            "/api/v1/databases",
            get(storage_admin::databases)
                .post(storage_admin::databases)
                .delete(storage_admin::databases),
        )
        .route("/api/v1/retention", post(storage_admin::retention))
        .route(
            "/api/v1/drop_measurement",
            post(storage_admin::drop_measurement),
        )
        .route("/api/v1/delete", post(storage_admin::delete))
        .route("/ping", get(health::ping).head(health::ping))
        .route("/health", get(health::health))
        .route("/ready", get(health::ready))
        .route("/metrics", get(health::metrics_text))
        .with_state(router)
}

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
pub(crate) fn json_error(status: StatusCode, code: &str, msg: &str) -> Response {
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
pub(crate) fn error_response(endpoint: &'static str, e: &Error) -> Response {
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
