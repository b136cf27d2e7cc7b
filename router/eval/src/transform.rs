//! Transformations applied to a series' points after aggregation (or to raw
//! field values): `derivative`, `non_negative_derivative`, `difference`,
//! `non_negative_difference`, `moving_average`, `cumulative_sum`,
//! `elapsed`, with InfluxDB 1.8's arithmetic:
//!
//! * empty values (`fill(null)` buckets) are skipped; NaN is a value;
//! * `derivative`/`difference` ignore a point at the same time as the one
//!   before; `derivative` divides by elapsed time in `unit`s (default: the
//!   `GROUP BY time()` interval, else 1s); in `ORDER BY time DESC` InfluxDB
//!   negates the elapsed time, and the non-negative forms drop points whose
//!   value difference is negative — both kept as InfluxDB has them;
//! * `moving_average` keeps a running sum (subtract the oldest, add the
//!   newest), so float results round exactly as InfluxDB's do;
//! * integer arithmetic wraps on overflow, as Go's does.
//!
//! With `GROUP BY time()`, InfluxDB reads one extra interval before the
//! query's start (after its end for `DESC`) for every transformation but
//! `cumulative_sum`, so the first bucket has a predecessor:
//! [`Transform::lookback`] tells the planner how far.

use shardhouse_influxql::{Call, Expr, Literal};

use crate::error::{Error, Result};
use crate::eval::Emitted;
use crate::value::Value;

const SECOND: i64 = 1_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transform {
    Derivative { unit: i64, non_negative: bool },
    Difference { non_negative: bool },
    MovingAverage { n: usize },
    CumulativeSum,
    Elapsed { unit: i64 },
}

impl Transform {
    /// Reads a transformation call; `interval` is the `GROUP BY time()`
    /// duration, if any. Returns the transformation and its argument (a
    /// field reference or the inner aggregate call).
    pub fn from_call(call: &Call, interval: Option<i64>) -> Result<(Transform, &Expr)> {
        let unit_arg = || match call.args.get(1) {
            None => Ok(None),
            Some(Expr::Literal(Literal::Duration(d))) if *d > 0 => Ok(Some(*d)),
            Some(other) => Err(Error::InvalidArgument {
                function: call.name.clone(),
                message: format!("second argument must be a positive duration, got {other}"),
            }),
        };
        let transform = match call.name.as_str() {
            "derivative" | "non_negative_derivative" => Transform::Derivative {
                unit: unit_arg()?.or(interval).unwrap_or(SECOND),
                non_negative: call.name.starts_with("non_negative"),
            },
            "difference" | "non_negative_difference" => Transform::Difference {
                non_negative: call.name.starts_with("non_negative"),
            },
            "moving_average" => match call.args.get(1) {
                Some(Expr::Literal(Literal::Integer(n))) if *n > 1 => {
                    Transform::MovingAverage { n: *n as usize }
                }
                other => {
                    return Err(Error::InvalidArgument {
                        function: call.name.clone(),
                        message: format!(
                            "moving_average window must be greater than 1, got {other:?}"
                        ),
                    })
                }
            },
            "cumulative_sum" => Transform::CumulativeSum,
            "elapsed" => Transform::Elapsed {
                unit: unit_arg()?.unwrap_or(1),
            },
            other => {
                return Err(Error::UnsupportedCall {
                    name: other.to_string(),
                })
            }
        };
        let arg = call.args.first().ok_or_else(|| Error::InvalidArgument {
            function: call.name.clone(),
            message: "missing argument".into(),
        })?;
        Ok((transform, arg))
    }

    /// How far before the query's start (after its end, for `DESC`) to read
    /// with `GROUP BY time(interval)`: one interval, except for
    /// `cumulative_sum`. InfluxDB 1.8 widens `moving_average`'s read by
    /// `n - 1` intervals only after building its input, so one it is.
    pub fn lookback(&self, interval: i64) -> i64 {
        match self {
            Transform::CumulativeSum => 0,
            _ => interval,
        }
    }

    /// Applies the transformation to one series' points (output order).
    pub fn apply(&self, points: &[Emitted], ascending: bool) -> Result<Vec<Emitted>> {
        let name = self.name();
        let values = points.iter().filter(|p| !p.value.is_null());
        match *self {
            Transform::Elapsed { unit } => Ok(elapsed(values, unit)),
            Transform::CumulativeSum => cumulative_sum(name, values),
            Transform::MovingAverage { n } => moving_average(name, values, n),
            Transform::Derivative { unit, non_negative } => {
                derivative(name, values, unit, non_negative, ascending)
            }
            Transform::Difference { non_negative } => difference(name, values, non_negative),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Transform::Derivative {
                non_negative: false,
                ..
            } => "derivative",
            Transform::Derivative { .. } => "non_negative_derivative",
            Transform::Difference {
                non_negative: false,
            } => "difference",
            Transform::Difference { .. } => "non_negative_difference",
            Transform::MovingAverage { .. } => "moving_average",
            Transform::CumulativeSum => "cumulative_sum",
            Transform::Elapsed { .. } => "elapsed",
        }
    }
}

fn numeric<'a>(function: &'static str, value: &'a Value) -> Result<&'a Value> {
    match value {
        Value::Float(_) | Value::Int(_) | Value::UInt(_) => Ok(value),
        other => Err(Error::UnsupportedType {
            function,
            value_type: other.type_name(),
        }),
    }
}

fn conflict(function: &'static str, first: &Value, second: &Value) -> Error {
    Error::TypeConflict {
        function,
        first: first.type_name(),
        second: second.type_name(),
    }
}

/// `sum ± v` in the values' type (wrapping for integers).
fn combine(function: &'static str, sum: &Value, v: &Value, subtract: bool) -> Result<Value> {
    Ok(match (sum, v) {
        (Value::Null, Value::Float(b)) => Value::Float(if subtract { -b } else { *b }),
        (Value::Null, Value::Int(b)) => Value::Int(if subtract { b.wrapping_neg() } else { *b }),
        (Value::Null, Value::UInt(b)) => Value::UInt(if subtract { b.wrapping_neg() } else { *b }),
        (Value::Float(a), Value::Float(b)) => Value::Float(if subtract { a - b } else { a + b }),
        (Value::Int(a), Value::Int(b)) => Value::Int(if subtract {
            a.wrapping_sub(*b)
        } else {
            a.wrapping_add(*b)
        }),
        (Value::UInt(a), Value::UInt(b)) => Value::UInt(if subtract {
            a.wrapping_sub(*b)
        } else {
            a.wrapping_add(*b)
        }),
        (a, b) => return Err(conflict(function, a, b)),
    })
}

/// `elapsed()`: the time between consecutive points, in `unit`s.
fn elapsed<'a>(values: impl Iterator<Item = &'a Emitted>, unit: i64) -> Vec<Emitted> {
    let mut out = Vec::new();
    let mut prev: Option<i64> = None;
    for p in values {
        if let Some(t0) = prev {
            out.push(Emitted::new(p.time, Value::Int((p.time - t0) / unit)));
        }
        prev = Some(p.time);
    }
    out
}

/// `cumulative_sum()`: the running sum.
fn cumulative_sum<'a>(
    name: &'static str,
    values: impl Iterator<Item = &'a Emitted>,
) -> Result<Vec<Emitted>> {
    let mut out = Vec::new();
    let mut total: Option<Value> = None;
    for p in values {
        let next = match (&total, &p.value) {
            (None, v) => numeric(name, v)?.clone(),
            (Some(Value::Float(a)), Value::Float(b)) => Value::Float(a + b),
            (Some(Value::Int(a)), Value::Int(b)) => Value::Int(a.wrapping_add(*b)),
            (Some(Value::UInt(a)), Value::UInt(b)) => Value::UInt(a.wrapping_add(*b)),
            (Some(a), b) => return Err(conflict(name, a, b)),
        };
        out.push(Emitted::new(p.time, next.clone()));
        total = Some(next);
    }
    Ok(out)
}

/// `moving_average()`: the mean of each window of `n` points.
fn moving_average<'a>(
    name: &'static str,
    values: impl Iterator<Item = &'a Emitted>,
    n: usize,
) -> Result<Vec<Emitted>> {
    let mut out = Vec::new();
    let mut window: Vec<Value> = Vec::with_capacity(n);
    let mut pos = 0;
    let mut sum = Value::Null;
    for p in values {
        let v = numeric(name, &p.value)?;
        if window.len() == n {
            sum = combine(name, &sum, &window[pos], true)?;
            window[pos] = v.clone();
        } else {
            window.push(v.clone());
        }
        sum = combine(name, &sum, v, false)?;
        pos = (pos + 1) % n;
        if window.len() == n {
            let total = sum.as_f64().unwrap_or(f64::NAN);
            out.push(Emitted::new(p.time, Value::Float(total / n as f64)));
        }
    }
    Ok(out)
}

/// `derivative()` and `non_negative_derivative()`: the rate of change per
/// `unit` between consecutive points of distinct times.
fn derivative<'a>(
    name: &'static str,
    values: impl Iterator<Item = &'a Emitted>,
    unit: i64,
    non_negative: bool,
    ascending: bool,
) -> Result<Vec<Emitted>> {
    let mut out = Vec::new();
    let mut prev: Option<&Emitted> = None;
    for p in values {
        numeric(name, &p.value)?;
        let Some(p0) = prev.filter(|p0| p0.time != p.time) else {
            prev = prev.or(Some(p));
            continue;
        };
        let diff = match (&p.value, &p0.value) {
            (Value::Float(b), Value::Float(a)) => b - a,
            (Value::Int(b), Value::Int(a)) => b.wrapping_sub(*a) as f64,
            (Value::UInt(b), Value::UInt(a)) if b > a => (b - a) as f64,
            (Value::UInt(b), Value::UInt(a)) => -((a - b) as f64),
            (b, a) => return Err(conflict(name, a, b)),
        };
        let mut elapsed = p.time - p0.time;
        if !ascending {
            elapsed = -elapsed;
        }
        if !(non_negative && diff < 0.0) {
            let value = diff / (elapsed as f64 / unit as f64);
            out.push(Emitted::new(p.time, Value::Float(value)));
        }
        prev = Some(p);
    }
    Ok(out)
}

/// `difference()` and `non_negative_difference()`: the change between
/// consecutive points of distinct times.
fn difference<'a>(
    name: &'static str,
    values: impl Iterator<Item = &'a Emitted>,
    non_negative: bool,
) -> Result<Vec<Emitted>> {
    let mut out = Vec::new();
    let mut prev: Option<&Emitted> = None;
    for p in values {
        numeric(name, &p.value)?;
        let Some(p0) = prev.filter(|p0| p0.time != p.time) else {
            prev = prev.or(Some(p));
            continue;
        };
        let value = match (&p.value, &p0.value) {
            (Value::Float(b), Value::Float(a)) => Some(b - a)
                .filter(|d| !(non_negative && *d < 0.0))
                .map(Value::Float),
            (Value::Int(b), Value::Int(a)) => Some(b.wrapping_sub(*a))
                .filter(|d| !(non_negative && *d < 0))
                .map(Value::Int),
            (Value::UInt(b), Value::UInt(a)) => {
                (!(non_negative && b < a)).then(|| Value::UInt(b.wrapping_sub(*a)))
            }
            (b, a) => return Err(conflict(name, a, b)),
        };
        if let Some(value) = value {
            out.push(Emitted::new(p.time, value));
        }
        prev = Some(p);
    }
    Ok(out)
}
