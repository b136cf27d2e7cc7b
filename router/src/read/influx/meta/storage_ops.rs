//! `CREATE/DROP DATABASE`, `DROP MEASUREMENT`, `DELETE`, `DROP SERIES` and
//! `ALTER RETENTION POLICY` as the storage operations every shard's log
//! applies.

use shardhouse_common::proto::{
    storage_op, tag_expr, tag_match, DeletePoints, StorageOp, TagExpr, TagExprList, TagMatch,
};
use shardhouse_eval::Series;
use shardhouse_influxql::time::{split_condition, time_range, TimeRange};
use shardhouse_influxql::{BinaryOp, Expr, Literal, MeasurementMatch, SeriesFilter, VarRef};

use super::super::Ctx;
use super::database_of;
use super::series_index::from_measurements;
use crate::error::{Error, Result};

pub(super) async fn apply(ctx: &Ctx<'_>, op: storage_op::Op) -> Result<Vec<Series>> {
    ctx.router
        .cluster
        .storage_all(&StorageOp { op: Some(op) })
        .await?;
    Ok(Vec::new())
}

pub(super) fn valid_database(name: &str) -> Result<()> {
    influx_valid_name(name)?;
    shardhouse_common::names::validate_database(name).map_err(Error::statement)
}

/// InfluxDB's rule for database and retention policy names (`ValidName`),
/// in its words: not `.` or `..`, no `/` or `\`, no control characters.
pub(super) fn influx_valid_name(name: &str) -> Result<()> {
    let bad = name == "."
        || name == ".."
        || name.contains(['/', '\\'])
        || name.chars().any(char::is_control);
    if bad {
        return Err(Error::statement("invalid name"));
    }
    Ok(())
}

/// `DELETE` / `DROP SERIES`: tags and time only, as in InfluxDB.
pub(super) async fn delete(
    ctx: &Ctx<'_>,
    f: &SeriesFilter,
    drop_series: bool,
) -> Result<Vec<Series>> {
    let db = database_of(ctx, None)?;
    let (range, tags) = match &f.condition {
        None => (TimeRange::UNBOUNDED, None),
        Some(c) => {
            let parts = split_condition(c, |_| true)?;
            if parts.fields.is_some() {
                return Err(Error::statement(format!(
                    "fields not supported in WHERE clause during deletion: {c}"
                )));
            }
            if drop_series && parts.time.is_some() {
                return Err(Error::statement(
                    "DROP SERIES doesn't support time in WHERE clause",
                ));
            }
            let range = match &parts.time {
                Some(t) => time_range(t, ctx.now)?,
                None => TimeRange::UNBOUNDED,
            };
            (range, parts.tags.as_ref().map(tag_expr_of).transpose()?)
        }
    };
    // InfluxDB deletes from every retention policy of the database; a
    // regex names the measurements each policy holds.
    let mut targets = Vec::new();
    for storage in ctx.router.policies.storages(&db) {
        if f.from.is_empty() {
            targets.push((storage.clone(), String::new()));
        }
        for m in &f.from {
            match &m.name {
                MeasurementMatch::Name(n) => targets.push((storage.clone(), n.clone())),
                MeasurementMatch::Regex(_) => {
                    for n in from_measurements(ctx, &storage, std::slice::from_ref(m)).await? {
                        targets.push((storage.clone(), n));
                    }
                }
            }
        }
    }
    for (storage, measurement) in targets {
        let op = storage_op::Op::DeletePoints(DeletePoints {
            database: storage.clone(),
            measurement,
            min_time_ns: range.start,
            max_time_ns: if range.has_end() {
                range.end - 1
            } else {
                i64::MAX
            },
            predicate: tags.clone(),
            drop_series,
        });
        apply(ctx, op).await?;
    }
    Ok(Vec::new())
}

/// A tag condition as the storage operation's predicate.
pub(super) fn tag_expr_of(e: &Expr) -> Result<TagExpr> {
    let bad = || {
        Error::statement(format!("only tag comparisons (=, !=, =~, !~) joined by AND/OR can select points to delete, found {e}"))
    };
    let Expr::Binary { op, lhs, rhs } = e else {
        return Err(bad());
    };
    let list = |items| TagExprList { items };
    let node = |expr| TagExpr { expr: Some(expr) };
    match op {
        BinaryOp::And => Ok(node(tag_expr::Expr::All(list(vec![
            tag_expr_of(lhs)?,
            tag_expr_of(rhs)?,
        ])))),
        BinaryOp::Or => Ok(node(tag_expr::Expr::Any(list(vec![
            tag_expr_of(lhs)?,
            tag_expr_of(rhs)?,
        ])))),
        BinaryOp::Eq | BinaryOp::NotEq | BinaryOp::EqRegex | BinaryOp::NotEqRegex => {
            let Expr::VarRef(VarRef { name: key, .. }) = lhs.as_ref() else {
                return Err(bad());
            };
            let value = match rhs.as_ref() {
                Expr::Literal(Literal::String(v)) => v.clone(),
                Expr::Regex(re) => re.0.clone(),
                _ => return Err(bad()),
            };
            let op = match op {
                BinaryOp::Eq => tag_match::Op::Eq,
                BinaryOp::NotEq => tag_match::Op::Neq,
                BinaryOp::EqRegex => tag_match::Op::Regex,
                _ => tag_match::Op::NotRegex,
            };
            Ok(node(tag_expr::Expr::Match(TagMatch {
                key: key.clone(),
                op: op as i32,
                value,
            })))
        }
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardhouse_influxql::{parse_statement, Statement};

    fn delete_where(text: &str) -> Expr {
        let Statement::Delete(f) = parse_statement(&format!("DELETE FROM m WHERE {text}")).unwrap()
        else {
            unreachable!()
        };
        f.condition.unwrap()
    }

    #[test]
    fn delete_conditions_become_tag_predicates() {
        let e = tag_expr_of(&delete_where("host = 'a' OR region =~ /^w/")).unwrap();
        let Some(tag_expr::Expr::Any(list)) = e.expr else {
            panic!("{e:?}")
        };
        assert_eq!(list.items.len(), 2);
        let Some(tag_expr::Expr::Match(m)) = &list.items[1].expr else {
            panic!()
        };
        assert_eq!((m.key.as_str(), m.value.as_str()), ("region", "^w"));
        assert_eq!(m.op, tag_match::Op::Regex as i32);
        assert!(tag_expr_of(&delete_where("value > 1")).is_err());
    }

    #[test]
    fn names_influxdb_refuses() {
        for bad in [".", "..", "a/b", "a\\b", "a\u{1}"] {
            assert_eq!(
                influx_valid_name(bad).unwrap_err().to_string(),
                "invalid name",
                "{bad:?}"
            );
        }
        assert!(influx_valid_name("db0").is_ok());
        assert!(influx_valid_name("a.b").is_ok());
    }
}
