//! `SELECT ... FROM (SELECT ...)`: the inner statement runs across the
//! shards as any statement does (exact), and the outer one is evaluated at
//! the router over the inner result's rows, as InfluxDB does: each inner
//! series keeps its name and `GROUP BY` tags, each column is a field.
//!
//! The outer statement may select columns of the inner result, aggregate
//! them, group by time and by the inner result's tags, fill, order and
//! limit; its WHERE may restrict time only.

use std::collections::BTreeMap;

use shardhouse_eval::partials::{group_key, group_partials, merge_groups, Groups, SeriesPoint};
use shardhouse_eval::{
    finish, only_selector, time_zone, Aggregate, Emitted, EvalOptions, Gathered, Interval, Series,
    SeriesKey, Transform, Value, Windowing,
};
use shardhouse_influxql::time::{split_condition, time_range, TimeRange};
use shardhouse_influxql::{Call, Dimension, Expr, Field, SelectStatement, SortOrder};

use crate::error::{Error, Result};

enum Source {
    Aggregate(Aggregate),
    Raw,
}

/// One output field: where its values come from, its transformation, the
/// inner column it reads.
type FieldPlan = (Source, Option<Transform>, String);

/// Evaluates `outer` over the rows of `inner` (already computed), in
/// steps: the time range (WHERE), the grouping, the field plans, each
/// plan's values gathered from the inner rows, then the pipeline.
pub fn evaluate(outer: &SelectStatement, inner: Vec<Series>, now: i64) -> Result<Vec<Series>> {
    let ascending = outer.order_by != Some(SortOrder::Descending);
    let range = outer_range(outer, now)?;
    let (interval, dims) = grouping(outer, &inner, now)?;
    let Some(range) = bucketed_range(range, interval, &inner, now) else {
        return Ok(Vec::new());
    };
    let zone = outer.timezone.as_deref().map(time_zone).transpose()?;
    let duration = interval.map(|iv| iv.duration);
    let (plans, fields) = field_plans(outer, duration)?;
    let read = read_range(range, &plans, duration, ascending);
    let windowing = Windowing::new(interval, read, zone);
    let opts = EvalOptions {
        ascending,
        point_times: only_selector(&fields),
    };
    let mut gathered = Vec::with_capacity(plans.len());
    for plan in &plans {
        gathered.push(gather(plan, &inner, &dims, &windowing)?);
    }
    Ok(finish(outer, &fields, gathered, &windowing, opts)?)
}

/// The outer WHERE's time range (it may restrict nothing else).
fn outer_range(outer: &SelectStatement, now: i64) -> Result<TimeRange> {
    let Some(c) = &outer.condition else {
        return Ok(TimeRange::UNBOUNDED);
    };
    let parts = split_condition(c, |_| false)?;
    if let Some(other) = parts.tags.or(parts.fields) {
        return Err(Error::statement(format!(
            "the outer statement of a subquery may only restrict time, found {other}"
        )));
    }
    match &parts.time {
        Some(t) => Ok(time_range(t, now)?),
        None => Ok(TimeRange::UNBOUNDED),
    }
}

/// `GROUP BY`: the time interval and the inner result's tags grouped by
/// (`*` is all of them), sorted.
fn grouping(
    outer: &SelectStatement,
    inner: &[Series],
    now: i64,
) -> Result<(Option<Interval>, Vec<String>)> {
    let mut interval = None;
    let mut dims = Vec::new();
    for d in &outer.group_by {
        match d {
            Dimension::Time {
                interval: i,
                offset,
            } => interval = Some(Interval::new(*i, *offset, now)?),
            Dimension::Tag(t) => dims.push(t.clone()),
            Dimension::Wildcard => {
                for s in inner {
                    dims.extend(s.tags.keys().cloned());
                }
            }
            Dimension::Regex(_) => {
                return Err(Error::statement(
                    "GROUP BY /regex/ over a subquery is not supported yet",
                ))
            }
        }
    }
    dims.sort();
    dims.dedup();
    Ok((interval, dims))
}

/// With `GROUP BY time()`, as InfluxDB: an open start is the first inner
/// row's time (`None`: no rows, nothing to answer), an open end now().
fn bucketed_range(
    mut range: TimeRange,
    interval: Option<Interval>,
    inner: &[Series],
    now: i64,
) -> Option<TimeRange> {
    if interval.is_none() {
        return Some(range);
    }
    if !range.has_start() {
        range.start = inner
            .iter()
            .flat_map(|s| &s.values)
            .filter_map(|row| match row.first() {
                Some(Value::Time(t)) => Some(*t),
                _ => None,
            })
            .min()?;
    }
    if !range.has_end() {
        range.end = now + 1;
    }
    Some(range)
}

/// Each outer field's plan (a `time` field has none) and the fields
/// `finish` shapes.
fn field_plans(
    outer: &SelectStatement,
    duration: Option<i64>,
) -> Result<(Vec<FieldPlan>, Vec<Field>)> {
    let mut plans: Vec<FieldPlan> = Vec::new();
    let mut fields = Vec::new();
    for f in &outer.fields {
        match &f.expr {
            Expr::VarRef(v) if v.name.eq_ignore_ascii_case("time") => {}
            Expr::VarRef(v) => plans.push((Source::Raw, None, v.name.clone())),
            Expr::Call(c) => plans.push(call_plan(c, duration)?),
            other => {
                return Err(Error::statement(format!(
                    "unsupported field over a subquery: {other} (select inner columns or aggregate them)"
                )))
            }
        }
        fields.push(f.clone());
    }
    Ok((plans, fields))
}

/// A call's plan: an aggregate of an inner column, or a transformation of
/// one (or of an aggregate of one).
fn call_plan(c: &Call, duration: Option<i64>) -> Result<FieldPlan> {
    let (agg_call, transform) = match Aggregate::from_call(c) {
        Ok(_) => (c, None),
        Err(_) => {
            let (t, inner_expr) = Transform::from_call(c, duration)?;
            match inner_expr {
                Expr::Call(ic) => (ic, Some(t)),
                Expr::VarRef(v) => return Ok((Source::Raw, Some(t), v.name.clone())),
                other => return Err(Error::statement(format!("unsupported argument {other}"))),
            }
        }
    };
    let agg = Aggregate::from_call(agg_call)?;
    let column = match agg_call.args.first() {
        Some(Expr::VarRef(v)) => v.name.clone(),
        Some(Expr::Call(d)) if d.name == "distinct" => match d.args.first() {
            Some(Expr::VarRef(v)) => v.name.clone(),
            _ => {
                return Err(Error::statement(format!(
                    "expected a field in {}()",
                    d.name
                )))
            }
        },
        _ => {
            return Err(Error::statement(format!(
                "expected a field in {}()",
                agg_call.name
            )))
        }
    };
    Ok((Source::Aggregate(agg), transform, column))
}

/// The range to read: transformations over `GROUP BY time()` read back.
fn read_range(
    range: TimeRange,
    plans: &[FieldPlan],
    duration: Option<i64>,
    ascending: bool,
) -> TimeRange {
    let mut read = range;
    if let Some(d) = duration {
        let lookback = plans
            .iter()
            .filter_map(|(_, t, _)| t.map(|t| t.lookback(d)))
            .max()
            .unwrap_or(0);
        if ascending && read.has_start() {
            read.start -= lookback;
        } else if !ascending && read.has_end() {
            read.end += lookback;
        }
    }
    read
}

/// A plan's values from the inner rows: an aggregate's partials per
/// group and bucket, or a raw column's rows per series group.
fn gather(
    (source, transform, column): &FieldPlan,
    inner: &[Series],
    dims: &[String],
    windowing: &Windowing,
) -> Result<Gathered> {
    let keep_nulls = matches!(source, Source::Raw) && transform.is_none();
    let points = points_of(inner, column, keep_nulls, windowing.range);
    Ok(match source {
        Source::Aggregate(agg) => {
            let mut groups = Groups::new();
            merge_groups(
                agg,
                &mut groups,
                group_partials(agg, &points, dims, windowing)?,
            )?;
            Gathered::Aggregate {
                agg: agg.clone(),
                transform: *transform,
                groups,
            }
        }
        Source::Raw => {
            let mut series: BTreeMap<SeriesKey, Vec<Emitted>> = BTreeMap::new();
            for p in points {
                series
                    .entry(group_key(&p.name, &p.tags, dims))
                    .or_default()
                    .push(Emitted::new(p.time, p.value));
            }
            Gathered::Raw {
                transform: *transform,
                series,
            }
        }
    })
}

/// The inner rows' values of `column` within `read` as points: an
/// aggregate reads the non-null values; a raw column is every inner row,
/// null or not (InfluxDB emits a row per inner row).
fn points_of(
    inner: &[Series],
    column: &str,
    keep_nulls: bool,
    read: TimeRange,
) -> Vec<SeriesPoint> {
    let mut out = Vec::new();
    for s in inner {
        let Some(c) = s.columns.iter().position(|n| n == column) else {
            continue;
        };
        for row in &s.values {
            let (Some(Value::Time(t)), Some(v)) = (row.first(), row.get(c)) else {
                continue;
            };
            if (v.is_null() && !keep_nulls) || !read.contains(*t) {
                continue;
            }
            out.push(SeriesPoint {
                name: s.name.clone(),
                tags: s.tags.clone(),
                time: *t,
                value: v.clone(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardhouse_influxql::{parse_statement, Statement};

    fn select(q: &str) -> SelectStatement {
        let Statement::Select(s) = parse_statement(q).unwrap() else {
            unreachable!()
        };
        *s
    }

    fn series(host: &str, rows: &[(i64, f64)]) -> Series {
        Series {
            name: "cpu".into(),
            tags: [("host".to_string(), host.to_string())]
                .into_iter()
                .collect(),
            columns: vec!["time".into(), "mean".into()],
            values: rows
                .iter()
                .map(|(t, v)| vec![Value::Time(*t), Value::Float(*v)])
                .collect(),
            partial: false,
        }
    }

    #[test]
    fn a_raw_outer_column_keeps_the_inner_rows_nulls() {
        // SELECT f1 + f2 AS sum FROM m: null where a point lacks a field.
        let inner = vec![Series {
            name: "m".into(),
            tags: BTreeMap::new(),
            columns: vec!["time".into(), "sum".into()],
            values: vec![
                vec![Value::Time(1), Value::Null],
                vec![Value::Time(2), Value::Float(14.0)],
            ],
            partial: false,
        }];
        let out = evaluate(
            &select("SELECT sum FROM (SELECT f1 + f2 AS sum FROM m)"),
            inner.clone(),
            0,
        )
        .unwrap();
        assert_eq!(
            out[0].values,
            vec![
                vec![Value::Time(1), Value::Null],
                vec![Value::Time(2), Value::Float(14.0)]
            ]
        );
        // An aggregate reads the values only.
        let out = evaluate(
            &select("SELECT count(sum) FROM (SELECT f1 + f2 AS sum FROM m)"),
            inner,
            0,
        )
        .unwrap();
        assert_eq!(out[0].values[0][1], Value::Int(1));
    }

    #[test]
    fn outer_aggregates_read_the_inner_rows() {
        let inner = vec![
            series("a", &[(0, 1.0), (10, 5.0)]),
            series("b", &[(0, 3.0), (10, 2.0)]),
        ];
        // The largest per-host mean, over all hosts.
        let out = evaluate(
            &select("SELECT max(mean) FROM (SELECT mean(v) FROM cpu)"),
            inner.clone(),
            0,
        )
        .unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(
            out[0].values,
            vec![vec![Value::Time(10), Value::Float(5.0)]]
        );
        // Grouped by the inner tag: one series per host.
        let out = evaluate(
            &select("SELECT sum(mean) FROM (SELECT mean(v) FROM cpu) GROUP BY host"),
            inner,
            0,
        )
        .unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].tags["host"], "b");
        assert_eq!(out[1].values[0][1], Value::Float(5.0));
        assert!(evaluate(
            &select("SELECT max(mean) FROM (SELECT mean(v) FROM cpu) WHERE host = 'a'"),
            vec![],
            0
        )
        .is_err());
    }
}
