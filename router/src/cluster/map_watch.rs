//! The shard map from etcd: read once, then watched, reconnecting with
//! backoff.

use super::Cluster;
use crate::error::Result;
use shardhouse_common::shard_map::{keys, ShardMap};
use std::sync::Arc;
use std::time::Duration;

/// Keeps the cluster's shard map in sync with etcd: initial get, then a
/// watch from the next revision; reconnects with backoff on any error.
pub async fn watch_shard_map(cluster: Arc<Cluster>, endpoints: Vec<String>) {
    let key = keys::shard_map(&cluster.cluster_name);
    let mut backoff = Duration::from_millis(100);
    loop {
        match watch_once(&cluster, &endpoints, &key).await {
            Ok(()) => tracing::warn!("etcd watch ended; reconnecting"),
            Err(e) => tracing::warn!(error = %e, "etcd shard map watch failed; retrying"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

async fn watch_once(cluster: &Cluster, endpoints: &[String], key: &str) -> Result<()> {
    let mut client = etcd_client::Client::connect(endpoints, None).await?;
    let resp = client.get(key, None).await?;
    if let Some(kv) = resp.kvs().first() {
        install(cluster, kv.value());
    } else {
        tracing::info!(key, "no shard map in etcd yet; waiting for it");
    }
    let rev = resp.header().map_or(0, |h| h.revision());
    let mut stream = client
        .watch(
            key,
            Some(etcd_client::WatchOptions::new().with_start_revision(rev + 1)),
        )
        .await?;
    while let Some(resp) = stream.message().await? {
        for ev in resp.events() {
            if ev.event_type() == etcd_client::EventType::Put {
                if let Some(kv) = ev.kv() {
                    install(cluster, kv.value());
                }
            }
        }
    }
    Ok(())
}

fn install(cluster: &Cluster, value: &[u8]) {
    match serde_json::from_slice::<ShardMap>(value) {
        Ok(map) => cluster.set_shard_map(map),
        Err(e) => {
            tracing::error!(error = %e, "shard map in etcd is not valid JSON ShardMap; keeping the old one")
        }
    }
}
