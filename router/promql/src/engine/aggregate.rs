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
    let mut keys = GroupKeys::new(&grouping);
    for (i, step) in input.into_iter().enumerate() {
        let groups = keys.groups(step);
        let res = match (&param, op.as_str()) {
            (Some(Val::Str(label)), "count_values") => count_values(label, groups)?,
            (Some(Val::Scalar(p)), "topk" | "bottomk") => top_k(&op, p[i], groups),
            (Some(Val::Scalar(p)), "quantile") => simple(&op, groups, p[i])?,
            (None, _) => simple(&op, groups, f64::NAN)?,
            _ => return Err(exec(format!("bad parameter for {op}"))),
        };
        out.push(res);
    }
    Ok(Val::Vector(out))
}

/// The group of each series, decided once per series rather than once
/// per sample: a series' samples share one `Arc<Labels>` across steps,
/// so the group key (a string built from the labels) is computed and
/// hashed once per distinct label set, not steps x series times.
struct GroupKeys<'g> {
    grouping: &'g Grouping,
    /// Label set address -> group number. The `Arc`s are kept in
    /// `alive` so that no address is reused for another label set.
    by_address: HashMap<usize, usize>,
    alive: Vec<Arc<Labels>>,
    by_key: HashMap<String, usize>,
    /// Each group's result labels.
    labels: Vec<Arc<Labels>>,
}

impl<'g> GroupKeys<'g> {
    fn new(grouping: &'g Grouping) -> Self {
        GroupKeys {
            grouping,
            by_address: HashMap::new(),
            alive: Vec::new(),
            by_key: HashMap::new(),
            labels: Vec::new(),
        }
    }

    fn group_of(&mut self, l: &Arc<Labels>) -> usize {
        let address = Arc::as_ptr(l) as usize;
        if let Some(&g) = self.by_address.get(&address) {
            return g;
        }
        let next = self.labels.len();
        let g = *self.by_key.entry(self.grouping.key(l)).or_insert(next);
        if g == next {
            self.labels.push(Arc::new(self.grouping.labels(l)));
        }
        self.by_address.insert(address, g);
        self.alive.push(Arc::clone(l));
        g
    }

    /// One step's samples in groups, in order of first appearance, as
    /// Prometheus returns them.
    fn groups(&mut self, step: Vec<Sample>) -> Vec<(Arc<Labels>, Vec<Sample>)> {
        let mut at: Vec<usize> = Vec::new();
        let mut out: Vec<(Arc<Labels>, Vec<Sample>)> = Vec::new();
        for s in step {
            let g = self.group_of(&s.labels);
            if g >= at.len() {
                at.resize(g + 1, usize::MAX);
            }
            if at[g] == usize::MAX {
                at[g] = out.len();
                out.push((Arc::clone(&self.labels[g]), Vec::new()));
            }
            out[at[g]].1.push(s);
        }
        out
    }
}

/// The groups of one step (`GroupKeys::groups`).
type Groups = Vec<(Arc<Labels>, Vec<Sample>)>;

fn simple(op: &str, groups: Groups, q: f64) -> Result<Vec<Sample>> {
    let mut out = Vec::with_capacity(groups.len());
    for (labels, members) in groups {
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
        out.push(Sample { labels, v });
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
fn top_k(op: &str, k: f64, groups: Groups) -> Vec<Sample> {
    if k.is_nan() || k < 1.0 {
        return Vec::new();
    }
    let k = if k >= usize::MAX as f64 {
        usize::MAX
    } else {
        k as usize
    };
    let mut out = Vec::new();
    for (_, mut members) in groups {
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

fn count_values(label: &str, groups: Groups) -> Result<Vec<Sample>> {
    if !is_label_name(label) {
        return Err(exec(format!("invalid label name {label:?}")));
    }
    let mut index: HashMap<Labels, usize> = HashMap::new();
    let mut out: Vec<Sample> = Vec::new();
    for (labels, members) in groups {
        for s in members {
            let mut l = (*labels).clone();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(l: &Arc<Labels>, v: f64) -> Sample {
        Sample {
            labels: Arc::clone(l),
            v,
        }
    }

    fn shown(groups: &Groups) -> Vec<(String, Vec<f64>)> {
        groups
            .iter()
            .map(|(l, m)| (l.to_string(), m.iter().map(|s| s.v).collect()))
            .collect()
    }

    #[test]
    fn groups_follow_each_steps_order_of_first_appearance() {
        let g = Grouping {
            names: vec!["job".into()],
            by: true,
        };
        let a = Arc::new(Labels::from_pairs([("job", "a"), ("x", "1")]));
        let b = Arc::new(Labels::from_pairs([("job", "b")]));
        let c = Arc::new(Labels::from_pairs([("job", "a"), ("x", "2")]));
        // Equal labels in another Arc: the same group.
        let a2 = Arc::new((*a).clone());
        let mut keys = GroupKeys::new(&g);
        let step = keys.groups(vec![sample(&b, 1.0), sample(&a, 2.0), sample(&c, 3.0)]);
        assert_eq!(
            shown(&step),
            [
                (r#"{job="b"}"#.to_string(), vec![1.0]),
                (r#"{job="a"}"#.to_string(), vec![2.0, 3.0])
            ]
        );
        let step = keys.groups(vec![sample(&c, 4.0), sample(&a2, 5.0), sample(&b, 6.0)]);
        assert_eq!(
            shown(&step),
            [
                (r#"{job="a"}"#.to_string(), vec![4.0, 5.0]),
                (r#"{job="b"}"#.to_string(), vec![6.0])
            ]
        );
        assert!(keys.groups(Vec::new()).is_empty());
    }

    #[test]
    fn without_drops_the_listed_labels_and_the_name() {
        let g = Grouping {
            names: vec!["x".into()],
            by: false,
        };
        let a = Arc::new(Labels::from_pairs([
            ("__name__", "m"),
            ("job", "a"),
            ("x", "1"),
        ]));
        let b = Arc::new(Labels::from_pairs([
            ("__name__", "n"),
            ("job", "a"),
            ("x", "2"),
        ]));
        let mut keys = GroupKeys::new(&g);
        let step = keys.groups(vec![sample(&a, 1.0), sample(&b, 2.0)]);
        assert_eq!(shown(&step), [(r#"{job="a"}"#.to_string(), vec![1.0, 2.0])]);
    }
}
