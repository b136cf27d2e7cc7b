//! InfluxQL statements other than `SELECT`: `SHOW ...` read the tag index
//! and the shards' columns; `CREATE/DROP DATABASE`, `DROP MEASUREMENT`,
//! `DROP SERIES`, `DELETE` and the retention-policy statements become the
//! storage operations every shard's log applies (`cluster::storage`).
//! This module dispatches; `series_index` reads the `_series` index and
//! shapes the answers, `storage_ops` builds the storage operations.

use std::collections::BTreeMap;

use shardhouse_common::names::sql_literal;
use shardhouse_common::proto::{storage_op, DropMeasurement};
use shardhouse_eval::Series;
use shardhouse_influxql::{
    ShowMeasurements, ShowSeries, ShowTagKeys, ShowTagValues, Statement, TagKeyMatch,
};

use super::fetch::{self, text_at};
use super::sqlgen::Ref;
use super::Ctx;
use crate::error::{Error, Result};

mod cardinality;
mod continuous;
mod measurement_filter;
mod policies;
mod series_index;
mod storage_ops;
mod users;

use measurement_filter::{MeasurementFilter, TagCounts};
use series_index::{
    databases, distinct_rows, distinct_strings, from_measurements, limit, measurement_matches,
    non_empty, per_measurement, push_where, push_where_with, s, string_pairs, table, tag_sql,
};
pub use series_index::{measurement_names, series_key};
use storage_ops::{apply, delete};

/// Runs a non-`SELECT` statement.
pub async fn run(ctx: &Ctx<'_>, stmt: &Statement) -> Result<Vec<Series>> {
    let out = run_statement(ctx, stmt).await?;
    // An empty SHOW on a database nobody holds is InfluxDB's "database not
    // found" (asked only then, so answered SHOWs cost nothing more).
    let shown_db = match stmt {
        Statement::ShowMeasurements(m) => Some(m.database.as_deref()),
        Statement::ShowTagKeys(k) => Some(k.database.as_deref()),
        Statement::ShowTagValues(t) => Some(t.database.as_deref()),
        Statement::ShowFieldKeys(f) => Some(f.database.as_deref()),
        Statement::ShowSeries(q) => Some(q.database.as_deref()),
        Statement::ShowCardinality(c) if !cardinality::estimated(c) => Some(c.database.as_deref()),
        _ => None,
    };
    if let Some(on) = shown_db {
        if out.iter().all(|s| s.values.is_empty()) {
            let db = database_of(ctx, on)?;
            if !super::select::database_exists(ctx, &db).await? {
                return Err(Error::NotFound(format!("database not found: {db}")));
            }
        }
    }
    Ok(out)
}

async fn run_statement(ctx: &Ctx<'_>, stmt: &Statement) -> Result<Vec<Series>> {
    if let Some(out) = policies::run(ctx, stmt).await {
        return out;
    }
    if let Some(out) = continuous::run(ctx, stmt).await {
        return out;
    }
    match stmt {
        Statement::ShowCardinality(c) => {
            let scope = scope_of(stmt);
            let listed = match cardinality::listing(c)? {
                // Each tag is tested on its own series: a tag the series
                // lacks matches nothing (InfluxDB's `_tags` evaluation).
                Statement::ShowTagValues(t) => tag_values(ctx, &t, scope, true).await?,
                // Counted by series, as InfluxDB's `_series` count.
                Statement::ShowMeasurements(m) => measurements(ctx, &m, scope, true).await?,
                Statement::ShowTagKeys(k) => tag_keys(ctx, &k, scope).await?,
                Statement::ShowSeries(q) => series(ctx, &q, scope).await?,
                listing => Box::pin(run_statement(ctx, &listing)).await?,
            };
            Ok(cardinality::counted(c, listed))
        }
        Statement::ShowDatabases => {
            let mut dbs = databases(ctx).await?;
            dbs.retain(|(n, _)| ctx.lists_database(n));
            Ok(vec![table(
                "databases",
                &["name"],
                dbs.into_iter().map(|(n, _)| vec![s(n)]).collect(),
            )])
        }
        Statement::ShowMeasurements(m) => measurements(ctx, m, scope_of(stmt), false).await,
        Statement::ShowTagKeys(k) => tag_keys(ctx, k, scope_of(stmt)).await,
        Statement::ShowTagValues(t) => tag_values(ctx, t, scope_of(stmt), false).await,
        Statement::ShowFieldKeys(f) => {
            let db = storage_of(ctx, f.database.as_deref())?;
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
        Statement::ShowSeries(q) => series(ctx, q, scope_of(stmt)).await,
        Statement::DropMeasurement { name } => {
            let db = database_of(ctx, None)?;
            for storage in ctx.router.policies.storages(&db) {
                let op = storage_op::Op::DropMeasurement(DropMeasurement {
                    database: storage,
                    measurement: name.clone(),
                });
                apply(ctx, op).await?;
            }
            Ok(Vec::new())
        }
        Statement::User(u) => users::run(ctx, u).await,
        Statement::Delete(f) => delete(ctx, f, false).await,
        Statement::DropSeries(f) => delete(ctx, f, true).await,
        other => Err(Error::statement(format!(
            "{} is not supported by Shardhouse",
            statement_name(other)
        ))),
    }
}

/// `SHOW TAG KEYS`: tag keys per measurement.
async fn tag_keys(ctx: &Ctx<'_>, k: &ShowTagKeys, scope: Scope) -> Result<Vec<Series>> {
    let storages = storages_of(ctx, k.database.as_deref(), scope)?;
    let mut sql = "SELECT measurement, arrayJoin(arrayMap(x -> toString(x), mapKeys(tags))) AS k FROM _series".to_string();
    push_where(&mut sql, &k.from, k.condition.as_ref(), ctx.now)?;
    sql.push_str(" GROUP BY measurement, k");
    let pairs = string_pairs(ctx, &storages, &sql).await?;
    Ok(per_measurement(
        pairs,
        &["tagKey"],
        k.limit,
        k.offset,
        |v| vec![s(v)],
    ))
}

/// `SHOW SERIES`: series keys.
async fn series(ctx: &Ctx<'_>, q: &ShowSeries, scope: Scope) -> Result<Vec<Series>> {
    let storages = storages_of(ctx, q.database.as_deref(), scope)?;
    let mut sql = "SELECT measurement, arrayMap(x -> toString(x), mapKeys(tags)), mapValues(tags) FROM _series".to_string();
    push_where(&mut sql, &q.from, q.condition.as_ref(), ctx.now)?;
    let keys = distinct_rows(ctx, &storages, &sql, |b, row| {
        let m = text_at(b.column(0), row);
        let tags: BTreeMap<String, String> = fetch::strings_at(b.column(1), row)
            .into_iter()
            .zip(fetch::strings_at(b.column(2), row))
            .collect();
        series_key(&m, &tags)
    })
    .await?;
    let rows = limit(
        keys.into_iter().map(|k| vec![s(k)]).collect(),
        q.limit,
        q.offset,
    );
    Ok(non_empty(table("", &["key"], rows)))
}

/// `SHOW MEASUREMENTS`: the condition decides per measurement
/// ([`MeasurementFilter`]), or per series when `by_series` (the listing a
/// cardinality counts).
async fn measurements(
    ctx: &Ctx<'_>,
    m: &ShowMeasurements,
    scope: Scope,
    by_series: bool,
) -> Result<Vec<Series>> {
    if m.condition.as_ref().is_some_and(cardinality::mentions_time) {
        return Err(Error::statement(
            "SHOW MEASUREMENTS doesn't support time in WHERE clause",
        ));
    }
    let storages = storages_of(ctx, m.database.as_deref(), scope)?;
    let mut names = match &m.condition {
        Some(c) if !by_series => {
            let filter = MeasurementFilter::new(c)?;
            let n = filter.tag_comparisons();
            let mut counts = TagCounts::new();
            let mut answers = Vec::new();
            for db in &storages {
                answers.extend(
                    fetch::on_every_shard(ctx.router, db, &filter.sql(), ctx.deadline).await?,
                );
            }
            for b in answers.iter().flat_map(|(_, batches)| batches) {
                for row in 0..b.num_rows() {
                    let sums = counts
                        .entry(text_at(b.column(0), row))
                        .or_insert_with(|| vec![(0, 0); n]);
                    for (i, sum) in sums.iter_mut().enumerate() {
                        sum.0 += fetch::u64_at(b.column(1 + 2 * i), row).unwrap_or(0);
                        sum.1 += fetch::u64_at(b.column(2 + 2 * i), row).unwrap_or(0);
                    }
                }
            }
            filter.keep(&counts)?
        }
        cond => {
            let mut sql = "SELECT DISTINCT measurement FROM _series".to_string();
            if let Some(w) = cond
                .as_ref()
                .map(|c| tag_sql(c, ctx.now))
                .transpose()?
                .flatten()
            {
                sql.push_str(&format!(" WHERE {w}"));
            }
            distinct_strings(ctx, &storages, &sql).await?
        }
    };
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

/// `SHOW TAG VALUES`: (key, value) pairs per measurement. `strict`: a
/// comparison with a tag the series lacks is not true (the cardinality's
/// evaluation); otherwise the missing tag reads as '' (the index's).
async fn tag_values(
    ctx: &Ctx<'_>,
    t: &ShowTagValues,
    scope: Scope,
    strict: bool,
) -> Result<Vec<Series>> {
    let storages = storages_of(ctx, t.database.as_deref(), scope)?;
    let sql = tag_values_sql(t, ctx.now, strict)?;
    let pairs = string_pairs(ctx, &storages, &sql).await?;
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

/// The `_series` query of [`tag_values`]: (measurement, key NUL value).
fn tag_values_sql(t: &ShowTagValues, now: i64, strict: bool) -> Result<String> {
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
    // In SHOW TAG VALUES, `value` and `key` are the listed pair.
    let pair = |v: &shardhouse_influxql::VarRef| match v.name.as_str() {
        "value" => Ref::Field("v".into()),
        "key" => Ref::Field("k".into()),
        other if strict => Ref::PresentTag(other.to_owned()),
        other => Ref::Tag(other.to_owned()),
    };
    push_where_with(&mut sql, &t.from, t.condition.as_ref(), now, &pair)?;
    sql.push_str(if sql.contains(" WHERE ") {
        " AND "
    } else {
        " WHERE "
    });
    sql.push_str(&key_cond);
    sql.push_str(" GROUP BY 1, 2");
    Ok(sql)
}

fn statement_name(stmt: &Statement) -> &'static str {
    match stmt {
        Statement::Explain { .. } => "EXPLAIN",
        _ => "this statement",
    }
}

/// Which storages a SHOW reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// Every retention policy's of the database.
    Database,
    /// The request's retention policy's (`rp`, else the default).
    Policy,
}

/// As InfluxDB 1.8: the listings of measurements, series, tag keys and
/// tag values see every retention policy of the database (the request's
/// `rp` does not narrow them); field keys and the exact cardinalities
/// (counted by a `SELECT` in InfluxDB) see one policy; the estimates the
/// whole database.
fn scope_of(stmt: &Statement) -> Scope {
    match stmt {
        Statement::ShowCardinality(c) if cardinality::estimated(c) => Scope::Database,
        Statement::ShowCardinality(_) | Statement::ShowFieldKeys(_) => Scope::Policy,
        _ => Scope::Database,
    }
}

/// The storages a SHOW of `scope` reads.
fn storages_of(ctx: &Ctx<'_>, on: Option<&str>, scope: Scope) -> Result<Vec<String>> {
    match scope {
        Scope::Database => Ok(ctx.router.policies.storages(&database_of(ctx, on)?)),
        Scope::Policy => Ok(vec![storage_of(ctx, on)?]),
    }
}

/// The storage a SHOW reads: the default retention policy's of the
/// statement's database (`ON db`, else the request's `db`), or the
/// request's `rp`.
fn storage_of(ctx: &Ctx<'_>, on: Option<&str>) -> Result<String> {
    let db = database_of(ctx, on)?;
    ctx.router
        .policies
        .storage(&db, ctx.retention_policy)
        .map_err(Error::from)
}

/// The statement's database: `ON db`, else the request's `db`.
fn database_of(ctx: &Ctx<'_>, on: Option<&str>) -> Result<String> {
    match on.filter(|d| !d.is_empty()).unwrap_or(ctx.database) {
        "" => Err(Error::statement("database name required")),
        db => Ok(db.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show_tag_values(q: &str) -> ShowTagValues {
        match shardhouse_influxql::parse_statement(q).unwrap() {
            Statement::ShowTagValues(t) => t,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn listings_see_every_retention_policy() {
        let scope = |q: &str| scope_of(&shardhouse_influxql::parse_statement(q).unwrap());
        for q in [
            "SHOW MEASUREMENTS",
            "SHOW SERIES FROM cpu",
            "SHOW TAG KEYS",
            "SHOW TAG VALUES WITH KEY = host",
            "SHOW SERIES CARDINALITY",
            "SHOW MEASUREMENT CARDINALITY",
        ] {
            assert_eq!(scope(q), Scope::Database, "{q}");
        }
        for q in [
            "SHOW FIELD KEYS",
            "SHOW SERIES EXACT CARDINALITY",
            "SHOW TAG KEY CARDINALITY",
            "SHOW TAG VALUES CARDINALITY WITH KEY = host",
            "SHOW SERIES CARDINALITY FROM cpu",
        ] {
            assert_eq!(scope(q), Scope::Policy, "{q}");
        }
    }

    #[test]
    fn a_cardinalitys_missing_tag_matches_nothing() {
        let t = show_tag_values("SHOW TAG VALUES WITH KEY = host WHERE region !~ /us/");
        // The listing: a series without `region` has region '' (which
        // does not match /us/), as InfluxDB's index answers.
        let listing = tag_values_sql(&t, 0, false).unwrap();
        assert!(listing.contains("WHERE NOT match(tags['region'], 'us') AND k = 'host'"));
        // The cardinality: a series without `region` is not counted.
        let counted = tag_values_sql(&t, 0, true).unwrap();
        assert!(counted.contains(
            "WHERE NOT match(if(mapContains(tags, 'region'), tags['region'], NULL), 'us') AND k = 'host'"
        ));
    }
}
