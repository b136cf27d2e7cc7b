//! A `SELECT`'s field list as plans over value slots: `*` and regex field
//! lists expanded against the measurement's schema, each field read as an
//! aggregate (with an optional transformation) or a raw value, and each
//! value slot an expression the shard computes or a tag from the tag index.

use std::collections::BTreeSet;

use shardhouse_eval::{Aggregate, Gathered, Transform};
use shardhouse_influxql::{Call, DataType, Expr, Field, VarRef};

use super::select::Schema;
use super::sqlgen;
use crate::error::{Error, Result};

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
        /// Other columns read with each point (`tx` in `SELECT tx,
        /// max(rx)`), carried by the point the selector keeps.
        aux_slots: Vec<usize>,
    },
    Raw {
        slot: usize,
        transform: Option<Transform>,
    },
}

/// How an output field is made from the plans.
pub(super) enum Output {
    /// Plan `i`'s values.
    Plan(usize),
    /// Arithmetic on calls: the calls' plans, in pre-order.
    Math { expr: Expr, inputs: Vec<usize> },
    /// Column `index` of the rows output `selector` (a selector) picks.
    Selected { selector: usize, index: usize },
}

pub(super) struct Planned {
    pub fields: Vec<Field>,
    pub slots: Vec<Slot>,
    pub plans: Vec<Plan>,
    /// One per field other than `time`, in order.
    pub outputs: Vec<Output>,
}

impl Planned {
    /// The statement's fields, for `finish`, from each plan's gathered
    /// values (`gathered[i]` is plan `i`'s).
    pub fn assemble(&self, gathered: Vec<Gathered>) -> Vec<Gathered> {
        let mut by_plan: Vec<Option<Gathered>> = gathered.into_iter().map(Some).collect();
        let mut take = |i: usize| by_plan[i].take().expect("each plan feeds one output");
        self.outputs
            .iter()
            .map(|o| match o {
                Output::Plan(i) => take(*i),
                Output::Math { expr, inputs } => Gathered::Math {
                    expr: expr.clone(),
                    inputs: inputs.iter().map(|i| take(*i)).collect(),
                },
                Output::Selected { selector, index } => Gathered::AuxOf {
                    selector: *selector,
                    index: *index,
                },
            })
            .collect()
    }
}

/// Expands `*` and regex field lists against the schema and reads each
/// field into a plan over value slots. `tag_keys` are the tags `*` shows:
/// the measurement's, less those the statement groups by (InfluxDB puts
/// those in the series' `tags`). `alone`: the statement reads this one
/// measurement, so selecting only its tags is an error; beside others
/// (`FROM cpu, gpu`, `FROM /re/`) such a measurement adds no series.
pub(super) fn plan_fields(
    fields: &[Field],
    schema: &Schema,
    tag_keys: &BTreeSet<String>,
    interval: Option<i64>,
    alone: bool,
) -> Result<Planned> {
    let has_call = fields.iter().any(|f| contains_call(&f.expr));
    let mut expanded: Vec<Field> = Vec::new();
    for f in fields {
        match &f.expr {
            Expr::Wildcard(ty) => {
                // Fields and tags by name; a tag named like a field comes
                // right after it as `name::tag` (its column is `name_1`).
                let mut names: Vec<(&String, bool)> = Vec::new();
                if *ty != Some(DataType::Tag) {
                    names.extend(schema.fields.keys().map(|n| (n, false)));
                }
                if *ty != Some(DataType::Field) && !has_call {
                    names.extend(tag_keys.iter().map(|k| (k, true)));
                }
                names.sort();
                for (name, tag) in names {
                    let data_type =
                        (tag && schema.fields.contains_key(name)).then_some(DataType::Tag);
                    expanded.push(Field::new(Expr::VarRef(VarRef {
                        name: name.clone(),
                        data_type,
                    })));
                }
            }
            Expr::Regex(re) => {
                let p = regex::Regex::new(&re.0)?;
                for name in schema.fields.keys().filter(|n| p.is_match(n)) {
                    expanded.push(Field::new(Expr::var(name)));
                }
            }
            Expr::Call(c) if matches!(c.args.first(), Some(Expr::Wildcard(_) | Expr::Regex(_))) => {
                let matches: Vec<&String> = match &c.args[0] {
                    Expr::Regex(re) => {
                        let p = regex::Regex::new(&re.0)?;
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
    let none = BTreeSet::new();
    let refused_tags = if alone { tag_keys } else { &none };
    plan_expanded(expanded, schema, refused_tags, interval)
}

/// Slots are shared: a value read once feeds every plan that needs it.
fn slot_of(expr: &Expr, schema: &Schema, slots: &mut Vec<Slot>) -> usize {
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
}

/// A call's plan: an aggregate (maybe inside a transformation) or a
/// transformation of raw values.
fn plan_call(
    c: &Call,
    schema: &Schema,
    interval: Option<i64>,
    slots: &mut Vec<Slot>,
) -> Result<Plan> {
    let (c, transform) = match Aggregate::from_call(c) {
        Ok(_) => (c, None),
        Err(_) => {
            let (t, inner) = Transform::from_call(c, interval)?;
            match inner {
                Expr::Call(inner) => (inner, Some(t)),
                other => {
                    return Ok(Plan::Raw {
                        slot: slot_of(other, schema, slots),
                        transform: Some(t),
                    })
                }
            }
        }
    };
    let agg = Aggregate::from_call(c)?;
    let arg = field_argument(c)?;
    Ok(Plan::Aggregate {
        agg,
        slot: slot_of(&arg, schema, slots),
        transform,
        aux_slots: Vec::new(),
    })
}

fn calls_of<'a>(e: &'a Expr, out: &mut Vec<&'a Call>) {
    match e {
        Expr::Call(c) => out.push(c),
        Expr::Binary { lhs, rhs, .. } => {
            calls_of(lhs, out);
            calls_of(rhs, out);
        }
        _ => {}
    }
}

/// The one selector call of a statement whose other fields are raw
/// (`SELECT tx, max(rx)`): InfluxDB returns those fields from the row the
/// selector picks. `None` when the statement is not of that shape.
fn lone_selector(fields: &[Field]) -> Option<usize> {
    let mut calls = Vec::new();
    for f in fields {
        calls_of(&f.expr, &mut calls);
    }
    let [call] = calls.as_slice() else {
        return None;
    };
    let at = fields
        .iter()
        .position(|f| matches!(&f.expr, Expr::Call(c) if c == *call))?;
    let selector = Aggregate::from_call(call).is_ok_and(|a| a.is_selector());
    let raw = fields
        .iter()
        .any(|f| matches!(f.expr, Expr::VarRef(ref v) if !v.name.eq_ignore_ascii_case("time")));
    (selector && raw).then_some(at)
}

/// Plans the expanded fields: one output per field (other than `time`).
fn plan_expanded(
    expanded: Vec<Field>,
    schema: &Schema,
    tag_keys: &BTreeSet<String>,
    interval: Option<i64>,
) -> Result<Planned> {
    let fields: Vec<Field> = expanded;
    let is_time =
        |f: &Field| matches!(&f.expr, Expr::VarRef(v) if v.name.eq_ignore_ascii_case("time"));
    // The lone selector's position among the outputs (fields but `time`).
    let selector =
        lone_selector(&fields).map(|at| fields[..at].iter().filter(|f| !is_time(f)).count());
    let mut slots: Vec<Slot> = Vec::new();
    let mut plans = Vec::new();
    let mut outputs = Vec::new();
    let mut aux = Vec::new();
    for f in &fields {
        match &f.expr {
            _ if is_time(f) => continue,
            Expr::Call(c) => {
                plans.push(plan_call(c, schema, interval, &mut slots)?);
                outputs.push(Output::Plan(plans.len() - 1));
            }
            Expr::Binary { .. } if contains_call(&f.expr) => {
                let mut calls = Vec::new();
                calls_of(&f.expr, &mut calls);
                let mut inputs = Vec::new();
                for c in calls {
                    plans.push(plan_call(c, schema, interval, &mut slots)?);
                    inputs.push(plans.len() - 1);
                }
                outputs.push(Output::Math {
                    expr: f.expr.clone(),
                    inputs,
                });
            }
            Expr::VarRef(_) if selector.is_some() => {
                aux.push(slot_of(&f.expr, schema, &mut slots));
                outputs.push(Output::Selected {
                    selector: selector.unwrap_or_default(),
                    index: aux.len() - 1,
                });
            }
            Expr::VarRef(_) | Expr::Binary { .. } => {
                plans.push(Plan::Raw {
                    slot: slot_of(&f.expr, schema, &mut slots),
                    transform: None,
                });
                outputs.push(Output::Plan(plans.len() - 1));
            }
            other => {
                return Err(Error::statement(format!(
                    "unsupported field expression: {other}"
                )))
            }
        }
    }
    // The selector's points carry the other columns.
    if let Some(Output::Plan(p)) = selector.and_then(|at| outputs.get(at)) {
        if let Plan::Aggregate { aux_slots, .. } = &mut plans[*p] {
            *aux_slots = aux;
        }
    }
    check_mixing(&fields, &slots, &plans, &outputs, tag_keys, !schema.samples)?;
    if !reads_field(&slots, &plans) {
        // Only names that are neither a field nor a tag (`SELECT foo`,
        // `mean(foo)`): InfluxDB answers with no series, no error.
        plans.clear();
        outputs.clear();
    }
    Ok(Planned {
        fields,
        slots,
        plans,
        outputs,
    })
}

/// `top`/`bottom` may not ask for more points than the statement's
/// `LIMIT` (InfluxDB's check and words).
pub(super) fn check_top_limit(fields: &[Field], limit: Option<u64>) -> Result<()> {
    let Some(limit) = limit.filter(|l| *l > 0) else {
        return Ok(());
    };
    for f in fields {
        if let Expr::Call(c) = &f.expr {
            if let Ok(Aggregate::Top { n, .. } | Aggregate::Bottom { n, .. }) =
                Aggregate::from_call(c)
            {
                if n as u64 > limit {
                    return Err(Error::statement(format!(
                        "limit ({n}) in {} function can not be larger than the LIMIT ({limit}) in the select statement",
                        c.name
                    )));
                }
            }
        }
    }
    Ok(())
}

/// InfluxDB's rules for aggregates beside other fields.
fn check_mixing(
    fields: &[Field],
    slots: &[Slot],
    plans: &[Plan],
    outputs: &[Output],
    tag_keys: &BTreeSet<String>,
    types_known: bool,
) -> Result<()> {
    let distinct = fields
        .iter()
        .any(|f| matches!(&f.expr, Expr::Call(c) if c.name == "distinct"));
    let others = fields
        .iter()
        .filter(|f| !matches!(&f.expr, Expr::VarRef(v) if v.name.eq_ignore_ascii_case("time")))
        .count();
    if distinct && others > 1 {
        return Err(Error::statement(
            "aggregate function distinct() cannot be combined with other functions or fields",
        ));
    }
    // Without a table (a Prometheus metric, or a measurement no shard
    // knows) a name that is not `value` may be a label or nothing: InfluxDB
    // answers an unknown measurement with no series, not this error.
    let only_tags = !slots.is_empty()
        && slots.iter().all(|s| match s {
            Slot::Tag(k) => tag_keys.contains(k),
            Slot::Sql(_) => false,
        });
    if types_known && !plans.is_empty() && !reads_field(slots, plans) && only_tags {
        return Err(Error::statement(
            "statement must have at least one field in select clause",
        ));
    }
    fn bare_var(e: &Expr) -> bool {
        match e {
            Expr::VarRef(_) => true,
            Expr::Binary { lhs, rhs, .. } => bare_var(lhs) || bare_var(rhs),
            _ => false,
        }
    }
    let math_on_raw = outputs
        .iter()
        .any(|o| matches!(o, Output::Math { expr, .. } if bare_var(expr)));
    let raw = math_on_raw
        || outputs.iter().any(|o| {
        matches!(o, Output::Plan(p) if matches!(plans[*p], Plan::Raw { transform: None, .. }))
    });
    let aggregate = plans.iter().any(|p| matches!(p, Plan::Aggregate { .. }));
    if raw && aggregate {
        return Err(Error::statement(
            "mixing aggregate and non-aggregate queries is not supported",
        ));
    }
    Ok(())
}

/// Whether a plan reads a field (rather than only tags or unknown names).
fn reads_field(slots: &[Slot], plans: &[Plan]) -> bool {
    plans.iter().any(|p| match p {
        Plan::Aggregate { slot, .. } | Plan::Raw { slot, .. } => {
            matches!(slots[*slot], Slot::Sql(_))
        }
    })
}

/// The field an aggregate reads: `f` in `mean(f)`, `count(distinct(f))`.
fn field_argument(c: &Call) -> Result<Expr> {
    match c.args.first() {
        Some(Expr::VarRef(v)) => Ok(Expr::VarRef(v.clone())),
        Some(Expr::Call(inner)) if inner.name == "distinct" => match inner.args.first() {
            Some(Expr::VarRef(v)) => Ok(Expr::VarRef(v.clone())),
            _ => Err(Error::statement(format!(
                "expected field argument in {}()",
                inner.name
            ))),
        },
        // InfluxDB's words.
        Some(_) => Err(Error::statement(format!(
            "expected field argument in {}()",
            c.name
        ))),
        None => Err(Error::statement(format!(
            "{}() needs a field argument",
            c.name
        ))),
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn schema(fields: &[(&str, &'static str)]) -> Schema {
        Schema {
            per_shard: BTreeMap::new(),
            fields: fields.iter().map(|(n, t)| (n.to_string(), *t)).collect(),
            samples: false,
        }
    }

    fn columns(q: &str, schema: &Schema, tags: &[&str]) -> Vec<String> {
        let shardhouse_influxql::Statement::Select(s) =
            shardhouse_influxql::parse_statement(q).unwrap()
        else {
            panic!("not a select");
        };
        let tags: BTreeSet<String> = tags.iter().map(|t| t.to_string()).collect();
        let planned = plan_fields(&s.fields, schema, &tags, None, true).unwrap();
        planned.fields.iter().map(|f| f.expr.to_string()).collect()
    }

    #[test]
    fn wildcards_list_fields_and_tags_by_name() {
        let s = schema(&[("rx", "float"), ("core", "integer"), ("tx", "float")]);
        // A tag named like a field follows it as name::tag (InfluxDB's
        // `core`, `core_1` columns).
        assert_eq!(
            columns("SELECT * FROM network", &s, &["core", "host"]),
            ["core", "core::tag", "host", "rx", "tx"]
        );
        assert_eq!(
            columns("SELECT *::field FROM network", &s, &["core", "host"]),
            ["core", "rx", "tx"]
        );
        // With no tags shown (all grouped by): fields only.
        assert_eq!(
            columns("SELECT * FROM network", &s, &[]),
            ["core", "rx", "tx"]
        );
    }

    fn plan(q: &str, schema: &Schema) -> Result<Planned> {
        let shardhouse_influxql::Statement::Select(s) =
            shardhouse_influxql::parse_statement(q).unwrap()
        else {
            panic!("not a select");
        };
        plan_fields(
            &s.fields,
            schema,
            &BTreeSet::from(["host".to_string()]),
            None,
            true,
        )
    }

    #[test]
    fn top_may_not_exceed_the_limit() {
        let shardhouse_influxql::Statement::Select(s) =
            shardhouse_influxql::parse_statement("SELECT top(value, 3) FROM cpu LIMIT 2").unwrap()
        else {
            panic!("not a select");
        };
        assert_eq!(
            check_top_limit(&s.fields, s.limit).unwrap_err().to_string(),
            "limit (3) in top function can not be larger than the LIMIT (2) in the select statement"
        );
        assert!(check_top_limit(&s.fields, Some(3)).is_ok());
        assert!(check_top_limit(&s.fields, None).is_ok());
    }

    #[test]
    fn arithmetic_on_calls_plans_each_call() {
        let s = schema(&[("v", "float")]);
        let p = plan("SELECT max(v) - min(v), sum(v) / 2 FROM m", &s).unwrap();
        assert_eq!(p.plans.len(), 3);
        assert!(matches!(&p.outputs[0], Output::Math { inputs, .. } if inputs == &[0, 1]));
        assert!(matches!(&p.outputs[1], Output::Math { inputs, .. } if inputs == &[2]));
        assert_eq!(
            plan("SELECT max(v) + v FROM m", &s)
                .err()
                .unwrap()
                .to_string(),
            "mixing aggregate and non-aggregate queries is not supported"
        );
    }

    #[test]
    fn a_lone_selector_carries_the_other_columns() {
        let s = schema(&[("rx", "float"), ("tx", "float")]);
        let p = plan("SELECT tx, max(rx), host FROM m", &s).unwrap();
        // tx and host come from the row max() picks.
        assert!(matches!(
            p.outputs[0],
            Output::Selected {
                selector: 1,
                index: 0
            }
        ));
        assert!(matches!(
            p.outputs[2],
            Output::Selected {
                selector: 1,
                index: 1
            }
        ));
        let Plan::Aggregate { aux_slots, .. } = &p.plans[0] else {
            panic!("max is an aggregate");
        };
        assert_eq!(aux_slots.len(), 2);
        assert_eq!(
            plan("SELECT tx, mean(rx) FROM m", &s)
                .err()
                .unwrap()
                .to_string(),
            "mixing aggregate and non-aggregate queries is not supported"
        );
        assert_eq!(
            plan("SELECT tx, distinct(rx) FROM m", &s)
                .err()
                .unwrap()
                .to_string(),
            "aggregate function distinct() cannot be combined with other functions or fields"
        );
        assert_eq!(
            plan("SELECT host FROM m", &s).err().unwrap().to_string(),
            "statement must have at least one field in select clause"
        );
        // Beside other measurements, one where the name is a tag adds no
        // series (`SELECT value FROM cpu, gpu`, gpu's `value` a tag).
        let shardhouse_influxql::Statement::Select(q) =
            shardhouse_influxql::parse_statement("SELECT host FROM m, n").unwrap()
        else {
            panic!("not a select");
        };
        let tags = BTreeSet::from(["host".to_string()]);
        assert!(plan_fields(&q.fields, &s, &tags, None, false)
            .unwrap()
            .plans
            .is_empty());
        // A name that is neither a field nor a tag: no series, no error
        // (InfluxDB's answer to `SELECT idontexist FROM cpu`).
        for q in [
            "SELECT foo FROM m",
            "SELECT foo, host FROM m",
            "SELECT mean(foo) FROM m",
        ] {
            assert!(plan(q, &s).unwrap().plans.is_empty(), "{q}");
        }
        // An aggregate of something other than a field: InfluxDB's words.
        assert_eq!(
            plan("SELECT count(2) FROM m", &s)
                .err()
                .unwrap()
                .to_string(),
            "expected field argument in count()"
        );
        assert_eq!(
            plan("SELECT max(mean(rx)) FROM m", &s)
                .err()
                .unwrap()
                .to_string(),
            "expected field argument in max()"
        );
        assert_eq!(
            plan("SELECT count(distinct(2)) FROM m", &s)
                .err()
                .unwrap()
                .to_string(),
            "expected field argument in distinct()"
        );
        // What `select::schema` gives a measurement with no table.
        let unknown = Schema {
            per_shard: Default::default(),
            fields: BTreeMap::from([("value".to_string(), "float")]),
            samples: true,
        };
        assert!(
            plan("SELECT usage FROM nosuchmeasurement", &unknown).is_ok(),
            "a measurement no shard knows is answered with no series"
        );
    }
}
