//! OpenTelemetry metrics in: OTLP/HTTP `POST /v1/metrics` (protobuf or
//! JSON, gzip or not), mapped to Prometheus samples as Prometheus's own
//! OTLP receiver maps them (`write::otlp`), then written through
//! remote_write's path into the database's `_samples` (database, token and
//! roles as `/api/v1/prom/write`). Answers are OTLP's, in the request's
//! encoding: 200 with an `ExportMetricsServiceResponse` (`partial_success`
//! counting the refused data points, the good ones kept), 400 when no
//! point could be kept or the body does not decode, 415 for other content
//! types, the router's usual 401/403/413/429/503 with a `google.rpc.Status`.

use super::{parse_params, read_body};
use crate::auth::presented_token;
use crate::error::Error;
use crate::metrics;
use crate::state::Router;
use crate::write::admit::{admit_write, charge_write};
use crate::write::otlp::{self, Converted, Rejection};
use crate::write::otlp_wire::{self, Encoding};
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use shardhouse_common::lineproto::Precision;
use shardhouse_common::status::retry_after_secs;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

const ENDPOINT: &str = "otlp";
/// Refusals spelled out in one answer; the rest are counted.
const MESSAGES_SHOWN: usize = 5;

pub(crate) async fn write_metrics(
    State(r): State<Arc<Router>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let enc = match otlp_wire::encoding_of(content_type) {
        Ok(enc) => enc,
        Err(why) => {
            return error(
                Encoding::Json,
                &Error::UnsupportedMediaType(why.to_string()),
            )
        }
    };
    let limit = r.options.max_body_bytes;
    let prep = async {
        let params = parse_params(query.as_deref())?;
        let db = params
            .get("db")
            .cloned()
            .unwrap_or_else(|| "prometheus".into());
        let token = presented_token(&headers, Some(&params));
        let access = admit_write(&r.auth, token.as_deref(), &db)?;
        // gzip or identity (415 otherwise), bounded before and after.
        let raw = read_body(&headers, body, limit).await?;
        metrics::BYTES
            .with_label_values(&[ENDPOINT])
            .inc_by(raw.len() as u64);
        let req = otlp_wire::decode(&raw, enc).map_err(|e| Error::BadRequest(e.to_string()))?;
        let rp = params.get("rp").filter(|r| !r.is_empty()).cloned();
        Ok::<_, Error>((db, rp, req, raw.len(), access))
    };
    let (db, rp, req, size, access) = match prep.await {
        Ok(x) => x,
        Err(e) => return error(enc, &e),
    };
    let converted = otlp::convert(&req);
    drop(req);
    let mut refused = Vec::new();
    let res = if converted.samples.is_empty() {
        None
    } else {
        let samples = &converted.samples;
        let refused = &mut refused;
        Some(
            r.write(
                ENDPOINT,
                &db,
                rp.as_deref(),
                size,
                Precision::Millisecond,
                |b| *refused = otlp::add_samples(b, samples),
            )
            .await,
        )
    };
    if let Some(res) = &res {
        charge_write(&r.auth, access, res);
    }
    metrics::WRITE_SECONDS
        .with_label_values(&[ENDPOINT])
        .observe(started.elapsed().as_secs_f64());
    match res {
        Some(Err(e)) => error(enc, &e),
        Some(Ok(_)) | None => answer(enc, &converted, &refused),
    }
}

/// 200 with `partial_success` when a data point was kept (or none was
/// sent), 400 when every data point was refused.
fn answer(enc: Encoding, c: &Converted, refused: &[Rejection]) -> Response {
    let all: Vec<&Rejection> = c.rejected.iter().chain(refused).collect();
    let points: BTreeSet<usize> = all.iter().filter_map(|r| r.point).collect();
    // Data points, not samples: a resource's target_info sample is no
    // data point of the client's.
    let kept = c.points.saturating_sub(points.len());
    let message = summary_message(&all, points.len(), c);
    if !all.is_empty() {
        metrics::REJECTED
            .with_label_values(&["bad_request"])
            .inc_by(all.len() as u64);
    }
    if kept == 0 && !points.is_empty() {
        return error(enc, &Error::BadRequest(message));
    }
    reply(
        enc,
        StatusCode::OK,
        otlp_wire::response_body(enc, points.len(), &message),
    )
}

/// What was refused: the first few messages, how many more, the warnings.
fn summary_message(all: &[&Rejection], points: usize, c: &Converted) -> String {
    let mut parts: Vec<String> = Vec::new();
    if !all.is_empty() {
        parts.push(format!("{points} of {} data points rejected", c.points));
        let mut seen = BTreeSet::new();
        for r in all {
            if seen.len() == MESSAGES_SHOWN {
                break;
            }
            if seen.insert(r.message.as_str()) {
                parts.push(r.message.clone());
            }
        }
        if all.len() > seen.len() {
            parts.push(format!("({} more)", all.len() - seen.len()));
        }
    }
    parts.extend(c.warnings.iter().take(MESSAGES_SHOWN).cloned());
    parts.join("; ")
}

/// An error as OTLP/HTTP answers one: the status, a `google.rpc.Status`
/// body in the request's encoding, `Retry-After` on 429/503.
fn error(enc: Encoding, e: &Error) -> Response {
    let status = e.status();
    if let Some(reason) = e.reject_reason() {
        metrics::REJECTED.with_label_values(&[reason]).inc();
    }
    let msg = super::bounded(&e.to_string(), super::MAX_ERROR_MESSAGE_BYTES);
    if status.is_server_error() {
        tracing::warn!(endpoint = ENDPOINT, error = %msg, "write failed");
    } else {
        tracing::debug!(endpoint = ENDPOINT, error = %msg, "write refused");
    }
    let code = tonic::Status::from(e.shared()).code() as i32;
    let mut resp = reply(enc, status, otlp_wire::status_body(enc, code, &msg));
    if let Some(d) = e.retry_after() {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs(d)));
    }
    resp
}

fn reply(enc: Encoding, status: StatusCode, body: Vec<u8>) -> Response {
    metrics::REQUESTS
        .with_label_values(&[ENDPOINT, status.as_str()])
        .inc();
    let mut resp = (status, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(enc.content_type()),
    );
    resp
}
