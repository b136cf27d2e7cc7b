//! The facts step of a `SELECT`: each shard's statement over its points
//! of one measurement (only the columns that shard has; a field it never
//! received reads as NULL) or, when every field is a pushable aggregate,
//! its partial aggregates per bucket and series (pushdown.rs); run on one
//! replica of every shard that knows the measurement.

use std::collections::{BTreeMap, BTreeSet};

use arrow_array::RecordBatch;
use shardhouse_common::names::sql_ident;
use shardhouse_eval::Interval;
use shardhouse_influxql::time::TimeRange;
use shardhouse_influxql::{Expr, VarRef};

use super::super::cache::{self, ShardPart};
use super::super::fetch;
use super::super::fields::{Plan, Planned, Slot};
use super::super::pushdown;
use super::super::rollup;
use super::super::sqlgen::{self, FactQuery, Ref};
use super::super::Ctx;
use super::{Schema, Shape};
use crate::error::{Error, Result};
use crate::metrics;

/// What the shards' statements are made of.
#[derive(Clone, Copy)]
pub(super) struct Facts<'a> {
    pub measurement: &'a str,
    pub schema: &'a Schema,
    pub planned: &'a Planned,
    pub shape: &'a Shape,
    /// The range to read (the statement's, and what transformations
    /// read back).
    pub read: TimeRange,
    /// The shards aggregate (pushdown.rs) rather than send points.
    pub pushed: bool,
    /// The tags `GROUP BY` names (none: not grouped by tags).
    pub group_tags: &'a [String],
    /// Pushed partials are grouped by those tags at the shards, not by
    /// series (grouping.rs).
    pub by_tags: bool,
    /// `first`/`last` without `GROUP BY time()`: the shards group by
    /// series, so that the router sees each series' head (its first point)
    /// for InfluxDB's answer to ties between series (merge.rs).
    pub heads: bool,
    /// The router's `query_max_points`.
    pub max_points: usize,
    /// Buckets `[lo, hi)` not to read: the cache holds them (cache.rs).
    pub exclude: Option<(i64, i64)>,
}

/// Each shard's rows and change mark.
type Answers = BTreeMap<u32, ShardPart>;

impl Facts<'_> {
    /// Each shard's answer (in shard order), at most `max_points` rows in
    /// all; settled buckets from the cache when the statement may use it.
    pub async fn fetch(&self, ctx: &Ctx<'_>, database: &str) -> Result<Vec<Vec<RecordBatch>>> {
        let answers = match self.cache_interval(ctx) {
            Some(iv) => self.fetch_cached(ctx, database, iv).await?,
            None => self.answers(ctx, database).await?,
        };
        let shards: Vec<Vec<RecordBatch>> = answers.into_values().map(|p| p.rows).collect();
        let points: usize = shards.iter().flatten().map(|b| b.num_rows()).sum();
        if points > self.max_points {
            return Err(Error::statement(format!(
                "the statement reads more than {} points (the router's --query-max-points); narrow the time range or the series, or aggregate with GROUP BY time()",
                self.max_points
            )));
        }
        Ok(shards)
    }

    /// Each shard's rows and change mark.
    async fn answers(&self, ctx: &Ctx<'_>, database: &str) -> Result<Answers> {
        let rollups = ctx.router.options.query_rollups;
        let mut sqls = BTreeMap::new();
        for shard in self.schema.per_shard.keys() {
            let rolled = if rollups {
                self.rollup_sql(*shard)?
            } else {
                None
            };
            sqls.insert(*shard, (self.sql(*shard)?, rolled));
        }
        let answers =
            futures::future::join_all(sqls.iter().map(|(shard, (sql, rolled))| async move {
                let rollup = rolled.as_deref().map(|r| (self.measurement, r));
                let (ipc, mark) = ctx
                    .router
                    .cluster
                    .planned_shard_rollup(database, *shard, sql, rollup, ctx.deadline)
                    .await?;
                let rows = fetch::decode(*shard, ipc)?;
                Ok::<_, Error>((*shard, ShardPart { mark, rows }))
            }))
            .await
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
        Ok(answers.into_iter().collect())
    }

    /// The interval whose settled buckets may be cached: partial
    /// aggregates per bucket over a bounded range, with the cache on.
    fn cache_interval(&self, ctx: &Ctx<'_>) -> Option<Interval> {
        let on = ctx.router.options.query_cache_mb > 0;
        let bounded = self.read.has_start() && self.read.has_end();
        self.shape.interval.filter(|_| on && self.pushed && bounded)
    }

    /// [`Facts::answers`] with the settled buckets the cache holds for
    /// this statement (when every shard's mark still reads the same), and
    /// the cache brought up to date.
    async fn fetch_cached(&self, ctx: &Ctx<'_>, database: &str, iv: Interval) -> Result<Answers> {
        let key = self.cache_key(ctx, database)?;
        let settled = ctx.now.min(wall_clock_ns()) - cache::ROUTER_LAG_NS;
        let cached = cache::lookup(&key, ctx.router.options.query_cache_mb);
        let usable = cached
            .as_ref()
            .and_then(|e| cache::usable_span(e.lo, e.hi, self.read, iv).map(|s| (e, s)));
        if let Some((entry, span)) = usable {
            let rest = Facts {
                exclude: Some(span),
                ..*self
            };
            let mut fresh = rest.answers(ctx, database).await?;
            let marks = fresh.iter().map(|(s, p)| (*s, p.mark)).collect();
            if cache::marks_agree(&entry.shards, &marks) {
                metrics::QUERY_CACHE_HITS.inc();
                for (shard, part) in &mut fresh {
                    if let Some(held) = entry.shards.get(shard) {
                        part.rows
                            .extend(cache::rows_within(&held.rows, span.0, span.1));
                    }
                }
                cache::store(&key, cache::entry_of(&fresh, self.read, iv, settled));
                return Ok(fresh);
            }
            metrics::QUERY_CACHE_INVALIDATIONS.inc();
            cache::store(&key, None);
        }
        metrics::QUERY_CACHE_MISSES.inc();
        let full = self.answers(ctx, database).await?;
        cache::store(&key, cache::entry_of(&full, self.read, iv, settled));
        Ok(full)
    }

    /// The cache key: every shard's statement over a fixed range (so only
    /// the range is left out), the cluster, database and shard map epoch.
    /// Grouped by series or by tags alike (grouping.rs may switch between
    /// a statement's first and second asking): rows of either name their
    /// group by a series the router maps by its tags, so they merge.
    fn cache_key(&self, ctx: &Ctx<'_>, database: &str) -> Result<String> {
        let template = Facts {
            read: TimeRange { start: 1, end: 2 },
            exclude: None,
            by_tags: false,
            ..*self
        };
        let mut sqls = BTreeMap::new();
        for shard in self.schema.per_shard.keys() {
            sqls.insert(*shard, template.sql(*shard)?);
        }
        let epoch = ctx.router.cluster.shard_map()?.epoch;
        Ok(cache::key(
            &ctx.router.options.cluster,
            database,
            epoch,
            &sqls,
        ))
    }

    /// The statement for `shard`: its points (slot `i` as column `s{i}`,
    /// whether an arithmetic slot's point has any of its fields as
    /// `p{i}`), or their partial aggregates when pushed.
    fn sql(&self, shard: u32) -> Result<String> {
        let empty = BTreeSet::new();
        let has = self.schema.per_shard.get(&shard).unwrap_or(&empty);
        let resolve = |v: &VarRef| {
            if has.contains(&v.name) {
                Ref::Field(v.name.clone())
            } else {
                Ref::Missing
            }
        };
        let is_field = |n: &str| self.schema.fields.contains_key(n);
        let resolve_condition = |v: &VarRef| {
            if sqlgen::is_tag_ref(v, &is_field) {
                Ref::SeriesTag(v.name.clone())
            } else {
                resolve(v)
            }
        };
        let columns = self.columns(&resolve)?;
        let field_sql = self
            .shape
            .field_cond
            .as_ref()
            .map(|c| sqlgen::condition_sql(c, &resolve_condition))
            .transpose()?;
        let field_sql = match (field_sql, self.exclude) {
            (c, None) => c,
            (None, Some(span)) => Some(excluded_sql(span)),
            (Some(c), Some(span)) => Some(format!("({c}) AND {}", excluded_sql(span))),
        };
        let query = FactQuery {
            measurement: self.measurement,
            samples: self.schema.samples,
            columns,
            range: self.read,
            tag_condition: self.shape.tag_sql.clone(),
            field_condition: field_sql,
            limit: (!self.pushed).then_some(self.max_points as u64 + 1),
            join_series_tags: self.shape.join_series_tags,
        };
        if !self.pushed {
            return Ok(sqlgen::fact_sql(&query));
        }
        let (columns, from) = sqlgen::fact_parts(&query);
        let facts = pushdown::FactsSql {
            columns: &columns,
            from: &from,
            joined: query.join_series_tags,
        };
        let groups = self.groups_sql();
        Ok(pushdown::grouped_sql(
            facts,
            self.shape.interval,
            self.grouping(&groups),
            &self.pushed_columns(has),
            self.max_points as u64 + 1,
        ))
    }

    /// The tag index subquery naming each series' group, when the shards
    /// group pushed partials by tags.
    fn groups_sql(&self) -> Option<String> {
        (self.by_tags && !self.heads && !self.group_tags.is_empty()).then(|| {
            sqlgen::series_groups_sql(
                self.measurement,
                self.shape.tag_sql.as_deref(),
                self.group_tags,
            )
        })
    }

    fn grouping<'g>(&self, groups: &'g Option<String>) -> pushdown::Grouping<'g> {
        match groups {
            Some(g) => pushdown::Grouping::ByTags(g),
            None if self.by_series() => pushdown::Grouping::BySeries,
            None => pushdown::Grouping::None,
        }
    }

    /// The pushed statement's equal over the measurement's rollups for
    /// `shard` (rollup.rs), when its calls and range qualify: the node
    /// runs it instead where the rollups are exact.
    fn rollup_sql(&self, shard: u32) -> Result<Option<String>> {
        let s = self.schema;
        if !self.pushed || self.heads || s.samples || self.shape.join_series_tags {
            return Ok(None);
        }
        if self.shape.field_cond.is_some() {
            return Ok(None);
        }
        let empty = BTreeSet::new();
        let has = s.per_shard.get(&shard).unwrap_or(&empty);
        let field_of = |slot: usize| match &self.planned.slots[slot] {
            Slot::Sql(Expr::VarRef(v)) => Some(v.name.clone()),
            _ => None,
        };
        let mut calls = Vec::new();
        for (j, plan) in self.planned.plans.iter().enumerate() {
            let Plan::Aggregate {
                agg,
                slot,
                aux_slots,
                ..
            } = plan
            else {
                return Ok(None);
            };
            let Some(name) = field_of(*slot).filter(|_| aux_slots.is_empty()) else {
                return Ok(None);
            };
            let Some(field_type) = s.fields.get(&name) else {
                return Ok(None);
            };
            if has.contains(&name) {
                calls.push(rollup::Call {
                    j,
                    agg,
                    slot: *slot,
                    field_type,
                });
            }
        }
        let Some(choice) = rollup::choose(&calls, self.shape.interval, self.read) else {
            return Ok(None);
        };
        let field = |slot: usize| field_of(slot).unwrap_or_default();
        let exclude = self.exclude.map(excluded_sql);
        let query = |columns, range, cond| FactQuery {
            measurement: self.measurement,
            samples: false,
            columns,
            range,
            tag_condition: self.shape.tag_sql.clone(),
            field_condition: cond,
            limit: None,
            join_series_tags: false,
        };
        let whole = TimeRange {
            start: choice.lo,
            end: choice.hi,
        };
        let (rolled_cols, rolled_from) = sqlgen::fact_parts(&query(
            rollup::rollup_columns(&calls, &field),
            whole,
            exclude.clone(),
        ));
        // The rollup table, read without FINAL: the merge adds its rows.
        let raw_table = format!(" FROM {} FINAL", sql_ident(self.measurement));
        let Some(rest) = rolled_from.strip_prefix(&raw_table) else {
            return Ok(None);
        };
        let table = rollup::table_name(&choice, self.measurement);
        let ends = match &exclude {
            Some(e) => format!("{} AND {e}", rollup::outside_sql(&choice)),
            None => rollup::outside_sql(&choice),
        };
        let (raw_cols, raw_from) = sqlgen::fact_parts(&query(
            rollup::raw_columns(&calls, &field),
            self.read,
            Some(ends),
        ));
        let from = format!(
            " FROM (SELECT {rolled_cols} FROM {}{rest} UNION ALL SELECT {raw_cols}{raw_from})",
            sql_ident(&table)
        );
        let facts = pushdown::FactsSql {
            columns: "*",
            from: &from,
            joined: true,
        };
        let groups = self.groups_sql();
        Ok(Some(pushdown::grouped_sql(
            facts,
            self.shape.interval,
            self.grouping(&groups),
            &rollup::merge_columns(&calls),
            self.max_points as u64 + 1,
        )))
    }

    /// Whether the shards group pushed partials by series (grouped by
    /// tags, but not at the shards; or for the series' heads).
    fn by_series(&self) -> bool {
        self.heads || (!self.group_tags.is_empty() && !self.by_tags)
    }

    /// The value slots the shard computes, `s{i}` (and `p{i}`).
    fn columns(&self, resolve: &dyn Fn(&VarRef) -> Ref) -> Result<Vec<String>> {
        let mut columns = Vec::new();
        for (i, slot) in self.planned.slots.iter().enumerate() {
            let Slot::Sql(e) = slot else {
                continue;
            };
            columns.push(format!(
                "{} AS {}",
                sqlgen::condition_sql(e, resolve)?,
                sql_ident(&format!("s{i}"))
            ));
            if let Some(any) = sqlgen::any_field_sql(e, resolve) {
                columns.push(format!("{any} AS {}", sql_ident(&format!("p{i}"))));
            }
        }
        Ok(columns)
    }

    /// The partial aggregates of the fields the shard `has`; a row count
    /// when it has none of them (its buckets still count).
    fn pushed_columns(&self, has: &BTreeSet<String>) -> Vec<String> {
        let mut aggs = Vec::new();
        for (j, plan) in self.planned.plans.iter().enumerate() {
            let Plan::Aggregate { agg, slot, .. } = plan else {
                continue;
            };
            if let Slot::Sql(Expr::VarRef(v)) = &self.planned.slots[*slot] {
                if has.contains(&v.name) {
                    let float = self.schema.fields.get(&v.name) == Some(&"float");
                    aggs.extend(pushdown::columns(
                        j,
                        agg,
                        &format!("s{slot}"),
                        float,
                        self.shape.interval.is_some(),
                        self.by_series(),
                    ));
                }
            }
        }
        if aggs.is_empty() {
            aggs.push("count() AS `__n`".into());
        }
        aggs
    }
}

/// The points outside buckets `[lo, hi)` (those the cache holds).
fn excluded_sql((lo, hi): (i64, i64)) -> String {
    format!(
        "(time < fromUnixTimestamp64Nano(toInt64({lo})) OR time >= fromUnixTimestamp64Nano(toInt64({hi})))"
    )
}

/// The router's clock in nanoseconds.
fn wall_clock_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(i64::MAX, |d| d.as_nanos() as i64)
}
