//! A `SELECT`'s field list as plans over value slots: `*` and regex field
//! lists expanded against the measurement's schema, each field read as an
//! aggregate (with an optional transformation) or a raw value, and each
//! value slot an expression the shard computes or a tag from the tag index.

use std::collections::BTreeSet;

use shardhouse_eval::{Aggregate, Transform};
use shardhouse_influxql::{Call, DataType, Expr, Field, VarRef};

use super::select::{Schema, StmtResult};
use super::sqlgen;

/// Where an output column's values come from.
#[derive(Debug, Clone)]
pub(super) enum Slot {
    /// An expression over fields, computed by the shard (a field or
    /// arithmetic between fields).
    Sql(Expr),
    /// A tag's value, from the tag index.
    Tag(String),
}

pub(super) enum Plan {
    Aggregate {
        agg: Aggregate,
        slot: usize,
        transform: Option<Transform>,
    },
    Raw {
        slot: usize,
        transform: Option<Transform>,
    },
}

pub(super) struct Planned {
    pub fields: Vec<Field>,
    pub slots: Vec<Slot>,
    pub plans: Vec<Plan>,
}

/// Expands `*` and regex field lists against the schema and reads each
/// field into a plan over value slots.
pub(super) fn plan_fields(
    fields: &[Field],
    schema: &Schema,
    tag_keys: &BTreeSet<String>,
    interval: Option<i64>,
) -> StmtResult<Planned> {
    let has_call = fields.iter().any(|f| contains_call(&f.expr));
    let mut expanded: Vec<Field> = Vec::new();
    for f in fields {
        match &f.expr {
            Expr::Wildcard(ty) => {
                let mut names: Vec<&String> = Vec::new();
                if *ty != Some(DataType::Tag) {
                    names.extend(schema.fields.keys());
                }
                if *ty != Some(DataType::Field) && !has_call {
                    names.extend(tag_keys.iter().filter(|k| !schema.fields.contains_key(*k)));
                }
                names.sort();
                for name in names {
                    expanded.push(Field::new(Expr::var(name)));
                }
            }
            Expr::Regex(re) => {
                let p = regex::Regex::new(&re.0).map_err(|e| e.to_string())?;
                for name in schema.fields.keys().filter(|n| p.is_match(n)) {
                    expanded.push(Field::new(Expr::var(name)));
                }
            }
            Expr::Call(c) if matches!(c.args.first(), Some(Expr::Wildcard(_) | Expr::Regex(_))) => {
                let matches: Vec<&String> = match &c.args[0] {
                    Expr::Regex(re) => {
                        let p = regex::Regex::new(&re.0).map_err(|e| e.to_string())?;
                        schema.fields.keys().filter(|n| p.is_match(n)).collect()
                    }
                    _ => schema.fields.keys().collect(),
                };
                for name in matches {
                    let mut call = c.clone();
                    call.args[0] = Expr::var(name);
                    expanded.push(Field {
                        expr: Expr::Call(call),
                        alias: Some(format!("{}_{name}", c.name)),
                    });
                }
            }
            _ => expanded.push(f.clone()),
        }
    }
    let mut slots: Vec<Slot> = Vec::new();
    let slot_of = |expr: &Expr, slots: &mut Vec<Slot>| -> usize {
        let slot = match expr {
            Expr::VarRef(v) if is_tag(v, schema) => Slot::Tag(v.name.clone()),
            e => Slot::Sql(e.clone()),
        };
        let key = format!("{slot:?}");
        if let Some(i) = slots.iter().position(|s| format!("{s:?}") == key) {
            return i;
        }
        slots.push(slot);
        slots.len() - 1
    };
    let mut plans = Vec::new();
    let mut kept = Vec::new();
    for f in expanded {
        match &f.expr {
            Expr::VarRef(v) if v.name.eq_ignore_ascii_case("time") => {
                kept.push(f);
                continue;
            }
            Expr::Call(c) => {
                let (agg_call, transform) = match Aggregate::from_call(c) {
                    Ok(_) => (Some(c), None),
                    Err(_) => {
                        let (t, inner) =
                            Transform::from_call(c, interval).map_err(|e| e.to_string())?;
                        match inner {
                            Expr::Call(inner) => (Some(inner), Some(t)),
                            other => {
                                let slot = slot_of(other, &mut slots);
                                plans.push(Plan::Raw {
                                    slot,
                                    transform: Some(t),
                                });
                                kept.push(f.clone());
                                continue;
                            }
                        }
                    }
                };
                let c = agg_call.expect("set above");
                let agg = Aggregate::from_call(c).map_err(|e| e.to_string())?;
                let arg = field_argument(c)?;
                let slot = slot_of(&arg, &mut slots);
                plans.push(Plan::Aggregate {
                    agg,
                    slot,
                    transform,
                });
            }
            Expr::Binary { .. } if contains_call(&f.expr) => {
                return Err(format!(
                    "arithmetic on aggregates is not supported yet: {}",
                    f.expr
                ))
            }
            Expr::VarRef(_) | Expr::Binary { .. } => {
                let slot = slot_of(&f.expr, &mut slots);
                plans.push(Plan::Raw {
                    slot,
                    transform: None,
                });
            }
            other => return Err(format!("unsupported field expression: {other}")),
        }
        kept.push(f);
    }
    if has_call
        && plans.iter().any(|p| {
            matches!(
                p,
                Plan::Raw {
                    transform: None,
                    ..
                }
            )
        })
        && plans.iter().any(|p| matches!(p, Plan::Aggregate { .. }))
    {
        return Err("mixing aggregate and non-aggregate queries is not supported".into());
    }
    Ok(Planned {
        fields: kept,
        slots,
        plans,
    })
}

/// The field an aggregate reads: `f` in `mean(f)`, `count(distinct(f))`.
fn field_argument(c: &Call) -> StmtResult<Expr> {
    match c.args.first() {
        Some(Expr::VarRef(v)) => Ok(Expr::VarRef(v.clone())),
        Some(Expr::Call(inner)) if inner.name == "distinct" => match inner.args.first() {
            Some(Expr::VarRef(v)) => Ok(Expr::VarRef(v.clone())),
            _ => Err(format!("expected a field argument in {}()", inner.name)),
        },
        Some(other) => Err(format!(
            "expected a field argument in {}(), found {other}",
            c.name
        )),
        None => Err(format!("{}() needs a field argument", c.name)),
    }
}

fn is_tag(v: &VarRef, schema: &Schema) -> bool {
    sqlgen::is_tag_ref(v, &|n| schema.fields.contains_key(n))
}

pub(super) fn contains_call(e: &Expr) -> bool {
    match e {
        Expr::Call(_) => true,
        Expr::Binary { lhs, rhs, .. } => contains_call(lhs) || contains_call(rhs),
        _ => false,
    }
}

/// Whether a projected expression reads a tag (raw tag columns, and
/// `top`/`bottom` tag arguments).
pub(super) fn uses_tags(e: &Expr, is_field: &dyn Fn(&str) -> bool) -> bool {
    match e {
        Expr::VarRef(v) => !v.name.eq_ignore_ascii_case("time") && sqlgen::is_tag_ref(v, is_field),
        Expr::Call(c) => {
            matches!(c.name.as_str(), "top" | "bottom") && c.args.len() > 2
                || c.args
                    .iter()
                    .any(|a| matches!(a, Expr::Call(_)) && uses_tags(a, is_field))
        }
        Expr::Binary { lhs, rhs, .. } => uses_tags(lhs, is_field) || uses_tags(rhs, is_field),
        _ => false,
    }
}

pub(super) fn mentions_tag(e: &Expr, is_field: &dyn Fn(&str) -> bool) -> bool {
    match e {
        Expr::VarRef(v) => sqlgen::is_tag_ref(v, is_field),
        Expr::Binary { lhs, rhs, .. } => mentions_tag(lhs, is_field) || mentions_tag(rhs, is_field),
        _ => false,
    }
}
