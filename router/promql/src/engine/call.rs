//! Function calls: those over range vectors are evaluated window by
//! window per series, the others per step over an instant vector.

use std::collections::HashSet;
use std::sync::Arc;

use promql_parser::parser::{Call, Expr};

use super::aggregate::is_label_name;
use super::eval::{check_unique, Evaluator, RangeArg, Sample, Steps, Val};
use super::functions as f;
use super::plan::matchers_of;
use crate::error::exec;
use crate::labels::{Labels, METRIC_NAME};
use crate::source::MatchKind;
use crate::Result;

const RANGE_FUNCTIONS: &[&str] = &[
    "rate",
    "irate",
    "increase",
    "delta",
    "idelta",
    "deriv",
    "predict_linear",
    "holt_winters",
    "changes",
    "resets",
    "avg_over_time",
    "count_over_time",
    "sum_over_time",
    "max_over_time",
    "min_over_time",
    "last_over_time",
    "present_over_time",
    "stddev_over_time",
    "stdvar_over_time",
    "quantile_over_time",
    "absent_over_time",
];

const CALENDAR: &[&str] = &[
    "day_of_month",
    "day_of_week",
    "day_of_year",
    "days_in_month",
    "hour",
    "minute",
    "month",
    "year",
];

fn unparen(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(p) => unparen(&p.expr),
        other => other,
    }
}

pub fn eval(ev: &Evaluator, c: &Call, steps: &Steps) -> Result<Val> {
    let name = c.func.name;
    let args: Vec<&Expr> = c.args.args.iter().map(|a| unparen(a)).collect();
    if RANGE_FUNCTIONS.contains(&name) {
        return range_function(ev, name, &args, steps);
    }
    match name {
        "time" => Ok(Val::Scalar(
            steps.iter().map(|t| *t as f64 / 1000.0).collect(),
        )),
        "pi" => Ok(Val::Scalar(vec![std::f64::consts::PI; steps.len()])),
        "vector" => {
            let s = scalar(ev, args[0], steps)?;
            let empty = Arc::new(Labels::default());
            Ok(Val::Vector(
                s.into_iter()
                    .map(|v| {
                        vec![Sample {
                            labels: empty.clone(),
                            v,
                        }]
                    })
                    .collect(),
            ))
        }
        "scalar" => {
            let v = vector(ev, args[0], steps)?;
            Ok(Val::Scalar(
                v.into_iter()
                    .map(|s| if s.len() == 1 { s[0].v } else { f64::NAN })
                    .collect(),
            ))
        }
        "timestamp" => timestamp(ev, args[0], steps),
        "absent" => {
            let v = vector(ev, args[0], steps)?;
            let labels = Arc::new(absent_labels(args[0]));
            Ok(Val::Vector(
                v.into_iter()
                    .map(|s| match s.is_empty() {
                        true => vec![Sample {
                            labels: labels.clone(),
                            v: 1.0,
                        }],
                        false => Vec::new(),
                    })
                    .collect(),
            ))
        }
        "label_replace" => label_replace(ev, &args, steps),
        "label_join" => label_join(ev, &args, steps),
        "sort" | "sort_desc" => sort(ev, name, args[0], steps),
        "histogram_quantile" => histogram_quantile(ev, &args, steps),
        "round" | "clamp" | "clamp_min" | "clamp_max" => clamp_round(ev, name, &args, steps),
        _ if CALENDAR.contains(&name) => calendar(ev, name, &args, steps),
        _ if f::math(name, 0.0).is_some() => {
            map_values(vector(ev, args[0], steps)?, |v, _| f::math(name, v))
        }
        _ => Err(exec(format!(
            "function {name}() is not supported by Shardhouse"
        ))),
    }
}

fn scalar(ev: &Evaluator, e: &Expr, steps: &Steps) -> Result<Vec<f64>> {
    match ev.eval(e, steps)? {
        Val::Scalar(s) => Ok(s),
        _ => Err(exec(format!("expected a scalar, got {e}"))),
    }
}

fn vector(ev: &Evaluator, e: &Expr, steps: &Steps) -> Result<Vec<Vec<Sample>>> {
    match ev.eval(e, steps)? {
        Val::Vector(v) => Ok(v),
        _ => Err(exec(format!("expected an instant vector, got {e}"))),
    }
}

fn string(e: &Expr) -> Result<String> {
    match e {
        Expr::StringLiteral(s) => Ok(s.val.clone()),
        _ => Err(exec(format!("expected a string, got {e}"))),
    }
}

/// Applies `f(value, step index)` to every element, dropping the metric
/// name (and elements for which `f` gives `None`).
fn map_values(v: Vec<Vec<Sample>>, f: impl Fn(f64, usize) -> Option<f64>) -> Result<Val> {
    let mut out = Vec::with_capacity(v.len());
    for (i, step) in v.into_iter().enumerate() {
        let res: Vec<Sample> = step
            .into_iter()
            .filter_map(|s| {
                f(s.v, i).map(|v| Sample {
                    labels: Arc::new(s.labels.without_name()),
                    v,
                })
            })
            .collect();
        check_unique(&res)?;
        out.push(res);
    }
    Ok(Val::Vector(out))
}

fn range_function(ev: &Evaluator, name: &str, args: &[&Expr], steps: &Steps) -> Result<Val> {
    let matrix_at = usize::from(name == "quantile_over_time");
    let arg = ev.range_arg(args[matrix_at], steps)?;
    if name == "absent_over_time" {
        return Ok(absent_over_time(&arg, args[0], steps));
    }
    let params: Vec<Vec<f64>> = args
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != matrix_at)
        .map(|(_, a)| scalar(ev, a, steps))
        .collect::<Result<_>>()?;
    let mut out: Vec<Vec<Sample>> = vec![Vec::new(); steps.len()];
    let mut seen = HashSet::new();
    for (i, (labels, _)) in arg.series.iter().enumerate() {
        let labels = match name {
            "last_over_time" => labels.clone(),
            _ => Arc::new(labels.without_name()),
        };
        let mut any = false;
        for (j, t) in steps.iter().enumerate() {
            let w = arg.window(i, *t);
            if w.is_empty() {
                continue;
            }
            let p: Vec<f64> = params.iter().map(|p| p[j]).collect();
            if let Some(v) = range_value(name, w, &arg, *t, &p)? {
                out[j].push(Sample {
                    labels: labels.clone(),
                    v,
                });
                any = true;
            }
        }
        // Prometheus checks the whole output matrix, not each step.
        if any && !seen.insert(labels.clone()) {
            return Err(exec("vector cannot contain metrics with the same labelset"));
        }
    }
    Ok(Val::Vector(out))
}

fn range_value(
    name: &str,
    w: &[(i64, f64)],
    arg: &RangeArg,
    t: i64,
    p: &[f64],
) -> Result<Option<f64>> {
    let end = arg.ref_time(t);
    let start = end - arg.range;
    Ok(match name {
        "rate" => f::extrapolated_rate(w, start, end, arg.range, true, true),
        "increase" => f::extrapolated_rate(w, start, end, arg.range, true, false),
        "delta" => f::extrapolated_rate(w, start, end, arg.range, false, false),
        "irate" => f::instant_value(w, true),
        "idelta" => f::instant_value(w, false),
        "deriv" => f::deriv(w),
        "predict_linear" => f::predict_linear(w, t, p[0]),
        "holt_winters" => {
            let (sf, tf) = (p[0], p[1]);
            if sf <= 0.0 || sf >= 1.0 {
                return Err(exec(format!(
                    "invalid smoothing factor. Expected: 0 < sf < 1, got: {sf:.6}"
                )));
            }
            if tf <= 0.0 || tf >= 1.0 {
                return Err(exec(format!(
                    "invalid trend factor. Expected: 0 < tf < 1, got: {tf:.6}"
                )));
            }
            f::holt_winters(w, sf, tf)
        }
        "changes" => f::changes(w),
        "resets" => f::resets(w),
        "quantile_over_time" => Some(f::quantile(
            p[0],
            &mut w.iter().map(|x| x.1).collect::<Vec<_>>(),
        )),
        _ => f::over_time(name, w),
    })
}

fn absent_over_time(arg: &RangeArg, e: &Expr, steps: &Steps) -> Val {
    let labels = Arc::new(absent_labels(e));
    Val::Vector(
        steps
            .iter()
            .map(|t| {
                let present = (0..arg.series.len()).any(|i| !arg.window(i, *t).is_empty());
                match present {
                    true => Vec::new(),
                    false => vec![Sample {
                        labels: labels.clone(),
                        v: 1.0,
                    }],
                }
            })
            .collect(),
    )
}

/// The labels `absent()` answers with: those set by `=` matchers of a
/// plain selector, minus any label that has another matcher too.
fn absent_labels(e: &Expr) -> Labels {
    let vs = match e {
        Expr::VectorSelector(vs) => vs,
        Expr::MatrixSelector(ms) => &ms.vs,
        _ => return Labels::default(),
    };
    let Ok(matchers) = matchers_of(vs) else {
        return Labels::default();
    };
    let mut l = Labels::default();
    let mut drop = Vec::new();
    for m in matchers.iter().filter(|m| m.name != METRIC_NAME) {
        if m.kind == MatchKind::Equal && l.get(&m.name).is_empty() && !drop.contains(&m.name) {
            l.set(&m.name, &m.value);
        } else {
            drop.push(m.name.clone());
        }
    }
    l.drop_names(&drop)
}

/// A plain selector's samples give their own times; anything else the
/// evaluation step's.
fn timestamp(ev: &Evaluator, e: &Expr, steps: &Steps) -> Result<Val> {
    if let Expr::VectorSelector(vs) = e {
        let v: Vec<Vec<Sample>> = ev
            .select_vector(vs, steps)
            .into_iter()
            .map(|step| {
                step.into_iter()
                    .map(|(s, t)| Sample {
                        labels: s.labels,
                        v: t as f64 / 1000.0,
                    })
                    .collect()
            })
            .collect();
        return map_values(v, |v, _| Some(v));
    }
    let v = vector(ev, e, steps)?;
    map_values(v, |_, i| Some(steps[i] as f64 / 1000.0))
}

fn clamp_round(ev: &Evaluator, name: &str, args: &[&Expr], steps: &Steps) -> Result<Val> {
    let v = vector(ev, args[0], steps)?;
    let p: Vec<Vec<f64>> = args[1..]
        .iter()
        .map(|a| scalar(ev, a, steps))
        .collect::<Result<_>>()?;
    map_values(v, |v, i| match name {
        "round" => Some(f::round(v, p.first().map_or(1.0, |p| p[i]))),
        "clamp_min" => Some(go_max(v, p[0][i])),
        "clamp_max" => Some(go_min(v, p[0][i])),
        _ if p[1][i] < p[0][i] => None,
        _ => Some(go_max(p[0][i], go_min(p[1][i], v))),
    })
}

/// Go's `math.Max`/`math.Min`: NaN wins.
fn go_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

fn go_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

fn calendar(ev: &Evaluator, name: &str, args: &[&Expr], steps: &Steps) -> Result<Val> {
    if args.is_empty() {
        let empty = Arc::new(Labels::default());
        return Ok(Val::Vector(
            steps
                .iter()
                .map(|t| match f::calendar(name, (*t as f64 / 1000.0).floor()) {
                    Some(v) => vec![Sample {
                        labels: empty.clone(),
                        v,
                    }],
                    None => Vec::new(),
                })
                .collect(),
        ));
    }
    map_values(vector(ev, args[0], steps)?, |v, _| f::calendar(name, v))
}

fn sort(ev: &Evaluator, name: &str, e: &Expr, steps: &Steps) -> Result<Val> {
    let mut v = vector(ev, e, steps)?;
    for step in &mut v {
        // NaN last in both directions, as Prometheus's sort order gives.
        step.sort_by(|a, b| {
            let ord = match (a.v.is_nan(), b.v.is_nan()) {
                (true, true) => std::cmp::Ordering::Equal,
                (true, false) => return std::cmp::Ordering::Greater,
                (false, true) => return std::cmp::Ordering::Less,
                _ => a.v.partial_cmp(&b.v).unwrap_or(std::cmp::Ordering::Equal),
            };
            if name == "sort_desc" {
                ord.reverse()
            } else {
                ord
            }
        });
    }
    Ok(Val::Vector(v))
}

fn label_replace(ev: &Evaluator, args: &[&Expr], steps: &Steps) -> Result<Val> {
    let dst = string(args[1])?;
    let replacement = string(args[2])?;
    let src = string(args[3])?;
    let pattern = string(args[4])?;
    let re = regex::Regex::new(&format!("^(?s:{pattern})$")).map_err(|e| {
        exec(format!(
            "invalid regular expression in label_replace(): {pattern}: {e}"
        ))
    })?;
    if !is_label_name(&dst) {
        return Err(exec(format!(
            "invalid destination label name in label_replace(): {dst}"
        )));
    }
    let v = vector(ev, args[0], steps)?;
    relabel(v, |l| {
        let caps = re.captures(l.get(&src))?;
        let mut res = String::new();
        caps.expand(&replacement, &mut res);
        let mut out = l.clone();
        out.set(&dst, &res);
        Some(out)
    })
}

fn label_join(ev: &Evaluator, args: &[&Expr], steps: &Steps) -> Result<Val> {
    let dst = string(args[1])?;
    let sep = string(args[2])?;
    let srcs: Vec<String> = args[3..].iter().map(|a| string(a)).collect::<Result<_>>()?;
    if !is_label_name(&dst) {
        return Err(exec(format!(
            "invalid destination label name in label_join(): {dst}"
        )));
    }
    let v = vector(ev, args[0], steps)?;
    relabel(v, |l| {
        let joined: Vec<&str> = srcs.iter().map(|s| l.get(s)).collect();
        let mut out = l.clone();
        out.set(&dst, &joined.join(&sep));
        Some(out)
    })
}

/// Relabels every element (`None` keeps it as it is), keeping the metric
/// name, then checks that no two elements collide.
fn relabel(v: Vec<Vec<Sample>>, f: impl Fn(&Labels) -> Option<Labels>) -> Result<Val> {
    let mut out = Vec::with_capacity(v.len());
    for step in v {
        let res: Vec<Sample> = step
            .into_iter()
            .map(|s| match f(&s.labels) {
                Some(l) => Sample {
                    labels: Arc::new(l),
                    v: s.v,
                },
                None => s,
            })
            .collect();
        check_unique(&res)?;
        out.push(res);
    }
    Ok(Val::Vector(out))
}

fn histogram_quantile(ev: &Evaluator, args: &[&Expr], steps: &Steps) -> Result<Val> {
    let q = scalar(ev, args[0], steps)?;
    let v = vector(ev, args[1], steps)?;
    let drop = vec!["le".to_string(), METRIC_NAME.to_string()];
    let mut out = Vec::with_capacity(v.len());
    for (i, step) in v.into_iter().enumerate() {
        let mut groups: Vec<(Labels, Vec<(f64, f64)>)> = Vec::new();
        let mut index = std::collections::HashMap::new();
        for s in step {
            let Ok(le) = parse_go_float(s.labels.get("le")) else {
                continue;
            };
            let key = s.labels.drop_names(&drop);
            let g = *index.entry(key.clone()).or_insert_with(|| {
                groups.push((key, Vec::new()));
                groups.len() - 1
            });
            groups[g].1.push((le, s.v));
        }
        out.push(
            groups
                .into_iter()
                .map(|(l, mut b)| Sample {
                    labels: Arc::new(l),
                    v: f::bucket_quantile(q[i], &mut b),
                })
                .collect(),
        );
    }
    Ok(Val::Vector(out))
}

/// Go's `strconv.ParseFloat` on the forms `le` labels take.
pub fn parse_go_float(s: &str) -> std::result::Result<f64, ()> {
    match s.to_ascii_lowercase().as_str() {
        "+inf" | "inf" | "+infinity" | "infinity" => Ok(f64::INFINITY),
        "-inf" | "-infinity" => Ok(f64::NEG_INFINITY),
        "nan" => Ok(f64::NAN),
        _ => s.parse::<f64>().map_err(|_| ()),
    }
}
