//! Restoring a backup into a cluster. A restore writes every replica of
//! every shard and never merges with data already there, so it refuses a
//! cluster that holds any database before it changes anything.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use futures::StreamExt;
use shardhouse_backup::{BackupError, Destination, Manifest, ShardManifest};
use shardhouse_common::credential::ClusterToken;
use shardhouse_common::proto::{DatabasesRequest, RestoreShardRequest};
use shardhouse_common::shard_map::NodeInfo;

use super::knobs::{Knobs, Options};
use super::node::backup_client;
use super::progress::{mb, Progress};
use crate::node_client;
use crate::rebalance::ClusterMeta;

/// Restores a backup into this (empty) cluster: every replica of every
/// shard in this cluster's map gets the shard's parts.
pub async fn restore(
    meta: &mut ClusterMeta,
    url: &str,
    id: Option<String>,
    knobs: &Knobs,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<Manifest> {
    restore_with(meta, url, id, knobs, &Options::default(), out).await
}

/// [`restore`] with [`Options`]: of one database only when
/// `opts.database` is set (its tables and series catalog; the backup's
/// other databases are not restored), live progress.
pub async fn restore_with(
    meta: &mut ClusterMeta,
    url: &str,
    id: Option<String>,
    knobs: &Knobs,
    opts: &Options,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<Manifest> {
    let database = opts.database.as_deref();
    let (id, m) = read_manifest(url, id, database).await?;
    let (map, _) = meta.shard_map().await?.with_context(|| {
        format!(
            "no shard map for cluster {:?}: start its nodes with --init-cluster shards={} first",
            meta.cluster, m.shard_count
        )
    })?;
    if map.shard_count != m.shard_count {
        bail!(
            "backup {id} has {} shards, cluster {:?} has {}: start the new cluster with --init-cluster shards={} (any node count and rf)",
            m.shard_count, meta.cluster, map.shard_count, m.shard_count
        );
    }
    let live = meta.live_nodes().await?;
    refuse_non_empty(&live, meta.node_token.as_ref()).await?;
    let what = match database {
        Some(db) => format!("database {db:?} of {id}"),
        None => id.clone(),
    };
    writeln!(
        out,
        "restore {what} ({} shards, {:.1} MB) into cluster {}",
        m.shard_count,
        mb(m.stats.bytes),
        meta.cluster
    )?;
    let t0 = Instant::now();
    let token = meta.node_token.clone();
    let mut calls =
        futures::stream::iter(m.shards.clone())
            .map(|sm| {
                let replicas = map
                    .shard(sm.shard)
                    .map(|p| p.replicas.clone())
                    .unwrap_or_default();
                let (live, token) = (&live, token.clone());
                let rate = opts.max_bytes_per_sec;
                async move {
                    restore_shard(&sm, &replicas, live, token.as_ref(), url, knobs, rate).await
                }
            })
            .buffer_unordered(knobs.parallel_shards.max(1));
    let mut progress = Progress::new(
        opts.live_progress,
        u64::from(m.shard_count),
        Some(m.stats.bytes),
    );
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        let r = tokio::select! {
            r = calls.next() => match r {
                Some(r) => r,
                None => break,
            },
            _ = tick.tick(), if progress.live => {
                progress.draw(out)?;
                continue;
            }
        };
        let (line, parts, bytes) = match r {
            Ok(x) => x,
            Err(e) => {
                progress.finish(out)?;
                return Err(e);
            }
        };
        progress.shard_done(&line, parts, bytes, out)?;
    }
    progress.finish(out)?;
    let secs = t0.elapsed().as_secs_f64();
    writeln!(
        out,
        "restore {id} complete: {} shards, {:.1} MB per replica set, {secs:.1} s, {:.1} MB/s (one copy)",
        m.shard_count,
        mb(m.stats.bytes),
        mb(m.stats.bytes) / secs.max(1e-3)
    )?;
    Ok(m)
}

/// The backup's id and manifest (cut down to `database` when given), read
/// and checked before anything else: an unreachable destination, wrong
/// credentials, a damaged manifest or a missing database fail here, with
/// the cluster untouched, and the error says so.
async fn read_manifest(
    url: &str,
    id: Option<String>,
    database: Option<&str>,
) -> anyhow::Result<(String, Manifest)> {
    let untouched = |e: BackupError| anyhow::anyhow!("{e}; nothing was restored");
    let dest = Destination::open(url).map_err(untouched)?;
    let id = match id {
        Some(id) => id,
        None => dest.latest().await.map_err(untouched)?,
    };
    let m = dest.manifest(&id).await.map_err(untouched)?;
    let m = match database {
        None => m,
        Some(db) => m
            .select_database(db)
            .map_err(|e| anyhow::anyhow!("{e} at {url}; nothing was restored"))?,
    };
    Ok((id, m))
}

/// Restores one shard on each of its replicas, each node downloading at
/// most `max_bytes_per_sec` (0: no limit); its line, parts and bytes.
async fn restore_shard(
    sm: &ShardManifest,
    replicas: &[u64],
    live: &BTreeMap<u64, NodeInfo>,
    token: Option<&ClusterToken>,
    url: &str,
    knobs: &Knobs,
    max_bytes_per_sec: u64,
) -> anyhow::Result<(String, u64, u64)> {
    let json = serde_json::to_string(sm)?;
    let mut secs = Vec::new();
    for node in replicas {
        let info = live.get(node).with_context(|| {
            format!(
                "shard {}: replica node {node} is not live; restore needs every replica up",
                sm.shard
            )
        })?;
        let r = backup_client(&info.grpc_addr, token)
            .await?
            .restore_shard(RestoreShardRequest {
                shard: sm.shard,
                destination: url.to_string(),
                shard_manifest_json: json.clone(),
                jobs: knobs.jobs,
                max_bytes_per_sec,
            })
            .await
            .map_err(|s| anyhow::anyhow!("shard {} on node {node}: {}", sm.shard, s.message()))?;
        secs.push(format!("{:.1}", r.into_inner().secs));
    }
    let line = format!(
        "shard {:>3}: restored on nodes {replicas:?} ({} files, {:.1} MB each; {} s), backup index {} (flushed {})",
        sm.shard,
        sm.stats.files,
        mb(sm.stats.bytes),
        secs.join("/"),
        sm.commit_index,
        sm.flushed_index
    );
    Ok((line, sm.parts(), sm.stats.bytes))
}

/// A restore never overwrites: every live node must hold no database.
async fn refuse_non_empty(
    live: &BTreeMap<u64, NodeInfo>,
    token: Option<&ClusterToken>,
) -> anyhow::Result<()> {
    for (id, n) in live {
        let mut admin = node_client::admin_client(&n.grpc_addr, token, Duration::from_secs(10))
            .await
            .with_context(|| format!("cannot reach node {id} at {}", n.grpc_addr))?;
        let dbs = admin
            .databases(DatabasesRequest {})
            .await?
            .into_inner()
            .databases;
        if !dbs.is_empty() {
            let names: Vec<&str> = dbs.iter().map(|d| d.name.as_str()).collect();
            bail!(
                "the cluster is not empty: node {id} holds databases {names:?}; restore only into a new, empty cluster (nothing was changed)"
            );
        }
    }
    Ok(())
}
