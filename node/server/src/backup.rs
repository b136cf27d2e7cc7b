//! The node's Backup service: one shard's backup from this replica, and a
//! shard's restore into this replica (docs/operations.md, "Backups").
//! The consistency argument is in shardhouse-backup's crate docs; this
//! file is the I/O between the WAL, the engine and the destination.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use shardhouse_backup::{
    merged, transfer, transfer::RateLimit, BackupError, DatabaseEntry, Destination, FileEntry,
    PartEntry, ShardManifest, Stats, TableEntry,
};
use shardhouse_common::proto::{
    self, BackupShardReply, BackupShardRequest, RestoreShardReply, RestoreShardRequest,
};
use shardhouse_common::status;
use shardhouse_engine::backup::{FrozenShard, ShardDatabase, TableParts};
use shardhouse_engine::layout::{FactOrder, FieldType};
use tonic::{Request, Response, Status};

use crate::context::NodeContext;

/// How long a backup waits for this replica to apply up to the read index.
const APPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest shard manifest a request or reply carries.
pub const MAX_MANIFEST_BYTES: usize = 256 << 20;

#[derive(Clone)]
pub struct BackupService {
    ctx: Arc<NodeContext>,
    /// The upload rate limit of each running backup (by id): its shards
    /// backed up here at once share one bucket, so the limit is per node.
    limits: Arc<Mutex<HashMap<String, Weak<RateLimit>>>>,
}

impl BackupService {
    /// The rate limit of backup `id` on this node (None: unlimited).
    fn limit(&self, id: &str, bytes_per_sec: u64) -> Option<Arc<RateLimit>> {
        if bytes_per_sec == 0 {
            return None;
        }
        let mut m = self.limits.lock().unwrap_or_else(|e| e.into_inner());
        m.retain(|_, w| w.strong_count() > 0);
        if let Some(l) = m.get(id).and_then(Weak::upgrade) {
            if l.bytes_per_sec() == bytes_per_sec {
                return Some(l);
            }
        }
        let l = Arc::new(RateLimit::new(bytes_per_sec)?);
        m.insert(id.to_string(), Arc::downgrade(&l));
        Some(l)
    }
}

pub fn backup_server(ctx: Arc<NodeContext>) -> proto::backup_server::BackupServer<BackupService> {
    // A shard's manifest names every file: thousands of entries.
    proto::backup_server::BackupServer::new(BackupService {
        ctx,
        limits: Arc::default(),
    })
    .max_decoding_message_size(MAX_MANIFEST_BYTES)
    .max_encoding_message_size(MAX_MANIFEST_BYTES)
}

/// A destination's error as a gRPC status: what the caller can do differs.
pub fn backup_status(e: &BackupError) -> Status {
    let m = e.to_string();
    match e {
        BackupError::Store { .. } => Status::unavailable(m),
        BackupError::BadObject { .. } | BackupError::BadManifest { .. } => Status::data_loss(m),
        BackupError::NotFound { .. } | BackupError::Empty { .. } => Status::not_found(m),
        BackupError::OtherCluster { .. } => Status::failed_precondition(m),
        BackupError::BadDestination { .. } | BackupError::BadName { .. } => {
            Status::invalid_argument(m)
        }
        BackupError::Io { .. } => Status::internal(m),
    }
}

/// The previous backup's manifest of the requested shard, if sent.
fn base_manifest(r: &BackupShardRequest) -> Result<Option<ShardManifest>, Status> {
    if r.base_shard_manifest_json.is_empty() {
        return Ok(None);
    }
    let m: ShardManifest = serde_json::from_str(&r.base_shard_manifest_json)
        .map_err(|e| Status::invalid_argument(format!("base shard manifest: {e}")))?;
    if m.shard != r.shard {
        return Err(Status::invalid_argument(format!(
            "the base manifest is shard {}'s, not shard {}'s",
            m.shard, r.shard
        )));
    }
    Ok(Some(m))
}

fn engine_status(e: &shardhouse_engine::EngineError) -> Status {
    status::to_tonic_status(e)
}

fn joined<T>(r: Result<T, tokio::task::JoinError>) -> Result<T, Status> {
    r.map_err(|e| Status::internal(format!("backup task failed: {e}")))
}

#[tonic::async_trait]
impl proto::backup_server::Backup for BackupService {
    async fn backup_shard(
        &self,
        request: Request<BackupShardRequest>,
    ) -> Result<Response<BackupShardReply>, Status> {
        let t0 = Instant::now();
        let r = request.into_inner();
        let ctx = &self.ctx;
        if !ctx.wal.has_replica(r.shard) {
            return Err(Status::not_found(format!(
                "node {} holds no replica of shard {}; back up a replica from the shard map",
                ctx.node_id, r.shard
            )));
        }
        let dest = Destination::open(&r.destination).map_err(|e| backup_status(&e))?;
        let base = base_manifest(&r)?;
        // Every write acknowledged before this call is at or below the
        // read index; once it is applied here, a flush stores it.
        let commit_index = ctx
            .wal
            .read_index(r.shard)
            .await
            .map_err(|e| status::to_tonic_status(&e))?;
        ctx.wal
            .wait_applied(r.shard, commit_index, APPLY_TIMEOUT)
            .await
            .map_err(|e| status::to_tonic_status(&e))?;
        let tag = format!("{}-s{}", r.backup_id, r.shard);
        let engine = Arc::clone(&ctx.engine);
        let (shard, t) = (r.shard, tag.clone());
        let frozen =
            joined(tokio::task::spawn_blocking(move || engine.freeze_shard(shard, &t)).await)?
                .map_err(|e| engine_status(&e))?;
        // Read index, apply, flush and freeze: what comes before the upload.
        let freeze_secs = t0.elapsed().as_secs_f64();
        let limit = self.limit(&r.backup_id, r.max_bytes_per_sec);
        let uploaded = upload_frozen(
            &dest,
            &frozen,
            base.as_ref(),
            ctx.node_id,
            dest.jobs(r.jobs),
            limit.as_deref(),
        )
        .await;
        let engine = Arc::clone(&ctx.engine);
        let unfrozen = joined(tokio::task::spawn_blocking(move || engine.unfreeze(&tag)).await)?;
        let (tables, stats) = uploaded.map_err(|e| backup_status(&e))?;
        unfrozen.map_err(|e| engine_status(&e))?;
        if frozen.flushed_index < commit_index {
            return Err(Status::unavailable(format!(
                "shard {}: flushed only up to index {} of {commit_index} (a table cannot flush, see /health); retry",
                r.shard, frozen.flushed_index
            )));
        }
        let manifest = ShardManifest {
            shard: r.shard,
            node_id: ctx.node_id,
            commit_index,
            flushed_index: frozen.flushed_index,
            databases: frozen
                .databases
                .iter()
                .map(|d| DatabaseEntry {
                    name: d.name.clone(),
                    retention_ns: d.retention_ns,
                })
                .collect(),
            tables,
            stats,
        };
        tracing::info!(shard = r.shard, backup = %r.backup_id, commit_index,
            flushed_index = frozen.flushed_index, files = stats.files, bytes = stats.bytes,
            bytes_uploaded = stats.bytes_uploaded, freeze_secs,
            secs = t0.elapsed().as_secs_f64(), "shard backed up");
        Ok(Response::new(BackupShardReply {
            shard_manifest_json: serde_json::to_string(&manifest)
                .map_err(|e| Status::internal(e.to_string()))?,
            secs: t0.elapsed().as_secs_f64(),
        }))
    }

    async fn restore_shard(
        &self,
        request: Request<RestoreShardRequest>,
    ) -> Result<Response<RestoreShardReply>, Status> {
        let t0 = Instant::now();
        let r = request.into_inner();
        let m: ShardManifest = serde_json::from_str(&r.shard_manifest_json)
            .map_err(|e| Status::invalid_argument(format!("shard manifest: {e}")))?;
        if m.shard != r.shard {
            return Err(Status::invalid_argument(format!(
                "the manifest is shard {}'s, not shard {}'s",
                m.shard, r.shard
            )));
        }
        let engine = Arc::clone(&self.ctx.engine);
        if engine.shard_has_data(r.shard) {
            return Err(Status::already_exists(format!(
                "node {}: shard {} already holds data; restore only into an empty cluster",
                self.ctx.node_id, r.shard
            )));
        }
        let dest = Destination::open(&r.destination).map_err(|e| backup_status(&e))?;
        let staging =
            engine
                .staging_dir()
                .join(format!("shard-{}-{}", r.shard, std::process::id()));
        // One limit per restore source on this node, shared by its shards.
        let limit = self.limit(&format!("restore {}", r.destination), r.max_bytes_per_sec);
        let staged = download_shard(&dest, &m, &staging, dest.jobs(r.jobs), limit.as_deref()).await;
        let download_secs = t0.elapsed().as_secs_f64();
        let result = match staged {
            Ok(tables) => {
                let dbs: Vec<ShardDatabase> = m
                    .databases
                    .iter()
                    .map(|d| ShardDatabase {
                        name: d.name.clone(),
                        retention_ns: d.retention_ns,
                    })
                    .collect();
                let shard = r.shard;
                joined(
                    tokio::task::spawn_blocking(move || engine.restore_shard(shard, &dbs, &tables))
                        .await,
                )?
                .map_err(|e| engine_status(&e))
            }
            Err(e) => Err(backup_status(&e)),
        };
        let _ = tokio::fs::remove_dir_all(&staging).await;
        result?;
        tracing::info!(
            shard = r.shard,
            files = m.stats.files,
            bytes = m.stats.bytes,
            download_secs,
            secs = t0.elapsed().as_secs_f64(),
            "shard restored"
        );
        Ok(Response::new(RestoreShardReply {
            files: m.stats.files,
            bytes: m.stats.bytes,
            secs: t0.elapsed().as_secs_f64(),
        }))
    }
}

/// Uploads the files of the frozen parts the destination lacks; returns
/// the tables' entries. A part merged since `base` (the previous backup
/// of this shard) from parts `base` names is named by those parts and
/// not read at all ([`shardhouse_backup::merged`]).
async fn upload_frozen(
    dest: &Destination,
    frozen: &FrozenShard,
    base: Option<&ShardManifest>,
    node_id: u64,
    jobs: usize,
    limit: Option<&RateLimit>,
) -> Result<(Vec<TableEntry>, Stats), BackupError> {
    // One flat list, so small and large parts upload side by side.
    let mut files: Vec<PathBuf> = Vec::new();
    let mut shape: Vec<Vec<PartPlan>> = Vec::new();
    let mut reused = Stats::default();
    for t in &frozen.tables {
        // Part names mean the same rows only in the same table of the
        // same replica.
        let base_table = base.filter(|b| b.node_id == node_id).and_then(|b| {
            b.tables.iter().find(|bt| {
                bt.database == t.database && bt.table == t.table && same_table(&bt.uuid, &t.uuid)
            })
        });
        let mut parts = Vec::new();
        for (name, dir) in &t.parts {
            let rows = part_rows(dir)?;
            let sources = base_table.and_then(|bt| merged::sources_in_base(name, rows, bt));
            if let Some(sources) = sources {
                for p in sources {
                    reused.files += p.files.len() as u64;
                    reused.bytes += p.files.iter().map(|f| f.size).sum::<u64>();
                    parts.push(PartPlan::Reused(p.clone()));
                }
                continue;
            }
            let listed = part_files(dir)?;
            parts.push(PartPlan::Upload {
                name: name.clone(),
                rows,
                files: listed.len(),
            });
            files.extend(listed);
        }
        shape.push(parts);
    }
    let (entries, mut stats) = transfer::upload_files(dest, files, jobs, limit).await?;
    stats.add(&reused);
    let mut entries = entries.into_iter();
    let tables = frozen
        .tables
        .iter()
        .zip(shape)
        .map(|(t, parts)| TableEntry {
            database: t.database.clone(),
            table: t.table.clone(),
            uuid: t.uuid.clone(),
            fields: t
                .fields
                .iter()
                .map(|(n, ty)| (n.clone(), ty.name().to_string()))
                .collect(),
            order: (t.table != shardhouse_engine::layout::SERIES_TABLE)
                .then(|| t.order.name().to_string()),
            parts: parts
                .into_iter()
                .map(|plan| match plan {
                    PartPlan::Reused(p) => p,
                    PartPlan::Upload { name, rows, files } => PartEntry {
                        name,
                        rows,
                        files: entries.by_ref().take(files).collect(),
                    },
                })
                .collect(),
        })
        .collect();
    Ok((tables, stats))
}

/// Both tables are known and the same one.
fn same_table(base_uuid: &str, uuid: &str) -> bool {
    !uuid.is_empty() && base_uuid == uuid
}

/// What a backup does with one frozen part.
enum PartPlan {
    /// Upload its `files` files (those not in the destination already).
    Upload {
        name: String,
        rows: u64,
        files: usize,
    },
    /// One of the previous backup's parts it was merged from.
    Reused(PartEntry),
}

/// Rows of a part (its `count.txt`); 0 (never reused) when absent.
fn part_rows(dir: &std::path::Path) -> Result<u64, BackupError> {
    let path = dir.join("count.txt");
    match std::fs::read_to_string(&path) {
        Ok(s) => Ok(s.trim().parse().unwrap_or(0)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(source) => Err(BackupError::Io { path, source }),
    }
}

/// The files of a part directory, sorted; a part is flat.
fn part_files(dir: &std::path::Path) -> Result<Vec<PathBuf>, BackupError> {
    let io = |source| BackupError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).map_err(io)? {
        let e = e.map_err(io)?;
        if !e.file_type().map_err(io)?.is_file() {
            return Err(BackupError::Io {
                path: e.path(),
                source: std::io::Error::other(
                    "a part holds a directory (projections are not backed up)",
                ),
            });
        }
        files.push(e.path());
    }
    files.sort();
    Ok(files)
}

/// Downloads (and verifies) every file of a shard into `staging`.
async fn download_shard(
    dest: &Destination,
    m: &ShardManifest,
    staging: &std::path::Path,
    jobs: usize,
    limit: Option<&RateLimit>,
) -> Result<Vec<TableParts>, BackupError> {
    let mut tables = Vec::new();
    let mut work: Vec<(FileEntry, PathBuf)> = Vec::new();
    for (ti, t) in m.tables.iter().enumerate() {
        let mut parts = Vec::new();
        for p in &t.parts {
            let dir = staging.join(format!("t{ti}")).join(&p.name);
            tokio::fs::create_dir_all(&dir)
                .await
                .map_err(|source| BackupError::Io {
                    path: dir.clone(),
                    source,
                })?;
            work.extend(p.files.iter().map(|f| (f.clone(), dir.join(&f.name))));
            parts.push((p.name.clone(), dir));
        }
        tables.push(TableParts {
            database: t.database.clone(),
            table: t.table.clone(),
            fields: parse_fields(&t.fields)?,
            parts,
            uuid: String::new(),
            order: parse_order(t.order.as_deref())?,
        });
    }
    futures::stream::iter(work)
        .map(|(f, to)| async move { transfer::download_file(dest, &f, &to, limit).await })
        .buffer_unordered(jobs)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(tables)
}

fn parse_fields(fields: &[(String, String)]) -> Result<Vec<(String, FieldType)>, BackupError> {
    fields
        .iter()
        .map(|(n, t)| {
            FieldType::from_clickhouse(t)
                .map(|ty| (n.clone(), ty))
                .ok_or_else(|| BackupError::BadName {
                    name: t.clone(),
                    reason: format!("field {n:?} has a type this release does not store"),
                })
        })
        .collect()
}

/// A manifest's table order; none named is `series-time`, the only
/// order before orders had names.
fn parse_order(order: Option<&str>) -> Result<FactOrder, BackupError> {
    match order {
        None => Ok(FactOrder::SeriesTime),
        Some(o) => FactOrder::parse(o).ok_or_else(|| BackupError::BadName {
            name: o.to_string(),
            reason: "a table sort order this release does not know (series-time, hour-series-time)"
                .into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_unnamed_in_old_manifests_are_series_time() {
        assert_eq!(parse_order(None).unwrap(), FactOrder::SeriesTime);
        for o in [FactOrder::SeriesTime, FactOrder::HourSeriesTime] {
            assert_eq!(parse_order(Some(o.name())).unwrap(), o);
        }
        assert!(parse_order(Some("time-first")).is_err());
    }

    #[test]
    fn field_types_round_trip_through_their_names() {
        for t in [
            FieldType::Float64,
            FieldType::Int64,
            FieldType::UInt64,
            FieldType::String,
            FieldType::Bool,
        ] {
            let parsed = parse_fields(&[("f".into(), t.name().into())]).unwrap();
            assert_eq!(parsed, [("f".to_string(), t)]);
        }
        assert!(parse_fields(&[("f".into(), "Decimal".into())]).is_err());
    }

    #[test]
    fn parts_are_flat_directories() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("b.bin"), "x").unwrap();
        std::fs::write(d.path().join("a.txt"), "y").unwrap();
        let names: Vec<_> = part_files(d.path())
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["a.txt", "b.bin"]);
        std::fs::create_dir(d.path().join("p.proj")).unwrap();
        assert!(part_files(d.path()).is_err());
    }
}
