//! The reconciler: observes the cluster (Kubernetes objects, the shard map in
//! etcd), asks the pure decision functions what should happen, and applies
//! the result with server-side apply under one field manager.

mod apply;
mod cleanup;
mod credential;
mod events;
mod moves;
mod observe;
mod rolling;

use crate::crd::ShardhouseCluster;
use crate::resources::MANAGER;
use crate::{metrics, Error, Result};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::finalizer::{finalizer, Event as FinalizerEvent};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use observe::{node_replicas, parse_counter_sum};

use apply::apply;
use cleanup::cleanup;

pub const FINALIZER: &str = "shardhouse.dev/cleanup";

/// Moves one reconcile may run before it requeues, so a long rebalance
/// still reports progress in status and reacts to spec changes.
const MOVES_PER_RECONCILE: usize = 8;

/// Per-cluster memory across reconciles.
#[derive(Debug, Default)]
struct ClusterMemory {
    failures: u32,
    /// Last `(unix seconds, points_total)` scraped from the routers.
    last_points: Option<(f64, f64)>,
    last_scale_down: Option<Instant>,
}

/// Shared by every reconcile.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    /// How long to wait for etcd; short in tests where there is none.
    pub etcd_timeout: Duration,
    /// Scrapes the routers' metrics for the autoscaler.
    scrape: reqwest::Client,
    memory: Mutex<BTreeMap<String, ClusterMemory>>,
}

impl Context {
    pub fn new(client: Client) -> Self {
        let reporter = Reporter {
            controller: MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            etcd_timeout: Duration::from_secs(3),
            // No idle connections: each scrape opens its own, so the router
            // Service spreads scrapes over the routers (a kept connection
            // would pin them to one router).
            scrape: reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .build()
                .unwrap_or_default(),
            memory: Mutex::new(BTreeMap::new()),
        }
    }

    fn memory<T>(&self, key: &str, f: impl FnOnce(&mut ClusterMemory) -> T) -> T {
        let mut m = self.memory.lock().unwrap_or_else(|p| p.into_inner());
        f(m.entry(key.to_string()).or_default())
    }
}

fn key(c: &ShardhouseCluster) -> String {
    format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any())
}

/// Entry point for the controller runtime.
pub async fn reconcile(obj: Arc<ShardhouseCluster>, ctx: Arc<Context>) -> Result<Action> {
    let meter = metrics::reconcile_meter();
    let k = key(&obj);
    let result = reconcile_cluster(obj, ctx).await;
    let (ms, api_requests) = meter.finish();
    // One line per run: what `make bench-operator-scale` reads.
    tracing::debug!(cluster = %k, ms, api_requests, ok = result.is_ok(), "reconcile finished");
    result
}

async fn reconcile_cluster(obj: Arc<ShardhouseCluster>, ctx: Arc<Context>) -> Result<Action> {
    let ns = obj
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let api: Api<ShardhouseCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let k = key(&obj);
    let action = finalizer(&api, FINALIZER, obj, |event| async {
        match event {
            FinalizerEvent::Apply(c) => apply(c, ctx.clone()).await,
            FinalizerEvent::Cleanup(c) => cleanup(c, ctx.clone()).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))?;
    ctx.memory(&k, |m| m.failures = 0);
    Ok(action)
}

/// Exponential backoff per cluster: 2s, 4s, 8s ... capped at 5 minutes.
pub fn backoff(failures: u32) -> Duration {
    let secs = 2u64.saturating_pow(failures.clamp(1, 9)).min(300);
    Duration::from_secs(secs)
}

pub fn error_policy(obj: Arc<ShardhouseCluster>, err: &Error, ctx: Arc<Context>) -> Action {
    metrics::RECONCILE_ERRORS.inc();
    let failures = ctx.memory(&key(&obj), |m| {
        m.failures += 1;
        m.failures
    });
    let delay = backoff(failures);
    tracing::warn!(cluster = %key(&obj), %err, failures, ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// Runs the controller until the process is told to stop.
pub async fn run(client: Client) {
    let ctx = Arc::new(Context::new(client.clone()));
    let clusters: Api<ShardhouseCluster> = Api::all(client.clone());
    let wc = watcher::Config::default().any_semantic();
    Controller::new(clusters, wc.clone())
        .owns(Api::<StatefulSet>::all(client.clone()), wc.clone())
        .owns(Api::<Deployment>::all(client.clone()), wc)
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            match res {
                Ok((obj, _)) => tracing::debug!(cluster = %obj.name, "reconciled"),
                Err(e) => tracing::debug!(%e, "reconcile error"),
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_caps() {
        assert_eq!(backoff(1), Duration::from_secs(2));
        assert_eq!(backoff(2), Duration::from_secs(4));
        assert_eq!(backoff(5), Duration::from_secs(32));
        assert_eq!(backoff(30), Duration::from_secs(300));
    }
}
