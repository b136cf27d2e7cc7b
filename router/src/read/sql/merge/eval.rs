//! Evaluating a router expression ([`crate::read::sql::plan::RExpr`]) over one
//! merged group as ClickHouse would: NULL propagates, `/` divides as
//! floats, comparisons and logic give 0/1, and only the router's own
//! short list of functions is known.

use super::aggregate::add;
use crate::error::{Error, Result};
use crate::read::sql::plan::{BinOp, RExpr};
use crate::read::sql::value::Value;
use std::cmp::Ordering;

pub(super) struct Ctx<'a> {
    pub(super) row: &'a [Value],
    pub(super) aggs: &'a [Value],
}

fn bool_value(b: bool) -> Value {
    Value::UInt(u64::from(b))
}

/// Evaluates a router expression as ClickHouse would: NULL propagates,
/// `/` is a float division, comparisons and logic give 0/1.
pub(super) fn eval(e: &RExpr, ctx: &Ctx) -> Result<Value> {
    Ok(match e {
        RExpr::Col(c) => ctx.row.get(*c).cloned().unwrap_or(Value::Null),
        RExpr::Agg(a) => ctx.aggs[*a].clone(),
        RExpr::Lit(v) => v.clone(),
        RExpr::Neg(x) => match eval(x, ctx)? {
            Value::Int(i) => Value::Int(i.wrapping_neg()),
            Value::UInt(u) => Value::Int((u as i64).wrapping_neg()),
            Value::Float(f) => Value::Float(-f),
            _ => Value::Null,
        },
        RExpr::Not(x) => match eval(x, ctx)? {
            Value::Null => Value::Null,
            v => bool_value(!v.truthy()),
        },
        RExpr::Bin(op, l, r) => {
            let (a, b) = (eval(l, ctx)?, eval(r, ctx)?);
            match op {
                BinOp::And => match (a.is_null(), b.is_null()) {
                    _ if (!a.is_null() && !a.truthy()) || (!b.is_null() && !b.truthy()) => {
                        bool_value(false)
                    }
                    (false, false) => bool_value(true),
                    _ => Value::Null,
                },
                BinOp::Or => match (a.is_null(), b.is_null()) {
                    _ if a.truthy() || b.truthy() => bool_value(true),
                    (false, false) => bool_value(false),
                    _ => Value::Null,
                },
                _ if a.is_null() || b.is_null() => Value::Null,
                BinOp::Eq => bool_value(a.total_cmp(&b) == Ordering::Equal),
                BinOp::Ne => bool_value(a.total_cmp(&b) != Ordering::Equal),
                BinOp::Lt => bool_value(a.total_cmp(&b) == Ordering::Less),
                BinOp::Le => bool_value(a.total_cmp(&b) != Ordering::Greater),
                BinOp::Gt => bool_value(a.total_cmp(&b) == Ordering::Greater),
                BinOp::Ge => bool_value(a.total_cmp(&b) != Ordering::Less),
                BinOp::Add => add(&a, &b),
                BinOp::Sub | BinOp::Mul | BinOp::Mod => arith(*op, &a, &b),
                BinOp::Div => match (a.as_f64(), b.as_f64()) {
                    (Some(x), Some(y)) => Value::Float(x / y),
                    _ => Value::Null,
                },
            }
        }
        RExpr::Func(name, args) => {
            let vals: Vec<Value> = args.iter().map(|a| eval(a, ctx)).collect::<Result<_>>()?;
            func(name, &vals)?
        }
    })
}

fn arith(op: BinOp, a: &Value, b: &Value) -> Value {
    let ints = |x: &Value| match x {
        Value::Int(i) => Some(i128::from(*i)),
        Value::UInt(u) => Some(i128::from(*u)),
        _ => None,
    };
    if let (Some(x), Some(y)) = (ints(a), ints(b)) {
        let r = match op {
            BinOp::Sub => x - y,
            BinOp::Mul => x.wrapping_mul(y),
            _ if y == 0 => return Value::Null,
            _ => x % y,
        };
        return i64::try_from(r).map_or_else(|_| Value::UInt(r as u64), Value::Int);
    }
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => Value::Float(match op {
            BinOp::Sub => x - y,
            BinOp::Mul => x * y,
            _ => x % y,
        }),
        _ => Value::Null,
    }
}

/// A function the planner let through that is not evaluated here is the
/// planner's bug.
fn func(name: &str, v: &[Value]) -> Result<Value> {
    let num = |i: usize| v.get(i).and_then(Value::as_f64);
    let f = |x: Option<f64>, g: fn(f64) -> f64| x.map_or(Value::Null, |x| Value::Float(g(x)));
    Ok(match name {
        "round" => {
            let digits = num(1).unwrap_or(0.0) as i32;
            match v.first() {
                Some(Value::Int(_) | Value::UInt(_)) if digits >= 0 => v[0].clone(),
                _ => match num(0) {
                    Some(x) => {
                        let p = 10f64.powi(digits);
                        let y = x * p;
                        // Half to even, as ClickHouse rounds floats.
                        let r = y.round();
                        let r = if (y - y.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
                            r - y.signum()
                        } else {
                            r
                        };
                        Value::Float(r / p)
                    }
                    None => Value::Null,
                },
            }
        }
        "abs" => match v.first() {
            Some(Value::Int(i)) => Value::UInt(i.unsigned_abs()),
            Some(Value::UInt(u)) => Value::UInt(*u),
            _ => f(num(0), f64::abs),
        },
        "sqrt" => f(num(0), f64::sqrt),
        "floor" => f(num(0), f64::floor),
        "ceil" => f(num(0), f64::ceil),
        "tofloat64" => f(num(0), |x| x),
        // Floats truncate toward zero, as ClickHouse converts them.
        "toint64" => match v.first() {
            Some(Value::Int(i)) => Value::Int(*i),
            Some(Value::UInt(u)) => Value::Int(*u as i64),
            _ => num(0).map_or(Value::Null, |x| Value::Int(x.trunc() as i64)),
        },
        "touint64" => match v.first() {
            Some(Value::UInt(u)) => Value::UInt(*u),
            Some(Value::Int(i)) => Value::UInt(*i as u64),
            _ => num(0).map_or(Value::Null, |x| Value::UInt(x.trunc() as u64)),
        },
        "ifnull" | "coalesce" => v
            .iter()
            .find(|x| !x.is_null())
            .cloned()
            .unwrap_or(Value::Null),
        other => {
            return Err(Error::Internal(format!(
                "function {other} is not evaluated by the router"
            )))
        }
    })
}
