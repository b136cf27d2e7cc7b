//! The `ShardhouseCluster` custom resource (`shardhouse.dev/v1alpha1`, `shc`).
//!
//! The YAML in `manifests/crds/` is generated from these types by `crdgen`; a
//! test fails when the committed file differs. Validation that the API server
//! must enforce (odd replication factor, RF <= nodes, immutable shard count)
//! is expressed as CEL rules so `kubectl apply` rejects bad specs before the
//! operator ever sees them.

// kube's derive takes one `printcolumn(...)` per column; clippy reads the
// repeated `type_ = "string"` keys as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Group, version and names, shared with RBAC and the chart.
pub const GROUP: &str = "shardhouse.dev";
pub const VERSION: &str = "v1alpha1";
pub const PLURAL: &str = "shardhouseclusters";

/// Desired state of a Shardhouse cluster.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "shardhouse.dev",
    version = "v1alpha1",
    kind = "ShardhouseCluster",
    namespaced,
    shortname = "shc",
    status = "ShardhouseClusterStatus",
    doc = "A sharded, Raft-replicated time-series ingest cluster (routers, nodes, etcd).",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Nodes",
        type_ = "string",
        description = "node pods ready/desired",
        json_path = ".status.nodesReady"
    ),
    printcolumn(
        name = "Shards",
        type_ = "string",
        description = "shards with a quorum of replicas healthy/total",
        json_path = ".status.shardsHealthy"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = Rule::new("self.replicationFactor % 2 == 1").message("replicationFactor must be odd (1, 3, 5): Raft needs a strict majority"),
    validation = Rule::new("self.replicationFactor <= self.nodes.replicas").message("replicationFactor must not exceed nodes.replicas: each replica of a shard lives on a different node"),
    validation = Rule::new("!has(self.autoscaling) || !has(self.autoscaling.enabled) || !self.autoscaling.enabled || self.autoscaling.minNodes >= self.replicationFactor").message("autoscaling.minNodes must be >= replicationFactor")
)]
#[serde(rename_all = "camelCase")]
pub struct ShardhouseClusterSpec {
    /// Container images for routers and nodes.
    #[serde(default)]
    pub image: ImageSpec,
    /// Node processes (Raft WAL + embedded engine).
    pub nodes: NodeSpec,
    /// Stateless ingest routers.
    #[serde(default)]
    pub routers: RouterSpec,
    /// Number of shards series hash into. Fixed for the life of the cluster:
    /// it is part of every series' placement.
    #[x_kube(validation = Rule::new("self == oldSelf").message("shardCount is immutable: series are placed by jump_hash(series_id, shardCount)"))]
    #[schemars(range(min = 1, max = 4096))]
    pub shard_count: u32,
    /// Replicas per shard (odd, <= nodes.replicas).
    #[serde(default = "default_rf")]
    #[schemars(range(min = 1, max = 7))]
    pub replication_factor: u32,
    /// Metadata store: managed by the operator, or external endpoints.
    #[serde(default)]
    pub etcd: EtcdSpec,
    /// Name of a Secret whose key `tokens` holds the router's accepted tokens,
    /// one per line. Auth is off when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_secret: Option<String>,
    /// Locked doors: the cluster credential node gRPC requires, the
    /// routers' TLS certificate and their tokens with roles.
    #[serde(default)]
    pub security: SecuritySpec,
    /// Scale node processes with the observed ingest rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<AutoscalingSpec>,
    /// Prometheus Operator integration.
    #[serde(default)]
    pub monitoring: MonitoringSpec,
}

/// Credentials and certificates, all read from Secrets mounted as files
/// (docs/operations.md, "Locked doors").
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SecuritySpec {
    /// The shared token every caller of node gRPC presents.
    #[serde(default)]
    pub cluster_token: ClusterTokenSpec,
    /// A `kubernetes.io/tls` Secret (`tls.crt`, `tls.key`): the routers
    /// serve HTTP and gRPC over TLS with it and reload it when it is renewed.
    /// Unset: plain HTTP and gRPC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_tls_secret: Option<String>,
    /// A Secret whose key `tokens.toml` holds the routers' `[[tokens]]`
    /// (roles, databases, write rate limits); reloaded when it changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_secret: Option<String>,
}

/// Where the cluster credential comes from.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterTokenSpec {
    /// Nodes require the token and routers and the operator present it.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// An existing Secret holding the token (16 or more visible ASCII
    /// characters). Unset: the operator creates `<cluster>-cluster-token`
    /// with a random token once and leaves it alone afterwards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    /// The Secret's key holding the token.
    #[serde(default = "default_token_key")]
    pub key: String,
}

fn default_token_key() -> String {
    "token".into()
}

impl Default for ClusterTokenSpec {
    fn default() -> Self {
        ClusterTokenSpec {
            enabled: true,
            secret_name: None,
            key: default_token_key(),
        }
    }
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MonitoringSpec {
    /// Create a ServiceMonitor when its CRD is installed.
    #[serde(default = "default_true")]
    pub service_monitor: bool,
    /// Extra labels on the ServiceMonitor: the label your Prometheus selects
    /// ServiceMonitors by (kube-prometheus-stack: `release: <its release>`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub service_monitor_labels: BTreeMap<String, String>,
    /// Scrape interval.
    #[serde(default = "default_scrape_interval")]
    pub interval: String,
}

fn default_true() -> bool {
    true
}
fn default_scrape_interval() -> String {
    "15s".into()
}

impl Default for MonitoringSpec {
    fn default() -> Self {
        MonitoringSpec {
            service_monitor: true,
            service_monitor_labels: BTreeMap::new(),
            interval: default_scrape_interval(),
        }
    }
}

fn default_rf() -> u32 {
    3
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ImageSpec {
    /// Registry and path prefix; images are `<registry>/shardhouse-node:<tag>`
    /// and `<registry>/shardhouse-router:<tag>`.
    #[serde(default = "default_registry")]
    pub registry: String,
    #[serde(default = "default_tag")]
    pub tag: String,
    #[serde(default = "default_pull_policy")]
    #[schemars(regex(pattern = "^(Always|IfNotPresent|Never)$"))]
    pub pull_policy: String,
}

pub const DEFAULT_REGISTRY: &str = "ghcr.io/shardhouse";
pub const DEFAULT_TAG: &str = "0.1.0";

fn default_registry() -> String {
    DEFAULT_REGISTRY.into()
}
fn default_tag() -> String {
    DEFAULT_TAG.into()
}
fn default_pull_policy() -> String {
    "IfNotPresent".into()
}

impl Default for ImageSpec {
    fn default() -> Self {
        ImageSpec {
            registry: default_registry(),
            tag: default_tag(),
            pull_policy: default_pull_policy(),
        }
    }
}

impl ImageSpec {
    pub fn node(&self) -> String {
        format!("{}/shardhouse-node:{}", self.registry, self.tag)
    }
    pub fn router(&self) -> String {
        format!("{}/shardhouse-router:{}", self.registry, self.tag)
    }
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeSpec {
    /// Node processes (pods). Raising it moves shard replicas onto the new
    /// nodes; lowering it drains the highest-numbered nodes first.
    #[schemars(range(min = 1, max = 256))]
    pub replicas: i32,
    /// Cores per process; sizes the chDB connection pool and the CPU request.
    #[serde(default = "default_cores")]
    #[schemars(range(min = 1, max = 256))]
    pub cores: u32,
    /// Memory per process (a Kubernetes quantity, e.g. `8Gi`).
    #[serde(default = "default_node_memory")]
    pub memory: String,
    #[serde(default)]
    pub storage: StorageSpec,
    /// Requests and limits of the node container. Unset: requests and
    /// limits of `cores` CPUs and `memory` (Guaranteed QoS, so chDB's pool
    /// and the runtime threads sized from `cores` are never throttled).
    /// Set it to reserve less (small test clusters) or to drop the CPU limit;
    /// `cores` keeps sizing the process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,
    /// Keeping a shard's replicas on different Kubernetes nodes: node pods
    /// repel each other by hostname and spread over zones. `Preferred`
    /// (default) still schedules when there are fewer workers than pods;
    /// `Required` refuses to co-locate two node pods (production with RF 3:
    /// at least `replicas` workers); `None` sets no rule.
    #[serde(default)]
    pub anti_affinity: AntiAffinity,
    /// A Secret whose keys become environment variables of every node pod
    /// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, optionally
    /// `AWS_SESSION_TOKEN`, `AWS_REGION`): each node uploads its shards'
    /// files to the backup destination itself, so an S3 backup (a
    /// `ShardhouseBackup`, `shardhouse-ctl backup create`) needs them there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_credentials_secret: Option<String>,
}

/// Scheduling rule between node pods.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum AntiAffinity {
    #[default]
    Preferred,
    Required,
    None,
}

/// Container requests and limits, as Kubernetes quantities
/// (`{requests: {cpu: 500m, memory: 2Gi}, limits: {memory: 2Gi}}`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, String>,
}

fn default_cores() -> u32 {
    2
}
fn default_node_memory() -> String {
    "4Gi".into()
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StorageSpec {
    /// Size of each node's volume (Raft log + engine data).
    #[serde(default = "default_storage_size")]
    pub size: String,
    /// StorageClass; the cluster default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

fn default_storage_size() -> String {
    "20Gi".into()
}

impl Default for StorageSpec {
    fn default() -> Self {
        StorageSpec {
            size: default_storage_size(),
            storage_class_name: None,
        }
    }
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouterSpec {
    #[serde(default = "default_router_replicas")]
    #[schemars(range(min = 0, max = 256))]
    pub replicas: i32,
    #[serde(default = "default_cores")]
    #[schemars(range(min = 1, max = 256))]
    pub cores: u32,
    #[serde(default = "default_router_memory")]
    pub memory: String,
    /// Requests and limits of the router container. Unset: `cores` CPUs and
    /// `memory` requested, `memory` as the limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,
    /// The router Service clients write to.
    #[serde(default)]
    pub service: RouterServiceSpec,
}

/// How the router Service is exposed.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouterServiceSpec {
    /// ClusterIP (default), NodePort or LoadBalancer.
    #[serde(rename = "type", default = "default_service_type")]
    #[schemars(regex(pattern = "^(ClusterIP|NodePort|LoadBalancer)$"))]
    pub type_: String,
    /// Annotations for the Service (cloud load balancer settings).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Fixed node ports (NodePort/LoadBalancer); unset: allocated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_node_port: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_node_port: Option<i32>,
    /// Source ranges allowed through a LoadBalancer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub load_balancer_source_ranges: Vec<String>,
}

fn default_service_type() -> String {
    "ClusterIP".into()
}

impl Default for RouterServiceSpec {
    fn default() -> Self {
        RouterServiceSpec {
            type_: default_service_type(),
            annotations: BTreeMap::new(),
            http_node_port: None,
            grpc_node_port: None,
            load_balancer_source_ranges: vec![],
        }
    }
}

fn default_router_replicas() -> i32 {
    2
}
fn default_router_memory() -> String {
    "1Gi".into()
}

impl Default for RouterSpec {
    fn default() -> Self {
        RouterSpec {
            replicas: default_router_replicas(),
            cores: default_cores(),
            memory: default_router_memory(),
            resources: None,
            service: RouterServiceSpec::default(),
        }
    }
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("size(self.endpoints) > 0 || self.replicas % 2 == 1").message("etcd.replicas must be odd"))]
pub struct EtcdSpec {
    /// External etcd client URLs. When empty the operator runs its own etcd.
    #[serde(default)]
    pub endpoints: Vec<String>,
    /// Managed etcd members (1, 3 or 5).
    #[serde(default = "default_etcd_replicas")]
    #[schemars(range(min = 1, max = 5))]
    pub replicas: i32,
    /// etcd image. The operator runs `etcd` with arguments only (no shell),
    /// so distroless images work: the default is the upstream image; without
    /// a registry, `scripts/images.sh etcd` builds one from Debian's etcd.
    #[serde(default = "default_etcd_image")]
    pub image: String,
    #[serde(default = "default_etcd_storage")]
    pub storage_size: String,
}

fn default_etcd_replicas() -> i32 {
    1
}
fn default_etcd_image() -> String {
    "quay.io/coreos/etcd:v3.5.17".into()
}
fn default_etcd_storage() -> String {
    "2Gi".into()
}

impl Default for EtcdSpec {
    fn default() -> Self {
        EtcdSpec {
            endpoints: vec![],
            replicas: default_etcd_replicas(),
            image: default_etcd_image(),
            storage_size: default_etcd_storage(),
        }
    }
}

impl EtcdSpec {
    pub fn is_managed(&self) -> bool {
        self.endpoints.is_empty()
    }
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.minNodes <= self.maxNodes").message("autoscaling.minNodes must be <= maxNodes"))]
pub struct AutoscalingSpec {
    #[serde(default)]
    pub enabled: bool,
    #[schemars(range(min = 1, max = 256))]
    pub min_nodes: i32,
    #[schemars(range(min = 1, max = 256))]
    pub max_nodes: i32,
    /// Ingest rate one node core should carry; the cluster gets
    /// `ceil(rate / (target * cores))` nodes.
    #[schemars(range(min = 1))]
    pub target_points_per_second_per_core: u64,
    /// Seconds between scale-downs, so a dip does not shuffle shards.
    #[serde(default = "default_cooldown")]
    pub scale_down_cooldown_seconds: u64,
}

fn default_cooldown() -> u64 {
    600
}

/// Observed state, written by the operator with server-side apply.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ShardhouseClusterStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub phase: Phase,
    #[serde(default)]
    pub conditions: Vec<ClusterCondition>,
    /// `ready/desired` node pods, for `kubectl get shc`.
    #[serde(default)]
    pub nodes_ready: String,
    /// `healthy/total` shards, for `kubectl get shc`.
    #[serde(default)]
    pub shards_healthy: String,
    #[serde(default)]
    pub ready_nodes: i32,
    #[serde(default)]
    pub desired_nodes: i32,
    /// Shard and leader counts per node, from the shard map.
    #[serde(default)]
    pub node_shards: Vec<NodeShardCount>,
    /// Node image the StatefulSet currently rolls towards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_image: Option<String>,
    /// Pending rebalance moves, when one is in flight.
    #[serde(default)]
    pub pending_moves: u32,
}

#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub enum Phase {
    #[default]
    Pending,
    Provisioning,
    Running,
    Scaling,
    Upgrading,
    Degraded,
    Deleting,
}

/// A status condition in the usual Kubernetes shape.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterCondition {
    /// Ready, Progressing, Degraded or Rebalancing.
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    pub reason: String,
    pub message: String,
    /// RFC 3339; changes only when `status` changes.
    pub last_transition_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NodeShardCount {
    pub node_id: u64,
    pub shards: u32,
    pub leaders: u32,
}

impl ShardhouseCluster {
    /// The Secret and key holding the cluster credential, when it is on.
    pub fn cluster_token_secret(&self) -> Option<(String, String)> {
        let t = &self.spec.security.cluster_token;
        t.enabled.then(|| {
            // An empty name (a chart value left blank) means none.
            let name = t
                .secret_name
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| format!("{}-cluster-token", kube::ResourceExt::name_any(self)));
            (name, t.key.clone())
        })
    }

    /// The etcd client URLs nodes and routers use.
    pub fn etcd_endpoints(&self) -> Vec<String> {
        if self.spec.etcd.is_managed() {
            let ns = kube::ResourceExt::namespace(self).unwrap_or_else(|| "default".into());
            vec![format!(
                "http://{}-etcd.{ns}.svc:2379",
                kube::ResourceExt::name_any(self)
            )]
        } else {
            self.spec.etcd.endpoints.clone()
        }
    }
}

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
    /// Shards backed up at once (bounds the cluster-wide I/O).
    #[serde(default = "default_parallel_shards")]
    #[schemars(range(min = 1, max = 64))]
    pub parallel_shards: u32,
    /// Files each node uploads at once.
    #[serde(default = "default_transfer_jobs")]
    #[schemars(range(min = 1, max = 64))]
    pub jobs: u32,
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
    /// Shards restored at once.
    #[serde(default = "default_parallel_shards")]
    #[schemars(range(min = 1, max = 64))]
    pub parallel_shards: u32,
    /// Files each node downloads at once.
    #[serde(default = "default_transfer_jobs")]
    #[schemars(range(min = 1, max = 64))]
    pub jobs: u32,
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
