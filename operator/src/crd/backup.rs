//! The `ShardhouseBackup` (`shb`) and `ShardhouseRestore` (`shr`) custom
//! resources. They have their own CRDs, controllers and readers (people
//! who set up backups), so their types live apart from the cluster's; the
//! YAML in `manifests/crds/` is still generated from them by `crdgen`.

// kube's derive takes one `printcolumn(...)` per column; clippy reads the
// repeated `type_ = "string"` keys as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::ClusterCondition;

/// Plural of the `ShardhouseBackup` resource (RBAC, the chart, crdgen).
pub const BACKUP_PLURAL: &str = "shardhousebackups";
/// Plural of the `ShardhouseRestore` resource.
pub const RESTORE_PLURAL: &str = "shardhouserestores";

/// Scheduled backups of one ShardhouseCluster to a directory or an
/// S3-compatible bucket (docs/operations.md, "Backups on Kubernetes").
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "shardhouse.dev",
    version = "v1alpha1",
    kind = "ShardhouseBackup",
    namespaced,
    shortname = "shb",
    status = "ShardhouseBackupStatus",
    doc = "Backups of a ShardhouseCluster on a cron schedule, with retention.",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterRef"),
    printcolumn(name = "Schedule", type_ = "string", json_path = ".spec.schedule"),
    printcolumn(name = "Suspend", type_ = "boolean", json_path = ".spec.suspend"),
    printcolumn(
        name = "Last Backup",
        type_ = "string",
        json_path = ".status.lastBackup"
    ),
    printcolumn(
        name = "Last Success",
        type_ = "date",
        json_path = ".status.lastSuccessTime"
    ),
    // A string: kubectl prints a `date` column as the age since it, and
    // a time still to come as `<invalid>`.
    printcolumn(name = "Next", type_ = "string", json_path = ".status.nextScheduleTime")
)]
#[serde(rename_all = "camelCase")]
pub struct ShardhouseBackupSpec {
    /// Name of the ShardhouseCluster (same namespace) to back up.
    #[schemars(length(min = 1))]
    pub cluster_ref: String,
    /// When to back up: a cron expression of five fields as in a CronJob
    /// (`minute hour day-of-month month day-of-week`, or `@daily`,
    /// `@hourly`...), in UTC. Runs missed while the operator was down
    /// collapse into one.
    #[schemars(length(min = 1))]
    pub schedule: String,
    /// Where backups go: `s3://bucket/prefix?endpoint=...&path_style=true`
    /// or an absolute directory that the node pods and the operator share.
    #[schemars(length(min = 1))]
    pub destination: String,
    /// Which backups to keep after each run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<BackupRetention>,
    /// A Secret with the keys `AWS_ACCESS_KEY_ID` and
    /// `AWS_SECRET_ACCESS_KEY` for an S3 destination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<String>,
    /// No new runs while true; a run in progress finishes.
    #[serde(default)]
    pub suspend: bool,
    /// Shards backed up at once, cluster-wide (bounds the cluster-wide
    /// I/O; a node works on at most this many of its shards at once).
    #[serde(default = "default_parallel_shards")]
    #[schemars(range(min = 1, max = 64))]
    pub parallel_shards: u32,
    /// Files each node reads, hashes and uploads at once per shard. With
    /// parallelShards it bounds the CPU a backup takes: at most
    /// parallelShards x jobs files are hashed at once on a node (there is
    /// no compression: the parts are compressed already).
    #[serde(default = "default_transfer_jobs")]
    #[schemars(range(min = 1, max = 64))]
    pub jobs: u32,
    /// Upload rate limit of each node in MB/s (10^6 bytes per second),
    /// shared by the shards it backs up at once, as `shardhouse-ctl backup
    /// create --max-mb-s`; 0 or absent: none, otherwise at least 0.1.
    /// Files already at the destination are read and hashed unpaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_mb_per_second: Option<f64>,
}

fn default_parallel_shards() -> u32 {
    2
}
fn default_transfer_jobs() -> u32 {
    4
}

/// Backups kept at the destination.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupRetention {
    /// Keep the newest N backups, delete the others after each successful
    /// run; a file a kept backup names is never deleted.
    #[schemars(range(min = 1))]
    pub keep: u32,
}

/// What the last runs of a ShardhouseBackup did.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ShardhouseBackupStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Id of the newest complete backup this resource took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup: Option<String>,
    /// The schedule slot (RFC 3339) the last successful run was for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<String>,
    /// When the last successful backup finished (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success_time: Option<String>,
    /// Bytes the last backup holds (incremental: most were already there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_size_bytes: Option<u64>,
    /// Bytes the last backup actually uploaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_uploaded_bytes: Option<u64>,
    /// Seconds the last backup took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_duration_seconds: Option<f64>,
    /// Lowest and highest Raft commit index of the last backup's shards
    /// (`lo..hi`), for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_range: Option<String>,
    /// Per shard of the last backup: the replica it came from and the Raft
    /// index it holds every acknowledged write up to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardBackupIndex>,
    /// Backups at the destination after the last retention pass.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept_backups: Vec<String>,
    /// When the next run is due (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_schedule_time: Option<String>,
    /// Failed runs since the last success (retried with backoff).
    #[serde(default)]
    pub consecutive_failures: u32,
    /// When the last failed run ended (RFC 3339); the retry waits a
    /// backoff from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure_time: Option<String>,
    /// The value of the `shardhouse.dev/backup-now` annotation last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_manual_request: Option<String>,
    /// `Ready` (the last run succeeded) and `Scheduled` (the schedule parses
    /// and the next run is known).
    #[serde(default)]
    pub conditions: Vec<ClusterCondition>,
}

/// One shard of a backup.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ShardBackupIndex {
    pub shard: u32,
    /// The replica the shard was backed up from.
    pub node_id: u64,
    /// Raft index the backup holds the shard's writes up to.
    pub commit_index: u64,
    /// Index the engine's parts were flushed to (WAL entries from there to
    /// `commitIndex` are in the backup).
    pub flushed_index: u64,
}

/// Restores a backup into a new, empty ShardhouseCluster once it runs.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "shardhouse.dev",
    version = "v1alpha1",
    kind = "ShardhouseRestore",
    namespaced,
    shortname = "shr",
    status = "ShardhouseRestoreStatus",
    doc = "A one-off restore of a backup into a new, empty ShardhouseCluster.",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterRef"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Backup", type_ = "string", json_path = ".status.backupId"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("self == oldSelf").message("a ShardhouseRestore is one-off: create a new one instead of changing it"))]
#[serde(rename_all = "camelCase")]
pub struct ShardhouseRestoreSpec {
    /// The ShardhouseCluster (same namespace) to restore into: new and
    /// empty, with the backup's shard count (any node count and RF).
    #[schemars(length(min = 1))]
    pub cluster_ref: String,
    /// Where the backup is (as `ShardhouseBackup.spec.destination`).
    #[schemars(length(min = 1))]
    pub source: String,
    /// Backup id; the newest at `source` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_id: Option<String>,
    /// A Secret with `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<String>,
    /// Shards restored at once, cluster-wide.
    #[serde(default = "default_parallel_shards")]
    #[schemars(range(min = 1, max = 64))]
    pub parallel_shards: u32,
    /// Files each node downloads and checks at once per shard: with
    /// parallelShards it bounds the CPU (at most parallelShards x jobs
    /// checksums computed at once on a node).
    #[serde(default = "default_transfer_jobs")]
    #[schemars(range(min = 1, max = 64))]
    pub jobs: u32,
    /// Download rate limit of each node in MB/s (10^6 bytes per second),
    /// shared by the shards it restores at once, as `shardhouse-ctl
    /// restore --max-mb-s`; 0 or absent: none, otherwise at least 0.1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_mb_per_second: Option<f64>,
}

/// Where a restore stands.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ShardhouseRestoreStatus {
    #[serde(default)]
    pub phase: RestorePhase,
    /// Why the restore is in its phase, in words.
    #[serde(default)]
    pub message: String,
    /// The backup restored (resolved when `spec.backupId` is unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<String>,
    /// Shards restored (on every replica).
    #[serde(default)]
    pub shards_restored: u32,
    /// Bytes of the backup (one copy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// Per shard: the Raft index the restored data holds writes up to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardBackupIndex>,
    #[serde(default)]
    pub conditions: Vec<ClusterCondition>,
}

/// `Pending` -> `WaitingForCluster` -> `Restoring` -> `Succeeded` or `Failed`.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum RestorePhase {
    #[default]
    Pending,
    WaitingForCluster,
    Restoring,
    Succeeded,
    Failed,
}
