//! The facts step of a `SELECT`: each shard's statement over its points
//! of one measurement (only the columns that shard has; a field it never
//! received reads as NULL) or, when every field is a pushable aggregate,
//! its partial aggregates per bucket and series (pushdown.rs); run on one
//! replica of every shard that knows the measurement.

use std::collections::{BTreeMap, BTreeSet};

use arrow_array::RecordBatch;
use shardhouse_common::names::sql_ident;
use shardhouse_influxql::time::TimeRange;
use shardhouse_influxql::{Expr, VarRef};

use super::super::fetch;
use super::super::fields::{Plan, Planned, Slot};
use super::super::pushdown;
use super::super::sqlgen::{self, FactQuery, Ref};
use super::super::Ctx;
use super::{Schema, Shape};
use crate::error::{Error, Result};

/// What the shards' statements are made of.
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
    pub grouped_by_tags: bool,
    /// The router's `query_max_points`.
    pub max_points: usize,
}

impl Facts<'_> {
    /// Each shard's answer (in shard order), at most `max_points` rows in
    /// all.
    pub async fn fetch(&self, ctx: &Ctx<'_>, database: &str) -> Result<Vec<Vec<RecordBatch>>> {
        let mut sqls = BTreeMap::new();
        for shard in self.schema.per_shard.keys() {
            sqls.insert(*shard, self.sql(*shard)?);
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
            if points > self.max_points {
                return Err(Error::statement(format!(
                    "the statement reads more than {} points (the router's --query-max-points); narrow the time range or the series, or aggregate with GROUP BY time()",
                    self.max_points
                )));
            }
            shards.push(batches);
        }
        Ok(shards)
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
        let inner = sqlgen::fact_sql(&FactQuery {
            measurement: self.measurement,
            samples: self.schema.samples,
            columns,
            range: self.read,
            tag_condition: self.shape.tag_sql.clone(),
            field_condition: field_sql,
            limit: (!self.pushed).then_some(self.max_points as u64 + 1),
            join_series_tags: self.shape.join_series_tags,
        });
        if !self.pushed {
            return Ok(inner);
        }
        Ok(pushdown::grouped_sql(
            &inner,
            self.shape.interval,
            self.grouped_by_tags,
            &self.pushed_columns(has),
            self.max_points as u64 + 1,
        ))
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
                    aggs.extend(pushdown::columns(j, agg, &format!("s{slot}"), float));
                }
            }
        }
        if aggs.is_empty() {
            aggs.push("count() AS `__n`".into());
        }
        aggs
    }
}
