//! `SELECT ... INTO [db.][rp.](measurement | :MEASUREMENT)`: the SELECT
//! runs as any other, its rows become points (InfluxDB's
//! `convertRowToPoints`) and go through the router's durable write path;
//! the answer is the count written, at time 0, in a series named `result`.
//!
//! What becomes what, as in InfluxDB 1.8: a series' `GROUP BY` tags stay
//! tags; every other column is a field, tags included (`SELECT *` without
//! `GROUP BY *` turns tags into fields), except the tag arguments of
//! `top()`/`bottom()`, which are written as tags. Null values are left
//! out, and a row left with no field is not written (nor counted).

use shardhouse_common::lineproto::{FieldValue, OwnedFieldValue, Precision};
use shardhouse_eval::{Series, Value};
use shardhouse_influxql::{Expr, IntoClause, SelectStatement};

use super::select;
use super::Ctx;
use crate::error::{Error, Result};
use crate::state::Router;
use crate::write::WriteOutcome;

/// One point to write.
#[derive(Debug, Clone, PartialEq)]
pub struct IntoPoint {
    pub measurement: String,
    pub tags: Vec<(String, String)>,
    pub fields: Vec<(String, OwnedFieldValue)>,
    pub time: i64,
}

/// Runs a `SELECT ... INTO`.
pub async fn run(ctx: &Ctx<'_>, stmt: &SelectStatement) -> Result<Vec<Series>> {
    let Some(into) = &stmt.into else {
        return select::run(ctx, stmt).await;
    };
    let database = into
        .database
        .as_deref()
        .filter(|d| !d.is_empty())
        .unwrap_or(ctx.database);
    if database.is_empty() {
        return Err(Error::statement("no database in target"));
    }
    let query = SelectStatement {
        into: None,
        ..stmt.clone()
    };
    let rows = select::run(ctx, &query).await?;
    let points = to_points(&rows, into, &written_as_tags(stmt));
    let written = if points.is_empty() {
        0
    } else {
        let outcome = write_points(
            ctx.router,
            database,
            into.retention_policy.as_deref(),
            &points,
        )
        .await?;
        if let Some(e) = outcome.partial_error("point") {
            return Err(Error::statement(e));
        }
        outcome.summary.points
    };
    Ok(vec![Series {
        name: "result".into(),
        columns: vec!["time".into(), "written".into()],
        values: vec![vec![Value::Time(0), Value::Int(written as i64)]],
        ..Series::default()
    }])
}

/// Writes `points` into `database` and its retention policy `rp` (`None`:
/// the database's default) through the same path as `/write`. The
/// router's write path has one policy per database today, so `rp` stops
/// here; this is the one place a policy-aware write call goes.
pub async fn write_points(
    router: &Router,
    database: &str,
    rp: Option<&str>,
    points: &[IntoPoint],
) -> Result<WriteOutcome> {
    let budget: usize = points
        .iter()
        .map(|p| {
            p.measurement.len()
                + p.tags
                    .iter()
                    .map(|(k, v)| k.len() + v.len() + 2)
                    .sum::<usize>()
                + p.fields.iter().map(|(k, _)| k.len() + 24).sum::<usize>()
                + 20
        })
        .sum();
    router
        .write("into", database, rp, budget, Precision::Nanosecond, |b| {
            for (i, p) in points.iter().enumerate() {
                let tags: Vec<(&str, &str)> = p
                    .tags
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                let fields = p.fields.iter().map(|(k, v)| (k.as_bytes(), borrowed(v)));
                if let Err((reason, message)) =
                    b.add_point(&p.measurement, &tags, fields, Some(p.time))
                {
                    b.reject(i + 1, reason, message);
                }
            }
        })
        .await
}

fn borrowed(v: &OwnedFieldValue) -> FieldValue<'_> {
    match v {
        OwnedFieldValue::Float(f) => FieldValue::Float(*f),
        OwnedFieldValue::Integer(i) => FieldValue::Integer(*i),
        OwnedFieldValue::Unsigned(u) => FieldValue::Unsigned(*u),
        OwnedFieldValue::String(s) => FieldValue::String(s),
        OwnedFieldValue::Boolean(b) => FieldValue::Boolean(*b),
    }
}

/// The columns written as tags besides the `GROUP BY` ones: the tag
/// arguments of `top()` and `bottom()` (`top(value, host, 2)`).
pub fn written_as_tags(stmt: &SelectStatement) -> Vec<String> {
    stmt.fields
        .iter()
        .filter_map(|f| match &f.expr {
            Expr::Call(c) if (c.name == "top" || c.name == "bottom") && c.args.len() > 2 => {
                Some(&c.args[1..c.args.len() - 1])
            }
            _ => None,
        })
        .flatten()
        .filter_map(|a| match a {
            Expr::VarRef(v) => Some(v.name.clone()),
            _ => None,
        })
        .collect()
}

/// The points of a SELECT's series (pure; see the module's doc).
pub fn to_points(series: &[Series], into: &IntoClause, tag_columns: &[String]) -> Vec<IntoPoint> {
    let mut out = Vec::new();
    for s in series {
        let measurement = into.measurement.clone().unwrap_or_else(|| s.name.clone());
        let Some(time_col) = s.columns.iter().position(|c| c == "time") else {
            continue;
        };
        for row in &s.values {
            let Some(Value::Time(time) | Value::Int(time)) = row.get(time_col).cloned() else {
                continue;
            };
            let mut tags: Vec<(String, String)> =
                s.tags.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            let mut fields = Vec::new();
            for (i, (col, v)) in s.columns.iter().zip(row).enumerate() {
                if i == time_col {
                    continue;
                }
                if tag_columns.contains(col) {
                    if let Value::String(t) = v {
                        tags.push((col.clone(), t.clone()));
                    }
                    continue;
                }
                if let Some(f) = field_value(v) {
                    fields.push((col.clone(), f));
                }
            }
            // A GROUP BY tag a series lacks is "" here: not a tag to write.
            tags.retain(|(_, v)| !v.is_empty());
            if !fields.is_empty() {
                out.push(IntoPoint {
                    measurement: measurement.clone(),
                    tags,
                    fields,
                    time,
                });
            }
        }
    }
    out
}

fn field_value(v: &Value) -> Option<OwnedFieldValue> {
    Some(match v {
        Value::Null => return None,
        Value::Float(f) => OwnedFieldValue::Float(*f),
        Value::Int(i) | Value::Time(i) => OwnedFieldValue::Integer(*i),
        Value::UInt(u) => OwnedFieldValue::Unsigned(*u),
        Value::Bool(b) => OwnedFieldValue::Boolean(*b),
        Value::String(s) => OwnedFieldValue::String(s.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn select(q: &str) -> SelectStatement {
        match shardhouse_influxql::parse_statement(q).unwrap() {
            shardhouse_influxql::Statement::Select(s) => *s,
            other => panic!("{other:?}"),
        }
    }

    fn series(
        name: &str,
        tags: &[(&str, &str)],
        columns: &[&str],
        rows: Vec<Vec<Value>>,
    ) -> Series {
        Series {
            name: name.into(),
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            values: rows,
            partial: false,
        }
    }

    #[test]
    fn rows_become_points_with_nulls_left_out() {
        let s = select("SELECT * INTO baz FROM foo");
        let rows = series(
            "foo",
            &[],
            &["time", "foobar", "value"],
            vec![
                vec![Value::Time(1), Value::Null, Value::Float(1.0)],
                vec![Value::Time(2), Value::Int(3), Value::Float(4.0)],
                vec![Value::Time(3), Value::Null, Value::Null],
            ],
        );
        let points = to_points(&[rows], s.into.as_ref().unwrap(), &written_as_tags(&s));
        assert_eq!(points.len(), 2, "a row of nulls is not written");
        assert_eq!(points[0].measurement, "baz");
        assert_eq!(
            points[0].fields,
            vec![("value".into(), OwnedFieldValue::Float(1.0))]
        );
        assert_eq!(
            points[1].fields,
            vec![
                ("foobar".into(), OwnedFieldValue::Integer(3)),
                ("value".into(), OwnedFieldValue::Float(4.0))
            ]
        );
        assert_eq!(points[1].time, 2);
    }

    #[test]
    fn group_by_tags_stay_tags_and_other_tags_become_fields() {
        let s = select("SELECT * INTO :MEASUREMENT FROM cpu GROUP BY host");
        let rows = series(
            "cpu",
            &[("host", "a")],
            &["time", "region", "v"],
            vec![vec![
                Value::Time(5),
                Value::String("west".into()),
                Value::Int(1),
            ]],
        );
        let p = &to_points(&[rows], s.into.as_ref().unwrap(), &written_as_tags(&s))[0];
        assert_eq!(p.measurement, "cpu", ":MEASUREMENT keeps the source's name");
        assert_eq!(p.tags, vec![("host".into(), "a".into())]);
        assert_eq!(
            p.fields,
            vec![
                ("region".into(), OwnedFieldValue::String("west".into())),
                ("v".into(), OwnedFieldValue::Integer(1))
            ]
        );
    }

    #[test]
    fn top_tag_arguments_are_written_as_tags() {
        let s = select("SELECT top(value, host, 2) INTO cpu_top FROM cpu");
        assert_eq!(written_as_tags(&s), vec!["host".to_string()]);
        let rows = series(
            "cpu",
            &[],
            &["time", "top", "host"],
            vec![vec![
                Value::Time(5),
                Value::Float(7.0),
                Value::String("s5".into()),
            ]],
        );
        let p = &to_points(&[rows], s.into.as_ref().unwrap(), &written_as_tags(&s))[0];
        assert_eq!(p.tags, vec![("host".into(), "s5".into())]);
        assert_eq!(p.fields, vec![("top".into(), OwnedFieldValue::Float(7.0))]);
        assert!(written_as_tags(&select("SELECT top(value, 2) INTO x FROM cpu")).is_empty());
    }
}
