//! `SELECT` across shards with exact answers.
//!
//! Per measurement: (1) the shards' columns of it (a field a shard never
//! received is NULL there); (2) the tag index rows the statement needs
//! (only when it groups by or shows tags); (3) each shard's points in the
//! time range, pruned by the tag condition through the tag index and
//! filtered by the field condition, read `FINAL` (one row per point); then
//! the `shardhouse-eval` pipeline: each shard's points become per-group,
//! per-bucket partials, the router merges them (exact for every aggregate,
//! see that crate), evaluates, fills, transforms and shapes.
//!
//! Pushable aggregates (pushdown.rs) are computed by the shards in chDB as
//! partials per bucket and series; the others from the shards' points. Either
//! way every answer equals one evaluation over all the data (docs/api.md).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use arrow_array::RecordBatch;
use shardhouse_eval::partials::{group_key, merge_groups, Groups};
use shardhouse_eval::{
    finish, only_selector, time_zone, Emitted, EvalOptions, Gathered, Interval, Point, Series,
    SeriesKey, Value, Windowing,
};
use shardhouse_influxql::time::{split_condition, time_range, TimeRange};
use shardhouse_influxql::{
    Dimension, Expr, MeasurementMatch, SelectStatement, SortOrder, Source, VarRef,
};

use super::fetch::{self, int_at, u64_at, value_at};
use super::fields::{contains_call, mentions_tag, plan_fields, uses_tags, Plan, Slot};
use super::pushdown;
use super::sqlgen::{self, FactQuery, Ref};
use super::Ctx;
use crate::error::{Error, Result};

/// Most `GROUP BY time()` buckets one statement may produce.
const MAX_BUCKETS: i64 = 1_000_000;

/// Runs one `SELECT`.
pub async fn run(ctx: &Ctx<'_>, stmt: &SelectStatement) -> Result<Vec<Series>> {
    if stmt.into.is_some() {
        return Err(Error::statement(
            "SELECT ... INTO is not supported: query, then write the result",
        ));
    }
    if let [Source::Subquery(inner)] = stmt.from.as_slice() {
        let inner = super::bounds::with_outer_time(inner, stmt)?;
        let rows = Box::pin(run(ctx, &inner)).await?;
        return super::subquery::evaluate(stmt, rows, ctx.now);
    }
    let pairs = measurements(ctx, stmt).await?;
    // Several measurements: `*` is their union (union.rs).
    let expanded;
    let stmt = if pairs.len() > 1 && super::union::has_wildcard(stmt) {
        let mut all = Vec::with_capacity(pairs.len());
        for (database, measurement) in &pairs {
            all.push(super::union::columns(ctx, database, measurement).await?);
        }
        expanded = super::union::expand(stmt, &all);
        &expanded
    } else {
        stmt
    };
    let mut out = Vec::new();
    for (database, measurement) in &pairs {
        let alone = pairs.len() == 1;
        let mut series = one_measurement(ctx, stmt, database, measurement, alone).await?;
        out.append(&mut series);
    }
    if pairs.iter().any(|(d, _)| *d != pairs[0].0) {
        let ascending = stmt.order_by != Some(SortOrder::Descending);
        out = super::union::merge_series(out, ascending);
    }
    Ok(out)
}

/// The (database, measurement) pairs of the FROM clause, regexes expanded
/// against the measurements the shards hold.
async fn measurements(ctx: &Ctx<'_>, stmt: &SelectStatement) -> Result<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    for source in &stmt.from {
        let name = match source {
            Source::Measurement(m) => m,
            Source::Subquery(_) => {
                return Err(Error::statement(
                    "subqueries (SELECT ... FROM (SELECT ...)) are not supported yet",
                ))
            }
        };
        let db = name
            .database
            .clone()
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| ctx.database.to_owned());
        if db.is_empty() {
            return Err(Error::statement("database name required"));
        }
        // From here on `db` is the retention policy's storage.
        let rp = name.retention_policy.as_deref().or(ctx.retention_policy);
        let db = match ctx.router.policies.storage(&db, rp) {
            Ok(storage) => storage,
            Err(e) => {
                // A policy of a database nobody holds: InfluxDB names the
                // database.
                if !database_exists(ctx, &db).await? {
                    return Err(Error::NotFound(format!("database not found: {db}")));
                }
                return Err(e.into());
            }
        };
        match &name.name {
            MeasurementMatch::Name(m) => out.push((db, m.clone())),
            MeasurementMatch::Regex(re) => {
                let pattern = regex::Regex::new(&re.0)?;
                for m in super::meta::measurement_names(ctx, &db).await? {
                    if pattern.is_match(&m) {
                        out.push((db.clone(), m));
                    }
                }
            }
        }
    }
    // InfluxDB answers measurements by name.
    out.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
    out.dedup();
    Ok(out)
}

/// The fields one measurement has on each shard, and across the cluster.
pub(crate) struct Schema {
    pub per_shard: BTreeMap<u32, BTreeSet<String>>,
    /// Field name to InfluxDB type name (the first shard's, if they differ).
    pub fields: BTreeMap<String, &'static str>,
    /// A Prometheus metric: its samples are rows of `_samples`.
    pub samples: bool,
}

pub(crate) async fn schema(ctx: &Ctx<'_>, database: &str, measurement: &str) -> Result<Schema> {
    // From the shards' catalogs: no engine statement, no flush.
    let answers =
        fetch::catalog_on_every_shard(ctx.router, database, measurement, ctx.deadline).await?;
    let mut s = Schema {
        per_shard: BTreeMap::new(),
        fields: BTreeMap::new(),
        samples: false,
    };
    for (shard, batches) in &answers {
        for b in batches {
            for row in 0..b.num_rows() {
                let name = fetch::text_at(b.column(1), row);
                let ty = sqlgen::field_type_name(&fetch::text_at(b.column(2), row));
                s.fields.entry(name.clone()).or_insert(ty);
                s.per_shard.entry(*shard).or_default().insert(name);
            }
        }
    }
    if s.fields.is_empty() && !database_exists(ctx, database).await? {
        // InfluxDB's words: clients match on them.
        return Err(Error::NotFound(format!(
            "database not found: {}",
            shardhouse_common::names::storage_database(database)
        )));
    }
    if s.fields.is_empty() {
        // No table of that name anywhere: a Prometheus metric, or nothing.
        s.samples = true;
        s.fields.insert("value".into(), "float");
        for (shard, _) in &answers {
            s.per_shard
                .entry(*shard)
                .or_default()
                .insert("value".into());
        }
    }
    Ok(s)
}

/// Whether any node lists `database` (asked only when a measurement has no
/// columns anywhere, so a dashboard's queries do not pay for it).
pub(crate) async fn database_exists(ctx: &Ctx<'_>, database: &str) -> Result<bool> {
    let listed = ctx.router.cluster.databases_all().await?;
    Ok(listed.iter().any(|d| d.name == database))
}

/// `alone`: the statement reads no other measurement (see
/// [`plan_fields`]).
async fn one_measurement(
    ctx: &Ctx<'_>,
    stmt: &SelectStatement,
    database: &str,
    measurement: &str,
    alone: bool,
) -> Result<Vec<Series>> {
    let schema = schema(ctx, database, measurement).await?;
    let is_field = |n: &str| schema.fields.contains_key(n);
    let ascending = stmt.order_by != Some(SortOrder::Descending);

    // WHERE: time range, tag part (series selection), field part.
    let (mut range, tag_cond, field_cond) = match &stmt.condition {
        None => (TimeRange::UNBOUNDED, None, None),
        Some(c) => {
            let parts = split_condition(c, |n| !is_field(n))?;
            let range = match &parts.time {
                Some(t) => time_range(t, ctx.now)?,
                None => TimeRange::UNBOUNDED,
            };
            (range, parts.tags, parts.fields)
        }
    };
    let tag_sql = tag_cond
        .as_ref()
        .map(|c| sqlgen::condition_sql(c, &|v: &VarRef| Ref::Tag(v.name.clone())))
        .transpose()?;
    // A tag beside a field under OR (or compared with a field) is read
    // from the series' tags joined to each point.
    let join_series_tags = field_cond
        .as_ref()
        .is_some_and(|fc| mentions_tag(fc, &is_field));
    let field_cond = field_cond.map(|fc| {
        sqlgen::untyped_tag_comparisons(&fc, &|v: &VarRef| {
            if sqlgen::is_tag_ref(v, &is_field) {
                None
            } else {
                Some(schema.fields.get(&v.name).copied().unwrap_or("float"))
            }
        })
    });

    // GROUP BY.
    let mut interval = None;
    let mut dims_spec = Vec::new();
    for d in &stmt.group_by {
        match d {
            Dimension::Time {
                interval: i,
                offset,
            } => interval = Some(Interval::new(*i, *offset, ctx.now)?),
            other => dims_spec.push(other.clone()),
        }
    }
    let has_call = stmt.fields.iter().any(|f| contains_call(&f.expr));
    if interval.is_some() {
        if !has_call {
            return Err(Error::statement(
                "GROUP BY requires at least one aggregate function",
            ));
        }
        if !range.has_end() {
            // InfluxDB ends GROUP BY time() queries at now() (inclusive).
            range.end = ctx.now + 1;
        }
        if !range.has_start() {
            // ... and starts them at the first point they read (bounds.rs).
            let first = super::bounds::first_time(
                ctx,
                database,
                measurement,
                schema.samples,
                range,
                tag_sql.as_deref(),
            )
            .await?;
            match first {
                Some(t) => range.start = t,
                None => return Ok(Vec::new()),
            }
        }
        let width = interval.map_or(1, |iv| iv.duration).max(1);
        if (range.end.saturating_sub(range.start)) / width > MAX_BUCKETS {
            return Err(Error::statement(format!(
                "max-select-buckets limit exceeded: the time range and GROUP BY time() interval give more than {MAX_BUCKETS} buckets"
            )));
        }
    }
    let zone = stmt.timezone.as_deref().map(time_zone).transpose()?;
    let duration = interval.map(|iv| iv.duration);

    // Which tags the statement needs decides whether the tag index is read.
    let wants_tag_keys = dims_spec
        .iter()
        .any(|d| matches!(d, Dimension::Wildcard | Dimension::Regex(_)))
        || (!has_call
            && stmt
                .fields
                .iter()
                .any(|f| matches!(f.expr, Expr::Wildcard(_))));
    // Raw rows are ordered by series key at equal times, so raw
    // statements read the tag index too.
    let series = if wants_tag_keys
        || !dims_spec.is_empty()
        || !has_call
        || stmt.fields.iter().any(|f| uses_tags(&f.expr, &is_field))
    {
        let answers = fetch::on_every_shard(
            ctx.router,
            database,
            &sqlgen::series_sql(measurement, tag_sql.as_deref()),
            ctx.deadline,
        )
        .await?;
        Some(fetch::series_tags(&answers))
    } else {
        None
    };
    let tag_keys: BTreeSet<String> = series
        .iter()
        .flat_map(|s| s.values().flat_map(|t| t.keys().cloned()))
        .collect();
    let mut dims: Vec<String> = Vec::new();
    for d in &dims_spec {
        match d {
            Dimension::Tag(t) => dims.push(t.clone()),
            Dimension::Wildcard => dims.extend(tag_keys.iter().cloned()),
            Dimension::Regex(re) => {
                let p = regex::Regex::new(&re.0)?;
                dims.extend(tag_keys.iter().filter(|k| p.is_match(k)).cloned());
            }
            Dimension::Time { .. } => {}
        }
    }
    dims.sort();
    dims.dedup();

    let shown_tags: BTreeSet<String> = tag_keys
        .difference(&dims.iter().cloned().collect())
        .cloned()
        .collect();
    let planned = plan_fields(&stmt.fields, &schema, &shown_tags, duration, alone)?;
    super::fields::check_top_limit(&stmt.fields, stmt.limit)?;
    if planned.plans.is_empty() {
        return Ok(Vec::new());
    }

    // The read range: transformations over GROUP BY time() read back.
    let mut read = range;
    let mut lookback = 0;
    if let Some(d) = duration {
        lookback = planned
            .plans
            .iter()
            .filter_map(|p| match p {
                Plan::Aggregate { transform, .. } | Plan::Raw { transform, .. } => {
                    transform.as_ref().map(|t| t.lookback(d))
                }
            })
            .max()
            .unwrap_or(0);
        if ascending && read.has_start() {
            read.start -= lookback;
        } else if !ascending && read.has_end() {
            read.end += lookback;
        }
    }
    let windowing = Windowing::new(interval, read, zone);
    let opts = EvalOptions {
        ascending,
        point_times: only_selector(&planned.fields),
    };

    // Shards aggregate in chDB when every field is a pushable aggregate of
    // a field (pushdown.rs); otherwise they send their points.
    let pushed = windowing.zone.is_none()
        && planned.plans.iter().all(|p| match p {
            Plan::Aggregate {
                agg,
                slot,
                aux_slots,
                ..
            } if aux_slots.is_empty() => match &planned.slots[*slot] {
                Slot::Sql(Expr::VarRef(v)) => {
                    pushdown::pushable(agg, schema.fields.get(&v.name).copied())
                }
                _ => false,
            },
            _ => false,
        });

    // Each shard's points (or groups), with only the columns it has.
    let sql_slots: Vec<(usize, &Expr)> = planned
        .slots
        .iter()
        .enumerate()
        .filter_map(|(i, s)| match s {
            Slot::Sql(e) => Some((i, e)),
            Slot::Tag(_) => None,
        })
        .collect();
    let per_shard_sql = |shard: u32| -> Result<String> {
        let empty = BTreeSet::new();
        let has = schema.per_shard.get(&shard).unwrap_or(&empty);
        let resolve = |v: &VarRef| {
            if has.contains(&v.name) {
                Ref::Field(v.name.clone())
            } else {
                Ref::Missing
            }
        };
        let mut columns = Vec::new();
        for (i, e) in &sql_slots {
            columns.push(format!(
                "{} AS {}",
                sqlgen::condition_sql(e, &resolve)?,
                shardhouse_common::names::sql_ident(&format!("s{i}"))
            ));
            if let Some(any) = sqlgen::any_field_sql(e, &resolve) {
                columns.push(format!(
                    "{any} AS {}",
                    shardhouse_common::names::sql_ident(&format!("p{i}"))
                ));
            }
        }
        let resolve_condition = |v: &VarRef| {
            if sqlgen::is_tag_ref(v, &is_field) {
                Ref::SeriesTag(v.name.clone())
            } else {
                resolve(v)
            }
        };
        let field_sql = field_cond
            .as_ref()
            .map(|c| sqlgen::condition_sql(c, &resolve_condition))
            .transpose()?;
        let inner = sqlgen::fact_sql(&FactQuery {
            measurement,
            samples: schema.samples,
            columns,
            range: read,
            tag_condition: tag_sql.clone(),
            field_condition: field_sql,
            limit: (!pushed).then_some(ctx.max_points as u64 + 1),
            join_series_tags,
        });
        if !pushed {
            return Ok(inner);
        }
        let mut aggs = Vec::new();
        for (j, plan) in planned.plans.iter().enumerate() {
            if let Plan::Aggregate { agg, slot, .. } = plan {
                if let Slot::Sql(Expr::VarRef(v)) = &planned.slots[*slot] {
                    if has.contains(&v.name) {
                        let float = schema.fields.get(&v.name) == Some(&"float");
                        aggs.extend(pushdown::columns(j, agg, &format!("s{slot}"), float));
                    }
                }
            }
        }
        if aggs.is_empty() {
            aggs.push("count() AS `__n`".into());
        }
        Ok(pushdown::grouped_sql(
            &inner,
            interval,
            !dims.is_empty(),
            &aggs,
            ctx.max_points as u64 + 1,
        ))
    };
    let mut sqls = BTreeMap::new();
    for shard in schema.per_shard.keys() {
        sqls.insert(*shard, per_shard_sql(*shard)?);
    }
    let answers = futures::future::join_all(sqls.iter().map(|(shard, sql)| async move {
        let ipc = ctx
            .router
            .cluster
            .planned_shard(database, *shard, sql, ctx.deadline)
            .await?;
        Ok::<_, Error>((*shard, ipc))
    }))
    .await
    .into_iter()
    .collect::<Result<Vec<_>>>()?;
    let mut shards: Vec<Vec<RecordBatch>> = Vec::with_capacity(answers.len());
    let mut points = 0usize;
    for (shard, ipc) in answers {
        let batches = fetch::decode(shard, ipc)?;
        points += batches.iter().map(|b| b.num_rows()).sum::<usize>();
        if points > ctx.max_points {
            return Err(Error::statement(format!(
                "the statement reads more than {} points (the router's --query-max-points); narrow the time range or the series, or aggregate with GROUP BY time()",
                ctx.max_points
            )));
        }
        shards.push(batches);
    }

    let no_tags = BTreeMap::new();
    let tags_of = |sid: u64| -> &BTreeMap<String, String> {
        series
            .as_ref()
            .and_then(|s| s.get(&sid))
            .unwrap_or(&no_tags)
    };
    let slot_value = |b: &RecordBatch, row: usize, slot: usize, sid: u64| -> Value {
        match &planned.slots[slot] {
            Slot::Sql(_) => b
                .schema()
                .index_of(&format!("s{slot}"))
                .map(|c| value_at(b.column(c), row))
                .unwrap_or(Value::Null),
            Slot::Tag(k) => tags_of(sid)
                .get(k)
                .map_or(Value::Null, |v| Value::String(v.clone())),
        }
    };

    // Series ranked by key (InfluxDB's order of raw rows at one time).
    let ranks: HashMap<u64, u64> = series
        .as_ref()
        .map(|s| {
            let mut keyed: Vec<(String, u64)> = s
                .iter()
                .map(|(sid, tags)| (super::meta::series_key(measurement, tags), *sid))
                .collect();
            keyed.sort();
            keyed
                .into_iter()
                .enumerate()
                .map(|(i, (_, sid))| (sid, i as u64))
                .collect()
        })
        .unwrap_or_default();
    let rank_of = |sid: u64| ranks.get(&sid).copied().unwrap_or(sid);
    let mut gathered = Vec::with_capacity(planned.plans.len());
    for (j, plan) in planned.plans.iter().enumerate() {
        gathered.push(match plan {
            Plan::Aggregate {
                agg,
                slot,
                transform,
                aux_slots,
            } => {
                let mut merged = Groups::new();
                for batches in shards.iter().filter(|_| pushed) {
                    for b in batches {
                        for row in 0..b.num_rows() {
                            let Some((bucket, sid)) = pushdown::keys(b, row) else {
                                continue;
                            };
                            let Some(p) = pushdown::partial(b, row, j, agg) else {
                                continue;
                            };
                            let bucket = if interval.is_some() {
                                bucket
                            } else {
                                windowing.bucket_start(0)
                            };
                            let held = merged
                                .entry(group_key(measurement, tags_of(sid), &dims))
                                .or_default();
                            match held.get_mut(&bucket) {
                                Some(existing) => existing.merge(agg, p)?,
                                None => {
                                    held.insert(bucket, p);
                                }
                            }
                        }
                    }
                }
                for batches in shards.iter().filter(|_| !pushed) {
                    let mut part = Groups::new();
                    for b in batches {
                        for row in 0..b.num_rows() {
                            let (Some(t), Some(sid)) =
                                (int_at(b.column(0), row), u64_at(b.column(1), row))
                            else {
                                continue;
                            };
                            if !windowing.range.contains(t) {
                                continue;
                            }
                            let value = slot_value(b, row, *slot, sid);
                            if value.is_null() {
                                continue;
                            }
                            let row_aux = |slots: &[usize]| -> Vec<Value> {
                                slots.iter().map(|s| slot_value(b, row, *s, sid)).collect()
                            };
                            let tags = tags_of(sid);
                            let aux: Vec<String> = agg
                                .aux_columns()
                                .iter()
                                .map(|k| tags.get(k).cloned().unwrap_or_default())
                                .collect();
                            part.entry(group_key(measurement, tags, &dims))
                                .or_default()
                                .entry(windowing.bucket_start(t))
                                .or_insert_with(|| agg.empty_partial())
                                .add(agg, &Point::with_aux(t, value, row_aux(aux_slots)), &aux)?;
                        }
                    }
                    merge_groups(agg, &mut merged, part)?;
                }
                Gathered::Aggregate {
                    agg: agg.clone(),
                    transform: *transform,
                    groups: merged,
                }
            }
            Plan::Raw { slot, transform } => {
                let mut raw: BTreeMap<SeriesKey, Vec<Emitted>> = BTreeMap::new();
                for b in shards.iter().flatten() {
                    for row in 0..b.num_rows() {
                        let (Some(t), Some(sid)) =
                            (int_at(b.column(0), row), u64_at(b.column(1), row))
                        else {
                            continue;
                        };
                        if !read.contains(t) {
                            continue;
                        }
                        // A tag column shows on rows that have a field.
                        if matches!(planned.slots[*slot], Slot::Tag(_))
                            && !row_has_field(b, row, &planned.slots)
                        {
                            continue;
                        }
                        let value = slot_value(b, row, *slot, sid);
                        // Arithmetic is null on a point that lacks one of
                        // its fields, and InfluxDB still shows that row.
                        if value.is_null() && (transform.is_some() || !has_any_field(b, row, *slot))
                        {
                            continue;
                        }
                        raw.entry(group_key(measurement, tags_of(sid), &dims))
                            .or_default()
                            .push(Emitted::of_series(t, value, rank_of(sid)));
                    }
                }
                Gathered::Raw {
                    transform: *transform,
                    series: raw,
                }
            }
        });
    }
    let gathered = planned.assemble(gathered);
    let out = finish(stmt, &planned.fields, gathered, &windowing, opts)?;
    if lookback == 0 {
        return Ok(out);
    }
    // The buckets read back feed the transformations only: an aggregate
    // beside one (`sum(v) / elapsed(sum(v), 1m)`) has a row there too.
    let first = if ascending && range.has_start() {
        windowing.bucket_start(range.start)
    } else {
        i64::MIN
    };
    let last = if !ascending && range.has_end() {
        windowing.bucket_start(range.end - 1)
    } else {
        i64::MAX
    };
    Ok(rows_within(out, first, last))
}

/// The series with only their rows timed within `[first, last]`; a series
/// left without rows is dropped.
fn rows_within(series: Vec<Series>, first: i64, last: i64) -> Vec<Series> {
    series
        .into_iter()
        .filter_map(|mut s| {
            s.values.retain(|row| match row.first() {
                Some(Value::Time(t)) => (first..=last).contains(t),
                _ => true,
            });
            (!s.values.is_empty()).then_some(s)
        })
        .collect()
}

/// Whether the point has one of the fields of arithmetic slot `slot`
/// (its `p{slot}` column, see [`sqlgen::any_field_sql`]).
fn has_any_field(b: &RecordBatch, row: usize, slot: usize) -> bool {
    b.schema()
        .index_of(&format!("p{slot}"))
        .is_ok_and(|c| match value_at(b.column(c), row) {
            Value::Bool(v) => v,
            Value::Int(v) => v != 0,
            Value::UInt(v) => v != 0,
            _ => false,
        })
}

fn row_has_field(b: &RecordBatch, row: usize, slots: &[Slot]) -> bool {
    slots.iter().enumerate().any(|(i, s)| {
        matches!(s, Slot::Sql(_))
            && b.schema()
                .index_of(&format!("s{i}"))
                .is_ok_and(|c| !value_at(b.column(c), row).is_null())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_read_back_for_a_transformation_are_not_shown() {
        let series = |times: &[i64]| Series {
            name: "cpu".into(),
            tags: BTreeMap::new(),
            columns: vec!["time".into(), "v".into()],
            values: times
                .iter()
                .map(|t| vec![Value::Time(*t), Value::Null])
                .collect(),
            partial: false,
        };
        let out = rows_within(vec![series(&[-60, 0, 60]), series(&[-60])], 0, i64::MAX);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].values.len(), 2);
        assert_eq!(out[0].values[0][0], Value::Time(0));
        let out = rows_within(vec![series(&[0, 60, 120])], i64::MIN, 60);
        assert_eq!(out[0].values.len(), 2);
    }
}
