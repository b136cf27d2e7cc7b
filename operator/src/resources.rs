//! What should exist for a `ShardhouseCluster`: pure functions from the
//! custom resource (plus the few decisions the reconciler made, such as how
//! many node pods to run while a drain is in progress) to Kubernetes objects.
//! No I/O here; the reconciler applies the result with server-side apply.

use crate::crd::{AntiAffinity, Resources, ShardhouseCluster};
use crate::dashboards;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::DynamicObject;
use kube::{Resource, ResourceExt};
use serde_json::{json, Value};
use std::collections::BTreeMap;

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

/// Environment shared by nodes and routers (flags of docs/contracts.md as
/// env vars). Changing it does not roll pods, which is why values that must
/// stay put (init shape) live here rather than in the pod template.
pub fn config_map(c: &ShardhouseCluster) -> ConfigMap {
    let etcd = c.etcd_endpoints().join(",");
    let cluster = etcd_cluster_key(c);
    let s = &c.spec;
    from_json(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": meta(c, config_name(c), "config"),
        "data": {
            "SHARDHOUSE_NODE_ETCD_ENDPOINTS": etcd,
            "SHARDHOUSE_NODE_CLUSTER": cluster,
            "SHARDHOUSE_NODE_GRPC_LISTEN": format!("0.0.0.0:{NODE_GRPC_PORT}"),
            "SHARDHOUSE_NODE_HTTP_LISTEN": format!("0.0.0.0:{NODE_HTTP_PORT}"),
            "SHARDHOUSE_NODE_DATA_DIR": NODE_DATA_DIR,
            "SHARDHOUSE_NODE_CHDB_DIR": NODE_CHDB_DIR,
            "SHARDHOUSE_NODE_CORES": s.nodes.cores.to_string(),
            "SHARDHOUSE_NODE_POOL_SIZE": s.nodes.cores.to_string(),
            // The first `rf` nodes write the initial map; every later node
            // receives replicas through the operator's rebalance, the same
            // path scale-out uses.
            "SHARDHOUSE_NODE_INIT_CLUSTER": format!(
                "shards={},rf={},nodes={}", s.shard_count, s.replication_factor, s.replication_factor),
            "SHARDHOUSE_ROUTER_ETCD_ENDPOINTS": etcd,
            "SHARDHOUSE_ROUTER_CLUSTER": cluster,
            "SHARDHOUSE_ROUTER_HTTP_LISTEN": format!("0.0.0.0:{ROUTER_HTTP_PORT}"),
            "SHARDHOUSE_ROUTER_GRPC_LISTEN": format!("0.0.0.0:{ROUTER_GRPC_PORT}"),
        }
    }))
}

pub fn etcd_service(c: &ShardhouseCluster) -> Service {
    from_json(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": meta(c, etcd_name(c), "etcd"),
        "spec": {
            "clusterIP": "None",
            // Peers must resolve each other before they are ready.
            "publishNotReadyAddresses": true,
            "selector": selector(c, "etcd"),
            "ports": [
                {"name": "client", "port": ETCD_CLIENT_PORT},
                {"name": "peer", "port": ETCD_PEER_PORT},
            ],
        }
    }))
}

pub fn etcd_statefulset(c: &ShardhouseCluster) -> StatefulSet {
    let name = etcd_name(c);
    let ns = ns(c);
    let e = &c.spec.etcd;
    let initial: Vec<String> = (0..e.replicas)
        .map(|i| format!("{name}-{i}=http://{name}-{i}.{name}.{ns}.svc:{ETCD_PEER_PORT}"))
        .collect();
    // No shell: etcd images are distroless (no /bin/sh since 3.5.7). The
    // kubelet expands $(POD_NAME) in args from the env below.
    let args = vec![
        "--name=$(POD_NAME)".to_string(),
        format!("--data-dir={ETCD_DATA_DIR}/data"),
        format!("--listen-client-urls=http://0.0.0.0:{ETCD_CLIENT_PORT}"),
        format!("--advertise-client-urls=http://$(POD_NAME).{name}.{ns}.svc:{ETCD_CLIENT_PORT}"),
        format!("--listen-peer-urls=http://0.0.0.0:{ETCD_PEER_PORT}"),
        format!(
            "--initial-advertise-peer-urls=http://$(POD_NAME).{name}.{ns}.svc:{ETCD_PEER_PORT}"
        ),
        format!("--initial-cluster={}", initial.join(",")),
        "--initial-cluster-state=new".to_string(),
        format!("--initial-cluster-token={name}"),
    ];
    from_json(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": meta(c, name.clone(), "etcd"),
        "spec": {
            "serviceName": name,
            "replicas": e.replicas,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": selector(c, "etcd")},
            "template": {
                "metadata": {"labels": labels(c, "etcd")},
                "spec": {
                    "affinity": anti_affinity(c, "etcd", AntiAffinity::Preferred),
                    "containers": [{
                        "name": "etcd",
                        "image": e.image,
                        "imagePullPolicy": c.spec.image.pull_policy,
                        "command": ["etcd"],
                        "args": args,
                        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                        "ports": [
                            {"name": "client", "containerPort": ETCD_CLIENT_PORT},
                            {"name": "peer", "containerPort": ETCD_PEER_PORT},
                        ],
                        "readinessProbe": {"httpGet": {"path": "/health", "port": ETCD_CLIENT_PORT}, "periodSeconds": 5, "timeoutSeconds": 3},
                        "livenessProbe": {"tcpSocket": {"port": ETCD_CLIENT_PORT}, "periodSeconds": 20, "timeoutSeconds": 5, "failureThreshold": 3},
                        "volumeMounts": [{"name": "data", "mountPath": ETCD_DATA_DIR}],
                    }]
                }
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data", "labels": labels(c, "etcd")},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": e.storage_size}},
                }
            }],
        }
    }))
}

/// Pod anti-affinity by hostname between pods of one component.
fn anti_affinity(c: &ShardhouseCluster, component: &str, rule: AntiAffinity) -> Value {
    let term = json!({
        "labelSelector": {"matchLabels": selector(c, component)},
        "topologyKey": "kubernetes.io/hostname",
    });
    match rule {
        AntiAffinity::None => json!({}),
        AntiAffinity::Preferred => json!({"podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}],
        }}),
        AntiAffinity::Required => json!({"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [term],
        }}),
    }
}

/// Requests and limits: the spec's override, or `cores` and `memory` as
/// both (Guaranteed QoS for nodes) or as requests plus a memory limit.
fn resources_of(over: Option<&Resources>, cores: u32, memory: &str, cpu_limit: bool) -> Resources {
    if let Some(r) = over {
        return r.clone();
    }
    let mut limits = BTreeMap::from([("memory".to_string(), memory.to_string())]);
    if cpu_limit {
        limits.insert("cpu".into(), cores.to_string());
    }
    Resources {
        requests: BTreeMap::from([
            ("cpu".to_string(), cores.to_string()),
            ("memory".to_string(), memory.to_string()),
        ]),
        limits,
    }
}

/// Bytes in a Kubernetes quantity (`4Gi`, `512Mi`, `1G`, `1e9`, `100`).
pub fn quantity_bytes(q: &str) -> Option<u64> {
    let q = q.trim();
    let split = q
        .find(|ch: char| ch.is_ascii_alphabetic() && ch != 'e' && ch != 'E')
        .unwrap_or(q.len());
    let (num, unit) = q.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mult: f64 = match unit {
        "" => 1.0,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    (n >= 0.0).then_some((n * mult) as u64)
}

/// Bytes of writes a node admits before it answers 429: an eighth of its
/// memory limit, at most the node's own default (512 MiB), at least 32 MiB.
pub fn node_inflight_bytes(memory_limit: Option<&str>) -> u64 {
    const DEFAULT: u64 = 512 << 20;
    memory_limit
        .and_then(quantity_bytes)
        .map_or(DEFAULT, |m| (m / 8).clamp(32 << 20, DEFAULT))
}

/// The WAL's RocksDB memtable size: it holds up to 4 memtables, so 1/32
/// of the memory limit keeps them within an eighth of it; at most the
/// node's default (256 MiB), at least 8 MiB.
pub fn node_wal_write_buffer_bytes(memory_limit: Option<&str>) -> u64 {
    const DEFAULT: u64 = 256 << 20;
    memory_limit
        .and_then(quantity_bytes)
        .map_or(DEFAULT, |m| (m / 32).clamp(8 << 20, DEFAULT))
}

pub fn node_service(c: &ShardhouseCluster) -> Service {
    from_json(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": meta(c, node_name(c), "node"),
        "spec": {
            "clusterIP": "None",
            // Raft peers dial each other by pod DNS while still joining.
            "publishNotReadyAddresses": true,
            "selector": selector(c, "node"),
            "ports": [
                {"name": "grpc", "port": NODE_GRPC_PORT},
                {"name": "http", "port": NODE_HTTP_PORT},
            ],
        }
    }))
}

/// Node id of the pod with StatefulSet ordinal `ordinal` (0 means "unknown"
/// in leader hints, so ids start at 1).
pub fn node_id_of_ordinal(ordinal: i32) -> u64 {
    ordinal as u64 + 1
}

pub fn node_statefulset(c: &ShardhouseCluster, replicas: i32) -> StatefulSet {
    let name = node_name(c);
    let ns = ns(c);
    let n = &c.spec.nodes;
    let mut pvc_spec = json!({
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": n.storage.size}},
    });
    if let Some(class) = &n.storage.storage_class_name {
        pvc_spec["storageClassName"] = json!(class);
    }
    // The node id comes from the pod ordinal, so a pod keeps its identity
    // (and its Raft replicas) across restarts and reschedules.
    let script = format!(
        "exec {NODE_BINARY} --node-id $(( ${{HOSTNAME##*-}} + 1 )) \
         --advertise-host ${{HOSTNAME}}.{name}.{ns}.svc"
    );
    let res = resources_of(n.resources.as_ref(), n.cores, &n.memory, true);
    // Size the process to the container: chDB's connection pool and the
    // runtime threads follow the CPU limit when there is one (the downward
    // API rounds it up to whole cores), the admission budget the memory limit.
    let memory_limit = res.limits.get("memory").map(String::as_str);
    let mut env = vec![
        json!({
            "name": "SHARDHOUSE_NODE_MAX_INFLIGHT_BYTES",
            "value": node_inflight_bytes(memory_limit).to_string(),
        }),
        // RocksDB's memory (the WAL's memtables) follows the memory limit too.
        json!({
            "name": "SHARDHOUSE_NODE_WAL_WRITE_BUFFER_BYTES",
            "value": node_wal_write_buffer_bytes(memory_limit).to_string(),
        }),
    ];
    if res.limits.contains_key("cpu") {
        for var in ["SHARDHOUSE_NODE_CORES", "SHARDHOUSE_NODE_POOL_SIZE"] {
            env.push(json!({
                "name": var,
                "valueFrom": {"resourceFieldRef": {"containerName": "node", "resource": "limits.cpu", "divisor": "1"}},
            }));
        }
    }
    let mut spread = vec![];
    if n.anti_affinity != AntiAffinity::None {
        spread.push(json!({
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector(c, "node")},
        }));
    }
    from_json(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": meta(c, name.clone(), "node"),
        "spec": {
            "serviceName": name,
            "replicas": replicas,
            "podManagementPolicy": "Parallel",
            // The operator rolls node pods itself, one at a time, after
            // moving the pod's leaderships away (see upgrade.rs).
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": selector(c, "node")},
            "template": {
                "metadata": {
                    "labels": labels(c, "node"),
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": NODE_HTTP_PORT.to_string(),
                    },
                },
                "spec": {
                    "terminationGracePeriodSeconds": 60,
                    // The image runs as uid 65532; the volume must be writable.
                    // OnRootMismatch: the kubelet chowns the volume once, not
                    // every part file at every start.
                    "securityContext": {
                        "runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                        "fsGroup": 65532, "fsGroupChangePolicy": "OnRootMismatch",
                    },
                    // A shard's replicas live on different node pods; keep
                    // those on different machines and zones.
                    "affinity": anti_affinity(c, "node", n.anti_affinity),
                    "topologySpreadConstraints": spread,
                    "containers": [{
                        "name": "node",
                        "image": c.spec.image.node(),
                        "imagePullPolicy": c.spec.image.pull_policy,
                        "command": ["/bin/sh", "-c", script],
                        "envFrom": [{"configMapRef": {"name": config_name(c)}}],
                        "env": env,
                        "ports": [
                            {"name": "grpc", "containerPort": NODE_GRPC_PORT},
                            {"name": "http", "containerPort": NODE_HTTP_PORT},
                        ],
                        // /health answers once chDB and the WAL are open (the
                        // engine's open and the log replay take a while on a
                        // big volume): up to 10 minutes before liveness counts.
                        "startupProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 5, "timeoutSeconds": 3, "failureThreshold": 120},
                        "livenessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 20, "timeoutSeconds": 5, "failureThreshold": 3},
                        // /ready: registered and every local replica caught up
                        // with its leader; upgrades and rebalances wait on it.
                        "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 5, "timeoutSeconds": 5, "failureThreshold": 3},
                        "resources": res,
                        "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
                        "volumeMounts": [{"name": "data", "mountPath": NODE_DATA_DIR}],
                    }]
                }
            },
            // Labelled so the finalizer can find them: PVCs are created by the
            // StatefulSet controller and carry no owner reference to the cluster.
            "volumeClaimTemplates": [{"metadata": {"name": "data", "labels": labels(c, "node")}, "spec": pvc_spec}],
            // Scale-in shrinks the StatefulSet only after the drain moved
            // every replica away, so a removed pod's volume holds nothing
            // the cluster needs (and would bring stale Raft state back on
            // the next scale-out).
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Delete"},
        }
    }))
}

pub fn router_service(c: &ShardhouseCluster) -> Service {
    let svc = &c.spec.routers.service;
    let mut http = json!({"name": "http", "port": ROUTER_HTTP_PORT, "targetPort": "http"});
    let mut grpc = json!({"name": "grpc", "port": ROUTER_GRPC_PORT, "targetPort": "grpc"});
    if svc.type_ != "ClusterIP" {
        if let Some(p) = svc.http_node_port {
            http["nodePort"] = json!(p);
        }
        if let Some(p) = svc.grpc_node_port {
            grpc["nodePort"] = json!(p);
        }
    }
    let mut m = meta(c, router_name(c), "router");
    if !svc.annotations.is_empty() {
        m["annotations"] = json!(svc.annotations);
    }
    let mut spec = json!({
        "type": svc.type_,
        "selector": selector(c, "router"),
        "ports": [http, grpc],
    });
    if svc.type_ == "LoadBalancer" && !svc.load_balancer_source_ranges.is_empty() {
        spec["loadBalancerSourceRanges"] = json!(svc.load_balancer_source_ranges);
    }
    from_json(json!({"apiVersion": "v1", "kind": "Service", "metadata": m, "spec": spec}))
}

pub fn router_deployment(c: &ShardhouseCluster) -> Deployment {
    let r = &c.spec.routers;
    let mut env = vec![];
    if let Some(secret) = &c.spec.auth_secret {
        env.push(json!({
            "name": "SHARDHOUSE_ROUTER_AUTH_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": secret, "key": "tokens"}},
        }));
    }
    from_json(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": meta(c, router_name(c), "router"),
        "spec": {
            "replicas": r.replicas,
            "selector": {"matchLabels": selector(c, "router")},
            "template": {
                "metadata": {
                    "labels": labels(c, "router"),
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": ROUTER_HTTP_PORT.to_string(),
                    },
                },
                "spec": {
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532},
                    "affinity": anti_affinity(c, "router", AntiAffinity::Preferred),
                    "containers": [{
                        "name": "router",
                        "image": c.spec.image.router(),
                        "imagePullPolicy": c.spec.image.pull_policy,
                        "command": [ROUTER_BINARY],
                        "envFrom": [{"configMapRef": {"name": config_name(c)}}],
                        "env": env,
                        "ports": [
                            {"name": "http", "containerPort": ROUTER_HTTP_PORT},
                            {"name": "grpc", "containerPort": ROUTER_GRPC_PORT},
                        ],
                        "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 5, "timeoutSeconds": 3},
                        "livenessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 20, "timeoutSeconds": 5},
                        "resources": resources_of(r.resources.as_ref(), r.cores, &r.memory, false),
                        // Keep serving while the endpoint removal reaches
                        // every kube-proxy, so a rolling restart does not
                        // cut writes that are still being routed here.
                        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "sleep 5"]}}},
                        "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}},
                    }]
                }
            }
        }
    }))
}

/// At most one node pod voluntarily down at a time: with RF 3 a second one
/// could take a shard's quorum with it.
pub fn node_pdb(c: &ShardhouseCluster) -> PodDisruptionBudget {
    from_json(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": meta(c, node_name(c), "node"),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": selector(c, "node")},
        }
    }))
}

/// Grafana dashboards, labelled for the Grafana sidecar.
pub fn dashboard_config_maps(c: &ShardhouseCluster) -> Vec<ConfigMap> {
    dashboards::ALL
        .iter()
        .map(|(name, body)| {
            let mut m = meta(c, format!("{}-dashboard-{name}", c.name_any()), "dashboard");
            m["labels"]["grafana_dashboard"] = json!("1");
            from_json(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": m,
                "data": {format!("shardhouse-{name}.json"): body},
            }))
        })
        .collect()
}

pub fn service_monitor_resource() -> kube::api::ApiResource {
    kube::api::ApiResource {
        group: "monitoring.coreos.com".into(),
        version: "v1".into(),
        api_version: "monitoring.coreos.com/v1".into(),
        kind: "ServiceMonitor".into(),
        plural: "servicemonitors".into(),
    }
}

pub fn service_monitor(c: &ShardhouseCluster) -> DynamicObject {
    let mon = &c.spec.monitoring;
    let mut m = meta(c, c.name_any(), "monitoring");
    for (k, v) in &mon.service_monitor_labels {
        m["labels"][k] = json!(v);
    }
    from_json(json!({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
        "metadata": m,
        "spec": {
            "selector": {"matchLabels": {LABEL_NAME: "shardhouse", LABEL_INSTANCE: c.name_any()}},
            "endpoints": [{"port": "http", "path": "/metrics", "interval": mon.interval}],
        }
    }))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::crd::*;

    pub fn cluster(name: &str) -> ShardhouseCluster {
        let mut c = ShardhouseCluster::new(
            name,
            ShardhouseClusterSpec {
                image: ImageSpec::default(),
                nodes: NodeSpec {
                    replicas: 3,
                    cores: 4,
                    memory: "8Gi".into(),
                    storage: StorageSpec {
                        size: "50Gi".into(),
                        storage_class_name: Some("fast".into()),
                    },
                    resources: None,
                    anti_affinity: AntiAffinity::Preferred,
                },
                routers: RouterSpec::default(),
                shard_count: 16,
                replication_factor: 3,
                etcd: EtcdSpec::default(),
                auth_secret: Some("tokens".into()),
                autoscaling: None,
                monitoring: MonitoringSpec::default(),
            },
        );
        c.metadata.namespace = Some("prod".into());
        c.metadata.uid = Some("uid-1".into());
        c
    }

    fn decisions(n: i32) -> Decisions {
        Decisions {
            node_replicas: n,
            service_monitor: true,
        }
    }

    #[test]
    fn node_statefulset_follows_spec_and_decision() {
        let c = cluster("ts");
        let d = desired(&c, &decisions(5));
        let sts = &d.nodes;
        assert_eq!(sts.metadata.name.as_deref(), Some("ts-node"));
        assert_eq!(sts.metadata.namespace.as_deref(), Some("prod"));
        let spec = sts.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(5), "replicas come from the decision");
        assert_eq!(spec.service_name.as_deref(), Some("ts-node"));
        assert_eq!(
            spec.update_strategy.as_ref().unwrap().type_.as_deref(),
            Some("OnDelete")
        );
        let pod = spec.template.spec.as_ref().unwrap();
        let ctr = &pod.containers[0];
        assert_eq!(
            ctr.image.as_deref(),
            Some("ghcr.io/shardhouse/shardhouse-node:0.1.0")
        );
        let cmd = ctr.command.as_ref().unwrap().join(" ");
        assert!(cmd.contains(NODE_BINARY), "{cmd}");
        assert!(
            cmd.contains("--advertise-host ${HOSTNAME}.ts-node.prod.svc"),
            "{cmd}"
        );
        let req = ctr.resources.as_ref().unwrap().requests.as_ref().unwrap();
        assert_eq!(req["cpu"].0, "4");
        assert_eq!(req["memory"].0, "8Gi");
        let pvc = &spec.volume_claim_templates.as_ref().unwrap()[0];
        let pvc_spec = pvc.spec.as_ref().unwrap();
        assert_eq!(pvc_spec.storage_class_name.as_deref(), Some("fast"));
        assert_eq!(
            pvc_spec
                .resources
                .as_ref()
                .unwrap()
                .requests
                .as_ref()
                .unwrap()["storage"]
                .0,
            "50Gi"
        );
        // Scaling must not change the pod template (it would roll pods).
        let d3 = desired(&c, &decisions(3));
        assert_eq!(d3.nodes.spec.unwrap().template, spec.template);
    }

    #[test]
    fn every_object_is_owned_and_labelled() {
        let c = cluster("ts");
        let d = desired(&c, &decisions(3));
        let metas = [
            &d.config.metadata,
            &d.etcd.as_ref().unwrap().metadata,
            &d.etcd_service.as_ref().unwrap().metadata,
            &d.node_service.metadata,
            &d.nodes.metadata,
            &d.router_service.metadata,
            &d.routers.metadata,
            &d.node_pdb.metadata,
            &d.service_monitor.as_ref().unwrap().metadata,
        ];
        for m in metas
            .into_iter()
            .chain(d.dashboards.iter().map(|c| &c.metadata))
        {
            let owners = m.owner_references.as_ref().unwrap();
            assert_eq!(owners.len(), 1);
            assert_eq!(owners[0].kind, "ShardhouseCluster");
            assert_eq!(owners[0].uid, "uid-1");
            assert_eq!(owners[0].controller, Some(true));
            assert_eq!(m.labels.as_ref().unwrap()[LABEL_INSTANCE], "ts");
        }
    }

    #[test]
    fn external_etcd_skips_managed_etcd_and_reaches_config() {
        let mut c = cluster("ts");
        let d = desired(&c, &decisions(3));
        assert!(d.etcd.is_some());
        assert_eq!(
            d.config.data.as_ref().unwrap()["SHARDHOUSE_NODE_ETCD_ENDPOINTS"],
            "http://ts-etcd.prod.svc:2379"
        );
        let etcd = d.etcd.unwrap();
        let ctr = &etcd.spec.unwrap().template.spec.unwrap().containers[0];
        // No shell: etcd images are distroless.
        assert_eq!(ctr.command.as_deref(), Some(&["etcd".to_string()][..]));
        let args = ctr.args.clone().unwrap();
        assert!(
            args.contains(
                &"--initial-cluster=ts-etcd-0=http://ts-etcd-0.ts-etcd.prod.svc:2380".to_string()
            ),
            "{args:?}"
        );
        assert!(args.contains(&"--name=$(POD_NAME)".to_string()));
        assert!(
            args.iter().all(|a| !a.contains("${")),
            "shell syntax in {args:?}"
        );
        assert_eq!(ctr.env.as_ref().unwrap()[0].name, "POD_NAME");

        c.spec.etcd.endpoints = vec!["http://a:2379".into(), "http://b:2379".into()];
        let d = desired(&c, &decisions(3));
        assert!(d.etcd.is_none() && d.etcd_service.is_none());
        let data = d.config.data.unwrap();
        assert_eq!(
            data["SHARDHOUSE_NODE_ETCD_ENDPOINTS"],
            "http://a:2379,http://b:2379"
        );
        assert_eq!(data["SHARDHOUSE_ROUTER_CLUSTER"], "ts");
        assert_eq!(
            data["SHARDHOUSE_NODE_INIT_CLUSTER"],
            "shards=16,rf=3,nodes=3"
        );
    }

    #[test]
    fn router_gets_auth_secret_ports_and_service() {
        let c = cluster("ts");
        let d = desired(&c, &decisions(3));
        let spec = d.routers.spec.unwrap();
        assert_eq!(spec.replicas, Some(2));
        let ctr = &spec.template.spec.unwrap().containers[0];
        let env = ctr.env.as_ref().unwrap();
        assert_eq!(env[0].name, "SHARDHOUSE_ROUTER_AUTH_TOKEN");
        let ports: Vec<i32> = ctr
            .ports
            .as_ref()
            .unwrap()
            .iter()
            .map(|p| p.container_port)
            .collect();
        assert_eq!(ports, vec![8086, 8087]);
        let svc_ports: Vec<i32> = d
            .router_service
            .spec
            .unwrap()
            .ports
            .unwrap()
            .iter()
            .map(|p| p.port)
            .collect();
        assert_eq!(svc_ports, vec![8086, 8087]);
    }

    #[test]
    fn node_pods_fit_a_real_cluster() {
        let mut c = cluster("ts");
        let sts = desired(&c, &decisions(3)).nodes;
        let pod = sts.spec.as_ref().unwrap().template.spec.clone().unwrap();
        let sc = pod.security_context.as_ref().unwrap();
        assert_eq!(sc.fs_group, Some(65532));
        assert_eq!(sc.fs_group_change_policy.as_deref(), Some("OnRootMismatch"));
        let aa = pod
            .affinity
            .as_ref()
            .unwrap()
            .pod_anti_affinity
            .as_ref()
            .unwrap();
        let pref = aa
            .preferred_during_scheduling_ignored_during_execution
            .as_ref()
            .unwrap();
        assert_eq!(
            pref[0].pod_affinity_term.topology_key,
            "kubernetes.io/hostname"
        );
        assert_eq!(pod.topology_spread_constraints.as_ref().unwrap().len(), 1);
        let ctr = &pod.containers[0];
        let startup = ctr.startup_probe.as_ref().unwrap();
        assert_eq!(
            startup.http_get.as_ref().unwrap().path.as_deref(),
            Some("/health")
        );
        assert!(startup.period_seconds.unwrap() * startup.failure_threshold.unwrap() >= 300);
        let ready = ctr.readiness_probe.as_ref().unwrap();
        assert_eq!(
            ready.http_get.as_ref().unwrap().path.as_deref(),
            Some("/ready")
        );
        assert!(
            ready.timeout_seconds.unwrap() >= 3,
            "/ready asks the leaders"
        );
        // Guaranteed QoS by default; the pool follows the CPU limit.
        let r = ctr.resources.as_ref().unwrap();
        assert_eq!(r.limits.as_ref().unwrap()["cpu"].0, "4");
        assert_eq!(r.limits.as_ref().unwrap()["memory"].0, "8Gi");
        let env = ctr.env.as_ref().unwrap();
        let pool = env
            .iter()
            .find(|e| e.name == "SHARDHOUSE_NODE_POOL_SIZE")
            .unwrap();
        let rf = pool
            .value_from
            .as_ref()
            .unwrap()
            .resource_field_ref
            .as_ref()
            .unwrap();
        assert_eq!(rf.resource, "limits.cpu");
        let inflight = env
            .iter()
            .find(|e| e.name == "SHARDHOUSE_NODE_MAX_INFLIGHT_BYTES")
            .unwrap();
        assert_eq!(
            inflight.value.as_deref(),
            Some("536870912"),
            "8Gi / 8 capped at 512 MiB"
        );
        // Scale-in deletes the drained pods' volumes.
        let policy = sts
            .spec
            .as_ref()
            .unwrap()
            .persistent_volume_claim_retention_policy
            .clone()
            .unwrap();
        assert_eq!(policy.when_scaled.as_deref(), Some("Delete"));

        // An override without a CPU limit: the pool stays at `cores`.
        c.spec.nodes.resources = Some(Resources {
            requests: BTreeMap::from([
                ("cpu".into(), "250m".into()),
                ("memory".into(), "1Gi".into()),
            ]),
            limits: BTreeMap::from([("memory".into(), "1Gi".into())]),
        });
        c.spec.nodes.anti_affinity = AntiAffinity::Required;
        let pod = desired(&c, &decisions(3))
            .nodes
            .spec
            .unwrap()
            .template
            .spec
            .unwrap();
        let ctr = &pod.containers[0];
        assert_eq!(
            ctr.resources.as_ref().unwrap().requests.as_ref().unwrap()["cpu"].0,
            "250m"
        );
        let env = ctr.env.as_ref().unwrap();
        assert!(env.iter().all(|e| e.name != "SHARDHOUSE_NODE_POOL_SIZE"));
        assert_eq!(env[0].value.as_deref(), Some("134217728"), "1Gi / 8");
        assert_eq!(env[1].name, "SHARDHOUSE_NODE_WAL_WRITE_BUFFER_BYTES");
        assert_eq!(env[1].value.as_deref(), Some("33554432"), "1Gi / 32");
        let aa = pod.affinity.unwrap().pod_anti_affinity.unwrap();
        assert!(aa
            .required_during_scheduling_ignored_during_execution
            .is_some());
    }

    #[test]
    fn quantities_parse() {
        assert_eq!(quantity_bytes("4Gi"), Some(4 << 30));
        assert_eq!(quantity_bytes("512Mi"), Some(512 << 20));
        assert_eq!(quantity_bytes("1G"), Some(1_000_000_000));
        assert_eq!(quantity_bytes("1e3"), Some(1000));
        assert_eq!(quantity_bytes("100"), Some(100));
        assert_eq!(quantity_bytes("lots"), None);
        assert_eq!(node_inflight_bytes(Some("128Mi")), 32 << 20, "floor");
        assert_eq!(node_inflight_bytes(None), 512 << 20);
        assert_eq!(node_wal_write_buffer_bytes(Some("8Gi")), 256 << 20, "cap");
        assert_eq!(node_wal_write_buffer_bytes(Some("128Mi")), 8 << 20, "floor");
        assert_eq!(node_wal_write_buffer_bytes(Some("2Gi")), 64 << 20);
        assert_eq!(node_wal_write_buffer_bytes(None), 256 << 20);
    }

    #[test]
    fn router_service_type_and_monitor_labels_are_configurable() {
        let mut c = cluster("ts");
        assert_eq!(
            desired(&c, &decisions(3))
                .router_service
                .spec
                .unwrap()
                .type_
                .as_deref(),
            Some("ClusterIP")
        );
        c.spec.routers.service = RouterServiceSpec {
            type_: "NodePort".into(),
            http_node_port: Some(30086),
            annotations: BTreeMap::from([("a".into(), "b".into())]),
            ..Default::default()
        };
        c.spec.monitoring.service_monitor_labels =
            BTreeMap::from([("release".into(), "kube-prometheus-stack".into())]);
        let d = desired(&c, &decisions(3));
        let svc = d.router_service;
        assert_eq!(svc.metadata.annotations.unwrap()["a"], "b");
        let spec = svc.spec.unwrap();
        assert_eq!(spec.type_.as_deref(), Some("NodePort"));
        assert_eq!(spec.ports.unwrap()[0].node_port, Some(30086));
        let sm = d.service_monitor.unwrap();
        assert_eq!(
            sm.metadata.labels.unwrap()["release"],
            "kube-prometheus-stack"
        );
        c.spec.monitoring.service_monitor = false;
        assert!(desired(&c, &decisions(3)).service_monitor.is_none());
    }

    #[test]
    fn dashboards_and_service_monitor_are_optional_extras() {
        let c = cluster("ts");
        let mut dec = decisions(3);
        dec.service_monitor = false;
        let d = desired(&c, &dec);
        assert!(d.service_monitor.is_none());
        assert_eq!(d.dashboards.len(), dashboards::ALL.len());
        for cm in &d.dashboards {
            assert_eq!(
                cm.metadata.labels.as_ref().unwrap()["grafana_dashboard"],
                "1"
            );
            let (_, body) = cm.data.as_ref().unwrap().iter().next().unwrap();
            serde_json::from_str::<Value>(body).expect("dashboard JSON");
        }
        assert_eq!(
            d.node_pdb.spec.unwrap().max_unavailable,
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
        );
    }
}
