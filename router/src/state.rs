//! The state every door shares ([`Router`]: options, cluster, tokens, the
//! write budgets and series caches) and the write pipeline chained for one
//! request: `write::stages` admit -> split, then `cluster::write` reserve
//! -> forward.

use crate::auth::Authorizer;
use crate::cluster::{self, Cluster};
use crate::config::RouterOptions;
use crate::error::Result;
use crate::meta_kv::MetaKv;
use crate::metrics;
use crate::policy::PolicyStore;
use crate::write::batch::RequestBatch;
use crate::write::cardinality::Cardinality;
use crate::write::series_cache::SeriesCache;
use crate::write::{now_nanos, stages as write_stages, WriteOutcome};
use shardhouse_common::lineproto::Precision;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
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
    /// Metadata the routers share in etcd (policies, continuous queries).
    pub meta: Arc<MetaKv>,
    /// Retention policies per database (etcd, cached): which storage a
    /// write's or a query's `rp` names.
    pub policies: Arc<PolicyStore>,
    cardinality: Cardinality,
    /// Series earlier requests resolved; its entries say "admitted" by
    /// `cardinality`, so the two are made together and never replaced.
    series_cache: SeriesCache,
    inflight: Arc<Semaphore>,
    request_prefix: u64,
    request_seq: AtomicU64,
    /// When the router started (`/ready` answers it).
    pub started: SystemTime,
    /// Labels of the series PromQL read, by series id.
    pub promql_labels: shardhouse_promql::LabelCache,
}

impl Router {
    /// Fails when the tokens in the options are unusable.
    pub fn new(options: RouterOptions, cluster: Arc<Cluster>) -> Result<Router> {
        metrics::init();
        let auth = Authorizer::from_sources(&options.token_sources())?;
        let inflight = Arc::new(Semaphore::new(options.max_inflight_bytes));
        let cardinality = Cardinality::new(options.max_series_per_db);
        let series_cache = SeriesCache::new(options.series_cache_entries);
        let meta = Arc::new(MetaKv::new(
            &options.cluster,
            options.etcd_endpoints.clone(),
        ));
        let policies = Arc::new(PolicyStore::new(meta.clone()));
        Ok(Router {
            options,
            cluster,
            auth,
            meta,
            policies,
            cardinality,
            series_cache,
            inflight,
            request_prefix: (now_nanos() as u64) ^ (u64::from(std::process::id()) << 40),
            request_seq: AtomicU64::new(0),
            started: SystemTime::now(),
            promql_labels: Default::default(),
        })
    }

    pub fn retry_after(&self) -> Duration {
        Duration::from_secs(self.options.retry_after_secs.max(1))
    }

    /// Runs one write into `db`'s retention policy `rp` (None: the
    /// default). `budget_bytes` (the body size) is held from the router's
    /// in-flight budget until the ack. `fill` adds the points.
    pub async fn write<F>(
        &self,
        endpoint: &'static str,
        db: &str,
        rp: Option<&str>,
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
        // From here on `db` is the policy's storage on the nodes.
        let storage = self.policies.storage(db, rp)?;
        let db = storage.as_str();
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
        let reserved = cluster::write::reserve(&self.cluster, split)?;
        let request_id = format!(
            "{:016x}-{}",
            self.request_prefix,
            self.request_seq.fetch_add(1, Ordering::Relaxed)
        );
        let summary =
            cluster::write::forward(&self.cluster, reserved, &request_id, admitted.deadline)
                .await?;
        metrics::POINTS
            .with_label_values(&[endpoint])
            .inc_by(summary.points as u64);
        drop(admitted);
        Ok(WriteOutcome { summary })
    }
}
