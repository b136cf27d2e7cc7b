//! InfluxDB 1.x: `POST /write` (line protocol, `db=`, `precision=`) and
//! `GET|POST /query` (InfluxQL: `db`, `rp`, `q`, `epoch`, `pretty`,
//! `chunked`, `chunk_size`, `params`; answered as InfluxDB 1.8 does, the
//! statements run by `read::influx`).

use super::params::precision_param;
use super::{error_header, error_response, parse_params, read_body, write_response, Params};
use crate::auth::presented_token;
use crate::error::Error;
use crate::metrics;
use crate::read::influx::{self, Ctx};
use crate::state::Router;
use crate::write::admit::{admit_write, charge_write};
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use shardhouse_eval::encode::{self, Format};
use shardhouse_influxql::Statement;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub(crate) async fn write_v1(
    State(r): State<Arc<Router>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    write_lines(r, "v1", query, headers, body).await
}

#[tracing::instrument(name = "write", skip_all, fields(endpoint = endpoint))]
pub(super) async fn write_lines(
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
        // v1 names `db` and `rp`; v2 a bucket `db/rp` (rp optional), as
        // InfluxDB 1.8's v2 compatibility API maps it.
        let (db, rp) = if v1 {
            let db = params.get("db").filter(|d| !d.is_empty());
            (
                db.cloned(),
                params.get("rp").filter(|r| !r.is_empty()).cloned(),
            )
        } else {
            match params.get("bucket").filter(|b| !b.is_empty()) {
                None => (None, None),
                Some(b) => match b.split_once('/') {
                    Some((db, rp)) => (
                        Some(db.to_owned()),
                        Some(rp.to_owned()).filter(|r| !r.is_empty()),
                    ),
                    None => (Some(b.clone()), None),
                },
            }
        };
        let access = admit_write(&r.auth, token.as_deref(), db.as_deref().unwrap_or(""))?;
        let db = db.ok_or_else(|| {
            Error::BadRequest(if v1 {
                "database is required: add ?db=<name>".into()
            } else {
                "bucket is required: add ?bucket=<name>".into()
            })
        })?;
        let precision = precision_param(&params, v1)?;
        let body = read_body(&headers, body, r.options.max_body_bytes).await?;
        metrics::BYTES
            .with_label_values(&[endpoint])
            .inc_by(body.len() as u64);
        Ok::<_, Error>((db, rp, precision, body, access))
    };
    let (db, rp, precision, body, access) = match prep.await {
        Ok(x) => x,
        Err(e) => return error_response(endpoint, &e),
    };
    let res = r
        .write(endpoint, &db, rp.as_deref(), body.len(), precision, |b| {
            b.add_line_protocol(&body)
        })
        .await;
    charge_write(&r.auth, access, &res);
    write_response(endpoint, "line", res, started)
}

/// `GET|POST /query`.
pub(crate) async fn query(
    State(r): State<Arc<Router>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let response = match answer(&r, query.as_deref(), &headers, body).await {
        Ok(response) => response,
        Err((status, message)) => request_error(status, &message),
    };
    metrics::REQUESTS
        .with_label_values(&["query", response.status().as_str()])
        .inc();
    tracing::debug!(elapsed_ms = started.elapsed().as_millis() as u64, "query");
    response
}

/// A request refused before any statement ran: its status and the
/// message of InfluxDB's `{"error": ...}` body.
type Refusal = (StatusCode, String);

fn bad_request(message: impl std::fmt::Display) -> Refusal {
    (StatusCode::BAD_REQUEST, message.to_string())
}

/// The request's steps: parameters, token, statements parsed, checked and
/// permitted, then run one after the other and encoded.
async fn answer(
    r: &Router,
    query: Option<&str>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, Refusal> {
    let params = query_params(r, query, headers, body).await?;
    let who = r
        .auth
        .authenticate(presented_token(headers, Some(&params)).as_deref())
        .map_err(|e| (StatusCode::UNAUTHORIZED, e.to_string()))?;
    let Some(q) = params.get("q").filter(|q| !q.trim().is_empty()) else {
        return Err(bad_request("missing required parameter \"q\""));
    };
    let bind =
        influx::bind_params(params.get("params").map(String::as_str)).map_err(bad_request)?;
    let parsed = shardhouse_influxql::parse_with_params(q, &bind)
        .map_err(|e| bad_request(format!("error parsing query: {e}")))?;
    // What Shardhouse does not serve is refused before anything runs.
    if let Some(message) = parsed
        .statements
        .iter()
        .find_map(|st| influx::unsupported(st, q))
    {
        return Err(bad_request(message));
    }
    let database = params.get("db").map(String::as_str).unwrap_or("");
    // The role the statements need (admin for create, drop, delete).
    r.auth
        .permit_statements(&who, &parsed.statements, database)
        .map_err(|e| (StatusCode::FORBIDDEN, e.to_string()))?;
    let format = output_format(&params, &parsed.statements);
    let ctx = Ctx {
        router: r,
        database,
        retention_policy: params
            .get("rp")
            .map(String::as_str)
            .filter(|r| !r.is_empty()),
        now: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64),
        deadline: tokio::time::Instant::now() + Duration::from_millis(r.options.query_timeout_ms),
        max_points: r.options.query_max_points,
        access: Some(&who),
    };
    let chunked = params.get("chunked").is_some_and(|c| c == "true");
    let chunk_size = encode::chunk_size(params.get("chunk_size").map(String::as_str));
    let results = influx::run_statements(&ctx, &parsed.statements, chunked.then_some(chunk_size))
        .await
        .map_err(|e| (e.status(), e.to_string()))?;
    let csv = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/csv") || a.contains("text/csv"));
    let (content_type, text) = influx::encode_results(results, &format, csv, chunked);
    Ok(with_version(
        (StatusCode::OK, [(header::CONTENT_TYPE, content_type)], text).into_response(),
    ))
}

/// The query string's parameters and, for a form post, the body's (the
/// query string wins).
async fn query_params(
    r: &Router,
    query: Option<&str>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Params, Refusal> {
    let mut params = parse_params(query).map_err(bad_request)?;
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if is_form {
        let bytes = axum::body::to_bytes(body, r.options.max_body_bytes)
            .await
            .map_err(|e| bad_request(format!("cannot read the request body: {e}")))?;
        let text =
            std::str::from_utf8(&bytes).map_err(|_| bad_request("the form body is not UTF-8"))?;
        for (k, v) in parse_params(Some(text)).map_err(bad_request)? {
            params.entry(k).or_insert(v);
        }
    }
    Ok(params)
}

/// `epoch` and `pretty`; times print in the zone of the first statement's
/// `tz()`.
fn output_format(params: &Params, statements: &[Statement]) -> Format {
    let mut format = Format::from_params(
        params.get("epoch").map(String::as_str),
        params.get("pretty").map(String::as_str),
    );
    if let Some(Statement::Select(s)) = statements.first() {
        format.zone = s
            .timezone
            .as_deref()
            .and_then(|z| shardhouse_eval::time_zone(z).ok());
    }
    format
}

/// A request-level error: `{"error":"..."}`, as InfluxDB answers it.
fn request_error(status: StatusCode, message: &str) -> Response {
    let body = encode::to_json(&encode::Response::error(message), &Format::default());
    let mut resp = (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
    resp.headers_mut()
        .insert("x-influxdb-error", error_header(message));
    with_version(resp)
}

fn with_version(mut resp: Response) -> Response {
    resp.headers_mut().insert(
        "x-influxdb-version",
        HeaderValue::from_static("shardhouse-1.8"),
    );
    resp
}
