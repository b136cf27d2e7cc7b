//! Merging shard answers of `/api/v1/sql` into one answer (pure functions;
//! the plan is [`crate::read::sql::plan`]).
//!
//! This file holds the two merges (rows: sort and window the union; groups:
//! merge partials per group key, then HAVING, DISTINCT, ORDER BY, LIMIT);
//! `aggregate` holds each aggregate kind's merge state and `eval` the
//! evaluation of expressions over merged aggregates.

mod aggregate;
mod eval;
#[cfg(test)]
mod tests;

use aggregate::{finish, fold, new_state, State};
pub use aggregate::{quantile_exact, quantile_interpolated};
use eval::{eval, Ctx};

use crate::error::{Error, Result};
use crate::read::sql::plan::{GroupsPlan, OutName, RowsPlan};
use crate::read::sql::value::{sort_cmp, Value};
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

struct Group {
    row: Vec<Value>,
    states: Vec<State>,
}

/// Merges the shards' partial rows per group and evaluates the outputs,
/// HAVING, DISTINCT, ORDER BY, OFFSET/LIMIT.
pub fn merge_groups(plan: &GroupsPlan, shards: Vec<ShardRows>) -> Result<Answer> {
    let (groups, shard_names) = fold_groups(plan, shards)?;
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
    let rows = evaluate_groups(plan, groups)?;
    let dirs: Vec<(bool, bool)> = plan.order.iter().map(|k| (k.desc, k.nulls_first)).collect();
    let rows = sort_window(rows, &dirs, plan.offset, plan.limit);
    Ok(Answer { names, rows })
}

/// The shards' rows folded into one group per key (its first row, the
/// first non-null scalars, the aggregates' states), and the column names
/// of the first shard that answered.
fn fold_groups(
    plan: &GroupsPlan,
    shards: Vec<ShardRows>,
) -> Result<(Vec<Group>, Option<Vec<String>>)> {
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
            return Err(Error::Internal(format!(
                "a shard answered {} columns, the plan has {width}",
                s.names.len()
            )));
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
    Ok((groups, shard_names))
}

/// Each group's output row and sort keys, HAVING and DISTINCT applied.
fn evaluate_groups(plan: &GroupsPlan, groups: Vec<Group>) -> Result<Vec<(Vec<Value>, Vec<Value>)>> {
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
            .collect::<Result<_>>()?;
        if plan.distinct && !seen.insert(out.clone()) {
            continue;
        }
        let keys = plan
            .order
            .iter()
            .map(|k| eval(&k.expr, &ctx))
            .collect::<Result<_>>()?;
        rows.push((out, keys));
    }
    Ok(rows)
}
