//! `fill(null | none | previous | linear | <number>)` over one series'
//! aggregated points, as InfluxDB 1.8's fill iterator does it:
//!
//! * fill runs from the window of the query's start to the window of its
//!   last instant (`[start, end)` range), and only for series that have at
//!   least one point; an unbounded start begins at the first point's window
//!   (InfluxDB bounds the end with `now()` for `GROUP BY time()` queries,
//!   which the planner passes in; an unbounded end stops at the last point);
//! * `null` adds empty values, except for `count()`, which gets 0;
//! * `<number>` is converted to the column's type (truncated for integers;
//!   strings get `""` and booleans `false`, as InfluxDB's casts do);
//! * `previous` repeats the last real value of the series (empty before it);
//! * `linear` interpolates between the last real value and the next one,
//!   in units of the interval (times are divided by the interval with
//!   integer division first, as InfluxDB does); empty before the first and
//!   after the last real value; strings and booleans stay empty.

use shardhouse_influxql::Fill;

use crate::eval::{linear, Emitted};
use crate::value::Value;
use crate::window::{BucketCursor, Windowing};

/// Fills the gaps of one series' points (in output order). `is_count`
/// makes `fill(null)` fill with 0. `fill(none)` and queries without
/// `GROUP BY time()` return the points unchanged.
pub fn fill(
    points: Vec<Emitted>,
    mode: &Fill,
    is_count: bool,
    windowing: &Windowing,
    ascending: bool,
) -> Vec<Emitted> {
    let Some(interval) = windowing.interval else {
        return points;
    };
    if matches!(mode, Fill::None) || points.is_empty() {
        return points;
    }
    let mode = match mode {
        Fill::Null if is_count => Fill::Integer(0),
        other => *other,
    };
    let range = windowing.range;
    let (first, last) = windowing.fill_bounds(ascending);
    let (start_bounded, end_bounded) = if ascending {
        (range.has_start(), range.has_end())
    } else {
        (range.has_end(), range.has_start())
    };
    let start = if start_bounded {
        first
    } else {
        windowing.window(points[0].time).0
    };
    let end = end_bounded.then_some(last);
    let template = points[0].value.clone();

    let mut out = Vec::with_capacity(points.len());
    let mut next = 0;
    let mut prev: Option<usize> = None;
    let mut cursor = BucketCursor::new(windowing, start, ascending);
    loop {
        let at = cursor.time;
        let in_range = end.is_some_and(|e| if ascending { at <= e } else { at >= e });
        match points.get(next) {
            None if !in_range => break,
            Some(p) if !(if ascending { p.time > at } else { p.time < at }) => {
                out.push(p.clone());
                prev = Some(next);
                next += 1;
            }
            upcoming => {
                let value = match mode {
                    Fill::Null | Fill::None => Value::Null,
                    Fill::Integer(n) => cast_number(n as f64, Some(n), &template),
                    Fill::Float(f) => cast_number(f, None, &template),
                    Fill::Previous => prev.map_or(Value::Null, |i| points[i].value.clone()),
                    Fill::Linear => match (prev.map(|i| &points[i]), upcoming) {
                        (Some(p0), Some(p1)) => interpolate(at, p0, p1, interval.duration),
                        _ => Value::Null,
                    },
                };
                out.push(Emitted::new(at, value));
            }
        }
        cursor.advance(windowing);
        if cursor.time == at {
            // The time axis ran out (saturated); nothing more can be placed.
            out.extend(points[next..].iter().cloned());
            break;
        }
    }
    out
}

/// `fill(<number>)` in the column's type, as InfluxDB's `castTo*` do.
fn cast_number(f: f64, int: Option<i64>, template: &Value) -> Value {
    match template {
        Value::Float(_) => Value::Float(f),
        Value::Int(_) => Value::Int(int.unwrap_or(f as i64)),
        Value::UInt(_) => Value::UInt(int.map_or(f as u64, |i| i as u64)),
        Value::String(_) => Value::String(String::new()),
        Value::Bool(_) => Value::Bool(false),
        Value::Null | Value::Time(_) => Value::Null,
    }
}

/// InfluxDB's `linearFloat` / `linearInteger` / `linearUnsigned` on times
/// divided by the interval.
fn interpolate(at: i64, p0: &Emitted, p1: &Emitted, duration: i64) -> Value {
    let (t, t0, t1) = (at / duration, p0.time / duration, p1.time / duration);
    match (&p0.value, &p1.value) {
        (Value::Float(v0), Value::Float(v1)) => Value::Float(linear(t, t0, t1, *v0, *v1)),
        (Value::Int(v0), Value::Int(v1)) => {
            let slope = v1.wrapping_sub(*v0) as f64 / (t1 - t0) as f64;
            Value::Int((slope * (t - t0) as f64 + *v0 as f64) as i64)
        }
        (Value::UInt(v0), Value::UInt(v1)) => {
            // InfluxDB subtracts unsigned values before converting, so a
            // falling line wraps around; kept for identical answers.
            let slope = v1.wrapping_sub(*v0) as f64 / (t1 - t0) as f64;
            Value::UInt((slope * (t - t0) as f64 + *v0 as f64) as u64)
        }
        _ => Value::Null,
    }
}
