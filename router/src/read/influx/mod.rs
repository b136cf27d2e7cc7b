//! InfluxQL statements of the InfluxDB 1.x query API (`GET|POST /query`,
//! the handler is `http::v1::query`), answered in InfluxDB 1.8's JSON (or
//! CSV with `Accept: application/csv`). Parsing is `shardhouse-influxql`,
//! evaluation and encoding `shardhouse-eval`; this module plans the
//! statements onto the shards (docs/api.md, "/query").

mod bounds;
mod cache;
mod fetch;
mod fields;
mod into;
mod meta;
mod prom_values;
mod pushdown;
mod rollup;
mod select;
mod sqlgen;
mod subquery;
mod union;

use std::collections::HashMap;

use shardhouse_eval::encode::{self, CsvWriter, Format, StatementResult};
use shardhouse_influxql::{ParamValue, Params, Statement};
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::state::Router;

pub use meta::series_key;

/// What one request's statements share.
pub struct Ctx<'a> {
    pub router: &'a Router,
    /// The request's `db` ("" when absent).
    pub database: &'a str,
    /// The request's `rp`: the policy of measurements named without one
    /// (None: the database's default).
    pub retention_policy: Option<&'a str>,
    /// `now()` for every statement of the request, in nanoseconds.
    pub now: i64,
    pub deadline: Instant,
    /// The router's `query_max_points`.
    pub max_points: usize,
    /// Who is asking (`None`: auth is off, or an internal statement).
    pub access: Option<&'a crate::auth::Access>,
}

impl Ctx<'_> {
    /// Whether the asker may see `database` in `SHOW DATABASES`: an
    /// InfluxDB user sees only the databases it may read, as in InfluxDB.
    pub fn lists_database(&self, database: &str) -> bool {
        self.access
            .is_none_or(|a| self.router.auth.user_may_read(a, database))
    }
}

/// One continuous-query window: its `SELECT ... INTO`, run as the router
/// itself (`crate::cq::runner` calls it; the definition was admitted when
/// the query was created).
pub fn run_cq_select<'a>(
    router: &'a Router,
    database: &'a str,
    select: shardhouse_influxql::SelectStatement,
    now: i64,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>> + Send + 'a>> {
    Box::pin(async move {
        let ctx = Ctx {
            router,
            database,
            retention_policy: None,
            now,
            deadline: Instant::now()
                + std::time::Duration::from_millis(router.options.query_timeout_ms),
            max_points: router.options.query_max_points,
            access: None,
        };
        outcome(&ctx, &Statement::Select(Box::new(select)))
            .await
            .map(|_| ())
    })
}

/// Line-protocol measurements as Prometheus series for remote_read on
/// InfluxDB's `/api/v1/prom/read` (prom_values.rs), read as the router.
pub async fn prom_value_series(
    router: &Router,
    database: &str,
    retention_policy: Option<&str>,
    matchers: &[shardhouse_promql::LabelMatcher],
    (start_ms, end_ms): (i64, i64),
    deadline: Instant,
) -> Result<Vec<prom_values::ValueSeries>> {
    let ctx = Ctx {
        router,
        database,
        retention_policy,
        now: crate::write::now_nanos(),
        deadline,
        max_points: router.options.query_max_points,
        access: None,
    };
    prom_values::value_series(&ctx, matchers, start_ms, end_ms).await
}

/// One statement's series.
async fn outcome(ctx: &Ctx<'_>, stmt: &Statement) -> Result<Vec<shardhouse_eval::Series>> {
    match stmt {
        Statement::Select(s) if s.into.is_some() => into::run(ctx, s).await,
        Statement::Select(s) => select::run(ctx, s).await,
        other => meta::run(ctx, other).await,
    }
}

/// Runs the statements one after the other, as InfluxDB does: a failing
/// statement's error is its result and ends the request. `chunk_size`:
/// each statement's series cut into results of that many rows. An error
/// that is not the statement's (a shard that cannot answer, etcd out of
/// reach, a bug) is returned instead: the request fails with its status,
/// never a 200 with an error string.
pub async fn run_statements(
    ctx: &Ctx<'_>,
    statements: &[Statement],
    chunk_size: Option<usize>,
) -> Result<Vec<StatementResult>> {
    let mut results: Vec<StatementResult> = Vec::new();
    for (i, stmt) in statements.iter().enumerate() {
        match outcome(ctx, stmt).await {
            Ok(series) => match chunk_size {
                Some(size) => results.extend(encode::chunk(i, series, size)),
                None => results.push(StatementResult {
                    statement_id: i,
                    series,
                    ..StatementResult::default()
                }),
            },
            Err(e) if e.is_statement_error() => {
                // As InfluxDB: the failing statement's error ends the request.
                results.push(StatementResult::error(i, e.to_string()));
                break;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(results)
}

/// The response body and its content type: CSV (`Accept:
/// application/csv`), one JSON document per result (`chunked`), or one.
pub fn encode_results(
    results: Vec<StatementResult>,
    format: &Format,
    csv: bool,
    chunked: bool,
) -> (&'static str, String) {
    if csv {
        let mut w = CsvWriter::new();
        let body = w.write(
            &encode::Response {
                results,
                error: None,
            },
            format,
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
                format,
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
                format,
            ),
        )
    }
}

/// Why a parsed statement cannot be served, naming the construct and where
/// it stands in `q` (as the parser's errors do), or `None`.
pub fn unsupported(stmt: &Statement, q: &str) -> Option<String> {
    let (what, needle) = match stmt {
        Statement::Explain { .. } => ("EXPLAIN".to_string(), "EXPLAIN".to_string()),
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

/// The `params` parameter: a JSON object of bind parameters (`$name`).
pub fn bind_params(json: Option<&str>) -> Result<Params> {
    let Some(text) = json.filter(|t| !t.trim().is_empty()) else {
        return Ok(Params::new());
    };
    let value: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| Error::statement(format!("error parsing query parameters: {e}")))?;
    let serde_json::Value::Object(map) = value else {
        return Err(Error::statement(
            "error parsing query parameters: expected a JSON object",
        ));
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
                        return Err(Error::statement(format!(
                            "error parsing query parameters: unsupported value for {k:?}"
                        )))
                    }
                }
            }
            _ => {
                return Err(Error::statement(format!(
                    "error parsing query parameters: unsupported value for {k:?}"
                )))
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
        assert_eq!(check("SELECT * INTO m2 FROM m"), None);
        assert!(check("EXPLAIN SELECT a FROM m")
            .unwrap()
            .contains("EXPLAIN"));
        assert_eq!(check("SELECT a + b FROM m"), None);
        assert_eq!(check("SELECT mean(a) / mean(b) FROM m"), None);
        assert_eq!(check("SHOW SERIES CARDINALITY"), None);
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
