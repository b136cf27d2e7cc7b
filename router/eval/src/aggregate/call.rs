//! The aggregate calls this crate evaluates, read from the parsed AST.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use shardhouse_influxql::{Call, Expr, Literal};

use super::{Partial, Rule, Sum};
use crate::error::{Error, Result};
use crate::exact::Moments;
use crate::value::Value;

const SECOND: i64 = 1_000_000_000;

/// An InfluxQL aggregate or selector call, with its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Aggregate {
    Count,
    /// `count(distinct(x))`.
    CountDistinct,
    Sum,
    Mean,
    Median,
    Mode,
    Min,
    Max,
    First,
    Last,
    Spread,
    Stddev,
    /// `percentile(x, N)`, N in percent.
    Percentile(f64),
    Distinct,
    /// `integral(x[, unit])`, unit in nanoseconds (default 1s).
    Integral {
        unit: i64,
    },
    /// `top(x[, tag, ...], N)`.
    Top {
        n: usize,
        tags: Vec<String>,
    },
    /// `bottom(x[, tag, ...], N)`.
    Bottom {
        n: usize,
        tags: Vec<String>,
    },
    /// `sample(x, N)`: N points picked at random (all of them, in time
    /// order, when there are at most N).
    Sample(usize),
}

impl Aggregate {
    /// Reads a parsed call (the parser already checked arity and argument
    /// kinds). The field argument is `call.args[0]`, for the planner.
    pub fn from_call(call: &Call) -> Result<Aggregate> {
        let bad = |message: String| Error::InvalidArgument {
            function: call.name.clone(),
            message,
        };
        Ok(match call.name.as_str() {
            "count" => match call.args.first() {
                Some(Expr::Call(inner)) if inner.name == "distinct" => Aggregate::CountDistinct,
                _ => Aggregate::Count,
            },
            "sum" => Aggregate::Sum,
            "mean" => Aggregate::Mean,
            "median" => Aggregate::Median,
            "mode" => Aggregate::Mode,
            "min" => Aggregate::Min,
            "max" => Aggregate::Max,
            "first" => Aggregate::First,
            "last" => Aggregate::Last,
            "spread" => Aggregate::Spread,
            "stddev" => Aggregate::Stddev,
            "distinct" => Aggregate::Distinct,
            "percentile" => match call.args.get(1) {
                Some(Expr::Literal(Literal::Integer(n))) => Aggregate::Percentile(*n as f64),
                Some(Expr::Literal(Literal::Float(n))) => Aggregate::Percentile(*n),
                other => return Err(bad(format!("expected a number as N, got {other:?}"))),
            },
            "integral" => match call.args.get(1) {
                None => Aggregate::Integral { unit: SECOND },
                Some(Expr::Literal(Literal::Duration(d))) if *d > 0 => {
                    Aggregate::Integral { unit: *d }
                }
                Some(other) => {
                    return Err(bad(format!("the unit must be a duration, got {other}")))
                }
            },
            "sample" => match call.args.get(1) {
                Some(Expr::Literal(Literal::Integer(n))) if *n > 0 => {
                    Aggregate::Sample(*n as usize)
                }
                other => return Err(bad(format!("N must be a positive integer, got {other:?}"))),
            },
            "top" | "bottom" => {
                let n = match call.args.last() {
                    Some(Expr::Literal(Literal::Integer(n))) if *n > 0 => *n as usize,
                    other => {
                        return Err(bad(format!("N must be a positive integer, got {other:?}")))
                    }
                };
                let mut tags = Vec::new();
                for arg in &call.args[1..call.args.len().saturating_sub(1).max(1)] {
                    match arg {
                        Expr::VarRef(v) => tags.push(v.name.clone()),
                        other => return Err(bad(format!("expected a tag key, got {other}"))),
                    }
                }
                if call.name == "top" {
                    Aggregate::Top { n, tags }
                } else {
                    Aggregate::Bottom { n, tags }
                }
            }
            other => {
                return Err(Error::UnsupportedCall {
                    name: other.to_string(),
                })
            }
        })
    }

    /// The function's name as written in InfluxQL.
    pub fn name(&self) -> &'static str {
        match self {
            Aggregate::Count | Aggregate::CountDistinct => "count",
            Aggregate::Sum => "sum",
            Aggregate::Mean => "mean",
            Aggregate::Median => "median",
            Aggregate::Mode => "mode",
            Aggregate::Min => "min",
            Aggregate::Max => "max",
            Aggregate::First => "first",
            Aggregate::Last => "last",
            Aggregate::Spread => "spread",
            Aggregate::Stddev => "stddev",
            Aggregate::Percentile(_) => "percentile",
            Aggregate::Distinct => "distinct",
            Aggregate::Integral { .. } => "integral",
            Aggregate::Top { .. } => "top",
            Aggregate::Bottom { .. } => "bottom",
            Aggregate::Sample(_) => "sample",
        }
    }

    /// InfluxQL's selectors: they return a point's own value (and, alone in
    /// a query without `GROUP BY time()`, its own time).
    pub fn is_selector(&self) -> bool {
        matches!(
            self,
            Aggregate::Min
                | Aggregate::Max
                | Aggregate::First
                | Aggregate::Last
                | Aggregate::Percentile(_)
                | Aggregate::Top { .. }
                | Aggregate::Bottom { .. }
                | Aggregate::Sample(_)
        )
    }

    /// Whether `fill()` applies. InfluxDB 1.8 fills the plain aggregates and
    /// selectors but returns `top`, `bottom`, `distinct` and `integral`
    /// without a fill step.
    pub fn fills(&self) -> bool {
        !matches!(
            self,
            Aggregate::Top { .. }
                | Aggregate::Bottom { .. }
                | Aggregate::Distinct
                | Aggregate::Integral { .. }
                | Aggregate::Sample(_)
        )
    }

    /// Extra output columns after this one (`top(x, host, 2)` adds `host`).
    pub fn aux_columns(&self) -> &[String] {
        match self {
            Aggregate::Top { tags, .. } | Aggregate::Bottom { tags, .. } => tags,
            _ => &[],
        }
    }

    /// The state a shard starts from for one group and bucket.
    pub fn empty_partial(&self) -> Partial {
        match self {
            Aggregate::Count => Partial::Count(0),
            Aggregate::Sum => Partial::Sum(Sum::Empty),
            Aggregate::Mean => Partial::Mean {
                sum: Sum::Empty,
                count: 0,
            },
            Aggregate::Median
            | Aggregate::Percentile(_)
            | Aggregate::Integral { .. }
            | Aggregate::Sample(_) => Partial::Points(Vec::new()),
            Aggregate::Mode => Partial::Mode(BTreeMap::new()),
            Aggregate::Distinct | Aggregate::CountDistinct => Partial::Distinct(BTreeMap::new()),
            Aggregate::Min => Partial::Selected(Rule::Min, None),
            Aggregate::Max => Partial::Selected(Rule::Max, None),
            Aggregate::First => Partial::Selected(Rule::First, None),
            Aggregate::Last => Partial::Selected(Rule::Last, None),
            Aggregate::Spread => Partial::Spread(None),
            Aggregate::Stddev => Partial::Stddev(Moments::default()),
            Aggregate::Top { n, tags } | Aggregate::Bottom { n, tags } => {
                let rule = if matches!(self, Aggregate::Top { .. }) {
                    Rule::Max
                } else {
                    Rule::Min
                };
                if tags.is_empty() {
                    Partial::Ranked {
                        rule,
                        n: *n,
                        best: Vec::new(),
                    }
                } else {
                    Partial::RankedByTags {
                        rule,
                        best: BTreeMap::new(),
                    }
                }
            }
        }
    }

    /// Field types the function takes, as InfluxDB 1.8 allows them.
    pub(super) fn accepts(&self, value: &Value) -> bool {
        let numeric = matches!(value, Value::Float(_) | Value::Int(_) | Value::UInt(_));
        match self {
            Aggregate::Count
            | Aggregate::CountDistinct
            | Aggregate::Distinct
            | Aggregate::Mode
            | Aggregate::First
            | Aggregate::Last
            | Aggregate::Sample(_) => !matches!(value, Value::Null | Value::Time(_)),
            Aggregate::Min | Aggregate::Max => numeric || matches!(value, Value::Bool(_)),
            _ => numeric,
        }
    }
}
