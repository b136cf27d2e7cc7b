//! HTTP front door: InfluxDB v1/v2 writes, msgpack, Prometheus
//! remote_write, SQL read-back, ping/health/ready/metrics.

use crate::error::{Error, Result};
use crate::ingest::{Router, WriteOutcome};
use crate::{metrics, query};
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use shardhouse_common::lineproto::{FieldValue, Precision};
use shardhouse_common::prom_proto;
use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::sync::Arc;
use std::time::Instant;

pub fn app(router: Arc<Router>) -> axum::Router {
    axum::Router::new()
        .route("/write", post(write_v1))
        .route("/api/v2/write", post(write_v2))
        .route("/api/v1/write/msgpack", post(write_msgpack))
        .route("/api/v1/prom/write", post(write_prom))
        .route("/api/v1/sql", get(sql).post(sql))
        .route("/ping", get(ping).head(ping))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics_text))
        .with_state(router)
}

type Params = Query<HashMap<String, String>>;

/// InfluxDB-style error answer: JSON `{"code","message"}`, `Retry-After`
/// on 429, `X-Influxdb-Error` for v1 clients.
fn error_response(endpoint: &'static str, e: &Error) -> Response {
    let status = e.status();
    if let Some(reason) = e.reject_reason() {
        metrics::REJECTED.with_label_values(&[reason]).inc();
    }
    metrics::REQUESTS
        .with_label_values(&[endpoint, status.as_str()])
        .inc();
    let msg = e.to_string();
    if status.is_server_error() {
        tracing::warn!(endpoint, error = %msg, "write failed");
    } else {
        tracing::debug!(endpoint, error = %msg, "write refused");
    }
    let body = serde_json::json!({ "code": e.influx_code(), "message": msg }).to_string();
    let mut resp = (status, body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Ok(v) = HeaderValue::from_str(&msg) {
        h.insert("x-influxdb-error", v);
    }
    if let Some(d) = e.retry_after() {
        let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
        h.insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
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
fn write_response(
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
                let body =
                    serde_json::json!({ "code": "invalid", "message": e.to_string() }).to_string();
                let mut resp = (StatusCode::BAD_REQUEST, body).into_response();
                resp.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                if let Ok(v) = HeaderValue::from_str(&e.to_string()) {
                    resp.headers_mut().insert("x-influxdb-error", v);
                }
                resp
            }
        },
        Err(e) => error_response(endpoint, &e),
    }
}

// ------------------------------------------------------------------ auth

/// Token from `Authorization: Token <t>` / `Bearer <t>` / `Basic` (the
/// password), or (v1) the `p` query parameter.
fn presented_token(
    headers: &HeaderMap,
    params: Option<&HashMap<String, String>>,
) -> Option<String> {
    if let Some(v) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        let v = v.trim();
        if let Some(t) = v
            .strip_prefix("Token ")
            .or_else(|| v.strip_prefix("Bearer "))
        {
            return Some(t.trim().to_owned());
        }
        if let Some(b) = v.strip_prefix("Basic ") {
            let decoded = base64_decode(b.trim())?;
            let text = String::from_utf8(decoded).ok()?;
            return text.split_once(':').map(|(_, p)| p.to_owned());
        }
        return Some(String::new());
    }
    params.and_then(|p| p.get("p").cloned())
}

/// 401 when no credentials were presented, 403 when they are wrong.
pub fn check_token(tokens: &[String], presented: Option<String>) -> Result<()> {
    if tokens.is_empty() {
        return Ok(());
    }
    match presented {
        None => Err(Error::Unauthorized(
            "send `Authorization: Token <token>` (v1 also accepts u/p query or Basic auth)".into(),
        )),
        Some(t)
            if tokens
                .iter()
                .any(|k| constant_time_eq(k.as_bytes(), t.as_bytes())) =>
        {
            Ok(())
        }
        Some(_) => Err(Error::Forbidden(
            "the token is not valid for this router".into(),
        )),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        } as u32)
    };
    let s = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for chunk in s.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= val(c)? << (18 - 6 * i);
        }
        let n = match chunk.len() {
            4 => 3,
            3 => 2,
            2 => 1,
            _ => return None,
        };
        out.extend_from_slice(&acc.to_be_bytes()[1..1 + n]);
    }
    Some(out)
}

// ------------------------------------------------------------------ bodies

/// Reads the body up to `limit` bytes (413 beyond), then gunzips it when
/// `Content-Encoding: gzip` (decompressed size bounded by the same limit).
async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes> {
    if let Some(len) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
    {
        if len > limit {
            return Err(Error::BodyTooLarge { limit });
        }
    }
    let raw = Limited::new(body, limit)
        .collect()
        .await
        .map_err(|e| {
            if e.downcast_ref::<LengthLimitError>().is_some() {
                Error::BodyTooLarge { limit }
            } else {
                Error::BadRequest(format!("reading the request body failed: {e}"))
            }
        })?
        .to_bytes();
    let gzip = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("gzip"));
    if !gzip {
        return Ok(raw);
    }
    let mut out = Vec::with_capacity(raw.len() * 4);
    flate2::read::MultiGzDecoder::new(&raw[..])
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| Error::BadRequest(format!("body is not valid gzip: {e}")))?;
    if out.len() > limit {
        return Err(Error::BodyTooLarge { limit });
    }
    Ok(Bytes::from(out))
}

fn precision_param(params: &HashMap<String, String>, v1: bool) -> Result<Precision> {
    let p = params.get("precision").map_or("", String::as_str);
    Precision::parse(p, v1).ok_or_else(|| {
        Error::BadRequest(format!(
            "invalid precision {p:?}: use ns, us, ms or s{}",
            if v1 { " (v1 also n, u, m, h)" } else { "" }
        ))
    })
}

// ------------------------------------------------------------------ writes

async fn write_v1(
    State(r): State<Arc<Router>>,
    Query(params): Params,
    headers: HeaderMap,
    body: Body,
) -> Response {
    write_lines(r, "v1", params, headers, body).await
}

async fn write_v2(
    State(r): State<Arc<Router>>,
    Query(params): Params,
    headers: HeaderMap,
    body: Body,
) -> Response {
    write_lines(r, "v2", params, headers, body).await
}

#[tracing::instrument(name = "write", skip_all, fields(endpoint = endpoint))]
async fn write_lines(
    r: Arc<Router>,
    endpoint: &'static str,
    params: HashMap<String, String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let v1 = endpoint == "v1";
    let prep = async {
        let token = presented_token(&headers, v1.then_some(&params));
        check_token(&r.options.auth_tokens, token)?;
        let db = if v1 {
            params
                .get("db")
                .filter(|d| !d.is_empty())
                .ok_or_else(|| Error::BadRequest("database is required: add ?db=<name>".into()))?
        } else {
            params
                .get("bucket")
                .filter(|d| !d.is_empty())
                .ok_or_else(|| Error::BadRequest("bucket is required: add ?bucket=<name>".into()))?
        };
        let precision = precision_param(&params, v1)?;
        let body = read_body(&headers, body, r.options.max_body_bytes).await?;
        metrics::BYTES
            .with_label_values(&[endpoint])
            .inc_by(body.len() as u64);
        Ok::<_, Error>((db.clone(), precision, body))
    };
    let (db, precision, body) = match prep.await {
        Ok(x) => x,
        Err(e) => return error_response(endpoint, &e),
    };
    let res = r
        .write(endpoint, &db, body.len(), precision, |b| {
            b.add_line_protocol(&body)
        })
        .await;
    write_response(endpoint, "line", res, started)
}

/// One msgpack point. Shape documented in docs/api.md.
#[derive(serde::Deserialize)]
struct MsgPoint<'a> {
    measurement: &'a str,
    #[serde(default, borrow)]
    tags: BTreeMap<&'a str, &'a str>,
    #[serde(borrow)]
    fields: BTreeMap<&'a str, MsgValue<'a>>,
    #[serde(default)]
    timestamp: Option<i64>,
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum MsgValue<'a> {
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(&'a str),
}

impl<'a> MsgValue<'a> {
    fn field(&self) -> FieldValue<'a> {
        match *self {
            MsgValue::Bool(b) => FieldValue::Boolean(b),
            MsgValue::Int(i) => FieldValue::Integer(i),
            MsgValue::UInt(u) => FieldValue::Unsigned(u),
            MsgValue::Float(f) => FieldValue::Float(f),
            MsgValue::Str(s) => FieldValue::String(s),
        }
    }
}

async fn write_msgpack(
    State(r): State<Arc<Router>>,
    Query(params): Params,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let endpoint = "msgpack";
    let started = Instant::now();
    let prep = async {
        check_token(
            &r.options.auth_tokens,
            presented_token(&headers, Some(&params)),
        )?;
        let precision = precision_param(&params, true)?;
        let db = params
            .get("db")
            .or_else(|| params.get("bucket"))
            .cloned()
            .unwrap_or_else(|| "default".into());
        let body = read_body(&headers, body, r.options.max_body_bytes).await?;
        metrics::BYTES
            .with_label_values(&[endpoint])
            .inc_by(body.len() as u64);
        Ok::<_, Error>((db, precision, body))
    };
    let (db, precision, body) = match prep.await {
        Ok(x) => x,
        Err(e) => return error_response(endpoint, &e),
    };
    let points: Vec<MsgPoint<'_>> = match rmp_serde::from_slice(&body) {
        Ok(p) => p,
        Err(e) => {
            return error_response(
                endpoint,
                &Error::BadRequest(format!(
                "body is not a msgpack array of {{measurement, tags, fields, timestamp}} maps: {e}"
            )),
            )
        }
    };
    let res = r
        .write(endpoint, &db, body.len(), precision, |b| {
            let mut tags = Vec::new();
            let mut fields = Vec::new();
            for (i, p) in points.iter().enumerate() {
                tags.clear();
                tags.extend(p.tags.iter().map(|(k, v)| (*k, *v)));
                fields.clear();
                fields.extend(p.fields.iter().map(|(k, v)| (k.as_bytes(), v.field())));
                let time = match p.timestamp.map(|t| precision.to_nanos(t)).transpose() {
                    Ok(t) => t,
                    Err(e) => {
                        b.reject(i, crate::batch::RejectReason::BadPoint, e.to_string());
                        continue;
                    }
                };
                if let Err((reason, msg)) =
                    b.add_point(p.measurement, &tags, fields.iter().copied(), time)
                {
                    b.reject(i, reason, msg);
                }
            }
        })
        .await;
    write_response(endpoint, "point", res, started)
}

async fn write_prom(
    State(r): State<Arc<Router>>,
    Query(params): Params,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let endpoint = "prom";
    let started = Instant::now();
    let limit = r.options.max_body_bytes;
    let prep = async {
        check_token(
            &r.options.auth_tokens,
            presented_token(&headers, Some(&params)),
        )?;
        let db = params
            .get("db")
            .cloned()
            .unwrap_or_else(|| "prometheus".into());
        let compressed = read_body(&HeaderMap::new(), body, limit).await?;
        metrics::BYTES
            .with_label_values(&[endpoint])
            .inc_by(compressed.len() as u64);
        let len = snap::raw::decompress_len(&compressed)
            .map_err(|e| Error::BadRequest(format!("body is not snappy block format: {e}")))?;
        if len > limit {
            return Err(Error::BodyTooLarge { limit });
        }
        let raw = snap::raw::Decoder::new()
            .decompress_vec(&compressed)
            .map_err(|e| Error::BadRequest(format!("body is not snappy block format: {e}")))?;
        let req = <prom_proto::WriteRequest as prost::Message>::decode(&raw[..]).map_err(|e| {
            Error::BadRequest(format!("body is not a remote_write WriteRequest: {e}"))
        })?;
        Ok::<_, Error>((db, req, compressed.len()))
    };
    let (db, req, size) = match prep.await {
        Ok(x) => x,
        Err(e) => return error_response(endpoint, &e),
    };
    let res = r
        .write(endpoint, &db, size, Precision::Millisecond, |b| {
            let mut tags = Vec::new();
            let mut i = 0usize;
            for ts in &req.timeseries {
                let name = ts.labels.iter().find(|l| l.name == "__name__");
                tags.clear();
                tags.extend(
                    ts.labels
                        .iter()
                        .filter(|l| l.name != "__name__" && !l.value.is_empty())
                        .map(|l| (l.name.as_str(), l.value.as_str())),
                );
                for s in &ts.samples {
                    let Some(name) = name else {
                        b.reject(
                            i,
                            crate::batch::RejectReason::BadPoint,
                            "time series without a __name__ label".into(),
                        );
                        i += 1;
                        continue;
                    };
                    let field = [(&b"value"[..], FieldValue::Float(s.value))];
                    let time = s.timestamp.checked_mul(1_000_000);
                    let res = match time {
                        Some(t) => b.add_point(&name.value, &tags, field.iter().copied(), Some(t)),
                        None => Err((
                            crate::batch::RejectReason::BadPoint,
                            format!("timestamp {} ms out of range", s.timestamp),
                        )),
                    };
                    if let Err((reason, msg)) = res {
                        b.reject(i, reason, msg);
                    }
                    i += 1;
                }
            }
        })
        .await;
    write_response(endpoint, "sample", res, started)
}

// ------------------------------------------------------------------ query

async fn sql(
    State(r): State<Arc<Router>>,
    Query(params): Params,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let endpoint = "sql";
    let res = async {
        check_token(
            &r.options.auth_tokens,
            presented_token(&headers, Some(&params)),
        )?;
        let q = match params.get("q") {
            Some(q) => q.clone(),
            None => {
                let b = read_body(&headers, body, r.options.max_body_bytes).await?;
                let text = String::from_utf8(b.to_vec())
                    .map_err(|_| Error::BadRequest("query is not UTF-8".into()))?;
                // Form posts (`q=...`) and raw SQL bodies both work.
                match text.strip_prefix("q=") {
                    Some(rest) => form_decode(rest),
                    None => text,
                }
            }
        };
        let csv = params.get("format").is_some_and(|f| f == "csv");
        query::run(&r, &q, csv).await
    }
    .await;
    match res {
        Ok((content_type, body)) => {
            metrics::REQUESTS
                .with_label_values(&[endpoint, "200"])
                .inc();
            ([(header::CONTENT_TYPE, content_type)], body).into_response()
        }
        Err(e) => error_response(endpoint, &e),
    }
}

fn form_decode(s: &str) -> String {
    let b = s.as_bytes();
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h * 16 + l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

// ------------------------------------------------------------------ misc

async fn ping() -> Response {
    let mut resp = StatusCode::NO_CONTENT.into_response();
    resp.headers_mut().insert(
        "x-influxdb-version",
        HeaderValue::from_static("shardhouse-1.8"),
    );
    resp
}

async fn health(State(r): State<Arc<Router>>) -> Response {
    let epoch = r.cluster.shard_map().map(|m| m.epoch).unwrap_or(0);
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::json!({"status": "pass", "shard_map_epoch": epoch}).to_string(),
    )
        .into_response()
}

/// Ready once a shard map is known (writes can be routed).
async fn ready(State(r): State<Arc<Router>>) -> Response {
    match r.cluster.shard_map() {
        Ok(_) => (StatusCode::OK, "ready").into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response(),
    }
}

async fn metrics_text() -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        metrics::render(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_and_basic_auth_decode() {
        assert_eq!(base64_decode("dXNlcjpzZWNyZXQ=").unwrap(), b"user:secret");
        assert_eq!(base64_decode("YQ").unwrap(), b"a");
        assert!(base64_decode("!!").is_none());
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Basic dXNlcjpzZWNyZXQ="),
        );
        assert_eq!(presented_token(&h, None).as_deref(), Some("secret"));
    }

    #[test]
    fn missing_token_is_401_wrong_token_is_403() {
        let tokens = vec!["t1".to_string()];
        assert!(check_token(&[], None).is_ok());
        assert_eq!(
            check_token(&tokens, None).unwrap_err().status(),
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            check_token(&tokens, Some("nope".into()))
                .unwrap_err()
                .status(),
            StatusCode::FORBIDDEN
        );
        assert!(check_token(&tokens, Some("t1".into())).is_ok());
    }

    #[test]
    fn form_decoding() {
        assert_eq!(form_decode("SELECT+1%2C2"), "SELECT 1,2");
        assert_eq!(form_decode("a%zz"), "a%zz");
    }
}
