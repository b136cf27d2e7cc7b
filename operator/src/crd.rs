//! The `ShardhouseCluster` custom resource (`shardhouse.dev/v1alpha1`, `shc`).
//!
//! The YAML in `manifests/crds/` is generated from these types by `crdgen`; a
//! test fails when the committed file differs. Validation that the API server
//! must enforce (odd replication factor, RF <= nodes, immutable shard count)
//! is expressed as CEL rules so `kubectl apply` rejects bad specs before the
//! operator ever sees them.
//!
//! `ShardhouseBackup` and `ShardhouseRestore` are in `crd/backup.rs`,
//! re-exported here.

// kube's derive takes one `printcolumn(...)` per column; clippy reads the
// repeated `type_ = "string"` keys as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

mod backup;

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub use backup::{
    BackupRetention, RestorePhase, ShardBackupIndex, ShardhouseBackup, ShardhouseBackupSpec,
    ShardhouseBackupStatus, ShardhouseRestore, ShardhouseRestoreSpec, ShardhouseRestoreStatus,
    BACKUP_PLURAL, RESTORE_PLURAL,
};

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
