//! The merge of one aggregate across shards: the state a group keeps per
//! aggregate kind, how each shard's partial values fold into it, and the
//! final value (quantiles, variance by Chan's formula, distinct counts).
//! Kept apart from the grouping so every kind's arithmetic reads in one
//! place.

use crate::read::sql::plan::AggKind;
use crate::read::sql::value::{sort_cmp, Value};
use std::cmp::Ordering;
use std::collections::HashSet;

/// The merge state of one aggregate in one group.
#[derive(Debug, Clone)]
pub(super) enum State {
    Count(u64),
    /// `sum` (NULL until a non-NULL partial), `min`, `max`, `any`, `anyLast`.
    One(Value),
    Avg(Value, u64),
    Arg(Value, Value),
    Set(HashSet<Value>),
    Values(Vec<Value>),
    Var {
        n: f64,
        mean: f64,
        m2: f64,
    },
}

pub(super) fn new_state(kind: &AggKind) -> State {
    match kind {
        AggKind::Count => State::Count(0),
        AggKind::Avg => State::Avg(Value::Null, 0),
        AggKind::ArgMin | AggKind::ArgMax => State::Arg(Value::Null, Value::Null),
        AggKind::Uniq => State::Set(HashSet::new()),
        AggKind::Quantile { .. } => State::Values(Vec::new()),
        AggKind::Var { .. } => State::Var {
            n: 0.0,
            mean: 0.0,
            m2: 0.0,
        },
        _ => State::One(Value::Null),
    }
}

fn as_u64(v: &Value) -> u64 {
    match v {
        Value::UInt(u) => *u,
        Value::Int(i) => (*i).max(0) as u64,
        Value::Float(f) => *f as u64,
        _ => 0,
    }
}

/// `a + b` as ClickHouse adds (integers wrap, a float makes a float).
pub(super) fn add(a: &Value, b: &Value) -> Value {
    match (a, b) {
        (Value::Null, x) | (x, Value::Null) => x.clone(),
        (Value::Int(x), Value::Int(y)) => Value::Int(x.wrapping_add(*y)),
        (Value::UInt(x), Value::UInt(y)) => Value::UInt(x.wrapping_add(*y)),
        (Value::Int(x), Value::UInt(y)) | (Value::UInt(y), Value::Int(x)) => {
            Value::Int(x.wrapping_add(*y as i64))
        }
        (x, y) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => Value::Float(x + y),
            _ => Value::Null,
        },
    }
}

pub(super) fn fold(kind: &AggKind, st: &mut State, p: &[Value]) {
    match (kind, st) {
        (AggKind::Count, State::Count(c)) => *c += as_u64(&p[0]),
        (AggKind::Sum, State::One(v)) => *v = add(v, &p[0]),
        (AggKind::Min | AggKind::Max, State::One(v)) if !p[0].is_null() => {
            let better = match kind {
                AggKind::Min => sort_cmp(&p[0], v, false, false) == Ordering::Less,
                _ => v.is_null() || p[0].total_cmp(v) == Ordering::Greater,
            };
            if v.is_null() || better {
                *v = p[0].clone();
            }
        }
        (AggKind::Any, State::One(v)) if v.is_null() => *v = p[0].clone(),
        (AggKind::AnyLast, State::One(v)) if !p[0].is_null() => *v = p[0].clone(),
        (AggKind::Avg, State::Avg(s, n)) => {
            *s = add(s, &p[0]);
            *n += as_u64(&p[1]);
        }
        (AggKind::ArgMin | AggKind::ArgMax, State::Arg(a, b)) if !p[1].is_null() => {
            let o = p[1].total_cmp(b);
            let better = b.is_null()
                || if matches!(kind, AggKind::ArgMin) {
                    o == Ordering::Less
                } else {
                    o == Ordering::Greater
                };
            if better {
                *a = p[0].clone();
                *b = p[1].clone();
            }
        }
        (AggKind::Uniq, State::Set(s)) => {
            if let Value::List(l) = &p[0] {
                s.extend(l.iter().filter(|v| !v.is_null()).cloned());
            }
        }
        (AggKind::Quantile { .. }, State::Values(vs)) => {
            if let Value::List(l) = &p[0] {
                vs.extend(l.iter().filter(|v| !v.is_null()).cloned());
            }
        }
        (AggKind::Var { .. }, State::Var { n, mean, m2 }) => {
            let nb = as_u64(&p[0]) as f64;
            if nb > 0.0 {
                let (mb, vb) = (
                    p[1].as_f64().unwrap_or(f64::NAN),
                    p[2].as_f64().unwrap_or(f64::NAN),
                );
                let m2b = vb * nb;
                let total = *n + nb;
                let delta = mb - *mean;
                *mean += delta * nb / total;
                *m2 += m2b + delta * delta * *n * nb / total;
                *n = total;
            }
        }
        _ => {}
    }
}

/// ClickHouse's `quantile` (interpolated) over sorted numbers.
pub fn quantile_interpolated(sorted: &[f64], level: f64) -> f64 {
    let n = sorted.len();
    let index = (level * (n as f64 - 1.0)).clamp(0.0, n as f64 - 1.0);
    let i = index as usize;
    let frac = index - i as f64;
    if i + 1 >= n {
        return sorted[i];
    }
    sorted[i] + frac * (sorted[i + 1] - sorted[i])
}

/// ClickHouse's `quantileExact`: the element at `floor(level * n)`.
pub fn quantile_exact(sorted: &[Value], level: f64) -> Value {
    let n = sorted.len();
    let i = if level < 1.0 {
        (level * n as f64) as usize
    } else {
        n - 1
    };
    sorted[i.min(n - 1)].clone()
}

pub(super) fn finish(kind: &AggKind, st: State) -> Value {
    match (kind, st) {
        (_, State::Count(c)) => Value::UInt(c),
        (_, State::One(v)) => v,
        (_, State::Avg(s, n)) => match s.as_f64() {
            Some(s) if n > 0 => Value::Float(s / n as f64),
            _ => Value::Null,
        },
        (_, State::Arg(a, _)) => a,
        (_, State::Set(s)) => Value::UInt(s.len() as u64),
        (
            AggKind::Quantile {
                levels,
                interpolated,
                multi,
            },
            State::Values(mut vs),
        ) => {
            if vs.is_empty() {
                return if *multi {
                    Value::List(vec![Value::Float(f64::NAN); levels.len()])
                } else {
                    Value::Null
                };
            }
            vs.sort_by(|a, b| sort_cmp(a, b, false, false));
            let one = |level: f64| -> Value {
                if *interpolated {
                    let nums: Vec<f64> = vs.iter().filter_map(Value::as_f64).collect();
                    if nums.len() != vs.len() {
                        return quantile_exact(&vs, level);
                    }
                    Value::Float(quantile_interpolated(&nums, level))
                } else {
                    quantile_exact(&vs, level)
                }
            };
            if *multi {
                Value::List(levels.iter().map(|l| one(*l)).collect())
            } else {
                one(levels[0])
            }
        }
        (AggKind::Var { sample, sqrt }, State::Var { n, m2, .. }) => {
            if n == 0.0 {
                return Value::Null;
            }
            let v = if *sample {
                if n > 1.0 {
                    m2 / (n - 1.0)
                } else {
                    f64::NAN
                }
            } else {
                m2 / n
            };
            Value::Float(if *sqrt { v.max(0.0).sqrt() } else { v.max(0.0) })
        }
        _ => Value::Null,
    }
}
