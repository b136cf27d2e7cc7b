//! The write pipeline shared by every endpoint: budget -> parse into shard
//! batches -> Arrow IPC -> shard budgets -> forward in parallel -> ack.

use crate::auth::Authorizer;
use crate::batch::{BatchSummary, RejectReason, RequestBatch};
use crate::cardinality::Cardinality;
use crate::cluster::Cluster;
use crate::config::RouterOptions;
use crate::error::{Error, Result};
use crate::metrics;
use shardhouse_common::lineproto::Precision;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tracing::Instrument;

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
        Ok(Router {
            options,
            cluster,
            auth,
            cardinality,
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
        shardhouse_common::names::validate_database(db)
            .map_err(|e| Error::BadRequest(e.to_string()))?;
        let deadline = Instant::now() + Duration::from_millis(self.options.request_timeout_ms);
        let n = budget_bytes.clamp(1, self.options.max_inflight_bytes) as u32;
        let _permit = self
            .inflight
            .clone()
            .try_acquire_many_owned(n)
            .map_err(|_| {
                Error::Overloaded(
                    "router in-flight byte budget is full".into(),
                    self.retry_after(),
                )
            })?;
        metrics::INFLIGHT_BYTES.add(i64::from(n));
        let _inflight = scopeguard(move || metrics::INFLIGHT_BYTES.sub(i64::from(n)));

        let map = self.cluster.shard_map()?;
        let db_series = self.cardinality.db(db);
        let parse = || {
            let _t = metrics::PARSE_SECONDS
                .with_label_values(&[endpoint])
                .start_timer();
            let mut batch = RequestBatch::new(
                map.shard_count,
                precision,
                now_nanos(),
                db_series.as_deref(),
            );
            batch.set_timing(true);
            fill(&mut batch);
            metrics::SERIES_HASH_SECONDS.observe(batch.series_seconds());
            let _b = metrics::BATCH_BUILD_SECONDS.start_timer();
            batch.finish()
        };
        let (mut batches, summary) = if budget_bytes > BLOCKING_PARSE_BYTES
            && tokio::runtime::Handle::current().runtime_flavor()
                == tokio::runtime::RuntimeFlavor::MultiThread
        {
            tokio::task::block_in_place(parse)?
        } else {
            parse()?
        };
        for b in &mut batches {
            b.database = db.to_string();
        }
        if summary.rejected_for_cardinality > 0 {
            metrics::REJECTED
                .with_label_values(&["cardinality"])
                .inc_by(summary.rejected_for_cardinality as u64);
        }
        let _shard_permits = self.cluster.reserve(&batches)?;
        let request_id = format!(
            "{:016x}-{}",
            self.request_prefix,
            self.request_seq.fetch_add(1, Ordering::Relaxed)
        );
        let span =
            tracing::debug_span!("forward", request_id = %request_id, batches = batches.len());
        self.cluster
            .write_all(&batches, &request_id, deadline)
            .instrument(span)
            .await?;
        metrics::POINTS
            .with_label_values(&[endpoint])
            .inc_by(summary.points as u64);
        Ok(WriteOutcome { summary })
    }
}

/// Runs a closure on drop (keeps the in-flight gauge honest on every path).
fn scopeguard<F: FnOnce()>(f: F) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
}
