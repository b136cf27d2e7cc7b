//! One backup run: which replica each shard is taken from, the node calls
//! (incremental against the newest backup at the destination), and the
//! manifest, written last so that an interrupted run leaves no backup
//! that looks complete.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};
use futures::StreamExt;
use shardhouse_backup::dest::new_backup_id;
use shardhouse_backup::{Destination, Manifest, ShardManifest, Stats};
use shardhouse_common::credential::ClusterToken;
use shardhouse_common::proto::BackupShardRequest;
use shardhouse_common::shard_map::{NodeInfo, ShardMap};

use super::knobs::{Knobs, Options};
use super::node::backup_client;
use super::progress::{mb, Progress};
use crate::rebalance::ClusterMeta;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Replicas to back a shard up from, best first: the replica that took the
/// base backup of the shard (its parts are already at the destination;
/// another replica's parts are merged differently and would all be new),
/// then its leader, then the other live replicas. Any replica is correct:
/// the node waits for a read index before it freezes its parts.
pub fn backup_sources(
    map: &ShardMap,
    live: &BTreeMap<u64, NodeInfo>,
    base: Option<&Manifest>,
) -> Vec<(u32, Vec<u64>)> {
    map.shards
        .iter()
        .map(|p| {
            let base_node = base
                .and_then(|b| b.shards.iter().find(|s| s.shard == p.shard))
                .map(|s| s.node_id);
            let mut nodes: Vec<u64> = p
                .replicas
                .iter()
                .copied()
                .filter(|n| live.contains_key(n))
                .collect();
            nodes.sort_by_key(|n| (Some(*n) != base_node, *n != p.leader_hint, *n));
            (p.shard, nodes)
        })
        .collect()
}

fn shard_line(m: &ShardManifest, secs: f64) -> String {
    format!(
        "shard {:>3}: node {} index {} (flushed {}) files {} (new {}) {:.1} MB (new {:.1} MB) {:.1} s",
        m.shard,
        m.node_id,
        m.commit_index,
        m.flushed_index,
        m.stats.files,
        m.stats.files_uploaded,
        mb(m.stats.bytes),
        mb(m.stats.bytes_uploaded),
        secs
    )
}

/// Backs up every shard; writes the manifest once all shards are stored.
pub async fn create(
    meta: &mut ClusterMeta,
    url: &str,
    id: Option<String>,
    knobs: &Knobs,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<Manifest> {
    create_with(meta, url, id, knobs, &Options::default(), out).await
}

/// [`create`] with [`Options`] (a rate limit, live progress).
pub async fn create_with(
    meta: &mut ClusterMeta,
    url: &str,
    id: Option<String>,
    knobs: &Knobs,
    opts: &Options,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<Manifest> {
    let dest = Destination::open(url)?;
    dest.claim(&meta.cluster).await?;
    let (map, _) = meta
        .shard_map()
        .await?
        .with_context(|| format!("no shard map for cluster {:?}", meta.cluster))?;
    let live = meta.live_nodes().await?;
    let started_ms = now_ms();
    let id = id.unwrap_or_else(|| new_backup_id(started_ms));
    if dest.backup_ids().await?.contains(&id) {
        bail!("backup {id} already exists at {url}; choose another --id");
    }
    writeln!(
        out,
        "backup {id} of cluster {} ({} shards) to {url}",
        meta.cluster, map.shard_count
    )?;
    let base = base_backup(&dest).await;
    if let Some(b) = &base {
        writeln!(
            out,
            "parts merged since backup {} from parts it holds are named, not uploaded",
            b.id
        )?;
    }
    let t0 = Instant::now();
    let token = meta.node_token.clone();
    let sources = backup_sources(&map, &live, base.as_ref());
    let mut calls = futures::stream::iter(sources)
        .map(|(shard, nodes)| {
            let (live, token, id) = (&live, token.clone(), id.clone());
            let base = base_shard_json(base.as_ref(), shard);
            async move {
                let call = ShardCall {
                    shard,
                    url,
                    id: &id,
                    base,
                };
                backup_shard(&call, &nodes, live, token.as_ref(), knobs, opts).await
            }
        })
        .buffer_unordered(knobs.parallel_shards.max(1));
    let mut shards = Vec::new();
    let mut stats = Stats::default();
    let mut progress = Progress::new(opts.live_progress, u64::from(map.shard_count), None);
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
        let (m, secs) = match r {
            Ok(x) => x,
            Err(e) => {
                progress.finish(out)?;
                return Err(e);
            }
        };
        stats.add(&m.stats);
        progress.shard_done(&shard_line(&m, secs), m.parts(), m.stats.bytes, out)?;
        shards.push(m);
    }
    progress.finish(out)?;
    shards.sort_by_key(|s| s.shard);
    let manifest = Manifest {
        format: shardhouse_backup::manifest::FORMAT,
        id: id.clone(),
        cluster: meta.cluster.clone(),
        started_ms,
        finished_ms: now_ms(),
        shard_count: map.shard_count,
        replication_factor: map.replication_factor,
        shard_map: serde_json::to_value(&map)?,
        shards,
        stats,
    };
    dest.put_manifest(&manifest).await?;
    complete_lines(&manifest, t0.elapsed().as_secs_f64(), out)?;
    Ok(manifest)
}

/// The lines a finished backup ends with: totals with rates, then exact
/// byte counts for scripts (the MB are rounded).
fn complete_lines(manifest: &Manifest, secs: f64, out: &mut dyn Write) -> anyhow::Result<()> {
    let (id, stats) = (&manifest.id, &manifest.stats);
    writeln!(
        out,
        "backup {id} complete: {} shards, {} files, {:.1} MB, uploaded {} files {:.1} MB ({:.2}% of the bytes), {secs:.1} s, {:.1} MB/s",
        manifest.shards.len(),
        stats.files,
        mb(stats.bytes),
        stats.files_uploaded,
        mb(stats.bytes_uploaded),
        100.0 * stats.bytes_uploaded as f64 / stats.bytes.max(1) as f64,
        mb(stats.bytes) / secs.max(1e-3),
    )?;
    writeln!(
        out,
        "backup {id} bytes={} uploaded_bytes={}",
        stats.bytes, stats.bytes_uploaded
    )?;
    Ok(())
}

/// The newest backup at the destination, the base of an incremental one;
/// none when there is none or it cannot be read (then every part not in
/// the destination is uploaded, which is always correct).
async fn base_backup(dest: &Destination) -> Option<Manifest> {
    let ms = dest.manifests().await.ok()?;
    ms.into_iter()
        .max_by(|a, b| (a.started_ms, &a.id).cmp(&(b.started_ms, &b.id)))
}

/// The base backup's manifest of one shard, as the node takes it.
fn base_shard_json(base: Option<&Manifest>, shard: u32) -> String {
    base.and_then(|b| b.shards.iter().find(|s| s.shard == shard))
        .and_then(|s| serde_json::to_string(s).ok())
        .unwrap_or_default()
}

/// What one shard's backup call asks for.
struct ShardCall<'a> {
    shard: u32,
    url: &'a str,
    id: &'a str,
    /// The base backup's manifest of the shard (JSON), or empty.
    base: String,
}

/// One shard from the first replica that manages it.
async fn backup_shard(
    call: &ShardCall<'_>,
    nodes: &[u64],
    live: &BTreeMap<u64, NodeInfo>,
    token: Option<&ClusterToken>,
    knobs: &Knobs,
    opts: &Options,
) -> anyhow::Result<(ShardManifest, f64)> {
    let ShardCall { shard, url, id, .. } = *call;
    let mut errors = Vec::new();
    for node in nodes {
        let addr = &live[node].grpc_addr;
        let reply = async {
            backup_client(addr, token)
                .await?
                .backup_shard(BackupShardRequest {
                    shard,
                    destination: url.to_string(),
                    backup_id: id.to_string(),
                    jobs: knobs.jobs,
                    base_shard_manifest_json: call.base.clone(),
                    max_bytes_per_sec: opts.max_bytes_per_sec,
                })
                .await
                .map_err(|s| anyhow::anyhow!("{}", s.message()))
        };
        match reply.await {
            Ok(r) => {
                let r = r.into_inner();
                let m: ShardManifest = serde_json::from_str(&r.shard_manifest_json)
                    .with_context(|| format!("node {node}: shard {shard}'s manifest"))?;
                return Ok((m, r.secs));
            }
            Err(e) => errors.push(format!("node {node}: {e:#}")),
        }
    }
    if errors.is_empty() {
        bail!("shard {shard}: no live replica to back up; the backup is incomplete and was not recorded");
    }
    bail!(
        "shard {shard} could not be backed up ({}); the backup is incomplete and was not recorded",
        errors.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardhouse_common::shard_map::ShardPlacement;

    fn node(id: u64) -> NodeInfo {
        NodeInfo {
            node_id: id,
            grpc_addr: format!("h:{id}"),
            http_addr: String::new(),
            cores: 1,
        }
    }

    #[test]
    fn the_leader_is_asked_first_and_dead_replicas_not_at_all() {
        let map = ShardMap {
            epoch: 1,
            shard_count: 2,
            replication_factor: 3,
            shards: vec![
                ShardPlacement {
                    shard: 0,
                    replicas: vec![1, 2, 3],
                    learners: vec![],
                    leader_hint: 3,
                },
                ShardPlacement {
                    shard: 1,
                    replicas: vec![1, 2, 3],
                    learners: vec![],
                    leader_hint: 2,
                },
            ],
            nodes: BTreeMap::new(),
        };
        let live: BTreeMap<u64, NodeInfo> = [1, 3].into_iter().map(|i| (i, node(i))).collect();
        assert_eq!(
            backup_sources(&map, &live, None),
            [(0, vec![3, 1]), (1, vec![1, 3])]
        );
    }

    #[test]
    fn the_replica_of_the_base_backup_is_asked_first_while_it_lives() {
        let placement = |shard, leader_hint| ShardPlacement {
            shard,
            replicas: vec![1, 2, 3],
            learners: vec![],
            leader_hint,
        };
        let map = ShardMap {
            epoch: 1,
            shard_count: 2,
            replication_factor: 3,
            shards: vec![placement(0, 3), placement(1, 3)],
            nodes: BTreeMap::new(),
        };
        let shard = |shard, node_id| ShardManifest {
            shard,
            node_id,
            commit_index: 9,
            flushed_index: 9,
            databases: vec![],
            tables: vec![],
            stats: Stats::default(),
        };
        let base = Manifest {
            format: shardhouse_backup::manifest::FORMAT,
            id: "b1".into(),
            cluster: "c".into(),
            started_ms: 1,
            finished_ms: 2,
            shard_count: 2,
            replication_factor: 3,
            shard_map: serde_json::Value::Null,
            shards: vec![shard(0, 2), shard(1, 1)],
            stats: Stats::default(),
        };
        let live: BTreeMap<u64, NodeInfo> = [2, 3].into_iter().map(|i| (i, node(i))).collect();
        // Shard 0's base replica (2) lives and comes before the leader (3);
        // shard 1's (1) is gone, so its leader is first.
        assert_eq!(
            backup_sources(&map, &live, Some(&base)),
            [(0, vec![2, 3]), (1, vec![3, 2])]
        );
    }
}
