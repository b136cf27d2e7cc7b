//! HTTP front door: InfluxDB v1/v2 writes, msgpack, Prometheus
//! remote_write, SQL read-back, ping/health/ready/metrics.

use crate::error::{Error, Result};
use crate::ingest::{Router, WriteOutcome};
use crate::{influx, metrics, query, storage_admin};
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
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
        .route("/ping", get(ping).head(ping))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics_text))
        .with_state(router)
}

type Params = HashMap<String, String>;

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
fn json_error(status: StatusCode, code: &str, msg: &str) -> Response {
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

/// Whether every `%` of a URL component starts a valid escape and the
/// decoded bytes are UTF-8.
fn check_escapes(component: &str) -> std::result::Result<(), String> {
    let b = component.as_bytes();
    for (i, _) in b.iter().enumerate().filter(|(_, &c)| c == b'%') {
        let valid = b.len() > i + 2 && b[i + 1].is_ascii_hexdigit() && b[i + 2].is_ascii_hexdigit();
        if !valid {
            let bad: String = component[i..].chars().take(3).collect();
            return Err(format!(
                "has an invalid percent-escape {bad:?} at byte {i}: encode `%` as `%25`"
            ));
        }
    }
    if percent_encoding::percent_decode(b).decode_utf8().is_err() {
        return Err("is not UTF-8 once percent-decoded".into());
    }
    Ok(())
}

fn excerpt(b: &[u8]) -> String {
    shardhouse_common::names::excerpt(b)
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
                json_error(StatusCode::BAD_REQUEST, "invalid", &e.to_string())
            }
        },
        Err(e) => error_response(endpoint, &e),
    }
}

// ------------------------------------------------------------------ auth

/// Token from `Authorization: Token <t>` / `Bearer <t>` / `Basic` (the
/// password), or (v1) the `p` query parameter.
pub(crate) fn presented_token(
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
            let decoded = BASE64.decode(b.trim()).ok()?;
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

/// Base64 of Basic credentials: the standard alphabet, padding optional.
const BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

// ------------------------------------------------------------------ bodies

/// The body's `Content-Encoding`, lower case, if it is one of `allowed`
/// (absent counts as `identity`); any other is 415 naming it.
fn content_encoding(headers: &HeaderMap, allowed: &[&'static str]) -> Result<&'static str> {
    let mut values = headers.get_all(header::CONTENT_ENCODING).iter();
    let (Some(v), None) = (values.next(), values.next()) else {
        if headers.contains_key(header::CONTENT_ENCODING) {
            return Err(Error::UnsupportedMediaType(
                "send one Content-Encoding header".into(),
            ));
        }
        return Ok("identity");
    };
    let text = String::from_utf8_lossy(v.as_bytes());
    let name = text.trim();
    let name = if name.eq_ignore_ascii_case("x-gzip") {
        "gzip"
    } else {
        name
    };
    allowed
        .iter()
        .find(|a| a.eq_ignore_ascii_case(name))
        .copied()
        .ok_or_else(|| {
            Error::UnsupportedMediaType(format!(
                "Content-Encoding {:?} is not supported here; send {}",
                excerpt(name.as_bytes()),
                allowed
                    .iter()
                    .map(|a| format!("`{a}`"))
                    .collect::<Vec<_>>()
                    .join(" or ")
            ))
        })
}

/// Reads the body up to `limit` bytes (413 beyond), then gunzips it when
/// `Content-Encoding: gzip` (decompressed size bounded by the same limit).
/// Encodings other than gzip and identity are 415.
async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes> {
    let encoding = content_encoding(headers, &["gzip", "identity"])?;
    let raw = read_raw_body(headers, body, limit).await?;
    if encoding != "gzip" {
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

/// Reads the body as sent, up to `limit` bytes (413 beyond).
async fn read_raw_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes> {
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
    Ok(raw)
}

fn precision_param(params: &HashMap<String, String>, v1: bool) -> Result<Precision> {
    let p = params.get("precision").map_or("", String::as_str);
    Precision::parse(p, v1).ok_or_else(|| {
        Error::BadRequest(format!(
            "invalid precision {:?}: use ns, us, ms or s{}",
            excerpt(p.as_bytes()),
            if v1 { " (v1 also n, u, m, h)" } else { "" }
        ))
    })
}

// ------------------------------------------------------------------ writes

async fn write_v1(
    State(r): State<Arc<Router>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    write_lines(r, "v1", query, headers, body).await
}

async fn write_v2(
    State(r): State<Arc<Router>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    write_lines(r, "v2", query, headers, body).await
}

#[tracing::instrument(name = "write", skip_all, fields(endpoint = endpoint))]
async fn write_lines(
    r: Arc<Router>,
    endpoint: &'static str,
    query: Option<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let v1 = endpoint == "v1";
    let prep = async {
        let params = parse_params(query.as_deref())?;
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
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let endpoint = "msgpack";
    let started = Instant::now();
    let prep = async {
        let params = parse_params(query.as_deref())?;
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
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let endpoint = "prom";
    let started = Instant::now();
    let limit = r.options.max_body_bytes;
    let prep = async {
        let params = parse_params(query.as_deref())?;
        check_token(
            &r.options.auth_tokens,
            presented_token(&headers, Some(&params)),
        )?;
        let db = params
            .get("db")
            .cloned()
            .unwrap_or_else(|| "prometheus".into());
        // remote_write bodies are snappy block format (Prometheus says
        // `Content-Encoding: snappy`); nothing else is read.
        content_encoding(&headers, &["snappy"])?;
        let compressed = read_raw_body(&headers, body, limit).await?;
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
            // NaN is how Prometheus marks a stale series: kept here only.
            b.keep_non_finite_floats();
            // Every metric in one table per database (docs/storage.md).
            b.samples_table();
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
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let endpoint = "sql";
    let res = async {
        let params = parse_params(query.as_deref())?;
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
                let form = headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
                if form || text.starts_with("q=") {
                    parse_params(Some(&text))?
                        .remove("q")
                        .ok_or_else(|| Error::BadRequest("the form has no `q` field".into()))?
                } else {
                    text
                }
            }
        };
        let opts = query::SqlOptions::from_params(&params)?;
        let db = params.get("db").ok_or_else(|| {
            Error::BadRequest(
                "name the database to read with `db=` (tables are that database's measurements, `_series` and `_samples`)".into(),
            )
        })?;
        shardhouse_common::names::validate_database(db)
            .map_err(|e| Error::BadRequest(e.to_string()))?;
        query::run(&r, db, &q, opts).await
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

// ------------------------------------------------------------------ misc

async fn ping() -> Response {
    let mut resp = StatusCode::NO_CONTENT.into_response();
    resp.headers_mut().insert(
        "x-influxdb-version",
        HeaderValue::from_static("shardhouse-1.8"),
    );
    resp
}

/// Git commit of the build, when the build set `SHARDHOUSE_GIT_COMMIT`.
const GIT_COMMIT: &str = match option_env!("SHARDHOUSE_GIT_COMMIT") {
    Some(c) => c,
    None => "",
};

/// The body of `/health`, shaped as InfluxDB 1.8/2.x answer it (the v2
/// client libraries' `health()` reads `name`, `message`, `status`,
/// `checks`, `version`, `commit`), plus `shard_map_epoch`.
pub fn health_body(shard_map_epoch: u64) -> serde_json::Value {
    serde_json::json!({
        "name": "shardhouse",
        "message": "ready for queries and writes",
        "status": "pass",
        "checks": [],
        "version": env!("CARGO_PKG_VERSION"),
        "commit": GIT_COMMIT,
        "shard_map_epoch": shard_map_epoch,
    })
}

async fn health(State(r): State<Arc<Router>>) -> Response {
    let epoch = r.cluster.shard_map().map(|m| m.epoch).unwrap_or(0);
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        health_body(epoch).to_string(),
    )
        .into_response()
}

/// A duration as Go prints it (`1h2m3.5s`, `250ms` is `0.25s` here: whole
/// seconds and a trimmed fraction), as InfluxDB's `/ready` `up` field.
pub fn go_duration(d: std::time::Duration) -> String {
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3_600, secs % 3_600 / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    out.push_str(&s.to_string());
    if d.subsec_nanos() > 0 {
        let frac = format!("{:09}", d.subsec_nanos());
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    out.push('s');
    out
}

/// Ready once a shard map is known (writes can be routed), answered as
/// InfluxDB 2.x does: 200 `{"status":"ready","started":..,"up":..}`;
/// before, 503 `{"status":"starting","message":<why>}`.
async fn ready(State(r): State<Arc<Router>>) -> Response {
    let (status, body) = match r.cluster.shard_map() {
        Ok(_) => {
            let started = r
                .started
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            (
                StatusCode::OK,
                serde_json::json!({
                    "status": "ready",
                    "started": query::rfc3339_utc(started.as_secs() as i64, started.subsec_nanos()),
                    "up": go_duration(r.started.elapsed().unwrap_or_default()),
                }),
            )
        }
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({"status": "starting", "message": e.to_string()}),
        ),
    };
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
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
    fn basic_auth_decode() {
        let mut h = HeaderMap::new();
        for (v, want) in [
            ("Basic dXNlcjpzZWNyZXQ=", Some("secret")),
            ("Basic dXNlcjpzZWNyZXQ", Some("secret")),
            ("Basic !!", None),
        ] {
            h.insert(header::AUTHORIZATION, HeaderValue::from_static(v));
            assert_eq!(presented_token(&h, None).as_deref(), want, "{v}");
        }
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

    #[test]
    fn content_encodings_other_than_gzip_and_identity_are_415() {
        let with = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_ENCODING, HeaderValue::from_static(v));
            h
        };
        let allowed = &["gzip", "identity"];
        assert_eq!(
            content_encoding(&HeaderMap::new(), allowed).unwrap(),
            "identity"
        );
        assert_eq!(content_encoding(&with("GZIP"), allowed).unwrap(), "gzip");
        assert_eq!(content_encoding(&with("x-gzip"), allowed).unwrap(), "gzip");
        assert_eq!(
            content_encoding(&with("identity"), allowed).unwrap(),
            "identity"
        );
        for v in ["br", "deflate", "zstd", "gzip, br"] {
            let e = content_encoding(&with(v), allowed).unwrap_err();
            assert_eq!(e.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
            assert!(e.to_string().contains(v), "{e}");
        }
    }

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

    #[test]
    fn health_has_influxdb_fields_and_durations_print_as_go() {
        let h = health_body(7);
        for k in ["name", "message", "status", "version", "commit"] {
            assert!(h[k].is_string(), "{k}: {h}");
        }
        assert_eq!(h["status"], "pass");
        assert_eq!(h["checks"], serde_json::json!([]));
        assert_eq!(h["shard_map_epoch"], 7);
        use std::time::Duration;
        assert_eq!(go_duration(Duration::from_millis(14_250)), "14.25s");
        assert_eq!(go_duration(Duration::from_secs(3_723)), "1h2m3s");
        assert_eq!(go_duration(Duration::from_secs(60)), "1m0s");
        assert_eq!(go_duration(Duration::ZERO), "0s");
    }
}
