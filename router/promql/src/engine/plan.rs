//! Which samples a query needs: every selector's matchers and the closed
//! time range its evaluation will look at, found by walking the expression
//! with the range of reference times each node is evaluated at (offsets,
//! `@`, lookback, range windows and subqueries widen or move it).

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use promql_parser::label::{MatchOp, Matchers};
use promql_parser::parser::{AtModifier, Expr, Offset, VectorSelector};

use super::{is_stale, EngineOptions};
use crate::labels::METRIC_NAME;
use crate::source::{LabelMatcher, MatchKind, SampleSource, Series};
use crate::{Error, Result};

/// A closed interval of milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: i64,
    pub end: i64,
}

/// One selector's fetch: keyed by the selector node's address, which the
/// evaluator looks up again (the expression is not moved in between).
#[derive(Debug)]
pub struct Wanted {
    pub key: usize,
    pub matchers: Vec<LabelMatcher>,
    pub span: Span,
    /// Range selectors never see stale markers; instant ones need them.
    pub drop_stale: bool,
}

pub fn key_of(vs: &VectorSelector) -> usize {
    vs as *const VectorSelector as usize
}

pub fn dur_ms(d: &Duration) -> i64 {
    d.as_millis() as i64
}

pub fn offset_ms(o: &Option<Offset>) -> i64 {
    match o {
        None => 0,
        Some(Offset::Pos(d)) => dur_ms(d),
        Some(Offset::Neg(d)) => -dur_ms(d),
    }
}

/// The time an `@` modifier pins evaluation to, if any.
pub fn at_ms(at: &Option<AtModifier>, query: Span) -> Option<i64> {
    match at {
        None => None,
        Some(AtModifier::Start) => Some(query.start),
        Some(AtModifier::End) => Some(query.end),
        Some(AtModifier::At(t)) => Some(match t.duration_since(SystemTime::UNIX_EPOCH) {
            Ok(d) => dur_ms(&d),
            Err(e) => -dur_ms(&e.duration()),
        }),
    }
}

/// The reference times a node with this `@` and offset is read at, for
/// evaluation times within `span`.
pub fn shifted(span: Span, at: Option<i64>, offset: i64) -> Span {
    match at {
        Some(t) => Span {
            start: t - offset,
            end: t - offset,
        },
        None => Span {
            start: span.start - offset,
            end: span.end - offset,
        },
    }
}

pub fn selectors(
    expr: &Expr,
    opts: &EngineOptions,
    query: Span,
    span: Span,
    out: &mut Vec<Wanted>,
) -> Result<()> {
    match expr {
        Expr::VectorSelector(vs) => {
            let s = shifted(span, at_ms(&vs.at, query), offset_ms(&vs.offset));
            out.push(wanted(vs, s.start - opts.lookback_ms, s.end, false)?);
        }
        Expr::MatrixSelector(ms) => {
            let vs = &ms.vs;
            let s = shifted(span, at_ms(&vs.at, query), offset_ms(&vs.offset));
            out.push(wanted(vs, s.start - dur_ms(&ms.range), s.end, true)?);
        }
        Expr::Subquery(sq) => {
            let s = shifted(span, at_ms(&sq.at, query), offset_ms(&sq.offset));
            let inner = Span {
                start: s.start - dur_ms(&sq.range),
                end: s.end,
            };
            selectors(&sq.expr, opts, query, inner, out)?;
        }
        Expr::Aggregate(a) => {
            if let Some(p) = &a.param {
                selectors(p, opts, query, span, out)?;
            }
            selectors(&a.expr, opts, query, span, out)?;
        }
        Expr::Unary(u) => selectors(&u.expr, opts, query, span, out)?,
        Expr::Binary(b) => {
            selectors(&b.lhs, opts, query, span, out)?;
            selectors(&b.rhs, opts, query, span, out)?;
        }
        Expr::Paren(p) => selectors(&p.expr, opts, query, span, out)?,
        Expr::Call(c) => {
            for a in &c.args.args {
                selectors(a, opts, query, span, out)?;
            }
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) => {}
        Expr::Extension(_) => return Err(Error::BadData("unsupported expression".into())),
    }
    Ok(())
}

fn wanted(vs: &VectorSelector, start: i64, end: i64, drop_stale: bool) -> Result<Wanted> {
    Ok(Wanted {
        key: key_of(vs),
        matchers: matchers_of(vs)?,
        span: Span { start, end },
        drop_stale,
    })
}

/// The selector's matchers as the source takes them, the metric name
/// written before the braces included.
pub fn matchers_of(vs: &VectorSelector) -> Result<Vec<LabelMatcher>> {
    let mut out = Vec::new();
    if let Some(name) = &vs.name {
        out.push(LabelMatcher::new(MatchKind::Equal, METRIC_NAME, name)?);
    }
    out.extend(convert_matchers(&vs.matchers)?);
    Ok(out)
}

pub fn convert_matchers(ms: &Matchers) -> Result<Vec<LabelMatcher>> {
    if !ms.or_matchers.is_empty() {
        return Err(Error::BadData(
            "`or` inside label matchers is not PromQL of Prometheus 2.x".into(),
        ));
    }
    Ok(ms
        .matchers
        .iter()
        .map(|m| {
            let (kind, regex) = match &m.op {
                MatchOp::Equal => (MatchKind::Equal, None),
                MatchOp::NotEqual => (MatchKind::NotEqual, None),
                MatchOp::Re(r) => (MatchKind::Regex, Some(r.clone())),
                MatchOp::NotRe(r) => (MatchKind::NotRegex, Some(r.clone())),
            };
            LabelMatcher {
                name: m.name.clone(),
                kind,
                value: m.value.clone(),
                regex,
            }
        })
        .collect())
}

/// Reads every wanted selector, refusing past `max_samples` in total.
pub async fn fetch(
    source: &dyn SampleSource,
    wanted: &[Wanted],
    max_samples: usize,
) -> Result<HashMap<usize, Vec<Series>>> {
    let mut data = HashMap::new();
    let mut total = 0usize;
    for w in wanted {
        let mut series = source.select(&w.matchers, w.span.start, w.span.end).await?;
        for s in &mut series {
            // A source may return more than asked; the engine's answers
            // must not depend on it.
            s.samples.retain(|(t, v)| {
                *t >= w.span.start && *t <= w.span.end && !(w.drop_stale && is_stale(*v))
            });
            s.samples.sort_by_key(|(t, _)| *t);
            total += s.samples.len();
        }
        series.retain(|s| {
            !s.samples.is_empty() && w.matchers.iter().all(|m| m.matches_labels(&s.labels))
        });
        if total > max_samples {
            return Err(Error::TooManySamples);
        }
        data.insert(w.key, series);
    }
    Ok(data)
}
