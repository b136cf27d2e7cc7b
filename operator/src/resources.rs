//! What should exist for a `ShardhouseCluster`: pure functions from the
//! custom resource (plus the few decisions the reconciler made, such as how
//! many node pods to run while a drain is in progress) to Kubernetes objects.
//! No I/O here; the reconciler applies the result with server-side apply.

mod config;
mod etcd;
mod monitoring;
mod nodes;
mod routers;
mod scheduling;
mod security;

use crate::crd::ShardhouseCluster;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::DynamicObject;
use kube::{Resource, ResourceExt};
use serde_json::{json, Value};
use std::collections::BTreeMap;

pub use config::config_map;
pub use etcd::{etcd_service, etcd_statefulset};
pub use monitoring::{dashboard_config_maps, service_monitor, service_monitor_resource};
pub use nodes::{
    node_id_of_ordinal, node_inflight_bytes, node_pdb, node_service, node_statefulset,
    node_wal_write_buffer_bytes,
};
pub use routers::{router_deployment, router_service};
pub use scheduling::quantity_bytes;
pub use security::{
    cluster_token_secret, CLUSTER_TOKEN_DIR, ROUTER_TLS_DIR, TOKENS_DIR, TOKENS_KEY,
};

/// Ports, fixed by docs/contracts.md and the Dockerfiles.
pub const ROUTER_HTTP_PORT: i32 = 8086;
pub const ROUTER_GRPC_PORT: i32 = 8087;
pub const NODE_GRPC_PORT: i32 = 8090;
pub const NODE_HTTP_PORT: i32 = 8091;
pub const ETCD_CLIENT_PORT: i32 = 2379;
pub const ETCD_PEER_PORT: i32 = 2380;

/// Binary paths inside the images (docker/*.Dockerfile install them here).
pub const NODE_BINARY: &str = "/usr/local/bin/shardhouse-node";
pub const ROUTER_BINARY: &str = "/usr/local/bin/shardhouse-router";
/// Where the node image unpacks the chdb-core wheel.
pub const NODE_CHDB_DIR: &str = "/opt/chdb";
pub const NODE_DATA_DIR: &str = "/var/lib/shardhouse";
/// Where the managed etcd's volume is mounted.
pub const ETCD_DATA_DIR: &str = "/var/lib/etcd";

/// Label keys the operator selects its objects by.
pub const LABEL_NAME: &str = "app.kubernetes.io/name";
pub const LABEL_INSTANCE: &str = "app.kubernetes.io/instance";
pub const LABEL_COMPONENT: &str = "app.kubernetes.io/component";
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGER: &str = "shardhouse-operator";

/// Inputs the reconciler decides on; everything else comes from the spec.
#[derive(Debug, Clone, PartialEq)]
pub struct Decisions {
    /// Node pods to run now. Differs from `spec.nodes.replicas` while a
    /// drain is in progress (the StatefulSet shrinks only after it) or when
    /// the autoscaler chose a count.
    pub node_replicas: i32,
    /// Create the ServiceMonitor (only when its CRD is installed).
    pub service_monitor: bool,
}

/// Every object the cluster should own.
#[derive(Debug, Clone)]
pub struct Desired {
    pub config: ConfigMap,
    pub etcd_service: Option<Service>,
    pub etcd: Option<StatefulSet>,
    pub node_service: Service,
    pub nodes: StatefulSet,
    pub router_service: Service,
    pub routers: Deployment,
    pub node_pdb: PodDisruptionBudget,
    pub dashboards: Vec<ConfigMap>,
    pub service_monitor: Option<DynamicObject>,
}

pub fn desired(c: &ShardhouseCluster, d: &Decisions) -> Desired {
    let managed = c.spec.etcd.is_managed();
    Desired {
        config: config_map(c),
        etcd_service: managed.then(|| etcd_service(c)),
        etcd: managed.then(|| etcd_statefulset(c)),
        node_service: node_service(c),
        nodes: node_statefulset(c, d.node_replicas),
        router_service: router_service(c),
        routers: router_deployment(c),
        node_pdb: node_pdb(c),
        dashboards: dashboard_config_maps(c),
        service_monitor: (d.service_monitor && c.spec.monitoring.service_monitor)
            .then(|| service_monitor(c)),
    }
}

pub fn labels(c: &ShardhouseCluster, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_NAME.into(), "shardhouse".into()),
        (LABEL_INSTANCE.into(), c.name_any()),
        (LABEL_COMPONENT.into(), component.into()),
        (LABEL_MANAGED_BY.into(), MANAGER.into()),
    ])
}

fn selector(c: &ShardhouseCluster, component: &str) -> Value {
    json!({
        LABEL_NAME: "shardhouse",
        LABEL_INSTANCE: c.name_any(),
        LABEL_COMPONENT: component,
    })
}

pub fn owner_ref(c: &ShardhouseCluster) -> OwnerReference {
    // The object comes from the API server, so it has a uid; a missing one
    // is a programming error in a test fixture.
    c.controller_owner_ref(&())
        .expect("ShardhouseCluster has a uid")
}

fn meta(c: &ShardhouseCluster, name: String, component: &str) -> Value {
    json!({
        "name": name,
        "namespace": c.namespace().unwrap_or_else(|| "default".into()),
        "labels": labels(c, component),
        "ownerReferences": [owner_ref(c)],
    })
}

fn from_json<T: serde::de::DeserializeOwned>(v: Value) -> T {
    // The JSON is built right here from typed inputs; a shape error is a bug
    // caught by the unit tests, not a runtime condition.
    serde_json::from_value(v).expect("desired object matches its Kubernetes schema")
}

pub fn etcd_name(c: &ShardhouseCluster) -> String {
    format!("{}-etcd", c.name_any())
}
pub fn node_name(c: &ShardhouseCluster) -> String {
    format!("{}-node", c.name_any())
}
pub fn router_name(c: &ShardhouseCluster) -> String {
    format!("{}-router", c.name_any())
}
pub fn config_name(c: &ShardhouseCluster) -> String {
    format!("{}-config", c.name_any())
}

/// Cluster name used in etcd keys (`/shardhouse/<cluster>/`).
pub fn etcd_cluster_key(c: &ShardhouseCluster) -> String {
    c.name_any()
}

fn ns(c: &ShardhouseCluster) -> String {
    c.namespace().unwrap_or_else(|| "default".into())
}

#[cfg(test)]
pub(crate) mod tests;
