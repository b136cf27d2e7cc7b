//! The InfluxDB 1.x query API: `GET|POST /query` with `db`, `rp`, `q`
//! (statements separated by `;`), `epoch`, `pretty`, `chunked`,
//! `chunk_size` and `params`, answered in InfluxDB 1.8's JSON (or CSV
//! with `Accept: application/csv`). Parsing is `shardhouse-influxql`,
//! evaluation and encoding `shardhouse-eval`; this module plans the
//! statements onto the shards (docs/api.md, "/query").

mod fetch;
mod fields;
mod meta;
mod pushdown;
mod select;
mod sqlgen;
mod subquery;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use shardhouse_influxql::{ParamValue, Params, Statement};
use shardhouse_eval::encode::{self, CsvWriter, Format, StatementResult};
use tokio::time::Instant;

use crate::http::{parse_params, presented_token};
use crate::ingest::Router;
use crate::metrics;

pub use meta::series_key;

/// What one request's statements share.
pub struct Ctx<'a> {
    pub router: &'a Router,
    /// The request's `db` ("" when absent).
    pub database: &'a str,
    /// `now()` for every statement of the request, in nanoseconds.
    pub now: i64,
    pub deadline: Instant,
    /// The router's `query_max_points`.
    pub max_points: usize,
}

/// `GET|POST /query`.
pub async fn handler(
    State(r): State<Arc<Router>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = std::time::Instant::now();
    let response = answer(&r, query.as_deref(), &headers, body).await;
    metrics::REQUESTS
        .with_label_values(&["query", response.status().as_str()])
        .inc();
    tracing::debug!(elapsed_ms = started.elapsed().as_millis() as u64, "query");
    response
}

async fn answer(r: &Router, query: Option<&str>, headers: &HeaderMap, body: Body) -> Response {
    let mut params = match parse_params(query) {
        Ok(p) => p,
        Err(e) => return request_error(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    // Form posts carry the parameters in the body (the query string wins).
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if is_form {
        let bytes = match axum::body::to_bytes(body, r.options.max_body_bytes).await {
            Ok(b) => b,
            Err(e) => {
                return request_error(
                    StatusCode::BAD_REQUEST,
                    &format!("cannot read the request body: {e}"),
                )
            }
        };
        match std::str::from_utf8(&bytes).map_err(|_| "the form body is not UTF-8".to_string()) {
            Ok(text) => match parse_params(Some(text)) {
                Ok(form) => {
                    for (k, v) in form {
                        params.entry(k).or_insert(v);
                    }
                }
                Err(e) => return request_error(StatusCode::BAD_REQUEST, &e.to_string()),
            },
            Err(e) => return request_error(StatusCode::BAD_REQUEST, &e),
        }
    }
    let who = match r
        .auth
        .authenticate(presented_token(headers, Some(&params)).as_deref())
    {
        Ok(who) => who,
        Err(e) => return request_error(StatusCode::UNAUTHORIZED, &e.to_string()),
    };
    let Some(q) = params.get("q").filter(|q| !q.trim().is_empty()) else {
        return request_error(StatusCode::BAD_REQUEST, "missing required parameter \"q\"");
    };
    let bind = match bind_params(params.get("params").map(String::as_str)) {
        Ok(b) => b,
        Err(e) => return request_error(StatusCode::BAD_REQUEST, &e),
    };
    let parsed = match shardhouse_influxql::parse_with_params(q, &bind) {
        Ok(p) => p,
        Err(e) => {
            return request_error(
                StatusCode::BAD_REQUEST,
                &format!("error parsing query: {e}"),
            )
        }
    };
    // What Shardhouse does not serve is refused before anything runs.
    if let Some(message) = parsed.statements.iter().find_map(|st| unsupported(st, q)) {
        return request_error(StatusCode::BAD_REQUEST, &message);
    }
    let database = params.get("db").map(String::as_str).unwrap_or("");
    // The role the statements need (admin for create, drop, delete).
    if let Err(e) = crate::http::permit_statements(r, &who, &parsed.statements, database) {
        return request_error(StatusCode::FORBIDDEN, &e.to_string());
    }
    let mut format = Format::from_params(
        params.get("epoch").map(String::as_str),
        params.get("pretty").map(String::as_str),
    );
    // Times print in the zone of the statement's tz().
    if let Some(Statement::Select(s)) = parsed.statements.first() {
        format.zone = s
            .timezone
            .as_deref()
            .and_then(|z| shardhouse_eval::time_zone(z).ok());
    }
    let ctx = Ctx {
        router: r,
        database,
        now: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64),
        deadline: Instant::now() + Duration::from_millis(r.options.query_timeout_ms),
        max_points: r.options.query_max_points,
    };
    let chunked = params.get("chunked").is_some_and(|c| c == "true");
    let chunk_size = encode::chunk_size(params.get("chunk_size").map(String::as_str));

    let mut results: Vec<StatementResult> = Vec::new();
    for (i, stmt) in parsed.statements.iter().enumerate() {
        let outcome = match stmt {
            Statement::Select(s) => select::run(&ctx, s).await,
            other => meta::run(&ctx, other).await,
        };
        match outcome {
            Ok(series) if chunked => results.extend(encode::chunk(i, series, chunk_size)),
            Ok(series) => results.push(StatementResult {
                statement_id: i,
                series,
                ..StatementResult::default()
            }),
            Err(message) => {
                // As InfluxDB: the failing statement's error ends the request.
                results.push(StatementResult::error(i, message));
                break;
            }
        }
    }

    let csv = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/csv") || a.contains("text/csv"));
    let (content_type, text) = if csv {
        let mut w = CsvWriter::new();
        let body = w.write(
            &encode::Response {
                results,
                error: None,
            },
            &format,
        );
        ("text/csv", body)
    } else if chunked {
        let mut body = String::new();
        for result in results {
            body.push_str(&encode::to_json(
                &encode::Response {
                    results: vec![result],
                    error: None,
                },
                &format,
            ));
        }
        ("application/json", body)
    } else {
        (
            "application/json",
            encode::to_json(
                &encode::Response {
                    results,
                    error: None,
                },
                &format,
            ),
        )
    };
    with_version((StatusCode::OK, [(header::CONTENT_TYPE, content_type)], text).into_response())
}

/// Why a parsed statement cannot be served, naming the construct and where
/// it stands in `q` (as the parser's errors do), or `None`.
fn unsupported(stmt: &Statement, q: &str) -> Option<String> {
    let (what, needle) = match stmt {
        Statement::Explain { .. } => ("EXPLAIN".to_string(), "EXPLAIN".to_string()),
        Statement::ShowCardinality(_) => (
            "SHOW ... CARDINALITY".to_string(),
            "CARDINALITY".to_string(),
        ),
        Statement::CreateRetentionPolicy(_) => (
            "CREATE RETENTION POLICY (each database has one policy, autogen; use ALTER RETENTION POLICY autogen ON <db> DURATION <d>)".to_string(),
            "CREATE".to_string(),
        ),
        Statement::DropRetentionPolicy { .. } => {
            ("DROP RETENTION POLICY".to_string(), "RETENTION".to_string())
        }
        Statement::Select(s) => {
            if s.into.is_some() {
                ("SELECT ... INTO".to_string(), "INTO".to_string())
            } else if let Some(call) = s.fields.iter().find_map(|f| aggregate_in_arithmetic(&f.expr)) {
                (
                    format!("arithmetic on aggregates ({call}() inside an expression)"),
                    format!("{call}("),
                )
            } else {
                return None;
            }
        }
        _ => return None,
    };
    let at = q
        .to_ascii_lowercase()
        .find(&needle.to_ascii_lowercase())
        .unwrap_or(0);
    let pos = shardhouse_influxql::Position::at(q, at);
    Some(format!(
        "{what} is not supported by Shardhouse at line {}, char {}",
        pos.line, pos.column
    ))
}

/// The first function called inside arithmetic (`mean(a) / mean(b)`).
fn aggregate_in_arithmetic(e: &shardhouse_influxql::Expr) -> Option<String> {
    use shardhouse_influxql::Expr;
    fn first_call(e: &Expr) -> Option<String> {
        match e {
            Expr::Call(c) => Some(c.name.clone()),
            Expr::Binary { lhs, rhs, .. } => first_call(lhs).or_else(|| first_call(rhs)),
            _ => None,
        }
    }
    match e {
        Expr::Binary { .. } => first_call(e),
        _ => None,
    }
}

/// A request-level error: `{"error":"..."}`, as InfluxDB answers it.
fn request_error(status: StatusCode, message: &str) -> Response {
    let body = encode::to_json(&encode::Response::error(message), &Format::default());
    let mut resp = (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
    resp.headers_mut()
        .insert("x-influxdb-error", crate::http::error_header(message));
    with_version(resp)
}

fn with_version(mut resp: Response) -> Response {
    resp.headers_mut().insert(
        "x-influxdb-version",
        HeaderValue::from_static("shardhouse-1.8"),
    );
    resp
}

/// The `params` parameter: a JSON object of bind parameters (`$name`).
fn bind_params(json: Option<&str>) -> Result<Params, String> {
    let Some(text) = json.filter(|t| !t.trim().is_empty()) else {
        return Ok(Params::new());
    };
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("error parsing query parameters: {e}"))?;
    let serde_json::Value::Object(map) = value else {
        return Err("error parsing query parameters: expected a JSON object".into());
    };
    let mut out: HashMap<String, ParamValue> = HashMap::new();
    for (k, v) in map {
        let p = match v {
            serde_json::Value::String(s) => ParamValue::String(s),
            serde_json::Value::Bool(b) => ParamValue::Boolean(b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => ParamValue::Integer(i),
                None => ParamValue::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            serde_json::Value::Object(o) if o.len() == 1 => {
                match o.iter().next().map(|(t, v)| (t.as_str(), v.as_str())) {
                    Some(("identifier", Some(s))) => ParamValue::Identifier(s.to_owned()),
                    Some(("string", Some(s))) => ParamValue::String(s.to_owned()),
                    _ => {
                        return Err(format!(
                            "error parsing query parameters: unsupported value for {k:?}"
                        ))
                    }
                }
            }
            _ => {
                return Err(format!(
                    "error parsing query parameters: unsupported value for {k:?}"
                ))
            }
        };
        out.insert(k, p);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_constructs_are_named_with_their_position() {
        let check = |q: &str| {
            let parsed = shardhouse_influxql::parse(q).unwrap();
            parsed.statements.iter().find_map(|s| unsupported(s, q))
        };
        assert_eq!(
            check("SELECT mean(a) / mean(b) FROM m").unwrap(),
            "arithmetic on aggregates (mean() inside an expression) is not supported by Shardhouse at line 1, char 8"
        );
        assert!(check("SELECT * INTO m2 FROM m")
            .unwrap()
            .starts_with("SELECT ... INTO is not supported by Shardhouse at line 1, char 10"));
        assert!(check("SHOW SERIES CARDINALITY")
            .unwrap()
            .contains("char 13"));
        assert!(check("EXPLAIN SELECT a FROM m")
            .unwrap()
            .contains("EXPLAIN"));
        assert_eq!(check("SELECT a + b FROM m"), None);
        assert_eq!(check("SELECT mean(a) FROM m GROUP BY time(1m)"), None);
    }

    #[test]
    fn bind_parameters_read_json_values() {
        let p = bind_params(Some(
            r#"{"host":"a","n":3,"x":1.5,"f":{"identifier":"usage"}}"#,
        ))
        .unwrap();
        assert_eq!(p["host"], ParamValue::String("a".into()));
        assert_eq!(p["n"], ParamValue::Integer(3));
        assert_eq!(p["x"], ParamValue::Float(1.5));
        assert_eq!(p["f"], ParamValue::Identifier("usage".into()));
        assert!(bind_params(Some("[1]")).is_err());
        assert!(bind_params(None).unwrap().is_empty());
    }
}
