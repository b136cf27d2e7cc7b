//! Which samples a query needs: every selector's matchers and the closed
//! time range its evaluation will look at, found by walking the expression
//! with the range of reference times each node is evaluated at (offsets,
//! `@`, lookback, range windows and subqueries widen or move it).

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use promql_parser::label::{MatchOp, Matchers};
use promql_parser::parser::{AtModifier, Expr, Offset, SubqueryExpr, VectorSelector};

use super::eval::ceil_to;
use super::{is_stale, EngineOptions};
use crate::labels::METRIC_NAME;
use crate::source::{Grid, LabelMatcher, MatchKind, Needed, SampleSource, Selection, Series};
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
    /// Which samples in the span the evaluation will look at.
    pub needed: Needed,
}

pub fn key_of(vs: &VectorSelector) -> usize {
    vs as *const VectorSelector as usize
}

pub fn dur_ms(d: &Duration) -> i64 {
    d.as_millis() as i64
}

/// A subquery's step: its own, or the engine's default when it has none.
pub fn subquery_step_ms(sq: &SubqueryExpr, default_ms: i64) -> i64 {
    sq.step
        .as_ref()
        .map(dur_ms)
        .filter(|s| *s > 0)
        .unwrap_or(default_ms)
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

/// The reference times of a node with this `@` and offset evaluated at
/// the times of `grid`: `@` pins them all to one.
pub fn reference(grid: Grid, at: Option<i64>, offset: i64) -> Grid {
    match at {
        Some(t) => Grid::new(t - offset, grid.step, grid.count.min(1)),
        None => Grid::new(grid.first - offset, grid.step, grid.count),
    }
}

/// The times a subquery's expression is evaluated at for reference
/// times `refs`: the multiples of its step from the first window's start
/// to the last reference time (as the evaluator computes them).
pub fn subquery_grid(refs: Grid, range: i64, step: i64) -> Grid {
    if refs.count == 0 {
        return Grid::new(refs.first, step, 0);
    }
    let first = ceil_to(refs.first - range, step);
    let last = refs.last();
    let count = if first > last {
        0
    } else {
        (last - first) / step + 1
    };
    Grid::new(first, step, count)
}

/// Where a node is evaluated: the query's own span (for `@ start()` and
/// `@ end()`), the span of evaluation times and their grid.
#[derive(Debug, Clone, Copy)]
pub struct Context {
    pub query: Span,
    pub span: Span,
    pub grid: Grid,
}

pub fn selectors(
    expr: &Expr,
    opts: &EngineOptions,
    cx: Context,
    out: &mut Vec<Wanted>,
) -> Result<()> {
    match expr {
        Expr::VectorSelector(vs) => {
            let (at, offset) = (at_ms(&vs.at, cx.query), offset_ms(&vs.offset));
            let s = shifted(cx.span, at, offset);
            let grid = reference(cx.grid, at, offset);
            let read = Read {
                vs,
                span: Span {
                    start: s.start - opts.lookback_ms,
                    end: s.end,
                },
                grid,
                drop_stale: false,
                needed: Needed::NewestPerStep {
                    grid,
                    lookback: opts.lookback_ms,
                },
            };
            push(out, read)?;
        }
        Expr::MatrixSelector(ms) => {
            let vs = &ms.vs;
            let (at, offset) = (at_ms(&vs.at, cx.query), offset_ms(&vs.offset));
            let s = shifted(cx.span, at, offset);
            let range = dur_ms(&ms.range);
            let grid = reference(cx.grid, at, offset);
            let read = Read {
                vs,
                span: Span {
                    start: s.start - range,
                    end: s.end,
                },
                grid,
                drop_stale: true,
                needed: match Needed::windows_prune(&grid, range) {
                    true => Needed::Windows { grid, range },
                    false => Needed::All,
                },
            };
            push(out, read)?;
        }
        Expr::Subquery(sq) => {
            let (at, offset) = (at_ms(&sq.at, cx.query), offset_ms(&sq.offset));
            let s = shifted(cx.span, at, offset);
            let range = dur_ms(&sq.range);
            let step = subquery_step_ms(sq, opts.default_subquery_step_ms);
            let inner = Context {
                query: cx.query,
                span: Span {
                    start: s.start - range,
                    end: s.end,
                },
                grid: subquery_grid(reference(cx.grid, at, offset), range, step),
            };
            selectors(&sq.expr, opts, inner, out)?;
        }
        Expr::Aggregate(a) => {
            if let Some(p) = &a.param {
                selectors(p, opts, cx, out)?;
            }
            selectors(&a.expr, opts, cx, out)?;
        }
        Expr::Unary(u) => selectors(&u.expr, opts, cx, out)?,
        Expr::Binary(b) => {
            selectors(&b.lhs, opts, cx, out)?;
            selectors(&b.rhs, opts, cx, out)?;
        }
        Expr::Paren(p) => selectors(&p.expr, opts, cx, out)?,
        Expr::Call(c) => {
            for a in &c.args.args {
                selectors(a, opts, cx, out)?;
            }
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) => {}
        Expr::Extension(_) => return Err(Error::BadData("unsupported expression".into())),
    }
    Ok(())
}

/// One selector's read; none when it is evaluated at no time at all
/// (inside a subquery whose windows hold no multiple of its step).
struct Read<'a> {
    vs: &'a VectorSelector,
    span: Span,
    grid: Grid,
    /// Range selectors never see stale markers; instant ones need them.
    drop_stale: bool,
    needed: Needed,
}

fn push(out: &mut Vec<Wanted>, r: Read) -> Result<()> {
    let matchers = matchers_of(r.vs)?;
    if r.grid.count > 0 {
        out.push(Wanted {
            key: key_of(r.vs),
            matchers,
            span: r.span,
            drop_stale: r.drop_stale,
            needed: r.needed,
        });
    }
    Ok(())
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
        let sel = Selection {
            matchers: w.matchers.clone(),
            start_ms: w.span.start,
            end_ms: w.span.end,
            needed: w.needed,
            limit: max_samples.saturating_sub(total),
        };
        let mut series = source.select(&sel).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    const M: i64 = 60_000;

    /// The reads of `q` as a range query from `start` to `end`.
    fn reads(q: &str, start: i64, end: i64, step: i64) -> Vec<(Span, Needed)> {
        let expr = crate::engine::parse(q).unwrap();
        let span = Span { start, end };
        let cx = Context {
            query: span,
            span,
            grid: Grid::new(start, step, (end - start) / step + 1),
        };
        let mut out = Vec::new();
        selectors(&expr, &EngineOptions::default(), cx, &mut out).unwrap();
        out.into_iter().map(|w| (w.span, w.needed)).collect()
    }

    fn newest(first: i64, step: i64, count: i64) -> Needed {
        Needed::NewestPerStep {
            grid: Grid::new(first, step, count),
            lookback: 5 * M,
        }
    }

    #[test]
    fn instant_selectors_thin_to_the_query_steps() {
        // 100 min to 110 min at 1 min: 11 steps; the grid's last step is
        // 110 min even though the query ends 30 s later.
        let r = reads("x", 100 * M, 110 * M + 30_000, M);
        assert_eq!(r[0].1, newest(100 * M, M, 11));
        assert_eq!(r[0].0.start, 95 * M, "first step's lookback");
    }

    #[test]
    fn offset_and_at_move_the_reference_times() {
        let r = reads("x offset 5m", 100 * M, 110 * M, M);
        assert_eq!(r[0].1, newest(95 * M, M, 11));
        let r = reads("x offset -90s", 100 * M, 110 * M, M);
        assert_eq!(r[0].1, newest(101 * M + 30_000, M, 11));
        // `@` pins every step to one time: one sample per series at most.
        let r = reads("x @ 3000 offset 1m", 100 * M, 110 * M, M);
        assert_eq!(r[0].1, newest(49 * M, M, 1));
        let r = reads("x @ end()", 100 * M, 110 * M, M);
        assert_eq!(r[0].1, newest(110 * M, M, 1));
    }

    #[test]
    fn range_selectors_prune_only_when_windows_leave_gaps() {
        assert_eq!(reads("rate(x[5m])", 0, 60 * M, M)[0].1, Needed::All);
        assert_eq!(reads("rate(x[5m])", 0, 60 * M, 5 * M)[0].1, Needed::All);
        assert_eq!(
            reads("rate(x[5m] offset 1m)", 10 * M, 60 * M, 10 * M)[0].1,
            Needed::Windows {
                grid: Grid::new(9 * M, 10 * M, 6),
                range: 5 * M
            }
        );
        // One step (an instant query, or `@`): the window is the span.
        assert_eq!(
            reads("rate(x[1m] @ 100)", 0, 60 * M, 10 * M)[0].1,
            Needed::All
        );
    }

    #[test]
    fn subqueries_thin_to_their_own_step() {
        // Reference times 10..20 min; windows of 10 min; step 2 min: the
        // inner grid is the multiples of 2 min from 0 to 20 min.
        let r = reads("max_over_time(x[10m:2m])", 10 * M, 20 * M, M);
        assert_eq!(r[0].1, newest(0, 2 * M, 11));
        let r = reads("max_over_time(x[10m:2m] offset 3m)", 10 * M, 20 * M, M);
        assert_eq!(r[0].1, newest(-2 * M, 2 * M, 10), "from ceil(-3m) to 17m");
        // Nested: rate's windows at the subquery's 3 min step, 1 min range.
        let r = reads("max_over_time(rate(x[1m])[9m:3m])", 30 * M, 30 * M, M);
        assert_eq!(
            r[0].1,
            Needed::Windows {
                grid: Grid::new(21 * M, 3 * M, 4),
                range: M
            }
        );
    }

    #[test]
    fn a_subquery_evaluated_at_no_time_reads_nothing() {
        // [70 s, 100 s] holds no multiple of 1 min.
        assert!(reads("max_over_time(x[30s:1m])", 100_000, 100_000, 1).is_empty());
        assert_eq!(
            reads("max_over_time(x[30s:1m])", 120_000, 120_000, 1).len(),
            1
        );
    }

    #[test]
    fn newest_per_step_keeps_stale_markers_and_checks_the_lookback() {
        let stale = f64::from_bits(super::super::STALE_NAN_BITS);
        let n = newest(10 * M, M, 3); // steps at 10, 11, 12 min
        let samples = vec![
            (4 * M, 1.0),             // before the first step's lookback
            (5 * M, 2.0),             // exactly at it: the first step's
            (10 * M + 1, 3.0),        // step 11's interval...
            (10 * M + 30_000, stale), // ...ends with a stale marker
            (12 * M, 5.0),            // on step 12
            (12 * M + 1, 6.0),        // past the last step
        ];
        let kept = n.keep(&samples);
        assert_eq!(kept.len(), 3, "{kept:?}");
        assert_eq!(kept[0], (5 * M, 2.0));
        assert_eq!(kept[1].0, 10 * M + 30_000);
        assert!(super::super::is_stale(kept[1].1), "the marker's bits kept");
        assert_eq!(kept[2], (12 * M, 5.0));
        // A step whose newest sample is past the lookback keeps nothing.
        let far = newest(20 * M, 10 * M, 2).keep(&[(14 * M, 1.0), (15 * M, 2.0)]);
        assert_eq!(far, vec![(15 * M, 2.0)]);
    }
}
