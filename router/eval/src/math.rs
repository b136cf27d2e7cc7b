//! Arithmetic between evaluated values, as InfluxDB 1.8's `ValuerEval`
//! computes a field expression at the router (`max(v) - min(v)`,
//! `sum(v) / 2`, `derivative(mean(v)) / last(v)`): each call of the
//! expression is evaluated on its own (one output column each), then the
//! expression combines them row by row.
//!
//! Types: float with anything numeric is float; integer with integer is
//! integer (wrapping, as Go's int64) except `/`, which is float (the query
//! engine sets `IntegerFloatDivision`); unsigned with an integer is
//! unsigned. Division or modulo by zero is 0. A null (or a non-numeric)
//! operand makes the result null.

use std::collections::BTreeMap;

use shardhouse_influxql::{BinaryOp, Expr, Literal};

use crate::eval::Emitted;
use crate::value::{SeriesKey, Value};

/// `lhs op rhs` for the arithmetic operators; null for anything else.
pub fn binary(op: BinaryOp, lhs: &Value, rhs: &Value) -> Value {
    match (lhs, rhs) {
        (Value::Float(l), r) => float_op(op, *l, as_float(r)),
        (l, Value::Float(r)) => match as_float(l) {
            Some(l) => float_op(op, l, Some(*r)),
            None => Value::Null,
        },
        (Value::Int(l), Value::Int(r)) => int_op(op, *l, *r),
        (Value::Int(l), Value::UInt(r)) => uint_op(op, *l as u64, *r),
        (Value::UInt(l), Value::Int(r)) => uint_op(op, *l, *r as u64),
        (Value::UInt(l), Value::UInt(r)) => uint_op(op, *l, *r),
        _ => Value::Null,
    }
}

fn as_float(v: &Value) -> Option<f64> {
    match v {
        Value::Float(f) => Some(*f),
        Value::Int(i) => Some(*i as f64),
        Value::UInt(u) => Some(*u as f64),
        _ => None,
    }
}

fn float_op(op: BinaryOp, l: f64, r: Option<f64>) -> Value {
    let Some(r) = r else { return Value::Null };
    Value::Float(match op {
        BinaryOp::Add => l + r,
        BinaryOp::Sub => l - r,
        BinaryOp::Mul => l * r,
        BinaryOp::Div if r == 0.0 => 0.0,
        BinaryOp::Div => l / r,
        // Go's math.Mod: the sign of the dividend, NaN for a zero divisor.
        BinaryOp::Mod => l % r,
        _ => return Value::Null,
    })
}

fn int_op(op: BinaryOp, l: i64, r: i64) -> Value {
    Value::Int(match op {
        BinaryOp::Add => l.wrapping_add(r),
        BinaryOp::Sub => l.wrapping_sub(r),
        BinaryOp::Mul => l.wrapping_mul(r),
        BinaryOp::Div if r == 0 => return Value::Float(0.0),
        BinaryOp::Div => return Value::Float(l as f64 / r as f64),
        BinaryOp::Mod if r == 0 => 0,
        BinaryOp::Mod => l.wrapping_rem(r),
        BinaryOp::BitAnd => l & r,
        BinaryOp::BitOr => l | r,
        BinaryOp::BitXor => l ^ r,
        _ => return Value::Null,
    })
}

fn uint_op(op: BinaryOp, l: u64, r: u64) -> Value {
    Value::UInt(match op {
        BinaryOp::Add => l.wrapping_add(r),
        BinaryOp::Sub => l.wrapping_sub(r),
        BinaryOp::Mul => l.wrapping_mul(r),
        BinaryOp::Div | BinaryOp::Mod if r == 0 => 0,
        BinaryOp::Div => l / r,
        BinaryOp::Mod => l % r,
        BinaryOp::BitAnd => l & r,
        BinaryOp::BitOr => l | r,
        BinaryOp::BitXor => l ^ r,
        _ => return Value::Null,
    })
}

/// The value of `expr` where its calls, in pre-order (left to right),
/// take the values `calls` (one per call).
pub fn evaluate(expr: &Expr, calls: &[Value]) -> Value {
    fn walk(expr: &Expr, calls: &[Value], next: &mut usize) -> Value {
        match expr {
            Expr::Call(_) => {
                let v = calls.get(*next).cloned().unwrap_or(Value::Null);
                *next += 1;
                v
            }
            Expr::Literal(Literal::Integer(i)) => Value::Int(*i),
            Expr::Literal(Literal::Unsigned(u)) => Value::UInt(*u),
            Expr::Literal(Literal::Float(f)) => Value::Float(*f),
            Expr::Literal(Literal::Duration(d)) => Value::Int(*d),
            Expr::Binary { op, lhs, rhs } => {
                let l = walk(lhs, calls, next);
                let r = walk(rhs, calls, next);
                binary(*op, &l, &r)
            }
            _ => Value::Null,
        }
    }
    walk(expr, calls, &mut 0)
}

/// The number of calls in `expr` (the inputs [`evaluate`] reads).
pub fn call_count(expr: &Expr) -> usize {
    match expr {
        Expr::Call(_) => 1,
        Expr::Binary { lhs, rhs, .. } => call_count(lhs) + call_count(rhs),
        _ => 0,
    }
}

/// Joins the calls' evaluated points of each series by time and computes
/// `expr` at every time any of them has a value (the others read as null,
/// so the result is null there, as in InfluxDB). `inputs[i]` is call `i`'s
/// points per series, already in output order.
pub fn combine(
    expr: &Expr,
    inputs: Vec<BTreeMap<SeriesKey, Vec<Emitted>>>,
    ascending: bool,
) -> BTreeMap<SeriesKey, Vec<Emitted>> {
    let n = inputs.len();
    let mut by_series: BTreeMap<SeriesKey, BTreeMap<i64, Vec<Value>>> = BTreeMap::new();
    for (i, per_series) in inputs.into_iter().enumerate() {
        for (key, points) in per_series {
            let rows = by_series.entry(key).or_default();
            for p in points {
                rows.entry(p.time).or_insert_with(|| vec![Value::Null; n])[i] = p.value;
            }
        }
    }
    by_series
        .into_iter()
        .map(|(key, rows)| {
            let mut points: Vec<Emitted> = rows
                .into_iter()
                .map(|(t, values)| Emitted::new(t, evaluate(expr, &values)))
                .collect();
            if !ascending {
                points.reverse();
            }
            (key, points)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expr(q: &str) -> Expr {
        let stmt = shardhouse_influxql::parse_statement(&format!("SELECT {q} FROM m")).unwrap();
        match stmt {
            shardhouse_influxql::Statement::Select(s) => s.fields[0].expr.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn types_follow_influxdb() {
        assert_eq!(
            binary(BinaryOp::Add, &Value::Int(2), &Value::Int(3)),
            Value::Int(5)
        );
        assert_eq!(
            binary(BinaryOp::Div, &Value::Int(3), &Value::Int(2)),
            Value::Float(1.5)
        );
        assert_eq!(
            binary(BinaryOp::Div, &Value::Int(3), &Value::Int(0)),
            Value::Float(0.0)
        );
        assert_eq!(
            binary(BinaryOp::Mul, &Value::Float(1.5), &Value::Int(2)),
            Value::Float(3.0)
        );
        assert_eq!(
            binary(BinaryOp::Sub, &Value::UInt(5), &Value::Int(2)),
            Value::UInt(3)
        );
        assert_eq!(
            binary(BinaryOp::Add, &Value::Int(i64::MAX), &Value::Int(1)),
            Value::Int(i64::MIN)
        );
        assert_eq!(
            binary(BinaryOp::Add, &Value::Null, &Value::Int(1)),
            Value::Null
        );
        assert_eq!(
            binary(BinaryOp::Add, &Value::String("a".into()), &Value::Int(1)),
            Value::Null
        );
    }

    #[test]
    fn calls_take_their_values_in_order() {
        let e = expr("max(v) - min(v) * 2");
        assert_eq!(call_count(&e), 2);
        assert_eq!(
            evaluate(&e, &[Value::Int(10), Value::Int(3)]),
            Value::Int(4)
        );
        let e = expr("sum(v) / 2");
        assert_eq!(evaluate(&e, &[Value::Int(5)]), Value::Float(2.5));
    }

    #[test]
    fn rows_join_by_time_with_nulls() {
        let key = SeriesKey {
            name: "m".into(),
            tags: BTreeMap::new(),
        };
        let points = |v: &[(i64, i64)]| {
            BTreeMap::from([(
                key.clone(),
                v.iter()
                    .map(|(t, x)| Emitted::new(*t, Value::Int(*x)))
                    .collect(),
            )])
        };
        let out = combine(
            &expr("max(x) + min(x)"),
            vec![points(&[(0, 1), (10, 2)]), points(&[(10, 5), (20, 7)])],
            true,
        );
        let values: Vec<(i64, Value)> = out[&key]
            .iter()
            .map(|p| (p.time, p.value.clone()))
            .collect();
        assert_eq!(
            values,
            vec![(0, Value::Null), (10, Value::Int(7)), (20, Value::Null)]
        );
    }
}
