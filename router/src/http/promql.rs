//! The Prometheus HTTP query API (`/api/v1/query`, `query_range`,
//! `series`, `labels`, `label/<name>/values`, `metadata`,
//! `status/buildinfo`, `query_exemplars`, `format_query`): GET with a
//! query string or POST with a form, answered as Prometheus 2.x answers.
//! PromQL and the answers' shape are `shardhouse_promql`; the samples come
//! from `read::promql`. The database is `db=` (default `prometheus`, as
//! remote_write), with the same tokens and roles as `/query`.

use super::{error_response, read_body};
use crate::auth::{presented_token, Role};

use crate::metrics;
use crate::read::promql::ShardSamples;
use crate::state::Router;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use shardhouse_promql::api::{self, InstantRequest, Params, RangeRequest};
use shardhouse_promql::{Engine, EngineOptions};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::time::Instant;

const ENDPOINT: &str = "promql";

fn json(status: u16, body: String) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    metrics::REQUESTS
        .with_label_values(&[ENDPOINT, code.as_str()])
        .inc();
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn prom_error(e: &shardhouse_promql::Error) -> Response {
    let (status, body) = api::error_body(e);
    json(status, body)
}

/// A 200 with the encoded body, or Prometheus's error answer.
fn answer(res: shardhouse_promql::Result<String>) -> Response {
    match res {
        Ok(body) => json(200, body),
        Err(e) => prom_error(&e),
    }
}

/// The engine, configured once from the environment:
/// `SHARDHOUSE_PROMQL_MAX_SAMPLES` (Prometheus's `--query.max-samples`,
/// default 50,000,000), `SHARDHOUSE_PROMQL_LOOKBACK_MS` (default 5
/// minutes) and `SHARDHOUSE_PROMQL_SUBQUERY_STEP_MS` (a subquery's step
/// when it names none: Prometheus's evaluation interval, default 1 minute).
fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let env = |k: &str| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.trim().parse::<i64>().ok())
                .filter(|n| *n > 0)
        };
        let mut o = EngineOptions::default();
        if let Some(n) = env("SHARDHOUSE_PROMQL_MAX_SAMPLES") {
            o.max_samples = n as usize;
        }
        if let Some(n) = env("SHARDHOUSE_PROMQL_LOOKBACK_MS") {
            o.lookback_ms = n;
        }
        if let Some(n) = env("SHARDHOUSE_PROMQL_SUBQUERY_STEP_MS") {
            o.default_subquery_step_ms = n;
        }
        Engine::new(o)
    })
}

/// The request's parameters (query string, then a form body), its
/// database, after the token is checked for reading it.
async fn admit(
    r: &Router,
    query: Option<&str>,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Params, String), Response> {
    let form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    let body = if form {
        Some(
            read_body(headers, body, r.options.max_body_bytes)
                .await
                .map_err(|e| error_response(ENDPOINT, &e))?,
        )
    } else {
        None
    };
    let params = api::query_params(query, body.as_deref());
    let db = params.get("db").unwrap_or("prometheus").to_string();
    shardhouse_common::names::validate_database(&db)
        .map_err(|e| prom_error(&shardhouse_promql::Error::BadData(e.to_string())))?;
    let flat: std::collections::HashMap<String, String> = params.0.iter().cloned().collect();
    let token = presented_token(headers, Some(&flat));
    r.auth
        .authorize(token.as_deref(), Role::Read, &[db.as_str()])
        .map_err(|e| error_response(ENDPOINT, &e))?;
    Ok((params, db))
}

fn source<'a>(r: &'a Router, db: &str) -> ShardSamples<'a> {
    ShardSamples {
        router: r,
        database: db.to_string(),
        deadline: Instant::now() + Duration::from_millis(r.options.request_timeout_ms),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

pub(crate) async fn query(
    State(r): State<Arc<Router>>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (params, db) = match admit(&r, q.as_deref(), &headers, body).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let res = async {
        let req = InstantRequest::from_params(&params, now_ms())?;
        engine()
            .instant(&source(&r, &db), &req.query, req.time_ms)
            .await
    }
    .await;
    answer(res.map(|v| api::success_body(&v, &[])))
}

pub(crate) async fn query_range(
    State(r): State<Arc<Router>>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (params, db) = match admit(&r, q.as_deref(), &headers, body).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let res = async {
        let req = RangeRequest::from_params(&params)?;
        let src = source(&r, &db);
        engine()
            .range(&src, &req.query, req.start_ms, req.end_ms, req.step_ms)
            .await
    }
    .await;
    answer(res.map(|v| api::success_body(&v, &[])))
}

/// `start`/`end` of the metadata endpoints; absent means all time.
fn time_range(p: &Params) -> shardhouse_promql::Result<Option<(i64, i64)>> {
    let t = |k: &str, default: i64| match p.get(k).filter(|v| !v.is_empty()) {
        Some(v) => api::parse_time(v).map_err(|e| {
            shardhouse_promql::Error::BadData(format!("invalid parameter \"{k}\": {e}"))
        }),
        None => Ok(default),
    };
    if p.get("start").is_none() && p.get("end").is_none() {
        return Ok(None);
    }
    Ok(Some((
        t("start", api::MIN_TIME_MS)?,
        t("end", api::MAX_TIME_MS)?,
    )))
}

fn limit(p: &Params) -> shardhouse_promql::Result<usize> {
    match p.get("limit").filter(|v| !v.is_empty()) {
        None => Ok(usize::MAX),
        Some(v) => match v.parse::<usize>() {
            Ok(0) => Ok(usize::MAX),
            Ok(n) => Ok(n),
            Err(_) => Err(shardhouse_promql::Error::BadData(format!(
                "invalid parameter \"limit\": cannot parse {v:?} to a valid limit"
            ))),
        },
    }
}

pub(crate) async fn series(
    State(r): State<Arc<Router>>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (params, db) = match admit(&r, q.as_deref(), &headers, body).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let res = async {
        let sets = api::match_sets(&params)?;
        if sets.is_empty() {
            return Err(shardhouse_promql::Error::BadData(
                "no match[] parameter provided".into(),
            ));
        }
        let (range, max) = (time_range(&params)?, limit(&params)?);
        let src = source(&r, &db);
        let mut all = std::collections::BTreeSet::new();
        for set in &sets {
            all.extend(src.series(set, range).await?.into_values());
        }
        Ok(all.into_iter().take(max).collect::<Vec<_>>())
    }
    .await;
    answer(res.map(|v| api::series_body(&v)))
}

async fn names_or_values(
    r: &Router,
    q: Option<&str>,
    headers: &HeaderMap,
    body: Body,
    name: Option<&str>,
) -> Response {
    let (params, db) = match admit(r, q, headers, body).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let res = async {
        let sets = api::match_sets(&params)?;
        let (range, max) = (time_range(&params)?, limit(&params)?);
        let mut v = source(r, &db).label_values(&sets, range, name).await?;
        v.truncate(max);
        Ok::<_, shardhouse_promql::Error>(v)
    }
    .await;
    answer(res.map(|v| api::labels_body(&v)))
}

pub(crate) async fn labels(
    State(r): State<Arc<Router>>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    names_or_values(&r, q.as_deref(), &headers, body, None).await
}

pub(crate) async fn label_values(
    State(r): State<Arc<Router>>,
    Path(name): Path<String>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
) -> Response {
    if !shardhouse_promql::engine::is_label_name(&name) {
        return prom_error(&shardhouse_promql::Error::BadData(format!(
            "invalid label name: {name:?}"
        )));
    }
    names_or_values(&r, q.as_deref(), &headers, Body::empty(), Some(&name)).await
}

/// Metric metadata (HELP/TYPE) is not kept by remote_write 1.0 here: an
/// empty answer, which Grafana's metric browser accepts.
pub(crate) async fn metadata(
    State(r): State<Arc<Router>>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match admit(&r, q.as_deref(), &headers, body).await {
        Ok(_) => json(200, r#"{"status":"success","data":{}}"#.into()),
        Err(resp) => resp,
    }
}

pub(crate) async fn exemplars(
    State(r): State<Arc<Router>>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match admit(&r, q.as_deref(), &headers, body).await {
        Ok(_) => json(200, r#"{"status":"success","data":[]}"#.into()),
        Err(resp) => resp,
    }
}

pub(crate) async fn buildinfo() -> Response {
    json(200, api::buildinfo())
}

pub(crate) async fn format_query(
    State(r): State<Arc<Router>>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (params, _) = match admit(&r, q.as_deref(), &headers, body).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    answer(api::format_query(params.get("query").unwrap_or("")))
}
