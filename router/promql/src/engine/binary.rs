//! Binary operators: arithmetic and comparisons between scalars and
//! vectors, vector matching (`on`/`ignoring`, `group_left`/`group_right`,
//! `bool`) and the set operators, as Prometheus 2.x matches them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use promql_parser::parser::{BinaryExpr, LabelModifier, VectorMatchCardinality};

use super::eval::{check_unique, Evaluator, Sample, Steps, Val};
use crate::error::exec;
use crate::labels::{Labels, METRIC_NAME};
use crate::Result;

/// How two vectors are matched.
pub struct Matching {
    /// `on(...)` when true, `ignoring(...)` (or nothing) when false.
    pub on: bool,
    pub names: Vec<String>,
    pub card: VectorMatchCardinality,
}

impl Matching {
    fn sig(&self, l: &Labels) -> String {
        l.signature(&self.names, self.on)
    }

    fn group_labels(&self, l: &Labels) -> Labels {
        if self.on {
            l.keep(&self.names)
        } else {
            let mut drop = self.names.clone();
            drop.push(METRIC_NAME.to_string());
            l.drop_names(&drop)
        }
    }
}

pub fn eval(ev: &Evaluator, b: &BinaryExpr, steps: &Steps) -> Result<Val> {
    let op = b.op.to_string();
    let return_bool = b.return_bool();
    let lhs = ev.eval(&b.lhs, steps)?;
    let rhs = ev.eval(&b.rhs, steps)?;
    Ok(match (lhs, rhs) {
        (Val::Scalar(l), Val::Scalar(r)) => Val::Scalar(
            l.into_iter()
                .zip(r)
                .map(|(a, c)| {
                    let (v, keep) = elem_op(&op, a, c);
                    if is_comparison(&op) {
                        f64::from(u8::from(keep))
                    } else {
                        v
                    }
                })
                .collect(),
        ),
        (Val::Vector(l), Val::Scalar(r)) => vector_scalar(&op, l, &r, false, return_bool)?,
        (Val::Scalar(l), Val::Vector(r)) => vector_scalar(&op, r, &l, true, return_bool)?,
        (Val::Vector(l), Val::Vector(r)) => {
            let matching = matching_of(b);
            let mut out = Vec::with_capacity(l.len());
            for (ls, rs) in l.into_iter().zip(r) {
                let step = match op.as_str() {
                    "and" | "or" | "unless" => set_op(&op, ls, rs, &matching),
                    _ => vector_binop(&op, ls, rs, &matching, return_bool)?,
                };
                check_unique(&step)?;
                out.push(step);
            }
            Val::Vector(out)
        }
        (l, r) => return Err(exec(format!("binary {op} between {l:?} and {r:?}"))),
    })
}

fn matching_of(b: &BinaryExpr) -> Matching {
    let (on, names) = match b.modifier.as_ref().and_then(|m| m.matching.as_ref()) {
        Some(LabelModifier::Include(l)) => (true, l.labels.clone()),
        Some(LabelModifier::Exclude(l)) => (false, l.labels.clone()),
        None => (false, Vec::new()),
    };
    let card = b
        .modifier
        .as_ref()
        .map(|m| m.card.clone())
        .unwrap_or(VectorMatchCardinality::OneToOne);
    Matching { on, names, card }
}

pub fn is_comparison(op: &str) -> bool {
    matches!(op, "==" | "!=" | ">" | "<" | ">=" | "<=")
}

/// Arithmetic drops the metric name; comparisons keep it.
fn drops_name(op: &str) -> bool {
    matches!(op, "+" | "-" | "*" | "/" | "%" | "^" | "atan2")
}

/// The value and, for comparisons, whether the pair is kept (the value
/// of a comparison is its left side).
pub fn elem_op(op: &str, l: f64, r: f64) -> (f64, bool) {
    match op {
        "+" => (l + r, true),
        "-" => (l - r, true),
        "*" => (l * r, true),
        "/" => (l / r, true),
        "%" => (l % r, true),
        "^" => (l.powf(r), true),
        "atan2" => (l.atan2(r), true),
        "==" => (l, l == r),
        "!=" => (l, l != r),
        ">" => (l, l > r),
        "<" => (l, l < r),
        ">=" => (l, l >= r),
        "<=" => (l, l <= r),
        _ => (f64::NAN, false),
    }
}

fn vector_scalar(
    op: &str,
    vec: Vec<Vec<Sample>>,
    scalar: &[f64],
    swap: bool,
    return_bool: bool,
) -> Result<Val> {
    let mut out = Vec::with_capacity(vec.len());
    for (step, &s) in vec.into_iter().zip(scalar) {
        let mut res = Vec::with_capacity(step.len());
        for e in step {
            let (l, r) = if swap { (s, e.v) } else { (e.v, s) };
            let (mut v, keep) = elem_op(op, l, r);
            // A comparison keeps the vector element's value, whichever
            // side the vector is on.
            if is_comparison(op) && swap {
                v = r;
            }
            if return_bool {
                v = f64::from(u8::from(keep));
            } else if !keep {
                continue;
            }
            let labels = if drops_name(op) || return_bool {
                Arc::new(e.labels.without_name())
            } else {
                e.labels
            };
            res.push(Sample { labels, v });
        }
        check_unique(&res)?;
        out.push(res);
    }
    Ok(Val::Vector(out))
}

fn vector_binop(
    op: &str,
    lhs: Vec<Sample>,
    rhs: Vec<Sample>,
    m: &Matching,
    return_bool: bool,
) -> Result<Vec<Sample>> {
    let (swapped, include) = match &m.card {
        VectorMatchCardinality::OneToMany(l) => (true, l.labels.clone()),
        VectorMatchCardinality::ManyToOne(l) => (false, l.labels.clone()),
        _ => (false, Vec::new()),
    };
    let one_to_one = matches!(m.card, VectorMatchCardinality::OneToOne);
    let (many, one) = if swapped { (rhs, lhs) } else { (lhs, rhs) };
    let mut index: HashMap<String, &Sample> = HashMap::with_capacity(one.len());
    for s in &one {
        if let Some(prev) = index.insert(m.sig(&s.labels), s) {
            let side = if swapped { "left" } else { "right" };
            return Err(exec(format!(
                "found duplicate series for the match group {} on the {side} hand-side of the operation: [{}, {}];many-to-many matching not allowed: matching labels must be unique on one side",
                m.group_labels(&s.labels), s.labels, prev.labels
            )));
        }
    }
    let mut matched: HashMap<String, HashSet<Labels>> = HashMap::new();
    let mut out = Vec::new();
    for ls in &many {
        let sig = m.sig(&ls.labels);
        let Some(rs) = index.get(&sig) else { continue };
        let (l, r) = if swapped { (rs.v, ls.v) } else { (ls.v, rs.v) };
        let (mut v, keep) = elem_op(op, l, r);
        if return_bool {
            v = f64::from(u8::from(keep));
        } else if !keep {
            continue;
        }
        let mut metric = result_metric(&ls.labels, &rs.labels, op, m, one_to_one, &include);
        if return_bool {
            metric.remove(METRIC_NAME);
        }
        let seen = matched.entry(sig).or_default();
        if one_to_one {
            if !seen.is_empty() {
                return Err(exec("multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)"));
            }
        } else if seen.contains(&metric) {
            return Err(exec(
                "multiple matches for labels: grouping labels must ensure unique matches",
            ));
        }
        seen.insert(metric.clone());
        out.push(Sample {
            labels: Arc::new(metric),
            v,
        });
    }
    Ok(out)
}

fn result_metric(
    many: &Labels,
    one: &Labels,
    op: &str,
    m: &Matching,
    one_to_one: bool,
    include: &[String],
) -> Labels {
    let mut l = many.clone();
    if drops_name(op) {
        l.remove(METRIC_NAME);
    }
    if one_to_one {
        l = if m.on {
            l.keep(&m.names)
        } else {
            l.drop_names(&m.names)
        };
    }
    for name in include {
        l.set(name, one.get(name));
    }
    l
}

fn set_op(op: &str, lhs: Vec<Sample>, rhs: Vec<Sample>, m: &Matching) -> Vec<Sample> {
    match op {
        "and" => {
            let sigs: HashSet<String> = rhs.iter().map(|s| m.sig(&s.labels)).collect();
            lhs.into_iter()
                .filter(|s| sigs.contains(&m.sig(&s.labels)))
                .collect()
        }
        "unless" => {
            let sigs: HashSet<String> = rhs.iter().map(|s| m.sig(&s.labels)).collect();
            lhs.into_iter()
                .filter(|s| !sigs.contains(&m.sig(&s.labels)))
                .collect()
        }
        _ => {
            let sigs: HashSet<String> = lhs.iter().map(|s| m.sig(&s.labels)).collect();
            let mut out = lhs;
            out.extend(
                rhs.into_iter()
                    .filter(|s| !sigs.contains(&m.sig(&s.labels))),
            );
            out
        }
    }
}
