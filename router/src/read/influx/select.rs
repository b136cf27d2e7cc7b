//! `SELECT` across shards with exact answers.
//!
//! Per measurement: (1) the shards' columns of it (a field a shard never
//! received is NULL there); (2) the tag index rows the statement needs
//! (only when it groups by, shows or orders by tags; asked beside the
//! facts when the plan does not depend on them, [`SeriesNeed`]); (3) each shard's points in the
//! time range, pruned by the tag condition through the tag index and
//! filtered by the field condition, read `FINAL` (one row per point); then
//! the `shardhouse-eval` pipeline: each shard's points become per-group,
//! per-bucket partials, the router merges them (exact for every aggregate,
//! see that crate), evaluates, fills, transforms and shapes.
//!
//! Pushable aggregates (pushdown.rs) are computed by the shards in chDB as
//! partials per bucket and series; the others from the shards' points. Either
//! way every answer equals one evaluation over all the data (docs/api.md).

mod facts;
mod grouping;
mod merge;
mod series;

use std::collections::{BTreeMap, BTreeSet};

use shardhouse_eval::{
    finish, only_selector, time_zone, EvalOptions, Interval, Series, Value, Windowing, Zone,
};
use shardhouse_influxql::time::{split_condition, time_range, TimeRange};
use shardhouse_influxql::{
    Dimension, Expr, MeasurementMatch, SelectStatement, SortOrder, Source, VarRef,
};

use super::fetch;
use super::fields::{contains_call, mentions_tag, plan_fields, Plan, Planned, Slot};
use super::pushdown;
use super::sqlgen::{self, Ref};
use super::Ctx;
use crate::error::{Error, Result};
use series::{all_known, more_than_one_series, series_need, series_tags, SeriesNeed};

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
        let mut series = one_measurement(ctx, stmt, database, measurement, alone, false).await?;
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

/// One measurement of a `SELECT`, in named steps: the catalog (which
/// fields each shard has, [`schema`]), the statement's [`Shape`] (time
/// range, conditions, grouping), the series (tag index rows, when the
/// statement needs tags), the facts (each shard's points or partial
/// aggregates, `facts.rs`) and their merge into the answer (`merge.rs`).
/// `alone`: the statement reads no other measurement (see
/// [`plan_fields`]). `points`: the shards send points, not partials (a
/// percentile their windows did not decide is read again so).
async fn one_measurement(
    ctx: &Ctx<'_>,
    stmt: &SelectStatement,
    database: &str,
    measurement: &str,
    alone: bool,
    points: bool,
) -> Result<Vec<Series>> {
    let schema = schema(ctx, database, measurement).await?;
    let Some(shape) = Shape::of(ctx, stmt, &schema, database, measurement).await? else {
        return Ok(Vec::new());
    };
    let need = series_need(stmt, &shape, &schema);
    let mut series = match need {
        SeriesNeed::First => Some(series_tags(ctx, &shape, &schema, database, measurement).await?),
        _ => None,
    };
    let (dims, shown_tags) = dims_and_shown_tags(&shape.dims_spec, series.as_ref())?;
    let planned = plan_fields(&stmt.fields, &schema, &shown_tags, shape.duration(), alone)?;
    super::fields::check_top_limit(&stmt.fields, stmt.limit)?;
    if planned.plans.is_empty() {
        return Ok(Vec::new());
    }
    let ascending = stmt.order_by != Some(SortOrder::Descending);
    let lookback = lookback(&planned, shape.duration());
    let read = read_range(shape.range, lookback, ascending);
    let windowing = Windowing::new(shape.interval, read, shape.zone.clone());
    let opts = EvalOptions {
        ascending,
        point_times: only_selector(&planned.fields),
    };
    // Shards aggregate in chDB when every field is a pushable aggregate of
    // a field (pushdown.rs); otherwise they send their points.
    let windows = ctx.router.options.query_percentile_windows;
    let pushed = !points && windowing.zone.is_none() && pushable(&planned, &schema, windows);
    let grouping_key = grouping::key(database, measurement, shape.tag_sql.as_deref(), &dims);
    let heads = shape.interval.is_none() && has_first_or_last(&planned);
    let facts = facts::Facts {
        measurement,
        schema: &schema,
        planned: &planned,
        shape: &shape,
        read,
        pushed,
        group_tags: &dims,
        by_tags: pushed && grouping::by_tags(&grouping_key),
        heads,
        max_points: ctx.max_points,
        exclude: None,
    };
    let shards = match need {
        // The facts do not depend on the tags: ask both at once.
        SeriesNeed::Alongside => {
            let (tags, shards) = futures::try_join!(
                series_tags(ctx, &shape, &schema, database, measurement),
                facts.fetch(ctx, database)
            )?;
            series = Some(tags);
            shards
        }
        _ => facts.fetch(ctx, database).await?,
    };
    // A series written after its tags were read: they are in the index
    // now (its rows would otherwise group as a series without tags).
    if series.as_ref().is_some_and(|t| !all_known(&shards, t)) {
        series = Some(series_tags(ctx, &shape, &schema, database, measurement).await?);
    }
    if let (true, false, Some(tags)) = (pushed, dims.is_empty(), &series) {
        grouping::learn(&grouping_key, tags, &dims);
    }
    // Raw rows at one time, and ties of first/last between series, are
    // ordered by series key.
    let orders = need == SeriesNeed::ToOrderRows || heads;
    if orders && series.is_none() && more_than_one_series(&shards, pushed) {
        series = Some(series_tags(ctx, &shape, &schema, database, measurement).await?);
    }
    let rows = merge::Rows::new(measurement, series.as_ref(), &planned.slots, &dims);
    let shard_duration = heads.then(|| ctx.router.policies.shard_duration(database));
    let gathered = merge::gather(&rows, &planned, &shards, &windowing, pushed, shard_duration)?;
    let out = finish(
        stmt,
        &planned.fields,
        planned.assemble(gathered),
        &windowing,
        opts,
    );
    if pushed && matches!(out, Err(shardhouse_eval::Error::RankUndecided)) {
        crate::metrics::QUERY_PERCENTILE_REREADS.inc();
        let again = one_measurement(ctx, stmt, database, measurement, alone, true);
        return Box::pin(again).await;
    }
    let out = out?;
    if lookback == 0 {
        return Ok(out);
    }
    Ok(shown_rows(out, shape.range, &windowing, ascending))
}

/// Tag values per series id, from the tag index.
type SeriesTags = BTreeMap<u64, BTreeMap<String, String>>;

/// What the statement asks of one measurement, decided before any point
/// is read: the time range, the tag condition as SQL, the field condition,
/// `GROUP BY time()` and the other dimensions, the time zone.
pub(super) struct Shape {
    pub range: TimeRange,
    pub tag_sql: Option<String>,
    /// WHERE's field part, its tag comparisons typed
    /// ([`sqlgen::untyped_tag_comparisons`]).
    pub field_cond: Option<Expr>,
    /// A tag beside a field under OR (or compared with a field) is read
    /// from the series' tags joined to each point.
    pub join_series_tags: bool,
    pub interval: Option<Interval>,
    pub dims_spec: Vec<Dimension>,
    pub has_call: bool,
    pub zone: Option<Zone>,
}

impl Shape {
    /// The shape, or `None` when `GROUP BY time()` without a lower time
    /// bound finds no point to start from (nothing to answer).
    async fn of(
        ctx: &Ctx<'_>,
        stmt: &SelectStatement,
        schema: &Schema,
        database: &str,
        measurement: &str,
    ) -> Result<Option<Shape>> {
        let mut shape = Shape::of_where(stmt, schema, ctx.now)?;
        shape.group_by(stmt, ctx.now)?;
        if shape.interval.is_some() {
            if !shape.has_call {
                return Err(Error::statement(
                    "GROUP BY requires at least one aggregate function",
                ));
            }
            if !shape
                .time_bounds(ctx, database, measurement, schema)
                .await?
            {
                return Ok(None);
            }
        }
        shape.zone = stmt.timezone.as_deref().map(time_zone).transpose()?;
        Ok(Some(shape))
    }

    /// WHERE: the time range, the tag part (series selection) as SQL and
    /// the field part.
    fn of_where(stmt: &SelectStatement, schema: &Schema, now: i64) -> Result<Shape> {
        let is_field = |n: &str| schema.fields.contains_key(n);
        let (range, tag_cond, field_cond) = match &stmt.condition {
            None => (TimeRange::UNBOUNDED, None, None),
            Some(c) => {
                let parts = split_condition(c, |n| !is_field(n))?;
                let range = match &parts.time {
                    Some(t) => time_range(t, now)?,
                    None => TimeRange::UNBOUNDED,
                };
                (range, parts.tags, parts.fields)
            }
        };
        let tag_sql = tag_cond
            .as_ref()
            .map(|c| sqlgen::condition_sql(c, &|v: &VarRef| Ref::Tag(v.name.clone())))
            .transpose()?;
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
        Ok(Shape {
            range,
            tag_sql,
            field_cond,
            join_series_tags,
            interval: None,
            dims_spec: Vec::new(),
            has_call: stmt.fields.iter().any(|f| contains_call(&f.expr)),
            zone: None,
        })
    }

    /// `GROUP BY`: the time interval and the other dimensions.
    fn group_by(&mut self, stmt: &SelectStatement, now: i64) -> Result<()> {
        for d in &stmt.group_by {
            match d {
                Dimension::Time {
                    interval: i,
                    offset,
                } => self.interval = Some(Interval::new(*i, *offset, now)?),
                other => self.dims_spec.push(other.clone()),
            }
        }
        Ok(())
    }

    /// InfluxDB's bounds of a `GROUP BY time()` statement: it ends at
    /// now() (inclusive) and starts at the first point it reads
    /// (bounds.rs); false when there is no such point. At most
    /// [`MAX_BUCKETS`] buckets.
    async fn time_bounds(
        &mut self,
        ctx: &Ctx<'_>,
        database: &str,
        measurement: &str,
        schema: &Schema,
    ) -> Result<bool> {
        if !self.range.has_end() {
            self.range.end = ctx.now + 1;
        }
        if !self.range.has_start() {
            let first = super::bounds::first_time(
                ctx,
                database,
                measurement,
                schema.samples,
                self.range,
                self.tag_sql.as_deref(),
            )
            .await?;
            match first {
                Some(t) => self.range.start = t,
                None => return Ok(false),
            }
        }
        let width = self.duration().map_or(1, |d| d.max(1));
        if (self.range.end.saturating_sub(self.range.start)) / width > MAX_BUCKETS {
            return Err(Error::statement(format!(
                "max-select-buckets limit exceeded: the time range and GROUP BY time() interval give more than {MAX_BUCKETS} buckets"
            )));
        }
        Ok(true)
    }

    /// The `GROUP BY time()` interval's length.
    fn duration(&self) -> Option<i64> {
        self.interval.map(|iv| iv.duration)
    }
}

/// The tag keys the statement groups by ([`dimensions`]) and the others
/// of the series read so far (shown as columns).
fn dims_and_shown_tags(
    dims_spec: &[Dimension],
    series: Option<&SeriesTags>,
) -> Result<(Vec<String>, BTreeSet<String>)> {
    let tag_keys: BTreeSet<String> = series
        .into_iter()
        .flat_map(|s| s.values().flat_map(|t| t.keys().cloned()))
        .collect();
    let dims = dimensions(dims_spec, &tag_keys)?;
    let shown = tag_keys
        .difference(&dims.iter().cloned().collect())
        .cloned()
        .collect();
    Ok((dims, shown))
}

/// The tag keys the statement groups by, sorted (`*` and regexes expanded
/// against the series' tag keys).
fn dimensions(dims_spec: &[Dimension], tag_keys: &BTreeSet<String>) -> Result<Vec<String>> {
    let mut dims: Vec<String> = Vec::new();
    for d in dims_spec {
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
    Ok(dims)
}

/// How far transformations over `GROUP BY time()` read back (0 without).
fn lookback(planned: &Planned, duration: Option<i64>) -> i64 {
    let Some(d) = duration else {
        return 0;
    };
    planned
        .plans
        .iter()
        .filter_map(|p| match p {
            Plan::Aggregate { transform, .. } | Plan::Raw { transform, .. } => {
                transform.as_ref().map(|t| t.lookback(d))
            }
        })
        .max()
        .unwrap_or(0)
}

/// The range to read: `lookback` before the range (after it when
/// descending).
fn read_range(range: TimeRange, lookback: i64, ascending: bool) -> TimeRange {
    let mut read = range;
    if ascending && read.has_start() {
        read.start -= lookback;
    } else if !ascending && read.has_end() {
        read.end += lookback;
    }
    read
}

/// Whether every field is an aggregate of a field that chDB can compute
/// as partials (pushdown.rs).
/// Whether a field is `first()` or `last()` (answered from the series'
/// heads without `GROUP BY time()`).
fn has_first_or_last(planned: &Planned) -> bool {
    planned.plans.iter().any(|p| {
        matches!(
            p,
            Plan::Aggregate {
                agg: shardhouse_eval::Aggregate::First | shardhouse_eval::Aggregate::Last,
                ..
            }
        )
    })
}

/// `windows`: a percentile counts as pushable ([`pushdown::pushable`]).
fn pushable(planned: &Planned, schema: &Schema, windows: bool) -> bool {
    planned.plans.iter().all(|p| match p {
        Plan::Aggregate {
            agg,
            slot,
            aux_slots,
            ..
        } if aux_slots.is_empty() => match &planned.slots[*slot] {
            Slot::Sql(Expr::VarRef(v)) => {
                (windows || !matches!(agg, shardhouse_eval::Aggregate::Percentile(_)))
                    && pushdown::pushable(agg, schema.fields.get(&v.name).copied())
            }
            _ => false,
        },
        _ => false,
    })
}

/// The rows of `out` the statement's own range shows: the buckets read
/// back feed the transformations only (an aggregate beside one, `sum(v) /
/// elapsed(sum(v), 1m)`, has a row there too).
fn shown_rows(
    out: Vec<Series>,
    range: TimeRange,
    windowing: &Windowing,
    ascending: bool,
) -> Vec<Series> {
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
    rows_within(out, first, last)
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
