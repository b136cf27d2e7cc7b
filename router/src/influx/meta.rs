//! InfluxQL statements other than `SELECT`: `SHOW ...` read the tag index
//! and the shards' columns; `CREATE/DROP DATABASE`, `DROP MEASUREMENT`,
//! `DROP SERIES`, `DELETE` and the retention-policy statements become the
//! storage operations every shard's log applies (router/src/storage_admin.rs).

use std::collections::{BTreeMap, BTreeSet};

use shardhouse_common::names::sql_literal;
use shardhouse_common::proto::{
    storage_op, tag_expr, tag_match, CreateDatabase, DeletePoints, DropDatabase, DropMeasurement,
    SetRetention, StorageOp, TagExpr, TagExprList, TagMatch,
};
use shardhouse_influxql::time::{split_condition, time_range, TimeRange};
use shardhouse_influxql::{
    BinaryOp, Expr, Literal, MeasurementMatch, MeasurementName, RetentionDuration, SeriesFilter,
    Statement, TagKeyMatch, VarRef,
};
use shardhouse_query::{Series, Value};

use super::fetch::{self, text_at};
use super::select::StmtResult;
use super::sqlgen::{self, Ref};
use super::Ctx;

/// The one retention policy each database has.
const AUTOGEN: &str = "autogen";

/// Runs a non-`SELECT` statement.
pub async fn run(ctx: &Ctx<'_>, stmt: &Statement) -> StmtResult<Vec<Series>> {
    let out = run_statement(ctx, stmt).await?;
    // An empty SHOW on a database nobody holds is InfluxDB's "database not
    // found" (asked only then, so answered SHOWs cost nothing more).
    let shown_db = match stmt {
        Statement::ShowMeasurements(m) => Some(m.database.as_deref()),
        Statement::ShowTagKeys(k) => Some(k.database.as_deref()),
        Statement::ShowTagValues(t) => Some(t.database.as_deref()),
        Statement::ShowFieldKeys(f) => Some(f.database.as_deref()),
        Statement::ShowSeries(q) => Some(q.database.as_deref()),
        _ => None,
    };
    if let Some(on) = shown_db {
        if out.iter().all(|s| s.values.is_empty()) {
            let db = database_of(ctx, on)?;
            if !super::select::database_exists(ctx, &db).await? {
                return Err(format!("database not found: {db}"));
            }
        }
    }
    Ok(out)
}

async fn run_statement(ctx: &Ctx<'_>, stmt: &Statement) -> StmtResult<Vec<Series>> {
    match stmt {
        Statement::ShowDatabases => {
            let dbs = databases(ctx).await?;
            Ok(vec![table(
                "databases",
                &["name"],
                dbs.into_iter().map(|(n, _)| vec![s(n)]).collect(),
            )])
        }
        Statement::ShowRetentionPolicies { database } => {
            let db = database_of(ctx, database.as_deref())?;
            let dbs = databases(ctx).await?;
            let Some((_, retention_ns)) = dbs.iter().find(|(n, _)| *n == db) else {
                return Err(format!("database not found: {db}"));
            };
            Ok(vec![table(
                "",
                &[
                    "name",
                    "duration",
                    "shardGroupDuration",
                    "replicaN",
                    "default",
                ],
                vec![vec![
                    s(AUTOGEN.into()),
                    s(crate::storage_admin::format_retention(*retention_ns)),
                    s("24h0m0s".into()),
                    Value::Int(1),
                    Value::Bool(true),
                ]],
            )])
        }
        Statement::ShowMeasurements(m) => {
            let db = database_of(ctx, m.database.as_deref())?;
            let mut sql = "SELECT DISTINCT measurement FROM _series".to_string();
            if let Some(c) = &m.condition {
                if let Some(w) = tag_sql(c, ctx.now)? {
                    sql.push_str(&format!(" WHERE {w}"));
                }
            }
            let mut names = distinct_strings(ctx, &db, &sql).await?;
            if let Some(w) = &m.with_measurement {
                names.retain(|n| measurement_matches(w, n));
            }
            let rows = limit(
                names.into_iter().map(|n| vec![s(n)]).collect(),
                m.limit,
                m.offset,
            );
            Ok(non_empty(table("measurements", &["name"], rows)))
        }
        Statement::ShowTagKeys(k) => {
            let db = database_of(ctx, k.database.as_deref())?;
            let mut sql = "SELECT measurement, arrayJoin(arrayMap(x -> toString(x), mapKeys(tags))) AS k FROM _series".to_string();
            push_where(&mut sql, &k.from, k.condition.as_ref(), ctx.now)?;
            sql.push_str(" GROUP BY measurement, k");
            let pairs = string_pairs(ctx, &db, &sql).await?;
            Ok(per_measurement(
                pairs,
                &["tagKey"],
                k.limit,
                k.offset,
                |v| vec![s(v)],
            ))
        }
        Statement::ShowTagValues(t) => {
            let db = database_of(ctx, t.database.as_deref())?;
            let mut sql = "SELECT measurement, concat(toString(k), '\\0', v) FROM _series ARRAY JOIN mapKeys(tags) AS k, mapValues(tags) AS v".to_string();
            let key_cond = match &t.key {
                TagKeyMatch::Eq(k) => format!("k = {}", sql_literal(k)),
                TagKeyMatch::NotEq(k) => format!("k != {}", sql_literal(k)),
                TagKeyMatch::Regex(re) => format!("match(toString(k), {})", sql_literal(&re.0)),
                TagKeyMatch::NotRegex(re) => {
                    format!("NOT match(toString(k), {})", sql_literal(&re.0))
                }
                TagKeyMatch::In(keys) => format!(
                    "k IN ({})",
                    keys.iter()
                        .map(|k| sql_literal(k))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            push_where(&mut sql, &t.from, t.condition.as_ref(), ctx.now)?;
            sql.push_str(if sql.contains(" WHERE ") {
                " AND "
            } else {
                " WHERE "
            });
            sql.push_str(&key_cond);
            sql.push_str(" GROUP BY 1, 2");
            let pairs = string_pairs(ctx, &db, &sql).await?;
            Ok(per_measurement(
                pairs,
                &["key", "value"],
                t.limit,
                t.offset,
                |kv| {
                    let (k, v) = kv.split_once('\0').unwrap_or((kv.as_str(), ""));
                    vec![s(k.to_owned()), s(v.to_owned())]
                },
            ))
        }
        Statement::ShowFieldKeys(f) => {
            let db = database_of(ctx, f.database.as_deref())?;
            let mut out = Vec::new();
            for m in from_measurements(ctx, &db, &f.from).await? {
                let schema = super::select::schema(ctx, &db, &m).await?;
                if schema.samples && !measurement_names(ctx, &db).await?.contains(&m) {
                    continue;
                }
                let rows = schema
                    .fields
                    .iter()
                    .map(|(n, t)| vec![s(n.clone()), s((*t).to_owned())])
                    .collect();
                let rows = limit(rows, f.limit, f.offset);
                if !rows.is_empty() {
                    out.push(table(&m, &["fieldKey", "fieldType"], rows));
                }
            }
            Ok(out)
        }
        Statement::ShowSeries(q) => {
            let db = database_of(ctx, q.database.as_deref())?;
            let mut sql = "SELECT measurement, arrayMap(x -> toString(x), mapKeys(tags)), mapValues(tags) FROM _series".to_string();
            push_where(&mut sql, &q.from, q.condition.as_ref(), ctx.now)?;
            let answers = fetch::on_every_shard(ctx.router, &db, &sql, ctx.deadline)
                .await
                .map_err(|e| e.to_string())?;
            let mut keys = BTreeSet::new();
            for (_, batches) in &answers {
                for b in batches {
                    for row in 0..b.num_rows() {
                        let m = text_at(b.column(0), row);
                        let tags: BTreeMap<String, String> = fetch::strings_at(b.column(1), row)
                            .into_iter()
                            .zip(fetch::strings_at(b.column(2), row))
                            .collect();
                        keys.insert(series_key(&m, &tags));
                    }
                }
            }
            let rows = limit(
                keys.into_iter().map(|k| vec![s(k)]).collect(),
                q.limit,
                q.offset,
            );
            Ok(non_empty(table("", &["key"], rows)))
        }
        Statement::CreateDatabase(c) => {
            let retention_ns = match c.retention_policy.as_ref().and_then(|p| p.duration) {
                Some(d) => retention(d)?,
                None => 0,
            };
            if let Some(name) = c.retention_policy.as_ref().and_then(|p| p.name.as_deref()) {
                if name != AUTOGEN {
                    return Err(format!(
                        "retention policy {name:?}: each database has one policy, {AUTOGEN}; leave NAME out"
                    ));
                }
            }
            valid_database(&c.name)?;
            let op = storage_op::Op::CreateDatabase(CreateDatabase {
                database: c.name.clone(),
                retention_ns,
            });
            apply(ctx, op).await
        }
        Statement::DropDatabase { name } => {
            valid_database(name)?;
            apply(
                ctx,
                storage_op::Op::DropDatabase(DropDatabase {
                    database: name.clone(),
                }),
            )
            .await
        }
        Statement::DropMeasurement { name } => {
            let db = database_of(ctx, None)?;
            apply(
                ctx,
                storage_op::Op::DropMeasurement(DropMeasurement {
                    database: db,
                    measurement: name.clone(),
                }),
            )
            .await
        }
        Statement::Delete(f) => delete(ctx, f, false).await,
        Statement::DropSeries(f) => delete(ctx, f, true).await,
        Statement::AlterRetentionPolicy(a) => {
            if a.name != AUTOGEN {
                return Err(format!("retention policy not found: {}", a.name));
            }
            let Some(d) = a.duration else {
                return Err("only DURATION can be altered (one replica count and shard duration are cluster settings)".into());
            };
            valid_database(&a.database)?;
            apply(
                ctx,
                storage_op::Op::SetRetention(SetRetention {
                    database: a.database.clone(),
                    retention_ns: retention(d)?,
                }),
            )
            .await
        }
        other => Err(format!(
            "{} is not supported by Shardhouse",
            statement_name(other)
        )),
    }
}

fn statement_name(stmt: &Statement) -> &'static str {
    match stmt {
        Statement::Explain { .. } => "EXPLAIN",
        Statement::ShowCardinality(_) => "SHOW ... CARDINALITY",
        Statement::CreateRetentionPolicy(_) => {
            "CREATE RETENTION POLICY (each database has one policy, autogen: use ALTER RETENTION POLICY autogen ON <db> DURATION <d>)"
        }
        Statement::DropRetentionPolicy { .. } => "DROP RETENTION POLICY",
        _ => "this statement",
    }
}

async fn apply(ctx: &Ctx<'_>, op: storage_op::Op) -> StmtResult<Vec<Series>> {
    ctx.router
        .cluster
        .storage_all(&StorageOp { op: Some(op) })
        .await
        .map_err(|e| e.to_string())?;
    Ok(Vec::new())
}

fn valid_database(name: &str) -> StmtResult<()> {
    shardhouse_common::names::validate_database(name).map_err(|e| e.to_string())
}

fn retention(d: RetentionDuration) -> StmtResult<i64> {
    match d {
        RetentionDuration::Infinite => Ok(0),
        RetentionDuration::Nanos(0) => Ok(0),
        RetentionDuration::Nanos(n) if n < 3_600_000_000_000 => {
            Err("retention policy duration must be at least 1h0m0s".into())
        }
        RetentionDuration::Nanos(n) => Ok(n),
    }
}

/// `DELETE` / `DROP SERIES`: tags and time only, as in InfluxDB.
async fn delete(ctx: &Ctx<'_>, f: &SeriesFilter, drop_series: bool) -> StmtResult<Vec<Series>> {
    let db = database_of(ctx, None)?;
    let (range, tags) = match &f.condition {
        None => (TimeRange::UNBOUNDED, None),
        Some(c) => {
            let parts = split_condition(c, |_| true).map_err(|e| e.to_string())?;
            if parts.fields.is_some() {
                return Err(format!(
                    "fields not supported in WHERE clause during deletion: {c}"
                ));
            }
            if drop_series && parts.time.is_some() {
                return Err("DROP SERIES doesn't support time in WHERE clause".into());
            }
            let range = match &parts.time {
                Some(t) => time_range(t, ctx.now).map_err(|e| e.to_string())?,
                None => TimeRange::UNBOUNDED,
            };
            (range, parts.tags.as_ref().map(tag_expr_of).transpose()?)
        }
    };
    let mut names: Vec<String> = Vec::new();
    for m in &f.from {
        match &m.name {
            MeasurementMatch::Name(n) => names.push(n.clone()),
            MeasurementMatch::Regex(_) => {
                names.extend(from_measurements(ctx, &db, std::slice::from_ref(m)).await?)
            }
        }
    }
    if f.from.is_empty() {
        names.push(String::new());
    }
    for measurement in names {
        let op = storage_op::Op::DeletePoints(DeletePoints {
            database: db.clone(),
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
fn tag_expr_of(e: &Expr) -> StmtResult<TagExpr> {
    let bad = || {
        format!("only tag comparisons (=, !=, =~, !~) joined by AND/OR can select points to delete, found {e}")
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

/// The statement's database: `ON db`, else the request's `db`.
fn database_of(ctx: &Ctx<'_>, on: Option<&str>) -> StmtResult<String> {
    match on.filter(|d| !d.is_empty()).unwrap_or(ctx.database) {
        "" => Err("database name required".into()),
        db => Ok(db.to_owned()),
    }
}

/// Databases and their retention, across the cluster. Every node lists
/// what its replicas hold, and a follower may not have applied a drop the
/// leaders already answered for; so each listed database is confirmed on
/// the shards through the query path (a Raft read index per shard), and
/// one no shard holds any more is left out.
async fn databases(ctx: &Ctx<'_>) -> StmtResult<Vec<(String, i64)>> {
    let listed = ctx
        .router
        .cluster
        .databases_all()
        .await
        .map_err(|e| e.to_string())?;
    let checks = listed.into_iter().map(|d| async move {
        let answers = fetch::on_every_shard(ctx.router, &d.name, "SELECT 1", ctx.deadline).await?;
        let held = answers.iter().any(|(_, b)| !b.is_empty());
        Ok::<_, crate::error::Error>(held.then_some((d.name, d.retention_ns)))
    });
    let mut out = Vec::new();
    for c in futures::future::join_all(checks).await {
        if let Some(d) = c.map_err(|e| e.to_string())? {
            out.push(d);
        }
    }
    Ok(out)
}

/// Every measurement of `db` with a series (InfluxDB and Prometheus).
pub async fn measurement_names(ctx: &Ctx<'_>, db: &str) -> StmtResult<Vec<String>> {
    distinct_strings(ctx, db, "SELECT DISTINCT measurement FROM _series").await
}

async fn from_measurements(
    ctx: &Ctx<'_>,
    db: &str,
    from: &[MeasurementName],
) -> StmtResult<Vec<String>> {
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

fn measurement_matches(m: &MeasurementMatch, name: &str) -> bool {
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
fn tag_sql(c: &Expr, now: i64) -> StmtResult<Option<String>> {
    let parts = split_condition(c, |_| true).map_err(|e| e.to_string())?;
    if let Some(t) = &parts.time {
        time_range(t, now).map_err(|e| e.to_string())?;
    }
    let mut out = Vec::new();
    for part in [&parts.tags, &parts.fields].into_iter().flatten() {
        out.push(sqlgen::condition_sql(part, &|v: &VarRef| {
            Ref::Tag(v.name.clone())
        })?);
    }
    Ok((!out.is_empty()).then(|| out.join(" AND ")))
}

/// `WHERE` over `_series` for a FROM list and a tag condition.
fn push_where(
    sql: &mut String,
    from: &[MeasurementName],
    cond: Option<&Expr>,
    now: i64,
) -> StmtResult<()> {
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
    if let Some(w) = cond.map(|c| tag_sql(c, now)).transpose()?.flatten() {
        conds.push(w);
    }
    if !conds.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conds.join(" AND "));
    }
    Ok(())
}

async fn distinct_strings(ctx: &Ctx<'_>, db: &str, sql: &str) -> StmtResult<Vec<String>> {
    let answers = fetch::on_every_shard(ctx.router, db, sql, ctx.deadline)
        .await
        .map_err(|e| e.to_string())?;
    let mut out = BTreeSet::new();
    for (_, batches) in &answers {
        for b in batches {
            for row in 0..b.num_rows() {
                out.insert(text_at(b.column(0), row));
            }
        }
    }
    Ok(out.into_iter().collect())
}

/// (measurement, value) pairs, distinct, sorted.
async fn string_pairs(
    ctx: &Ctx<'_>,
    db: &str,
    sql: &str,
) -> StmtResult<BTreeSet<(String, String)>> {
    let answers = fetch::on_every_shard(ctx.router, db, sql, ctx.deadline)
        .await
        .map_err(|e| e.to_string())?;
    let mut out = BTreeSet::new();
    for (_, batches) in &answers {
        for b in batches {
            for row in 0..b.num_rows() {
                out.insert((text_at(b.column(0), row), text_at(b.column(1), row)));
            }
        }
    }
    Ok(out)
}

/// One series per measurement, `LIMIT`/`OFFSET` within each.
fn per_measurement(
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

fn limit(rows: Vec<Vec<Value>>, limit: Option<u64>, offset: Option<u64>) -> Vec<Vec<Value>> {
    let it = rows.into_iter().skip(offset.unwrap_or(0) as usize);
    match limit.filter(|l| *l > 0) {
        Some(l) => it.take(l as usize).collect(),
        None => it.collect(),
    }
}

fn table(name: &str, columns: &[&str], values: Vec<Vec<Value>>) -> Series {
    Series {
        name: name.to_owned(),
        tags: BTreeMap::new(),
        columns: columns.iter().map(|c| c.to_string()).collect(),
        values,
        partial: false,
    }
}

fn non_empty(t: Series) -> Vec<Series> {
    if t.values.is_empty() {
        Vec::new()
    } else {
        vec![t]
    }
}

fn s(v: String) -> Value {
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
    fn series_keys_escape_like_line_protocol() {
        let tags: BTreeMap<String, String> = [("host".to_string(), "a b,c=d".to_string())]
            .into_iter()
            .collect();
        assert_eq!(series_key("c p", &tags), "c\\ p,host=a\\ b\\,c\\=d");
    }

    #[test]
    fn retention_durations_follow_influxdb() {
        assert_eq!(retention(RetentionDuration::Infinite), Ok(0));
        assert!(retention(RetentionDuration::Nanos(60_000_000_000)).is_err());
        assert_eq!(
            retention(RetentionDuration::Nanos(86_400_000_000_000)),
            Ok(86_400_000_000_000)
        );
    }
}
