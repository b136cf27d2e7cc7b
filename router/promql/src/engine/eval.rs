//! Step-wise evaluation of a parsed expression over fetched samples.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use promql_parser::parser::{Expr, SubqueryExpr, VectorSelector};

use super::plan::{at_ms, dur_ms, key_of, offset_ms, subquery_step_ms, Span};
use super::{
    aggregate, binary, call, collect_series, is_stale, EngineOptions, QueryValue, RangeSeries,
};
use crate::error::exec;
use crate::labels::Labels;
use crate::source::Series;
use crate::{Error, Result};

/// One element of an instant vector at one step.
#[derive(Debug, Clone)]
pub struct Sample {
    pub labels: Arc<Labels>,
    pub v: f64,
}

/// The evaluation times of a node.
pub type Steps = Arc<Vec<i64>>;

/// A node's value at every step it is evaluated at.
#[derive(Debug)]
pub enum Val {
    Scalar(Vec<f64>),
    Str(String),
    Vector(Vec<Vec<Sample>>),
    /// Only as the answer of an instant query (`foo[5m]`).
    Matrix(Vec<RangeSeries>),
}

/// A series' labels and its points.
pub type PointSeries = (Arc<Labels>, Vec<(i64, f64)>);

/// A range-vector argument: series with their points (stale markers
/// already dropped) and how a step's window is placed.
pub struct RangeArg {
    pub series: Vec<PointSeries>,
    pub range: i64,
    pub offset: i64,
    pub at: Option<i64>,
}

impl RangeArg {
    /// The points of series `i` in `[ref - range, ref]`, both ends
    /// included as in Prometheus 2.x.
    pub fn window(&self, i: usize, t: i64) -> &[(i64, f64)] {
        let r = self.ref_time(t);
        let lo = r - self.range;
        let pts = &self.series[i].1;
        let a = pts.partition_point(|p| p.0 < lo);
        let b = pts.partition_point(|p| p.0 <= r);
        &pts[a..b.max(a)]
    }

    pub fn ref_time(&self, t: i64) -> i64 {
        self.at.unwrap_or(t) - self.offset
    }
}

pub struct Evaluator<'a> {
    pub data: HashMap<usize, Vec<Series>>,
    pub opts: &'a EngineOptions,
    pub query: Span,
    /// The largest number of points any node's value has held.
    pub held: Cell<usize>,
}

impl Evaluator<'_> {
    pub fn eval(&self, e: &Expr, steps: &Steps) -> Result<Val> {
        let v = match e {
            Expr::NumberLiteral(n) => Val::Scalar(vec![n.val; steps.len()]),
            Expr::StringLiteral(s) => Val::Str(s.val.clone()),
            Expr::Paren(p) => return self.eval(&p.expr, steps),
            Expr::Unary(u) => negate(self.eval(&u.expr, steps)?)?,
            Expr::VectorSelector(vs) => Val::Vector(
                self.select_vector(vs, steps)
                    .into_iter()
                    .map(|step| step.into_iter().map(|(s, _)| s).collect())
                    .collect(),
            ),
            Expr::MatrixSelector(_) | Expr::Subquery(_) => self.matrix_value(e, steps)?,
            Expr::Aggregate(a) => aggregate::eval(self, a, steps)?,
            Expr::Binary(b) => binary::eval(self, b, steps)?,
            Expr::Call(c) => call::eval(self, c, steps)?,
            Expr::Extension(_) => return Err(exec("unsupported expression")),
        };
        self.account(&v)?;
        Ok(v)
    }

    fn account(&self, v: &Val) -> Result<()> {
        let n = match v {
            Val::Scalar(s) => s.len(),
            Val::Str(_) => 1,
            Val::Vector(steps) => steps.iter().map(Vec::len).sum(),
            Val::Matrix(m) => m.iter().map(|s| s.points.len()).sum(),
        };
        if n > self.opts.max_samples {
            return Err(Error::TooManySamples);
        }
        self.held.set(self.held.get().max(n));
        Ok(())
    }

    /// The sample each series has at each step: the latest at or before
    /// the reference time, within the lookback, unless it is a stale
    /// marker. The sample's own time comes along for `timestamp()`.
    pub fn select_vector(&self, vs: &VectorSelector, steps: &Steps) -> Vec<Vec<(Sample, i64)>> {
        let at = at_ms(&vs.at, self.query);
        let offset = offset_ms(&vs.offset);
        let mut out: Vec<Vec<(Sample, i64)>> = vec![Vec::new(); steps.len()];
        let Some(series) = self.data.get(&key_of(vs)) else {
            return out;
        };
        for s in series {
            let labels = Arc::new(s.labels.clone());
            for (i, t) in steps.iter().enumerate() {
                let r = at.unwrap_or(*t) - offset;
                let n = s.samples.partition_point(|p| p.0 <= r);
                if n == 0 {
                    continue;
                }
                let (st, v) = s.samples[n - 1];
                if st < r - self.opts.lookback_ms || is_stale(v) {
                    continue;
                }
                out[i].push((
                    Sample {
                        labels: labels.clone(),
                        v,
                    },
                    st,
                ));
            }
        }
        out
    }

    /// A range vector as a function argument: a range selector or a
    /// subquery (parentheses around either allowed).
    pub fn range_arg(&self, e: &Expr, steps: &Steps) -> Result<RangeArg> {
        match e {
            Expr::Paren(p) => self.range_arg(&p.expr, steps),
            Expr::MatrixSelector(ms) => {
                let series = self
                    .data
                    .get(&key_of(&ms.vs))
                    .map(|v| {
                        v.iter()
                            .map(|s| (Arc::new(s.labels.clone()), s.samples.clone()))
                            .collect()
                    })
                    .unwrap_or_default();
                Ok(RangeArg {
                    series,
                    range: dur_ms(&ms.range),
                    offset: offset_ms(&ms.vs.offset),
                    at: at_ms(&ms.vs.at, self.query),
                })
            }
            Expr::Subquery(sq) => self.subquery(sq, steps),
            _ => Err(exec(format!("expected a range vector, got {e}"))),
        }
    }

    /// Evaluates a subquery's expression once on its own grid (multiples
    /// of its step, as Prometheus aligns them) covering every window the
    /// outer steps need.
    fn subquery(&self, sq: &SubqueryExpr, steps: &Steps) -> Result<RangeArg> {
        let at = at_ms(&sq.at, self.query);
        let offset = offset_ms(&sq.offset);
        let range = dur_ms(&sq.range);
        let step = subquery_step_ms(sq, self.opts.default_subquery_step_ms);
        let refs = steps.iter().map(|t| at.unwrap_or(*t) - offset);
        let (lo, hi) = refs.fold((i64::MAX, i64::MIN), |(a, b), r| (a.min(r), b.max(r)));
        let first = ceil_to(lo - range, step);
        let inner: Vec<i64> = (0..)
            .map(|i| first + i * step)
            .take_while(|t| *t <= hi)
            .collect();
        let times = inner.clone();
        let value = self.eval(&sq.expr, &Arc::new(inner))?;
        let Val::Vector(per_step) = value else {
            return Err(exec("subquery is only allowed on instant vector"));
        };
        let points = per_step.into_iter().zip(times).flat_map(|(samples, t)| {
            samples
                .into_iter()
                .map(move |s| ((*s.labels).clone(), t, s.v))
        });
        let series = collect_series(points)
            .into_iter()
            .map(|s| (Arc::new(s.labels), s.points))
            .collect();
        Ok(RangeArg {
            series,
            range,
            offset,
            at,
        })
    }

    /// `foo[5m]` or a subquery as the whole of an instant query: the raw
    /// points of each window.
    fn matrix_value(&self, e: &Expr, steps: &Steps) -> Result<Val> {
        if steps.len() != 1 {
            return Err(Error::BadData(
                "invalid expression type \"range vector\" for range query, must be Scalar or instant Vector".into(),
            ));
        }
        let arg = self.range_arg(e, steps)?;
        let mut out = Vec::new();
        for i in 0..arg.series.len() {
            let w = arg.window(i, steps[0]);
            if !w.is_empty() {
                out.push(RangeSeries {
                    labels: (*arg.series[i].0).clone(),
                    points: w.to_vec(),
                });
            }
        }
        out.sort_by(|a, b| a.labels.cmp(&b.labels));
        Ok(Val::Matrix(out))
    }
}

/// The smallest multiple of `step` at or after `t`.
pub fn ceil_to(t: i64, step: i64) -> i64 {
    let q = t.div_euclid(step) * step;
    if q < t {
        q + step
    } else {
        q
    }
}

fn negate(v: Val) -> Result<Val> {
    Ok(match v {
        Val::Scalar(s) => Val::Scalar(s.into_iter().map(|x| -x).collect()),
        Val::Vector(steps) => {
            let out: Vec<Vec<Sample>> = steps
                .into_iter()
                .map(|step| {
                    step.into_iter()
                        .map(|s| Sample {
                            labels: Arc::new(s.labels.without_name()),
                            v: -s.v,
                        })
                        .collect()
                })
                .collect();
            for step in &out {
                check_unique(step)?;
            }
            Val::Vector(out)
        }
        other => return Err(exec(format!("unary minus on {other:?}"))),
    })
}

/// Prometheus refuses a vector in which two elements have the same labels
/// (e.g. after a function dropped the metric name).
pub fn check_unique(step: &[Sample]) -> Result<()> {
    if step.len() < 2 {
        return Ok(());
    }
    let mut seen = HashSet::with_capacity(step.len());
    for s in step {
        if !seen.insert(&*s.labels) {
            return Err(exec("vector cannot contain metrics with the same labelset"));
        }
    }
    Ok(())
}

pub fn to_instant(v: Val, t: i64) -> QueryValue {
    match v {
        Val::Scalar(s) => QueryValue::Scalar(t, s.first().copied().unwrap_or(f64::NAN)),
        Val::Str(s) => QueryValue::String(t, s),
        Val::Vector(mut steps) => QueryValue::Vector(
            steps
                .pop()
                .unwrap_or_default()
                .into_iter()
                .map(|s| ((*s.labels).clone(), t, s.v))
                .collect(),
        ),
        Val::Matrix(m) => QueryValue::Matrix(m),
    }
}

pub fn to_range(v: Val, steps: &[i64]) -> Result<QueryValue> {
    Ok(match v {
        Val::Scalar(s) => QueryValue::Matrix(vec![RangeSeries {
            labels: Labels::default(),
            points: steps.iter().copied().zip(s).collect(),
        }]),
        Val::Vector(per_step) => {
            for step in &per_step {
                check_unique(step)?;
            }
            let points =
                per_step
                    .into_iter()
                    .zip(steps.iter().copied())
                    .flat_map(|(samples, t)| {
                        samples
                            .into_iter()
                            .map(move |s| ((*s.labels).clone(), t, s.v))
                    });
            QueryValue::Matrix(collect_series(points))
        }
        Val::Str(_) | Val::Matrix(_) => {
            return Err(Error::BadData(
                "invalid expression type for range query, must be Scalar or instant Vector".into(),
            ))
        }
    })
}
