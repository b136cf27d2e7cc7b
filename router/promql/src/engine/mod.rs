//! The evaluator: a query is parsed, every selector's samples are fetched
//! once for the whole time range it needs ([`plan`]), then the expression is
//! evaluated step by step without further I/O ([`eval`]), as Prometheus's
//! engine does with its range evaluation.

mod aggregate;
mod binary;
mod call;
mod eval;
pub mod functions;
mod plan;
#[cfg(test)]
mod pushdown_tests;

pub use aggregate::is_label_name;
pub use plan::matchers_of as selector_matchers;

use std::collections::BTreeMap;
use std::sync::Arc;

use promql_parser::parser;

use crate::labels::Labels;
use crate::source::{Grid, SampleSource};
use crate::{Error, Result};

/// Prometheus's stale marker: a NaN with this exact bit pattern ends a
/// series (remote_write carries it, `_samples` keeps it).
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

pub fn is_stale(v: f64) -> bool {
    v.to_bits() == STALE_NAN_BITS
}

/// Prometheus refuses range queries with more points per series.
pub const MAX_POINTS_PER_SERIES: i64 = 11_000;

#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// How far back an instant selector looks for a sample (Prometheus's
    /// `--query.lookback-delta`, 5m).
    pub lookback_ms: i64,
    /// The most samples a query may hold (Prometheus's
    /// `--query.max-samples`, 50,000,000).
    pub max_samples: usize,
    /// The step of a subquery written without one, in an instant query
    /// (Prometheus uses its global evaluation interval, 1m by default).
    pub default_subquery_step_ms: i64,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            lookback_ms: 5 * 60 * 1000,
            max_samples: 50_000_000,
            default_subquery_step_ms: 60_000,
        }
    }
}

/// A series of a range query's answer, or of an instant query's range
/// vector.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeSeries {
    pub labels: Labels,
    pub points: Vec<(i64, f64)>,
}

/// A query's answer, shaped as Prometheus's `resultType`s.
#[derive(Debug, Clone, PartialEq)]
pub enum QueryValue {
    Scalar(i64, f64),
    String(i64, String),
    Vector(Vec<(Labels, i64, f64)>),
    Matrix(Vec<RangeSeries>),
}

#[derive(Debug, Clone, Default)]
pub struct Engine {
    pub options: EngineOptions,
}

/// Parses PromQL, giving Prometheus's `bad_data` message on failure.
pub fn parse(query: &str) -> Result<parser::Expr> {
    parser::parse(query).map_err(|e| Error::BadData(parse_error_text(query, &e)))
}

/// Parses the `query` parameter of the HTTP API: Prometheus's API answers a
/// parse error there as `invalid parameter "query": <line:col: ...>`.
pub fn parse_query_param(query: &str) -> Result<parser::Expr> {
    parse(query).map_err(|e| match e {
        Error::BadData(m) => Error::BadData(format!("invalid parameter \"query\": {m}")),
        other => other,
    })
}

/// Prometheus prefixes parse errors with `line:column: parse error: `.
/// The parser gives its message without a position, so the position is
/// found from the message: the end of the input for what is left open, the
/// offending character for what is unexpected, else the start.
fn parse_error_text(query: &str, msg: &str) -> String {
    let msg = msg.trim();
    let at_end = ["unclosed", "unexpected end of input", "unterminated"];
    let pos = if at_end.iter().any(|m| msg.starts_with(m)) {
        query.len()
    } else if msg.starts_with("unexpected right parenthesis") {
        unbalanced_close(query).unwrap_or(0)
    } else if let Some(c) = msg
        .strip_prefix("unexpected character inside brackets: '")
        .and_then(|r| r.chars().next())
    {
        query
            .find('[')
            .and_then(|b| query[b..].find(c).map(|i| b + i))
            .unwrap_or(0)
    } else {
        0
    };
    let before = &query[..pos.min(query.len())];
    let line = before.matches('\n').count() + 1;
    let col = pos - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    format!("{line}:{col}: parse error: {msg}")
}

/// The byte offset of the first `)` that closes nothing.
fn unbalanced_close(query: &str) -> Option<usize> {
    let mut depth = 0i32;
    for (i, c) in query.char_indices() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => return Some(i),
            ')' => depth -= 1,
            _ => {}
        }
    }
    None
}

impl Engine {
    pub fn new(options: EngineOptions) -> Self {
        Engine { options }
    }

    /// `/api/v1/query`: the expression at one time.
    pub async fn instant(
        &self,
        source: &dyn SampleSource,
        query: &str,
        time_ms: i64,
    ) -> Result<QueryValue> {
        let expr = parse_query_param(query)?;
        let grid = Grid::new(time_ms, 1, 1);
        let value = self.run(source, &expr, time_ms, time_ms, grid).await?;
        Ok(eval::to_instant(value, time_ms))
    }

    /// `/api/v1/query_range`: the expression at every step from start to
    /// end; the answer is always a matrix sorted by labels.
    pub async fn range(
        &self,
        source: &dyn SampleSource,
        query: &str,
        start_ms: i64,
        end_ms: i64,
        step_ms: i64,
    ) -> Result<QueryValue> {
        let expr = parse_query_param(query)?;
        let kind = expr.value_type();
        if !matches!(
            kind,
            parser::value::ValueType::Scalar | parser::value::ValueType::Vector
        ) {
            return Err(Error::BadData(format!(
                "invalid expression type \"{}\" for range query, must be Scalar or instant Vector",
                type_name(kind)
            )));
        }
        if step_ms <= 0 {
            return Err(Error::BadData(
                "zero or negative query resolution step widths are not accepted. Try a positive integer".into(),
            ));
        }
        if end_ms < start_ms {
            return Err(Error::BadData(
                "end timestamp must not be before start time".into(),
            ));
        }
        let grid = Grid::new(start_ms, step_ms, (end_ms - start_ms) / step_ms + 1);
        let steps: Vec<i64> = (0..grid.count).map(|k| grid.at(k)).collect();
        let value = self.run(source, &expr, start_ms, end_ms, grid).await?;
        eval::to_range(value, &steps)
    }

    async fn run(
        &self,
        source: &dyn SampleSource,
        expr: &parser::Expr,
        start_ms: i64,
        end_ms: i64,
        grid: Grid,
    ) -> Result<eval::Val> {
        let span = plan::Span {
            start: start_ms,
            end: end_ms,
        };
        let steps: Vec<i64> = (0..grid.count).map(|k| grid.at(k)).collect();
        let mut wanted = Vec::new();
        let cx = plan::Context {
            query: span,
            span,
            grid,
        };
        plan::selectors(expr, &self.options, cx, &mut wanted)?;
        let data = plan::fetch(source, &wanted, self.options.max_samples).await?;
        let ev = eval::Evaluator {
            data,
            opts: &self.options,
            query: span,
            held: std::cell::Cell::new(0),
        };
        ev.eval(expr, &Arc::new(steps))
    }
}

pub(crate) fn type_name(t: parser::value::ValueType) -> &'static str {
    match t {
        parser::value::ValueType::Scalar => "scalar",
        parser::value::ValueType::Vector => "instant vector",
        parser::value::ValueType::Matrix => "range vector",
        parser::value::ValueType::String => "string",
    }
}

/// Groups per-step samples into series keyed by labels, in label order.
pub(crate) fn collect_series(
    points: impl IntoIterator<Item = (Labels, i64, f64)>,
) -> Vec<RangeSeries> {
    let mut by: BTreeMap<Labels, Vec<(i64, f64)>> = BTreeMap::new();
    for (l, t, v) in points {
        by.entry(l).or_default().push((t, v));
    }
    by.into_iter()
        .map(|(labels, points)| RangeSeries { labels, points })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_errors_carry_a_position() {
        assert_eq!(
            parse_query_param("foo(").unwrap_err().to_string(),
            "invalid parameter \"query\": 1:5: parse error: unclosed left parenthesis",
            "as Prometheus 2.42's /api/v1/query answers it"
        );
        let e = |q: &str| parse(q).unwrap_err().to_string();
        assert_eq!(e("sum(up"), "1:7: parse error: unclosed left parenthesis");
        assert_eq!(
            e("up)"),
            "1:3: parse error: unexpected right parenthesis ')'"
        );
        assert_eq!(
            e("rate(up[5m)"),
            "1:11: parse error: unexpected character inside brackets: ')'"
        );
        assert_eq!(
            e("up +\n  {a=\"b\""),
            "2:9: parse error: unexpected end of input inside braces"
        );
        assert!(e("rate(up)").starts_with("1:1: parse error: expected type matrix"));
    }
}
