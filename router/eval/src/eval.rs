//! From the merged partials of one series to its output points, in the
//! query's time order: the bucket's time or the selected point's time on
//! each value, and `integral()`, whose trapezoids cross bucket edges.

use std::collections::BTreeMap;

use crate::aggregate::{Aggregate, Partial};
use crate::error::Result;
use crate::value::{Point, Value};
use crate::window::Windowing;

/// One value of one output column of one series, after aggregation (and
/// later fill and transformations).
#[derive(Debug, Clone, PartialEq)]
pub struct Emitted {
    pub time: i64,
    pub value: Value,
    /// Extra columns that travel with this value (`top(x, host, 2)`'s host).
    pub aux: Vec<Value>,
    /// The series a raw value comes from, as its rank in the statement's
    /// series order (0 for aggregates): raw values of different series at
    /// one time are separate rows, ordered by series, as InfluxDB returns
    /// them (`SELECT used, free FROM mem` with `used` and `free` in two
    /// series gives two rows per time, not one).
    pub series: u64,
}

impl Emitted {
    pub fn new(time: i64, value: Value) -> Self {
        Emitted {
            time,
            value,
            aux: Vec::new(),
            series: 0,
        }
    }

    /// A raw value of the series ranked `series` (see [`Emitted::series`]).
    pub fn of_series(time: i64, value: Value, series: u64) -> Self {
        Emitted {
            series,
            ..Emitted::new(time, value)
        }
    }
}

/// How output times are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EvalOptions {
    /// `ORDER BY time ASC` (the default).
    pub ascending: bool,
    /// The statement's only call is this selector (`SELECT max(x) ...`):
    /// without `GROUP BY time()` each value keeps its point's time, as
    /// InfluxDB 1.8 does. See [`crate::shape::only_selector`].
    pub point_times: bool,
}

impl Default for EvalOptions {
    fn default() -> Self {
        EvalOptions {
            ascending: true,
            point_times: false,
        }
    }
}

/// Evaluates `agg` for one series from its merged partials, keyed by
/// [`Windowing::bucket_start`]. `top`/`bottom` rows keep their points'
/// times, ordered by time (equal times best first); `distinct` rows share
/// the bucket's time.
pub fn evaluate(
    agg: &Aggregate,
    buckets: &BTreeMap<i64, Partial>,
    windowing: &Windowing,
    opts: EvalOptions,
) -> Result<Vec<Emitted>> {
    if let Aggregate::Integral { unit } = agg {
        let mut points: Vec<Point> = Vec::new();
        for partial in buckets.values() {
            if let Partial::Points(p) = partial {
                points.extend(p.iter().cloned());
            }
        }
        // Equal times from several series: the larger value is fed last
        // (InfluxDB leaves this to its merge heap).
        points.sort_by(|a, b| {
            let (x, y) = (a.value.as_f64(), b.value.as_f64());
            a.time
                .cmp(&b.time)
                .then(x.partial_cmp(&y).unwrap_or(std::cmp::Ordering::Equal))
        });
        let mut out = integral(&points, *unit, windowing);
        if !opts.ascending {
            out.reverse();
        }
        return Ok(out);
    }
    let ordered: Box<dyn Iterator<Item = (&i64, &Partial)>> = if opts.ascending {
        Box::new(buckets.iter())
    } else {
        Box::new(buckets.iter().rev())
    };
    let mut out = Vec::new();
    for (&bucket, partial) in ordered {
        let mut outputs = partial.finish(agg, opts.ascending)?;
        if matches!(
            agg,
            Aggregate::Top { .. } | Aggregate::Bottom { .. } | Aggregate::Sample(_)
        ) {
            // Several points per bucket, each at its own time; top/bottom
            // are best first already, a stable sort keeps that on ties.
            if opts.ascending {
                outputs.sort_by_key(|o| o.time);
            } else {
                outputs.sort_by_key(|o| std::cmp::Reverse(o.time));
            }
            for o in outputs {
                out.push(Emitted {
                    time: o.time.unwrap_or(bucket),
                    value: o.value,
                    aux: o.aux,
                    series: 0,
                });
            }
            continue;
        }
        let own_time = opts.point_times && windowing.interval.is_none();
        for o in outputs {
            let time = match o.time {
                Some(t) if own_time => t,
                _ => bucket,
            };
            out.push(Emitted {
                time,
                value: o.value,
                aux: o.aux,
                series: 0,
            });
        }
    }
    Ok(out)
}

/// InfluxDB's float `integral()` over time-ordered points: trapezoids
/// between consecutive points (a later point at the same time replaces the
/// earlier); with `GROUP BY time()` the trapezoid across a bucket edge is
/// split at the edge by linear interpolation, and a bucket's area is
/// reported at its start. A last point exactly on its bucket's start adds
/// nothing and reports nothing. Without `GROUP BY time()` the time is 0.
fn integral(points: &[Point], unit: i64, windowing: &Windowing) -> Vec<Emitted> {
    let unit = unit as f64;
    let grouped = windowing.interval.is_some();
    let mut out = Vec::new();
    let mut prev: Option<(i64, f64)> = None;
    let (mut start, mut end) = (0, 0);
    let mut sum = 0.0;
    for p in points {
        let Some(v) = p.value.as_f64() else { continue };
        let Some((mut pt, mut pv)) = prev else {
            prev = Some((p.time, v));
            if grouped {
                (start, end) = windowing.window(p.time);
            }
            continue;
        };
        if pt == p.time {
            prev = Some((p.time, v));
            continue;
        }
        if grouped && p.time >= end {
            if pt != end {
                let at_edge = linear(end, pt, p.time, pv, v);
                sum += 0.5 * (at_edge + pv) * ((end - pt) as f64 / unit);
                (pt, pv) = (end, at_edge);
            }
            out.push(Emitted::new(start, Value::Float(sum)));
            (start, end) = windowing.window(p.time);
            sum = 0.0;
        }
        sum += 0.5 * (v + pv) * ((p.time - pt) as f64 / unit);
        prev = Some((p.time, v));
    }
    if let Some((pt, _)) = prev {
        if pt != start {
            out.push(Emitted::new(start, Value::Float(sum)));
        }
    }
    out
}

/// InfluxDB's `linearFloat`: the value at `t` on the line through two points.
pub(crate) fn linear(t: i64, t0: i64, t1: i64, v0: f64, v1: f64) -> f64 {
    let slope = (v1 - v0) / (t1 - t0) as f64;
    slope * (t - t0) as f64 + v0
}
