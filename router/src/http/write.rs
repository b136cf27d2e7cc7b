//! Writes: InfluxDB `/write` (v1) and `/api/v2/write`, msgpack and
//! Prometheus remote_write, answered 204 or with the first bad point.

use super::params::precision_param;
use super::{
    admit_write, charge_write, content_encoding, error_response, json_error, parse_params,
    presented_token, read_body, read_raw_body,
};
use crate::error::{Error, Result};
use crate::ingest::{Router, WriteOutcome};
use crate::metrics;
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use shardhouse_common::lineproto::{FieldValue, Precision};
use shardhouse_common::prom_proto;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

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

pub(super) async fn write_v1(
    State(r): State<Arc<Router>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    write_lines(r, "v1", query, headers, body).await
}

pub(super) async fn write_v2(
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
        let named = params.get(if v1 { "db" } else { "bucket" });
        let access = admit_write(&r, token.as_deref(), named.map_or("", String::as_str))?;
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
        Ok::<_, Error>((db.clone(), precision, body, access))
    };
    let (db, precision, body, access) = match prep.await {
        Ok(x) => x,
        Err(e) => return error_response(endpoint, &e),
    };
    let res = r
        .write(endpoint, &db, body.len(), precision, |b| {
            b.add_line_protocol(&body)
        })
        .await;
    charge_write(&r, access, &res);
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

fn decode_points(body: &[u8]) -> Result<Vec<MsgPoint<'_>>> {
    rmp_serde::from_slice(body).map_err(|e| {
        Error::BadRequest(format!(
            "body is not a msgpack array of {{measurement, tags, fields, timestamp}} maps: {e}"
        ))
    })
}

/// Decodes a msgpack body as `/api/v1/write/msgpack` does and counts its
/// points (property tests and the fuzz target call this).
pub fn decode_msgpack(body: &[u8]) -> Result<usize> {
    decode_points(body).map(|p| p.len())
}

pub(super) async fn write_msgpack(
    State(r): State<Arc<Router>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let endpoint = "msgpack";
    let started = Instant::now();
    let prep = async {
        let params = parse_params(query.as_deref())?;
        let precision = precision_param(&params, true)?;
        let db = params
            .get("db")
            .or_else(|| params.get("bucket"))
            .cloned()
            .unwrap_or_else(|| "default".into());
        let access = admit_write(&r, presented_token(&headers, Some(&params)).as_deref(), &db)?;
        let body = read_body(&headers, body, r.options.max_body_bytes).await?;
        metrics::BYTES
            .with_label_values(&[endpoint])
            .inc_by(body.len() as u64);
        Ok::<_, Error>((db, precision, body, access))
    };
    let (db, precision, body, access) = match prep.await {
        Ok(x) => x,
        Err(e) => return error_response(endpoint, &e),
    };
    let points = match decode_points(&body) {
        Ok(p) => p,
        Err(e) => return error_response(endpoint, &e),
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
    charge_write(&r, access, &res);
    write_response(endpoint, "point", res, started)
}

pub(super) async fn write_prom(
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
        let db = params
            .get("db")
            .cloned()
            .unwrap_or_else(|| "prometheus".into());
        let access = admit_write(&r, presented_token(&headers, Some(&params)).as_deref(), &db)?;
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
        Ok::<_, Error>((db, req, compressed.len(), access))
    };
    let (db, req, size, access) = match prep.await {
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
    charge_write(&r, access, &res);
    write_response(endpoint, "sample", res, started)
}
