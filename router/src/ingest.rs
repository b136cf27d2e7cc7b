//! The write pipeline shared by every endpoint: the stages of
//! `write_stages` (admit -> split -> reserve -> forward) chained for one
//! request.

use crate::auth::Authorizer;
use crate::batch::{BatchSummary, RejectReason, RequestBatch};
use crate::cardinality::Cardinality;
use crate::cluster::Cluster;
use crate::config::RouterOptions;
use crate::error::{Error, Result};
use crate::metrics;
use crate::series_cache::SeriesCache;
use crate::write_stages;
use shardhouse_common::lineproto::Precision;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::Semaphore;

/// Bodies above this size are parsed with `block_in_place` so a big write
/// does not stall other requests on the same runtime worker.
const BLOCKING_PARSE_BYTES: usize = 1 << 20;

/// State shared by the HTTP and gRPC front doors.
pub struct Router {
    pub options: RouterOptions,
    pub cluster: Arc<Cluster>,
    /// Tokens, roles and write rate limits.
    pub auth: Authorizer,
    cardinality: Cardinality,
    /// Series earlier requests resolved; its entries say "admitted" by
    /// `cardinality`, so the two are made together and never replaced.
    series_cache: SeriesCache,
    inflight: Arc<Semaphore>,
    request_prefix: u64,
    request_seq: AtomicU64,
    /// When the router started (`/ready` answers it).
    pub started: SystemTime,
}

/// What a write did: points committed and points rejected (partial write).
#[derive(Debug, Clone)]
pub struct WriteOutcome {
    pub summary: BatchSummary,
}

impl WriteOutcome {
    /// The 400 error for rejected points, if any were rejected. Every good
    /// point has been committed when this is returned.
    pub fn partial_error(&self, unit: &str) -> Option<Error> {
        let s = &self.summary;
        let r = s.first_rejection.as_ref()?;
        let total = s.points + s.rejected;
        let what = match r.reason {
            RejectReason::Cardinality => "series limit",
            RejectReason::BadPoint => "invalid point",
        };
        Some(Error::BadRequest(format!(
            "partial write: {unit} {}: {}; {} of {total} points rejected ({what} first), the other {} were written",
            r.position, r.message, s.rejected, s.points
        )))
    }
}

pub fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

impl Router {
    /// Fails when the tokens in the options are unusable.
    pub fn new(options: RouterOptions, cluster: Arc<Cluster>) -> Result<Router> {
        metrics::init();
        let auth = Authorizer::from_options(&options)?;
        let inflight = Arc::new(Semaphore::new(options.max_inflight_bytes));
        let cardinality = Cardinality::new(options.max_series_per_db);
        let series_cache = SeriesCache::new(options.series_cache_entries);
        Ok(Router {
            options,
            cluster,
            auth,
            cardinality,
            series_cache,
            inflight,
            request_prefix: (now_nanos() as u64) ^ (u64::from(std::process::id()) << 40),
            request_seq: AtomicU64::new(0),
            started: SystemTime::now(),
        })
    }

    pub fn retry_after(&self) -> Duration {
        Duration::from_secs(self.options.retry_after_secs.max(1))
    }

    /// Runs one write. `budget_bytes` (the body size) is held from the
    /// router's in-flight budget until the ack. `fill` adds the points.
    pub async fn write<F>(
        &self,
        endpoint: &'static str,
        db: &str,
        budget_bytes: usize,
        precision: Precision,
        fill: F,
    ) -> Result<WriteOutcome>
    where
        F: for<'b> FnOnce(&mut RequestBatch<'b>),
    {
        let admitted = write_stages::admit(
            &self.options,
            &self.inflight,
            self.retry_after(),
            db,
            budget_bytes,
        )?;
        let map = self.cluster.shard_map()?;
        let db_series = self.cardinality.db(db);
        let series_cache = self.series_cache.db(db);
        let split = || {
            write_stages::split(
                endpoint,
                db,
                map.shard_count,
                precision,
                db_series.as_deref(),
                series_cache,
                fill,
            )
        };
        let split = if budget_bytes > BLOCKING_PARSE_BYTES
            && tokio::runtime::Handle::current().runtime_flavor()
                == tokio::runtime::RuntimeFlavor::MultiThread
        {
            tokio::task::block_in_place(split)?
        } else {
            split()?
        };
        let reserved = write_stages::reserve(&self.cluster, split)?;
        let request_id = format!(
            "{:016x}-{}",
            self.request_prefix,
            self.request_seq.fetch_add(1, Ordering::Relaxed)
        );
        let summary =
            write_stages::forward(&self.cluster, reserved, &request_id, admitted.deadline).await?;
        metrics::POINTS
            .with_label_values(&[endpoint])
            .inc_by(summary.points as u64);
        drop(admitted);
        Ok(WriteOutcome { summary })
    }
}
