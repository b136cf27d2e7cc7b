//! `shardhouse-ctl backup create|list|delete` and `shardhouse-ctl restore`:
//! one node call per shard (the nodes move the data), the manifest
//! assembled and written here, last. docs/operations.md, "Backups".

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};
use futures::StreamExt;
use shardhouse_backup::dest::new_backup_id;
use shardhouse_backup::{retention, Destination, Manifest, ShardManifest, Stats};
use shardhouse_common::credential::{with_credential, ClusterToken, CredentialChannel};
use shardhouse_common::proto::backup_client::BackupClient;
use shardhouse_common::proto::{BackupShardRequest, DatabasesRequest, RestoreShardRequest};
use shardhouse_common::shard_map::{NodeInfo, ShardMap};
use tonic::transport::Endpoint;

use crate::node_client::{self, CONNECT_TIMEOUT};
use crate::rebalance::ClusterMeta;

/// A shard's backup or restore may take long: bounded by this per call.
const SHARD_CALL_TIMEOUT: Duration = Duration::from_secs(3600);
const MAX_MESSAGE: usize = 256 << 20;

/// How a backup or restore runs.
///
/// The public functions write their lines to `out: &mut (dyn Write +
/// Send)`, so that their futures are `Send` (a controller's reconcile).
#[derive(Debug, Clone)]
pub struct Knobs {
    /// Shards worked on at once (bounds the cluster-wide I/O).
    pub parallel_shards: usize,
    /// Files each node uploads or downloads at once.
    pub jobs: u32,
}

impl Default for Knobs {
    /// The ctl's defaults: 2 shards at once, 4 files per node.
    fn default() -> Knobs {
        Knobs {
            parallel_shards: 2,
            jobs: 4,
        }
    }
}

/// What else a run may ask for, apart from [`Knobs`] so that callers
/// building `Knobs { parallel_shards, jobs }` keep compiling; used by
/// [`create_with`] and [`restore_with`] (`Options::default()`: what
/// [`create`] and [`restore`] do).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Upload rate limit of a backup on each node, bytes per second
    /// (0 = none); shared by the shards a node backs up at once.
    pub max_bytes_per_sec: u64,
    /// Progress redrawn in place on one line (stdout is a terminal);
    /// otherwise one `progress` line per shard.
    pub live_progress: bool,
    /// Restore only this database (its tables and series catalog).
    pub database: Option<String>,
}

async fn backup_client(
    addr: &str,
    token: Option<&ClusterToken>,
) -> anyhow::Result<BackupClient<CredentialChannel>> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(SHARD_CALL_TIMEOUT)
        .connect()
        .await
        .with_context(|| format!("cannot reach node at {addr}"))?;
    Ok(BackupClient::new(with_credential(channel, token))
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE))
}

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

/// `bytes` as MB with one decimal.
fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// Seconds as `42 s` or `3 min 04 s`.
fn duration_text(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    if s < 60 {
        format!("{s} s")
    } else if s < 3600 {
        format!("{} min {:02} s", s / 60, s % 60)
    } else {
        format!("{} h {:02} min", s / 3600, s % 3600 / 60)
    }
}

/// Progress of a backup or restore: shards, parts and bytes done, the
/// rate and the time left. A node answers once per shard, so the counts
/// move when a shard is done; on a terminal the line is redrawn in place
/// every second (the rate and the time left move with the clock), else
/// one plain `progress` line follows each shard's line.
struct Progress {
    live: bool,
    t0: Instant,
    shards_total: u64,
    shards: u64,
    parts: u64,
    bytes: u64,
    /// Bytes of the whole job when known (a restore), else the time left
    /// comes from the shards done.
    bytes_total: Option<u64>,
    /// A live line is on the screen (no newline after it yet).
    drawn: bool,
}

impl Progress {
    fn new(live: bool, shards_total: u64, bytes_total: Option<u64>) -> Progress {
        Progress {
            live,
            t0: Instant::now(),
            shards_total,
            shards: 0,
            parts: 0,
            bytes: 0,
            bytes_total,
            drawn: false,
        }
    }

    /// The line after `secs` seconds.
    fn text(&self, secs: f64) -> String {
        let rate = mb(self.bytes) / secs.max(1e-3);
        let of = self
            .bytes_total
            .map(|t| format!(" of {:.1}", mb(t)))
            .unwrap_or_default();
        let done = match self.bytes_total {
            Some(t) if t > 0 => self.bytes as f64 / t as f64,
            _ => self.shards as f64 / self.shards_total.max(1) as f64,
        };
        let left = if self.shards >= self.shards_total {
            "0 s".to_string()
        } else if done > 0.0 {
            duration_text(secs * (1.0 - done) / done)
        } else {
            "?".to_string()
        };
        format!(
            "progress {}/{} shards, {} parts, {:.1}{of} MB, {rate:.1} MB/s, {} elapsed, {left} left",
            self.shards,
            self.shards_total,
            self.parts,
            mb(self.bytes),
            duration_text(secs)
        )
    }

    /// Erases the live line, if drawn.
    fn clear(&mut self, out: &mut dyn Write) -> std::io::Result<()> {
        if self.drawn {
            write!(out, "\r\x1b[2K")?;
            self.drawn = false;
        }
        Ok(())
    }

    /// Redraws the live line (nothing when not live).
    fn draw(&mut self, out: &mut dyn Write) -> std::io::Result<()> {
        if self.live {
            write!(
                out,
                "\r\x1b[2K{}",
                self.text(self.t0.elapsed().as_secs_f64())
            )?;
            self.drawn = true;
            out.flush()?;
        }
        Ok(())
    }

    /// A shard is done: its line, then the progress.
    fn shard_done(
        &mut self,
        line: &str,
        parts: u64,
        bytes: u64,
        out: &mut dyn Write,
    ) -> std::io::Result<()> {
        self.shards += 1;
        self.parts += parts;
        self.bytes += bytes;
        self.clear(out)?;
        writeln!(out, "{line}")?;
        if self.live {
            self.draw(out)
        } else {
            writeln!(out, "{}", self.text(self.t0.elapsed().as_secs_f64()))
        }
    }

    /// Ends the live line before other output.
    fn finish(&mut self, out: &mut dyn Write) -> std::io::Result<()> {
        if self.drawn {
            writeln!(out)?;
            self.drawn = false;
        }
        Ok(())
    }
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

/// One line per backup at `url`.
pub async fn list(url: &str, out: &mut (dyn Write + Send)) -> anyhow::Result<Vec<Manifest>> {
    let dest = Destination::open(url)?;
    let ms = dest.manifests().await?;
    writeln!(
        out,
        "{:<22} {:>6} {:>10} {:>12} {:>8}  cluster  index range",
        "id", "shards", "MB", "uploaded MB", "secs"
    )?;
    for m in &ms {
        let lo = m.shards.iter().map(|s| s.commit_index).min().unwrap_or(0);
        let hi = m.shards.iter().map(|s| s.commit_index).max().unwrap_or(0);
        writeln!(
            out,
            "{:<22} {:>6} {:>10.1} {:>12.1} {:>8.1}  {}  {lo}..{hi}",
            m.id,
            m.shards.len(),
            mb(m.stats.bytes),
            mb(m.stats.bytes_uploaded),
            m.finished_ms.saturating_sub(m.started_ms) as f64 / 1000.0,
            m.cluster
        )?;
    }
    Ok(ms)
}

/// Deletes backups by id, or all but the newest `keep`; an object a kept
/// backup names stays.
pub async fn delete(
    url: &str,
    ids: &[String],
    keep: Option<usize>,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<retention::Plan> {
    let dest = Destination::open(url)?;
    let ms = dest.manifests().await?;
    let plan = match keep {
        Some(n) => retention::keep_newest(&ms, n),
        None => {
            for id in ids {
                anyhow::ensure!(ms.iter().any(|m| &m.id == id), "no backup {id} at {url}");
            }
            retention::delete_ids(&ms, ids)
        }
    };
    for id in &plan.delete_backups {
        dest.delete(&shardhouse_backup::manifest::manifest_key(id))
            .await?;
        writeln!(out, "deleted backup {id}")?;
    }
    for o in &plan.delete_objects {
        dest.delete(&o.key()).await?;
    }
    writeln!(
        out,
        "deleted {} backups and {} objects; kept {:?}",
        plan.delete_backups.len(),
        plan.delete_objects.len(),
        plan.keep_backups
    )?;
    Ok(plan)
}

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
    let dest = Destination::open(url)?;
    let id = match id {
        Some(id) => id,
        None => dest.latest().await?,
    };
    let m = dest.manifest(&id).await?;
    let m = match database {
        None => m,
        Some(db) => m
            .select_database(db)
            .map_err(|e| anyhow::anyhow!("{e} at {url}; nothing was restored"))?,
    };
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
    let mut calls = futures::stream::iter(m.shards.clone())
        .map(|sm| {
            let replicas = map
                .shard(sm.shard)
                .map(|p| p.replicas.clone())
                .unwrap_or_default();
            let (live, token) = (&live, token.clone());
            async move { restore_shard(&sm, &replicas, live, token.as_ref(), url, knobs).await }
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

/// Restores one shard on each of its replicas; its line, parts and bytes.
async fn restore_shard(
    sm: &ShardManifest,
    replicas: &[u64],
    live: &BTreeMap<u64, NodeInfo>,
    token: Option<&ClusterToken>,
    url: &str,
    knobs: &Knobs,
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
    fn progress_says_what_is_done_the_rate_and_the_time_left() {
        let mut p = Progress::new(false, 4, Some(40_000_000));
        assert_eq!(
            p.text(2.0),
            "progress 0/4 shards, 0 parts, 0.0 of 40.0 MB, 0.0 MB/s, 2 s elapsed, ? left"
        );
        let mut out = Vec::new();
        p.shard_done("shard 0: ...", 7, 10_000_000, &mut out)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("shard 0: ...\nprogress 1/4 shards, 7 parts, 10.0 of 40.0 MB"));
        // A quarter in 10 s: 30 s left.
        assert_eq!(
            p.text(10.0),
            "progress 1/4 shards, 7 parts, 10.0 of 40.0 MB, 1.0 MB/s, 10 s elapsed, 30 s left"
        );
        // Without a byte total (a backup), the shards done say it.
        let mut b = Progress::new(false, 2, None);
        b.shards = 1;
        b.bytes = 1_000_000;
        assert!(b
            .text(90.0)
            .ends_with("1 min 30 s elapsed, 1 min 30 s left"));
        // A terminal: the line is redrawn in place, ended before others.
        let mut live = Progress::new(true, 1, None);
        let mut out = Vec::new();
        live.draw(&mut out).unwrap();
        live.shard_done("shard 0: x", 1, 5, &mut out).unwrap();
        live.finish(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("\r\x1b[2Kprogress 0/1"), "{text:?}");
        assert!(
            text.contains("\r\x1b[2Kshard 0: x\n\r\x1b[2Kprogress 1/1"),
            "{text:?}"
        );
        assert!(text.ends_with(" 0 s left\n"), "{text:?}");
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
