//! What SHOW statements read from the `_series` index of every shard, and
//! the shape of their answers (one series per measurement, LIMIT/OFFSET).

use std::collections::{BTreeMap, BTreeSet};

use arrow_array::RecordBatch;
use shardhouse_common::names::sql_literal;
use shardhouse_eval::{Series, Value};
use shardhouse_influxql::time::{split_condition, time_range};
use shardhouse_influxql::{Expr, MeasurementMatch, MeasurementName, VarRef};

use super::super::fetch::{self, text_at};
use super::super::sqlgen::{self, Ref};
use super::super::Ctx;
use crate::error::Result;

/// Databases and their retention, across the cluster. Every node lists
/// what its replicas hold, and a follower may not have applied a drop the
/// leaders already answered for; so each listed database is confirmed on
/// the shards through the query path (a Raft read index per shard), and
/// one no shard holds any more is left out.
pub(super) async fn databases(ctx: &Ctx<'_>) -> Result<Vec<(String, i64)>> {
    let listed = ctx.router.cluster.databases_all().await?;
    // A retention policy's own storage (`db/rp`) is not a database.
    let listed = listed
        .into_iter()
        .filter(|d| !d.name.contains(shardhouse_common::names::POLICY_SEPARATOR));
    let checks = listed.map(|d| async move {
        let answers = fetch::on_every_shard(ctx.router, &d.name, "SELECT 1", ctx.deadline).await?;
        let held = answers.iter().any(|(_, b)| !b.is_empty());
        Ok::<_, crate::error::Error>(held.then_some((d.name, d.retention_ns)))
    });
    let mut out = Vec::new();
    for c in futures::future::join_all(checks).await {
        if let Some(d) = c? {
            out.push(d);
        }
    }
    Ok(out)
}

/// Every measurement of `db` with a series (InfluxDB and Prometheus).
pub async fn measurement_names(ctx: &Ctx<'_>, db: &str) -> Result<Vec<String>> {
    distinct_strings(
        ctx,
        &[db.to_owned()],
        "SELECT DISTINCT measurement FROM _series",
    )
    .await
}

pub(super) async fn from_measurements(
    ctx: &Ctx<'_>,
    db: &str,
    from: &[MeasurementName],
) -> Result<Vec<String>> {
    let all = measurement_names(ctx, db).await?;
    if from.is_empty() {
        return Ok(all);
    }
    let mut out: Vec<String> = all
        .into_iter()
        .filter(|n| from.iter().any(|m| measurement_matches(&m.name, n)))
        .collect();
    for m in from {
        if let MeasurementMatch::Name(n) = &m.name {
            if !out.contains(n) {
                out.push(n.clone());
            }
        }
    }
    out.sort();
    Ok(out)
}

pub(super) fn measurement_matches(m: &MeasurementMatch, name: &str) -> bool {
    match m {
        MeasurementMatch::Name(n) => n == name,
        MeasurementMatch::Regex(re) => regex::Regex::new(&re.0).is_ok_and(|p| p.is_match(name)),
    }
}

/// The tag condition of a SHOW statement's WHERE, as SQL over `_series`
/// (None: nothing but time). A time range (Grafana's `$timeFilter` in a
/// variable query, `time > now() - 1h`) is checked and then not used to
/// narrow the series: InfluxDB 1.8 narrows only to whole shard groups
/// (a week for an infinite retention), so its answer is the series of the
/// recent past, and listing every series of the measurement is the same
/// answer for a dashboard's variables (docs/api.md).
pub(super) fn tag_sql(c: &Expr, now: i64) -> Result<Option<String>> {
    tag_sql_with(c, now, &|v: &VarRef| Ref::Tag(v.name.clone()))
}

/// [`tag_sql`] with the names resolved by `resolve`. A tag compared with a
/// number or boolean never matches (tag values are strings, and InfluxDB
/// compares types strictly), so such a comparison is a constant.
pub(super) fn tag_sql_with(
    c: &Expr,
    now: i64,
    resolve: &dyn Fn(&VarRef) -> Ref,
) -> Result<Option<String>> {
    let parts = split_condition(c, |_| true)?;
    if let Some(t) = &parts.time {
        time_range(t, now)?;
    }
    let mut out = Vec::new();
    for part in [&parts.tags, &parts.fields].into_iter().flatten() {
        out.push(sqlgen::condition_sql(&strings_only(part), resolve)?);
    }
    Ok((!out.is_empty()).then(|| out.join(" AND ")))
}

/// `tag = 5000` as `false`, `tag != 5000` as `true` (see [`tag_sql_with`]).
fn strings_only(e: &Expr) -> Expr {
    use shardhouse_influxql::{BinaryOp, Literal};
    match e {
        Expr::Binary { op, lhs, rhs } => {
            let typed = |x: &Expr| {
                matches!(
                    x,
                    Expr::Literal(
                        Literal::Integer(_)
                            | Literal::Unsigned(_)
                            | Literal::Float(_)
                            | Literal::Boolean(_)
                            | Literal::Duration(_)
                    )
                )
            };
            let var = |x: &Expr| matches!(x, Expr::VarRef(_));
            if (var(lhs) && typed(rhs)) || (typed(lhs) && var(rhs)) {
                return Expr::Literal(Literal::Boolean(*op == BinaryOp::NotEq));
            }
            Expr::Binary {
                op: *op,
                lhs: Box::new(strings_only(lhs)),
                rhs: Box::new(strings_only(rhs)),
            }
        }
        other => other.clone(),
    }
}

/// `WHERE` over `_series` for a FROM list and a tag condition.
pub(super) fn push_where(
    sql: &mut String,
    from: &[MeasurementName],
    cond: Option<&Expr>,
    now: i64,
) -> Result<()> {
    push_where_with(sql, from, cond, now, &|v: &VarRef| Ref::Tag(v.name.clone()))
}

/// [`push_where`] with the condition's names resolved by `resolve`.
pub(super) fn push_where_with(
    sql: &mut String,
    from: &[MeasurementName],
    cond: Option<&Expr>,
    now: i64,
    resolve: &dyn Fn(&VarRef) -> Ref,
) -> Result<()> {
    let mut conds = Vec::new();
    let mut alts = Vec::new();
    for m in from {
        alts.push(match &m.name {
            MeasurementMatch::Name(n) => format!("measurement = {}", sql_literal(n)),
            MeasurementMatch::Regex(re) => {
                format!("match(toString(measurement), {})", sql_literal(&re.0))
            }
        });
    }
    if !alts.is_empty() {
        conds.push(format!("({})", alts.join(" OR ")));
    }
    if let Some(w) = cond
        .map(|c| tag_sql_with(c, now, resolve))
        .transpose()?
        .flatten()
    {
        conds.push(w);
    }
    if !conds.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conds.join(" AND "));
    }
    Ok(())
}

/// Every row `sql` returns on any shard of any of `storages`, as `read`
/// takes it from (batch, row): distinct and sorted.
pub(super) async fn distinct_rows<T: Ord>(
    ctx: &Ctx<'_>,
    storages: &[String],
    sql: &str,
    read: impl Fn(&RecordBatch, usize) -> T,
) -> Result<BTreeSet<T>> {
    let mut out = BTreeSet::new();
    for db in storages {
        let answers = fetch::on_every_shard(ctx.router, db, sql, ctx.deadline).await?;
        for (_, batches) in &answers {
            for b in batches {
                for row in 0..b.num_rows() {
                    out.insert(read(b, row));
                }
            }
        }
    }
    Ok(out)
}

/// The first column's values, distinct, sorted.
pub(super) async fn distinct_strings(
    ctx: &Ctx<'_>,
    storages: &[String],
    sql: &str,
) -> Result<Vec<String>> {
    let out = distinct_rows(ctx, storages, sql, |b, row| text_at(b.column(0), row)).await?;
    Ok(out.into_iter().collect())
}

/// (measurement, value) pairs, distinct, sorted.
pub(super) async fn string_pairs(
    ctx: &Ctx<'_>,
    storages: &[String],
    sql: &str,
) -> Result<BTreeSet<(String, String)>> {
    distinct_rows(ctx, storages, sql, |b, row| {
        (text_at(b.column(0), row), text_at(b.column(1), row))
    })
    .await
}

/// One series per measurement, `LIMIT`/`OFFSET` within each.
pub(super) fn per_measurement(
    pairs: BTreeSet<(String, String)>,
    columns: &[&str],
    lim: Option<u64>,
    off: Option<u64>,
    row: impl Fn(String) -> Vec<Value>,
) -> Vec<Series> {
    let mut by: BTreeMap<String, Vec<Vec<Value>>> = BTreeMap::new();
    for (m, v) in pairs {
        by.entry(m).or_default().push(row(v));
    }
    by.into_iter()
        .map(|(m, rows)| table(&m, columns, limit(rows, lim, off)))
        .filter(|t| !t.values.is_empty())
        .collect()
}

pub(super) fn limit(
    rows: Vec<Vec<Value>>,
    limit: Option<u64>,
    offset: Option<u64>,
) -> Vec<Vec<Value>> {
    let it = rows.into_iter().skip(offset.unwrap_or(0) as usize);
    match limit.filter(|l| *l > 0) {
        Some(l) => it.take(l as usize).collect(),
        None => it.collect(),
    }
}

pub(super) fn table(name: &str, columns: &[&str], values: Vec<Vec<Value>>) -> Series {
    Series {
        name: name.to_owned(),
        tags: BTreeMap::new(),
        columns: columns.iter().map(|c| c.to_string()).collect(),
        values,
        partial: false,
    }
}

pub(super) fn non_empty(t: Series) -> Vec<Series> {
    if t.values.is_empty() {
        Vec::new()
    } else {
        vec![t]
    }
}

pub(super) fn s(v: String) -> Value {
    Value::String(v)
}

/// `cpu,host=a,region=west`: the series key as InfluxDB prints it, with
/// line protocol's escapes.
pub fn series_key(measurement: &str, tags: &BTreeMap<String, String>) -> String {
    let esc = |t: &str, extra: &[char]| {
        let mut o = String::with_capacity(t.len());
        for c in t.chars() {
            if c == ',' || c == ' ' || extra.contains(&c) {
                o.push('\\');
            }
            o.push(c);
        }
        o
    };
    let mut key = esc(measurement, &[]);
    for (k, v) in tags {
        key.push(',');
        key.push_str(&esc(k, &['=']));
        key.push('=');
        key.push_str(&esc(v, &['=']));
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_compared_with_numbers_never_match() {
        let Ok(shardhouse_influxql::Statement::ShowTagValues(t)) =
            shardhouse_influxql::parse_statement(
                "SHOW TAG VALUES WITH KEY = host WHERE value = 5000 OR region != 1",
            )
        else {
            panic!("a SHOW TAG VALUES");
        };
        let sql = tag_sql(t.condition.as_ref().unwrap(), 0).unwrap().unwrap();
        assert_eq!(sql, "(false OR true)");
    }

    #[test]
    fn series_keys_escape_like_line_protocol() {
        let tags: BTreeMap<String, String> = [("host".to_string(), "a b,c=d".to_string())]
            .into_iter()
            .collect();
        assert_eq!(series_key("c p", &tags), "c\\ p,host=a\\ b\\,c\\=d");
    }
}
