//! Aggregation operators over each step's vector, grouped by `by` or
//! `without` as Prometheus 2.x groups them.

use std::collections::HashMap;
use std::sync::Arc;

use promql_parser::parser::{AggregateExpr, LabelModifier};

use super::eval::{Evaluator, Sample, Steps, Val};
use super::functions::{format_value, incremental_mean, quantile};
use crate::error::exec;
use crate::labels::{Labels, METRIC_NAME};
use crate::Result;

/// How samples are put into groups, and the labels a group's result has.
struct Grouping {
    names: Vec<String>,
    by: bool,
}

impl Grouping {
    fn key(&self, l: &Labels) -> String {
        l.signature(&self.names, self.by)
    }

    fn labels(&self, l: &Labels) -> Labels {
        if self.by {
            l.keep(&self.names)
        } else {
            let mut drop = self.names.clone();
            drop.push(METRIC_NAME.to_string());
            l.drop_names(&drop)
        }
    }
}

pub fn eval(ev: &Evaluator, a: &AggregateExpr, steps: &Steps) -> Result<Val> {
    let op = a.op.to_string();
    let grouping = match &a.modifier {
        Some(LabelModifier::Include(l)) => Grouping {
            names: l.labels.clone(),
            by: true,
        },
        Some(LabelModifier::Exclude(l)) => Grouping {
            names: l.labels.clone(),
            by: false,
        },
        None => Grouping {
            names: Vec::new(),
            by: true,
        },
    };
    let param = match &a.param {
        Some(p) => Some(ev.eval(p, steps)?),
        None => None,
    };
    let Val::Vector(input) = ev.eval(&a.expr, steps)? else {
        return Err(exec(format!("{op} expects an instant vector")));
    };
    let mut out = Vec::with_capacity(input.len());
    for (i, step) in input.into_iter().enumerate() {
        let res = match (&param, op.as_str()) {
            (Some(Val::Str(label)), "count_values") => count_values(label, step, &grouping)?,
            (Some(Val::Scalar(p)), "topk" | "bottomk") => top_k(&op, p[i], step, &grouping),
            (Some(Val::Scalar(p)), "quantile") => simple(&op, step, &grouping, p[i])?,
            (None, _) => simple(&op, step, &grouping, f64::NAN)?,
            _ => return Err(exec(format!("bad parameter for {op}"))),
        };
        out.push(res);
    }
    Ok(Val::Vector(out))
}

/// Groups in order of first appearance, as Prometheus returns them.
fn groups(step: Vec<Sample>, g: &Grouping) -> Vec<(Labels, Vec<Sample>)> {
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut out: Vec<(Labels, Vec<Sample>)> = Vec::new();
    for s in step {
        let key = g.key(&s.labels);
        let i = *index.entry(key).or_insert_with(|| {
            out.push((g.labels(&s.labels), Vec::new()));
            out.len() - 1
        });
        out[i].1.push(s);
    }
    out
}

fn simple(op: &str, step: Vec<Sample>, g: &Grouping, q: f64) -> Result<Vec<Sample>> {
    let mut out = Vec::new();
    for (labels, members) in groups(step, g) {
        let vals = members.iter().map(|s| s.v);
        let v = match op {
            "sum" => vals.sum(),
            "avg" => incremental_mean(vals),
            "count" => members.len() as f64,
            "group" => 1.0,
            "max" => vals.fold(f64::NAN, |m, v| if m < v || m.is_nan() { v } else { m }),
            "min" => vals.fold(f64::NAN, |m, v| if m > v || m.is_nan() { v } else { m }),
            "stdvar" => variance(&members),
            "stddev" => variance(&members).sqrt(),
            "quantile" => quantile(q, &mut vals.collect::<Vec<_>>()),
            _ => return Err(exec(format!("aggregation {op} is not supported"))),
        };
        out.push(Sample {
            labels: Arc::new(labels),
            v,
        });
    }
    Ok(out)
}

/// Welford's variance started from the first sample (a lone infinity
/// has variance 0 here, as in Prometheus's aggregation).
fn variance(members: &[Sample]) -> f64 {
    let (mut count, mut mean, mut aux) = (1.0, members[0].v, 0.0);
    for s in &members[1..] {
        count += 1.0;
        let delta = s.v - mean;
        mean += delta / count;
        aux += delta * (s.v - mean);
    }
    aux / count
}

/// `topk`/`bottomk`: the k largest (smallest) per group, NaN ranked last,
/// earlier samples winning ties; output in rank order.
fn top_k(op: &str, k: f64, step: Vec<Sample>, g: &Grouping) -> Vec<Sample> {
    if k.is_nan() || k < 1.0 {
        return Vec::new();
    }
    let k = if k >= usize::MAX as f64 {
        usize::MAX
    } else {
        k as usize
    };
    let mut out = Vec::new();
    for (_, mut members) in groups(step, g) {
        members.sort_by(|a, b| match (a.v.is_nan(), b.v.is_nan()) {
            (true, true) => std::cmp::Ordering::Equal,
            (true, false) => std::cmp::Ordering::Greater,
            (false, true) => std::cmp::Ordering::Less,
            _ if op == "topk" => b.v.partial_cmp(&a.v).unwrap_or(std::cmp::Ordering::Equal),
            _ => a.v.partial_cmp(&b.v).unwrap_or(std::cmp::Ordering::Equal),
        });
        members.truncate(k);
        out.extend(members);
    }
    out
}

fn count_values(label: &str, step: Vec<Sample>, g: &Grouping) -> Result<Vec<Sample>> {
    if !is_label_name(label) {
        return Err(exec(format!("invalid label name {label:?}")));
    }
    let mut index: HashMap<Labels, usize> = HashMap::new();
    let mut out: Vec<Sample> = Vec::new();
    for (labels, members) in groups(step, g) {
        for s in members {
            let mut l = labels.clone();
            l.set(label, &format_value(s.v));
            match index.get(&l) {
                Some(&i) => out[i].v += 1.0,
                None => {
                    index.insert(l.clone(), out.len());
                    out.push(Sample {
                        labels: Arc::new(l),
                        v: 1.0,
                    });
                }
            }
        }
    }
    Ok(out)
}

pub fn is_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
