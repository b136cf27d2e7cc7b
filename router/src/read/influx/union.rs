//! Several measurements in one `FROM` (`cpu, gpu`, `/[cg]pu/`,
//! `db0..cpu, db1..cpu`), answered as InfluxDB 1.8 does: `*` expands
//! against the union of their fields and tags, so every series has the same
//! columns (null where a measurement lacks one), and series of one name
//! from several databases are one series.

use std::collections::{BTreeMap, BTreeSet};

use shardhouse_common::names::sql_literal;
use shardhouse_eval::{Series, Value};
use shardhouse_influxql::{DataType, Dimension, Expr, Field, SelectStatement, VarRef};

use super::fetch::{self, text_at};
use super::Ctx;
use crate::error::Result;

/// The fields and tags of one measurement, by name.
#[derive(Debug, Default, Clone)]
pub(super) struct Columns {
    pub fields: BTreeSet<String>,
    pub tags: BTreeSet<String>,
}

/// Whether the statement's field list depends on each measurement's
/// schema (`*`, `*::field`, `*::tag`).
pub(super) fn has_wildcard(stmt: &SelectStatement) -> bool {
    stmt.fields
        .iter()
        .any(|f| matches!(f.expr, Expr::Wildcard(_)))
}

/// The statement with `*` replaced by the union's columns, each typed
/// (`name::field`, `name::tag`), so a measurement without one reads null.
/// Without calls, tags are listed too; a tag named like a field follows it.
pub(super) fn expand(stmt: &SelectStatement, all: &[Columns]) -> SelectStatement {
    let fields: BTreeSet<&String> = all.iter().flat_map(|c| &c.fields).collect();
    // Tags the statement groups by are in each series' `tags` instead.
    let grouped = |t: &str| {
        stmt.group_by.iter().any(|d| match d {
            Dimension::Wildcard => true,
            Dimension::Tag(g) => g == t,
            Dimension::Regex(re) => regex::Regex::new(&re.0).is_ok_and(|p| p.is_match(t)),
            Dimension::Time { .. } => false,
        })
    };
    let tags: BTreeSet<&String> = all
        .iter()
        .flat_map(|c| &c.tags)
        .filter(|t| !grouped(t))
        .collect();
    let has_call = stmt.fields.iter().any(|f| matches!(f.expr, Expr::Call(_)));
    let mut out = stmt.clone();
    out.fields = Vec::new();
    for f in &stmt.fields {
        let Expr::Wildcard(ty) = &f.expr else {
            out.fields.push(f.clone());
            continue;
        };
        let mut names: Vec<(&String, DataType)> = Vec::new();
        if *ty != Some(DataType::Tag) {
            names.extend(fields.iter().map(|n| (*n, DataType::Field)));
        }
        if *ty != Some(DataType::Field) && !has_call {
            names.extend(tags.iter().map(|n| (*n, DataType::Tag)));
        }
        names.sort_by(|a, b| {
            a.0.cmp(b.0)
                .then((a.1 == DataType::Tag).cmp(&(b.1 == DataType::Tag)))
        });
        for (name, data_type) in names {
            out.fields.push(Field::new(Expr::VarRef(VarRef {
                name: name.clone(),
                data_type: Some(data_type),
            })));
        }
    }
    out
}

/// The fields (from the schema) and tag keys (from the tag index) of one
/// measurement.
pub(super) async fn columns(ctx: &Ctx<'_>, db: &str, measurement: &str) -> Result<Columns> {
    let schema = super::select::schema(ctx, db, measurement).await?;
    let sql = format!(
        "SELECT DISTINCT toString(arrayJoin(mapKeys(tags))) FROM _series WHERE measurement = {}",
        sql_literal(measurement)
    );
    let answers = fetch::on_every_shard(ctx.router, db, &sql, ctx.deadline).await?;
    let mut tags = BTreeSet::new();
    for (_, batches) in &answers {
        for b in batches {
            for row in 0..b.num_rows() {
                tags.insert(text_at(b.column(0), row));
            }
        }
    }
    Ok(Columns {
        fields: schema.fields.into_keys().collect(),
        tags,
    })
}

/// Series of one name and tags (from several databases) as one, rows in
/// time order (`ascending`) and series in InfluxDB's order.
pub(super) fn merge_series(series: Vec<Series>, ascending: bool) -> Vec<Series> {
    let mut merged: BTreeMap<(String, BTreeMap<String, String>), Series> = BTreeMap::new();
    for s in series {
        match merged.entry((s.name.clone(), s.tags.clone())) {
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(s);
            }
            std::collections::btree_map::Entry::Occupied(mut o) => {
                o.get_mut().values.extend(s.values);
                let time = |row: &Vec<Value>| match row.first() {
                    Some(Value::Time(t)) => *t,
                    _ => 0,
                };
                let values = &mut o.get_mut().values;
                if ascending {
                    values.sort_by_key(time);
                } else {
                    values.sort_by_key(|r| std::cmp::Reverse(time(r)));
                }
            }
        }
    }
    let mut out: Vec<Series> = merged.into_values().collect();
    if !ascending {
        out.reverse();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardhouse_influxql::Statement;

    fn select(q: &str) -> SelectStatement {
        match shardhouse_influxql::parse_statement(q).unwrap() {
            Statement::Select(s) => *s,
            other => panic!("{other:?}"),
        }
    }

    fn cols(fields: &[&str], tags: &[&str]) -> Columns {
        Columns {
            fields: fields.iter().map(|s| s.to_string()).collect(),
            tags: tags.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn wildcards_expand_to_the_union() {
        let all = [
            cols(&["value"], &["host"]),
            cols(&["speed"], &["host", "gpu"]),
        ];
        let expanded = expand(&select("SELECT * FROM cpu, gpu"), &all);
        let names: Vec<String> = expanded.fields.iter().map(|f| f.expr.to_string()).collect();
        assert_eq!(
            names,
            ["gpu::tag", "host::tag", "speed::field", "value::field"]
        );
        let expanded = expand(&select("SELECT * FROM cpu, gpu GROUP BY host"), &all);
        let names: Vec<String> = expanded.fields.iter().map(|f| f.expr.to_string()).collect();
        assert_eq!(names, ["gpu::tag", "speed::field", "value::field"]);
        let expanded = expand(&select("SELECT count(*) FROM cpu, gpu"), &all);
        assert_eq!(expanded.fields.len(), 1, "calls keep their own wildcard");
    }

    #[test]
    fn series_of_one_name_merge_by_time() {
        let s = |rows: &[i64]| Series {
            name: "cpu".into(),
            columns: vec!["time".into(), "value".into()],
            values: rows
                .iter()
                .map(|t| vec![Value::Time(*t), Value::Int(*t)])
                .collect(),
            ..Series::default()
        };
        let out = merge_series(vec![s(&[10, 30]), s(&[20])], true);
        assert_eq!(out.len(), 1);
        let times: Vec<&Value> = out[0].values.iter().map(|r| &r[0]).collect();
        assert_eq!(
            times,
            [&Value::Time(10), &Value::Time(20), &Value::Time(30)]
        );
    }
}
