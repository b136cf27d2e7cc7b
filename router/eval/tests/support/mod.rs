//! A minimal planner for tests: runs a `SELECT` (time conditions only, one
//! field called `value`) over points split into shards, the way the router
//! will: partials per shard, merge, evaluate, fill, transform, shape.

#![allow(dead_code)]

use std::collections::BTreeMap;

use shardhouse_eval::partials::{group_key, group_partials, merge_groups, Groups, SeriesPoint};
use shardhouse_eval::{
    finish, only_selector, time_zone, Aggregate, Emitted, EvalOptions, Gathered, Interval, Result,
    Series, SeriesKey, Transform, Value, Windowing,
};
use shardhouse_influxql::time::{split_condition, time_range, TimeRange};
use shardhouse_influxql::{parse_statement, Dimension, Expr, SortOrder, Statement};

pub const S: i64 = 1_000_000_000;

/// `"region=west,host=A"` as a tag map.
pub fn tags(spec: &str) -> BTreeMap<String, String> {
    spec.split(',')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("k=v");
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// A point of measurement `cpu` at `seconds`.
pub fn pt(tag_spec: &str, seconds: i64, value: Value) -> SeriesPoint {
    SeriesPoint {
        name: "cpu".to_string(),
        tags: tags(tag_spec),
        time: seconds * S,
        value,
    }
}

pub fn f(v: f64) -> Value {
    Value::Float(v)
}

pub fn i(v: i64) -> Value {
    Value::Int(v)
}

pub fn u(v: u64) -> Value {
    Value::UInt(v)
}

pub fn s(v: &str) -> Value {
    Value::String(v.to_string())
}

pub fn b(v: bool) -> Value {
    Value::Bool(v)
}

enum Source {
    Aggregate(Aggregate),
    Raw,
}

/// Runs `text` over `shards` with `now` in nanoseconds.
pub fn query_shards(text: &str, shards: &[Vec<SeriesPoint>], now: i64) -> Result<Vec<Series>> {
    let Statement::Select(select) = parse_statement(text).expect("test query parses") else {
        panic!("not a SELECT: {text}");
    };
    let ascending = select.order_by != Some(SortOrder::Descending);
    let mut range = match &select.condition {
        Some(c) => {
            let parts = split_condition(c, |_| false).expect("time-only condition");
            match parts.time {
                Some(t) => time_range(&t, now).expect("time range"),
                None => TimeRange::UNBOUNDED,
            }
        }
        None => TimeRange::UNBOUNDED,
    };
    let mut interval = None;
    let mut dims = Vec::new();
    for d in &select.group_by {
        match d {
            Dimension::Time {
                interval: i,
                offset,
            } => interval = Some(Interval::new(*i, *offset, now)?),
            Dimension::Tag(t) => dims.push(t.clone()),
            other => panic!("test planner: unsupported dimension {other:?}"),
        }
    }
    if interval.is_some() && !range.has_end() {
        // InfluxDB ends GROUP BY time() queries at now() (inclusive).
        range.end = now + 1;
    }
    let zone = select.timezone.as_deref().map(time_zone).transpose()?;
    let duration = interval.map(|iv| iv.duration);

    let mut plans = Vec::new();
    for field in &select.fields {
        let (source, transform) = match &field.expr {
            Expr::Call(c) if Aggregate::from_call(c).is_err() => {
                let (t, inner) = Transform::from_call(c, duration)?;
                let source = match inner {
                    Expr::Call(inner) => Source::Aggregate(Aggregate::from_call(inner)?),
                    _ => Source::Raw,
                };
                (source, Some(t))
            }
            Expr::Call(c) => (Source::Aggregate(Aggregate::from_call(c)?), None),
            _ => (Source::Raw, None),
        };
        plans.push((source, transform));
    }
    let mut read = range;
    if let Some(d) = duration {
        let lookback = plans
            .iter()
            .filter_map(|(_, t)| t.map(|t| t.lookback(d)))
            .max()
            .unwrap_or(0);
        if ascending && read.has_start() {
            read.start -= lookback;
        } else if !ascending && read.has_end() {
            read.end += lookback;
        }
    }
    let windowing = Windowing::new(interval, read, zone);
    let opts = EvalOptions {
        ascending,
        point_times: only_selector(&select.fields),
    };

    let mut gathered = Vec::with_capacity(plans.len());
    for (source, transform) in &plans {
        gathered.push(match source {
            Source::Aggregate(agg) => {
                let mut groups = Groups::new();
                for shard in shards {
                    merge_groups(
                        agg,
                        &mut groups,
                        group_partials(agg, shard, &dims, &windowing)?,
                    )?;
                }
                Gathered::Aggregate {
                    agg: agg.clone(),
                    transform: *transform,
                    groups,
                }
            }
            Source::Raw => {
                let mut series: BTreeMap<SeriesKey, Vec<Emitted>> = BTreeMap::new();
                for p in shards.iter().flatten().filter(|p| read.contains(p.time)) {
                    series
                        .entry(group_key(&p.name, &p.tags, &dims))
                        .or_default()
                        .push(Emitted::new(p.time, p.value.clone()));
                }
                Gathered::Raw {
                    transform: *transform,
                    series,
                }
            }
        });
    }
    finish(&select, &select.fields, gathered, &windowing, opts)
}

/// Runs `text` over one shard.
pub fn query(text: &str, points: &[SeriesPoint]) -> Result<Vec<Series>> {
    query_shards(text, &[points.to_vec()], 0)
}

/// Compact text for comparing results: one line per series,
/// `name,k=v | time:cell,cell | ...` with times in seconds when whole,
/// floats as Rust prints them, `i`/`u` suffixes on integers.
pub fn render(series: &[Series]) -> Vec<String> {
    series
        .iter()
        .map(|s| {
            let mut line = s.name.clone();
            for (k, v) in &s.tags {
                line.push_str(&format!(",{k}={v}"));
            }
            for row in &s.values {
                line.push_str(" | ");
                let cells: Vec<String> = row.iter().map(cell).collect();
                line.push_str(&cells[0]);
                line.push(':');
                line.push_str(&cells[1..].join(","));
            }
            line
        })
        .collect()
}

pub fn cell(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Float(x) => format!("{x}"),
        Value::Int(x) => format!("{x}i"),
        Value::UInt(x) => format!("{x}u"),
        Value::Bool(x) => x.to_string(),
        Value::String(x) => format!("{x:?}"),
        Value::Time(t) if t % S == 0 => format!("{}", t / S),
        Value::Time(t) => format!("{t}ns"),
    }
}

/// `query` + `render`, panicking on errors.
pub fn run(text: &str, points: &[SeriesPoint]) -> Vec<String> {
    render(&query(text, points).unwrap_or_else(|e| panic!("{text}: {e}")))
}
