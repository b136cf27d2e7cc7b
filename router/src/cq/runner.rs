//! Runs the continuous queries on exactly one router at a time. Every
//! router campaigns for a key in etcd (`/shardhouse/<cluster>/cq-leader`)
//! attached to a lease it keeps alive; the holder checks every second which
//! windows are due ([`super::due`]), runs each as `SELECT ... INTO` with its
//! time range through the normal read and write paths, and records the
//! window's end once the rows are acknowledged. A router that dies loses
//! the key when its lease runs out (`LEASE_TTL_SECS`) and another takes
//! over from the recorded ends.

use super::store::CqStore;
use super::{due, parse_select, window_statement, CqError};
use crate::metrics;
use crate::state::Router;
use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use shardhouse_influxql::SelectStatement;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Runs one window's `SELECT ... INTO` in a database at `now` through the
/// read and write paths (`read::influx` provides it; taking it as a
/// function keeps this module free of the read path).
pub type RunSelect =
    for<'a> fn(
        &'a Router,
        &'a str,
        SelectStatement,
        i64,
    ) -> Pin<Box<dyn Future<Output = Result<(), crate::error::Error>> + Send + 'a>>;

const LEASE_TTL_SECS: i64 = 10;
const TICK: Duration = Duration::from_secs(1);

/// Campaigns, leads while the lease holds, campaigns again; forever.
pub async fn run(router: Arc<Router>, run_select: RunSelect) {
    let holder = format!("router-{:016x}", rand_id());
    loop {
        if let Err(e) = lead(&router, &holder, run_select).await {
            tracing::warn!(error = %e, "continuous queries: lost or could not take the lease; retrying");
        }
        metrics::CQ_LEADER.set(0);
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

fn rand_id() -> u64 {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ u64::from(std::process::id()).rotate_left(32)
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

async fn lead(router: &Arc<Router>, holder: &str, run_select: RunSelect) -> Result<(), CqError> {
    let mut client = router.meta.client().await?;
    let key = router.meta.key("cq-leader");
    let lease = client
        .lease_grant(LEASE_TTL_SECS, None)
        .await
        .map_err(unavailable)?
        .id();
    // Keep the lease alive from the start: a follower's lease keeps it
    // ready to take over; the key decides who leads.
    let (mut keeper, mut acks) = client.lease_keep_alive(lease).await.map_err(unavailable)?;
    let alive = Arc::new(AtomicBool::new(true));
    let flag = alive.clone();
    let keep = tokio::spawn(async move {
        loop {
            let ok = keeper.keep_alive().await.is_ok()
                && matches!(acks.message().await, Ok(Some(r)) if r.ttl() > 0);
            if !ok {
                flag.store(false, Ordering::SeqCst);
                return;
            }
            tokio::time::sleep(Duration::from_secs(LEASE_TTL_SECS as u64 / 3)).await;
        }
    });
    let result = async {
        loop {
            let txn = Txn::new()
                .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.as_str(),
                    holder,
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            if client.txn(txn).await.map_err(unavailable)?.succeeded() {
                break;
            }
            if !alive.load(Ordering::SeqCst) {
                return Err(CqError::Unavailable("the lease expired".into()));
            }
            tokio::time::sleep(TICK).await;
        }
        tracing::info!(holder, "continuous queries: this router leads");
        metrics::CQ_LEADER.set(1);
        let store = CqStore::new(router.meta.clone());
        while alive.load(Ordering::SeqCst) {
            if let Err(e) = tick(router, &store, run_select).await {
                tracing::warn!(error = %e, "continuous queries: a round failed");
            }
            tokio::time::sleep(TICK).await;
        }
        Err(CqError::Unavailable("the lease expired".into()))
    }
    .await;
    keep.abort();
    let _ = client.lease_revoke(lease).await;
    result
}

fn unavailable(e: etcd_client::Error) -> CqError {
    CqError::Unavailable(e.to_string())
}

/// One round: every query's due window, run and recorded.
async fn tick(router: &Router, store: &CqStore, run_select: RunSelect) -> Result<(), CqError> {
    let now = now_ns();
    for (database, queries) in store.all().await? {
        for cq in queries {
            let done = store.done(&database, &cq.name).await?;
            let Some(window) = due(&cq, done, now) else {
                continue;
            };
            let select = window_statement(&parse_select(&cq)?, window);
            match run_select(router, &database, select, now).await {
                Ok(()) => {
                    store.record_done(&database, &cq.name, window.end).await?;
                    metrics::CQ_RUNS.with_label_values(&["ok"]).inc();
                }
                Err(e) => {
                    metrics::CQ_RUNS.with_label_values(&["error"]).inc();
                    tracing::warn!(cq = cq.name, database, error = %e, "continuous query failed; the window is tried again");
                }
            }
        }
    }
    Ok(())
}
