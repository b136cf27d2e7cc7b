//! The stages of a write after its endpoint decoded it, each a typed step
//! that takes the previous step's output, so each can be run and tested on
//! its own (InfluxDB IOx's router chained its DML handlers the same way).
//! `state::Router::write` chains them:
//!
//! 0. decode + authorize, per door (`http/`, `grpc.rs`): the body read and
//!    decoded (`write::parse`), the token admitted (`write::admit`);
//! 1. [`admit`]: the database name checked and the request's bytes held
//!    from the router's in-flight budget until the ack -> [`Admitted`];
//! 2. [`split`]: every point parsed, its series hashed and its fields put in
//!    its shard's column builders, the builders encoded as Arrow IPC ->
//!    [`Split`]. Parse, series hash and shard split stay one pass per point
//!    (the hot loop in `batch`): a stage is one call per request, never a
//!    dynamic call per point;
//! 3. `cluster::write::reserve`: the per-shard in-flight budgets, all or
//!    none -> `Reserved`;
//! 4. `cluster::write::forward`: per-shard queue (coalescing), per-node
//!    queue and the leader retry until the deadline -> the request's
//!    [`BatchSummary`] once every shard committed.

use super::batch::{BatchSummary, RequestBatch, ShardBatch};
use super::cardinality::DbSeries;
use super::now_nanos;
use super::series_cache::DbCache;
use crate::config::RouterOptions;
use crate::error::{Error, Result};
use crate::metrics;
use shardhouse_common::lineproto::Precision;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// A write let in: its database name is valid and its bytes are held from
/// the router's in-flight budget until this is dropped (after the ack).
pub struct Admitted {
    /// When the write answers 503 if not every shard committed.
    pub deadline: Instant,
    _permit: OwnedSemaphorePermit,
    /// Bytes held (the in-flight gauge gives them back on drop).
    held: u32,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        metrics::INFLIGHT_BYTES.sub(i64::from(self.held));
    }
}

/// Stage 1: checks the database name and takes `budget_bytes` (the body
/// size; a body larger than the whole budget still goes alone) from
/// `inflight`, or answers 429 with `retry_after` at once when the budget
/// is full.
pub fn admit(
    options: &RouterOptions,
    inflight: &Arc<Semaphore>,
    retry_after: Duration,
    db: &str,
    budget_bytes: usize,
) -> Result<Admitted> {
    shardhouse_common::names::validate_database(db)
        .map_err(|e| Error::BadRequest(e.to_string()))?;
    let deadline = Instant::now() + Duration::from_millis(options.request_timeout_ms);
    let held = budget_bytes.clamp(1, options.max_inflight_bytes) as u32;
    let permit = inflight.clone().try_acquire_many_owned(held).map_err(|_| {
        Error::Overloaded("router in-flight byte budget is full".into(), retry_after)
    })?;
    metrics::INFLIGHT_BYTES.add(i64::from(held));
    Ok(Admitted {
        deadline,
        _permit: permit,
        held,
    })
}

/// A request's points as shard batches (Arrow IPC), each naming the
/// database, and what was accepted and rejected.
#[derive(Debug)]
pub struct Split {
    pub batches: Vec<ShardBatch>,
    pub summary: BatchSummary,
}

/// Stage 2: `fill` adds the endpoint's points to a [`RequestBatch`] over
/// `shard_count` shards (points without a time get now); `db_series`
/// enforces the database's series limit and `series_cache` (made with it)
/// spares known series their resolution. CPU only: the caller decides
/// whether it runs off the async workers.
pub fn split<F>(
    endpoint: &'static str,
    db: &str,
    shard_count: u32,
    precision: Precision,
    db_series: Option<&DbSeries>,
    series_cache: Option<DbCache<'_>>,
    fill: F,
) -> Result<Split>
where
    F: for<'b> FnOnce(&mut RequestBatch<'b>),
{
    let (mut batches, summary) = {
        let _t = metrics::PARSE_SECONDS
            .with_label_values(&[endpoint])
            .start_timer();
        let mut batch = RequestBatch::new(shard_count, precision, now_nanos(), db_series);
        batch.set_timing(true);
        if let Some(cache) = series_cache {
            batch.use_series_cache(cache);
        }
        fill(&mut batch);
        metrics::SERIES_HASH_SECONDS.observe(batch.series_seconds());
        let (hits, misses) = batch.series_cache_lookups();
        if hits > 0 {
            metrics::SERIES_CACHE_LOOKUPS
                .with_label_values(&["hit"])
                .inc_by(hits as u64);
        }
        if misses > 0 {
            metrics::SERIES_CACHE_LOOKUPS
                .with_label_values(&["miss"])
                .inc_by(misses as u64);
        }
        let _b = metrics::BATCH_BUILD_SECONDS.start_timer();
        batch.finish()?
    };
    for b in &mut batches {
        b.database = db.to_string();
    }
    if summary.rejected_for_cardinality > 0 {
        metrics::REJECTED
            .with_label_values(&["cardinality"])
            .inc_by(summary.rejected_for_cardinality as u64);
    }
    Ok(Split { batches, summary })
}

#[cfg(test)]
#[path = "stages_tests.rs"]
mod tests;
