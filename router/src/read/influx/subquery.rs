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
use shardhouse_influxql::{Dimension, Expr, SelectStatement, SortOrder};

use crate::error::{Error, Result};

enum Source {
    Aggregate(Aggregate),
    Raw,
}

/// Evaluates `outer` over the rows of `inner` (already computed).
pub fn evaluate(outer: &SelectStatement, inner: Vec<Series>, now: i64) -> Result<Vec<Series>> {
    let ascending = outer.order_by != Some(SortOrder::Descending);
    let mut range = TimeRange::UNBOUNDED;
    if let Some(c) = &outer.condition {
        let parts = split_condition(c, |_| false)?;
        if let Some(other) = parts.tags.or(parts.fields) {
            return Err(Error::statement(format!(
                "the outer statement of a subquery may only restrict time, found {other}"
            )));
        }
        if let Some(t) = &parts.time {
            range = time_range(t, now)?;
        }
    }
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
                for s in &inner {
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
    if interval.is_some() {
        if !range.has_start() {
            // As InfluxDB: from the first row the outer statement reads.
            let first = inner
                .iter()
                .flat_map(|s| &s.values)
                .filter_map(|row| match row.first() {
                    Some(Value::Time(t)) => Some(*t),
                    _ => None,
                })
                .min();
            match first {
                Some(t) => range.start = t,
                None => return Ok(Vec::new()),
            }
        }
        if !range.has_end() {
            range.end = now + 1;
        }
    }
    let zone = outer.timezone.as_deref().map(time_zone).transpose()?;
    let duration = interval.map(|iv| iv.duration);

    let mut plans: Vec<(Source, Option<Transform>, String)> = Vec::new();
    let mut fields = Vec::new();
    for f in &outer.fields {
        let (source, transform, column) = match &f.expr {
            Expr::VarRef(v) if v.name.eq_ignore_ascii_case("time") => {
                fields.push(f.clone());
                continue;
            }
            Expr::VarRef(v) => (Source::Raw, None, v.name.clone()),
            Expr::Call(c) => {
                let (agg_call, transform) = match Aggregate::from_call(c) {
                    Ok(_) => (c, None),
                    Err(_) => {
                        let (t, inner_expr) = Transform::from_call(c, duration)?;
                        match inner_expr {
                            Expr::Call(ic) => (ic, Some(t)),
                            Expr::VarRef(v) => {
                                plans.push((Source::Raw, Some(t), v.name.clone()));
                                fields.push(f.clone());
                                continue;
                            }
                            other => {
                                return Err(Error::statement(format!(
                                    "unsupported argument {other}"
                                )))
                            }
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
                (Source::Aggregate(agg), transform, column)
            }
            other => {
                return Err(Error::statement(format!(
                    "unsupported field over a subquery: {other} (select inner columns or aggregate them)"
                )))
            }
        };
        plans.push((source, transform, column));
        fields.push(f.clone());
    }

    // The inner rows as points of each column.
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
    // An aggregate reads the non-null values; a raw column is every inner
    // row, null or not (InfluxDB emits a row per inner row).
    let points_of = |column: &str, keep_nulls: bool| -> Vec<SeriesPoint> {
        let mut out = Vec::new();
        for s in &inner {
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
    };
    let windowing = Windowing::new(interval, read, zone);
    let opts = EvalOptions {
        ascending,
        point_times: only_selector(&fields),
    };
    let mut gathered = Vec::with_capacity(plans.len());
    for (source, transform, column) in &plans {
        let keep_nulls = matches!(source, Source::Raw) && transform.is_none();
        let points = points_of(column, keep_nulls);
        gathered.push(match source {
            Source::Aggregate(agg) => {
                let mut groups = Groups::new();
                merge_groups(
                    agg,
                    &mut groups,
                    group_partials(agg, &points, &dims, &windowing)?,
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
                        .entry(group_key(&p.name, &p.tags, &dims))
                        .or_default()
                        .push(Emitted::new(p.time, p.value));
                }
                Gathered::Raw {
                    transform: *transform,
                    series,
                }
            }
        });
    }
    Ok(finish(outer, &fields, gathered, &windowing, opts)?)
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
