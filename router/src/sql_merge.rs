//! Merging shard answers of `/api/v1/sql` into one answer (pure functions;
//! the plan is [`crate::sql_plan`]).

use crate::sql_plan::{AggKind, BinOp, GroupsPlan, OutName, RExpr, RowsPlan};
use crate::sql_value::{sort_cmp, Value};
use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

/// One shard's answer: column names and rows.
#[derive(Debug, Clone, Default)]
pub struct ShardRows {
    pub names: Vec<String>,
    pub rows: Vec<Vec<Value>>,
}

/// The merged answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub names: Vec<String>,
    pub rows: Vec<Vec<Value>>,
}

/// Rows `(row, sort keys)` ordered by their keys (`(desc, nulls_first)`
/// per key; stable, so ties keep the shards' order), then OFFSET / LIMIT.
fn sort_window(
    mut rows: Vec<(Vec<Value>, Vec<Value>)>,
    dirs: &[(bool, bool)],
    offset: u64,
    limit: Option<u64>,
) -> Vec<Vec<Value>> {
    if !dirs.is_empty() {
        rows.sort_by(|a, b| {
            for (i, (desc, nulls_first)) in dirs.iter().enumerate() {
                let o = sort_cmp(&a.1[i], &b.1[i], *desc, *nulls_first);
                if o != Ordering::Equal {
                    return o;
                }
            }
            Ordering::Equal
        });
    }
    let off = usize::try_from(offset).unwrap_or(usize::MAX);
    let lim = limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
    rows.into_iter().skip(off).take(lim).map(|r| r.0).collect()
}

/// Rows: the union of the shards' rows (columns matched by name when the
/// shards' column lists differ, as with `SELECT *` over shards that have
/// seen different fields), sorted by the hidden ORDER BY columns, then
/// OFFSET / LIMIT.
pub fn merge_rows(plan: &RowsPlan, shards: Vec<ShardRows>) -> Answer {
    let hidden = plan.order.len();
    let shards: Vec<ShardRows> = shards.into_iter().filter(|s| !s.names.is_empty()).collect();
    let visible = |s: &ShardRows| s.names[..s.names.len().saturating_sub(hidden)].to_vec();
    let mut names: Vec<String> = Vec::new();
    let same = shards.windows(2).all(|w| w[0].names == w[1].names);
    if same {
        names = shards.first().map(visible).unwrap_or_default();
    } else {
        for s in &shards {
            for n in visible(s) {
                if !names.contains(&n) {
                    names.push(n);
                }
            }
        }
    }
    let mut rows: Vec<(Vec<Value>, Vec<Value>)> = Vec::new();
    for s in shards {
        let vis = visible(&s);
        let map: Vec<Option<usize>> = if same {
            (0..names.len()).map(Some).collect()
        } else {
            names
                .iter()
                .map(|n| vis.iter().position(|v| v == n))
                .collect()
        };
        for mut r in s.rows {
            let keys = r.split_off(vis.len());
            let row = map
                .iter()
                .map(|m| m.and_then(|i| r.get(i).cloned()).unwrap_or(Value::Null))
                .collect();
            rows.push((row, keys));
        }
    }
    let dirs: Vec<(bool, bool)> = plan.order.iter().map(|k| (k.desc, k.nulls_first)).collect();
    let rows = sort_window(rows, &dirs, plan.offset, plan.limit);
    Answer { names, rows }
}

/// The merge state of one aggregate in one group.
#[derive(Debug, Clone)]
enum State {
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

fn new_state(kind: &AggKind) -> State {
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
fn add(a: &Value, b: &Value) -> Value {
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

fn fold(kind: &AggKind, st: &mut State, p: &[Value]) {
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

fn finish(kind: &AggKind, st: State) -> Value {
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

struct Group {
    row: Vec<Value>,
    states: Vec<State>,
}

/// Merges the shards' partial rows per group and evaluates the outputs,
/// HAVING, DISTINCT, ORDER BY, OFFSET/LIMIT.
pub fn merge_groups(plan: &GroupsPlan, shards: Vec<ShardRows>) -> Result<Answer, String> {
    let n_keys = plan.keys.len();
    let width = n_keys + plan.scalars.len() + plan.partials.len();
    let mut index: HashMap<Vec<Value>, usize> = HashMap::new();
    let mut groups: Vec<Group> = Vec::new();
    let mut shard_names: Option<Vec<String>> = None;
    for s in shards {
        if s.names.is_empty() {
            continue;
        }
        if s.names.len() != width {
            return Err(format!(
                "a shard answered {} columns, the plan has {width}",
                s.names.len()
            ));
        }
        if shard_names.is_none() {
            shard_names = Some(s.names.clone());
        }
        for r in s.rows {
            let key = r[..n_keys].to_vec();
            let g = *index.entry(key).or_insert_with(|| {
                groups.push(Group {
                    row: r.clone(),
                    states: plan.aggs.iter().map(|a| new_state(&a.kind)).collect(),
                });
                groups.len() - 1
            });
            let g = &mut groups[g];
            let scalars = n_keys..n_keys + plan.scalars.len();
            for (have, got) in g.row[scalars.clone()].iter_mut().zip(&r[scalars]) {
                if have.is_null() && !got.is_null() {
                    *have = got.clone();
                }
            }
            for (a, st) in plan.aggs.iter().zip(&mut g.states) {
                let p: Vec<Value> = a.cols.iter().map(|c| r[*c].clone()).collect();
                fold(&a.kind, st, &p);
            }
        }
    }
    // Without GROUP BY, an aggregate answers one row even over no rows.
    if !plan.group_by && groups.is_empty() {
        groups.push(Group {
            row: vec![Value::Null; width],
            states: plan.aggs.iter().map(|a| new_state(&a.kind)).collect(),
        });
    }
    let names: Vec<String> = plan
        .outputs
        .iter()
        .map(|(n, _)| match n {
            OutName::Fixed(s) => s.clone(),
            OutName::Shard(c, fallback) => shard_names
                .as_ref()
                .and_then(|s| s.get(*c).cloned())
                .unwrap_or_else(|| fallback.clone()),
        })
        .collect();
    let mut rows: Vec<(Vec<Value>, Vec<Value>)> = Vec::new();
    let mut seen = HashSet::new();
    for g in groups {
        let aggs: Vec<Value> = plan
            .aggs
            .iter()
            .zip(g.states)
            .map(|(a, s)| finish(&a.kind, s))
            .collect();
        let ctx = Ctx {
            row: &g.row,
            aggs: &aggs,
        };
        if let Some(h) = &plan.having {
            if !eval(h, &ctx)?.truthy() {
                continue;
            }
        }
        let out: Vec<Value> = plan
            .outputs
            .iter()
            .map(|(_, e)| eval(e, &ctx))
            .collect::<Result<_, _>>()?;
        if plan.distinct && !seen.insert(out.clone()) {
            continue;
        }
        let keys = plan
            .order
            .iter()
            .map(|k| eval(&k.expr, &ctx))
            .collect::<Result<_, _>>()?;
        rows.push((out, keys));
    }
    let dirs: Vec<(bool, bool)> = plan.order.iter().map(|k| (k.desc, k.nulls_first)).collect();
    let rows = sort_window(rows, &dirs, plan.offset, plan.limit);
    Ok(Answer { names, rows })
}

struct Ctx<'a> {
    row: &'a [Value],
    aggs: &'a [Value],
}

fn bool_value(b: bool) -> Value {
    Value::UInt(u64::from(b))
}

/// Evaluates a router expression as ClickHouse would: NULL propagates,
/// `/` is a float division, comparisons and logic give 0/1.
fn eval(e: &RExpr, ctx: &Ctx) -> Result<Value, String> {
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
            let vals: Vec<Value> = args
                .iter()
                .map(|a| eval(a, ctx))
                .collect::<Result<_, _>>()?;
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

fn func(name: &str, v: &[Value]) -> Result<Value, String> {
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
        other => return Err(format!("function {other} is not evaluated by the router")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql_plan::{plan, Plan};

    fn groups(sql: &str) -> GroupsPlan {
        match plan(sql).unwrap() {
            Plan::Groups(g) => g,
            p => panic!("{p:?}"),
        }
    }

    fn shard(names: &[&str], rows: Vec<Vec<Value>>) -> ShardRows {
        ShardRows {
            names: names.iter().map(|s| s.to_string()).collect(),
            rows,
        }
    }

    fn list(v: &[i64]) -> Value {
        Value::List(v.iter().map(|x| Value::Int(*x)).collect())
    }

    #[test]
    fn global_aggregates_merge_exactly() {
        let g = groups("SELECT count(), sum(x), avg(x), min(x), max(x), uniqExact(x), median(x), medianExact(x), varSamp(x), stddevPop(x) FROM t");
        // Each shard's partials, computed here from its values.
        let part = |xs: &[i64]| -> Vec<Value> {
            let n = xs.len() as f64;
            let mean = xs.iter().sum::<i64>() as f64 / n;
            let var = xs.iter().map(|x| (*x as f64 - mean).powi(2)).sum::<f64>() / n;
            let mut uniq: Vec<i64> = xs.to_vec();
            uniq.sort();
            uniq.dedup();
            g.partials
                .iter()
                .map(|p| match p.as_str() {
                    "count()" | "count(x)" => Value::UInt(xs.len() as u64),
                    "sum(x)" => Value::Int(xs.iter().sum()),
                    "min(x)" => Value::Int(*xs.iter().min().unwrap()),
                    "max(x)" => Value::Int(*xs.iter().max().unwrap()),
                    "groupUniqArray(x)" => list(&uniq),
                    "groupArray(x)" => list(xs),
                    "avg(x)" => Value::Float(mean),
                    "varPop(x)" => Value::Float(var),
                    other => panic!("partial {other}"),
                })
                .collect()
        };
        let names: Vec<String> = (0..g.partials.len()).map(|i| format!("c{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let a = merge_groups(
            &g,
            vec![
                shard(&names, vec![part(&[1, 2, 2])]),
                shard(&names, vec![part(&[4, 10])]),
                ShardRows::default(),
            ],
        )
        .unwrap();
        let r = &a.rows[0];
        assert_eq!(r[0], Value::UInt(5));
        assert_eq!(r[1], Value::Int(19));
        assert_eq!(r[2], Value::Float(3.8));
        assert_eq!(
            (r[3].clone(), r[4].clone()),
            (Value::Int(1), Value::Int(10))
        );
        assert_eq!(r[5], Value::UInt(4));
        assert_eq!(r[6], Value::Float(2.0));
        assert_eq!(r[7], Value::Int(2));
        let all = [1.0, 2.0, 2.0, 4.0, 10.0];
        let mean = 3.8;
        let m2: f64 = all.iter().map(|x| (x - mean) * (x - mean)).sum();
        assert!((r[8].as_f64().unwrap() - m2 / 4.0).abs() < 1e-9);
        assert!((r[9].as_f64().unwrap() - (m2 / 5.0).sqrt()).abs() < 1e-9);
        assert_eq!(a.names[0], "count()");
        // No rows anywhere: one row, count 0 and NULLs.
        let empty = merge_groups(&g, vec![]).unwrap();
        assert_eq!(empty.rows.len(), 1);
        assert_eq!(empty.rows[0][0], Value::UInt(0));
        assert!(empty.rows[0][1].is_null() && empty.rows[0][2].is_null());
    }

    #[test]
    fn groups_merge_then_having_order_limit() {
        let g = groups("SELECT host, count() AS n, sum(x) / count() AS m FROM t GROUP BY host HAVING n > 1 ORDER BY n DESC, host LIMIT 2 OFFSET 1");
        // Shard row: the key, then the partials count() and sum(x) (each
        // once, however often the statement names them).
        assert_eq!(g.keys, vec!["host"]);
        assert_eq!(g.partials, vec!["count()", "sum(x)"]);
        let row =
            |h: &str, c: u64, s: i64| vec![Value::Str(h.into()), Value::UInt(c), Value::Int(s)];
        let names = ["host", "count()", "sum(x)"];
        let a = merge_groups(
            &g,
            vec![
                shard(
                    &names,
                    vec![row("a", 2, 10), row("b", 1, 1), row("c", 5, 5)],
                ),
                shard(&names, vec![row("a", 1, 2), row("b", 2, 2), row("d", 1, 1)]),
            ],
        )
        .unwrap();
        assert_eq!(a.names, vec!["host", "n", "m"]);
        // groups: a 3 (12), b 3 (3), c 5 (5), d 1 -> having n>1: c5, a3, b3 -> offset 1 limit 2: a, b
        assert_eq!(
            a.rows,
            vec![
                vec![Value::Str("a".into()), Value::UInt(3), Value::Float(4.0)],
                vec![Value::Str("b".into()), Value::UInt(3), Value::Float(1.0)]
            ]
        );
    }

    #[test]
    fn rows_sort_across_shards_and_unify_columns() {
        let Plan::Rows(p) = plan("SELECT * FROM t ORDER BY v DESC LIMIT 3 OFFSET 1").unwrap()
        else {
            panic!()
        };
        let a = merge_rows(
            &p,
            vec![
                shard(
                    &["time", "v", "w", "__sh_o0"],
                    vec![
                        vec![Value::Int(1), Value::Int(5), Value::Int(9), Value::Int(5)],
                        vec![Value::Int(2), Value::Int(1), Value::Null, Value::Int(1)],
                    ],
                ),
                shard(
                    &["time", "v", "__sh_o0"],
                    vec![
                        vec![Value::Int(3), Value::Int(7), Value::Int(7)],
                        vec![Value::Int(4), Value::Null, Value::Null],
                    ],
                ),
            ],
        );
        assert_eq!(a.names, vec!["time", "v", "w"]);
        assert_eq!(
            a.rows,
            vec![
                vec![Value::Int(1), Value::Int(5), Value::Int(9)],
                vec![Value::Int(2), Value::Int(1), Value::Null],
                vec![Value::Int(4), Value::Null, Value::Null],
            ]
        );
    }

    #[test]
    fn quantiles_follow_clickhouse() {
        let v: Vec<f64> = (1..=7).map(f64::from).collect();
        assert!((quantile_interpolated(&v, 0.3) - 2.8).abs() < 1e-12);
        assert!((quantile_interpolated(&v, 0.1) - 1.6).abs() < 1e-12);
        let vals: Vec<Value> = (1..=7).map(Value::Int).collect();
        assert_eq!(quantile_exact(&vals, 0.3), Value::Int(3));
        let four: Vec<Value> = (1..=4).map(Value::Int).collect();
        assert_eq!(quantile_exact(&four, 0.5), Value::Int(3));
        assert_eq!(quantile_interpolated(&[1.0, 2.0, 3.0, 4.0], 0.5), 2.5);
    }
}
