//! The node pods: their StatefulSet, headless Service and disruption
//! budget, and the sizes derived from their memory limit.

use super::scheduling::{anti_affinity, quantity_bytes, resources_of};
use super::security::node_mounts;
use super::{config_name, from_json, labels, meta, node_name, ns, selector};
use super::{NODE_BINARY, NODE_DATA_DIR, NODE_GRPC_PORT, NODE_HTTP_PORT};
use crate::crd::{AntiAffinity, NodeSpec, ShardhouseCluster};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::{json, Value};

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
    let n = &c.spec.nodes;
    let doors = node_mounts(c);
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
                    "topologySpreadConstraints": node_spread(c),
                    "volumes": doors.volumes,
                    "containers": [node_container(c, &name, doors.env, doors.mounts)]
                }
            },
            // Labelled so the finalizer can find them: PVCs are created by the
            // StatefulSet controller and carry no owner reference to the cluster.
            "volumeClaimTemplates": [{"metadata": {"name": "data", "labels": labels(c, "node")}, "spec": node_pvc_spec(n)}],
            // Scale-in shrinks the StatefulSet only after the drain moved
            // every replica away, so a removed pod's volume holds nothing
            // the cluster needs (and would bring stale Raft state back on
            // the next scale-out).
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Delete"},
        }
    }))
}

/// The claim template's spec: the volume size and storage class.
fn node_pvc_spec(n: &NodeSpec) -> Value {
    let mut pvc_spec = json!({
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": n.storage.size}},
    });
    if let Some(class) = &n.storage.storage_class_name {
        pvc_spec["storageClassName"] = json!(class);
    }
    pvc_spec
}

/// Node pods spread over zones unless anti-affinity is off.
fn node_spread(c: &ShardhouseCluster) -> Vec<Value> {
    let mut spread = vec![];
    if c.spec.nodes.anti_affinity != AntiAffinity::None {
        spread.push(json!({
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector(c, "node")},
        }));
    }
    spread
}

/// The node container; `doors_env` and `doors_mounts` are those of the
/// cluster credential (`node_mounts`).
fn node_container(
    c: &ShardhouseCluster,
    name: &str,
    doors_env: Vec<Value>,
    doors_mounts: Vec<Value>,
) -> Value {
    let ns = ns(c);
    let n = &c.spec.nodes;
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
    env.extend(doors_env);
    // Backup credentials: the nodes write to the destination themselves.
    let mut env_from = vec![json!({"configMapRef": {"name": config_name(c)}})];
    if let Some(secret) = &n.backup_credentials_secret {
        env_from.push(json!({"secretRef": {"name": secret}}));
    }
    let mut volume_mounts = vec![json!({"name": "data", "mountPath": NODE_DATA_DIR})];
    volume_mounts.extend(doors_mounts);
    json!({
        "name": "node",
        "image": c.spec.image.node(),
        "imagePullPolicy": c.spec.image.pull_policy,
        "command": ["/bin/sh", "-c", script],
        "envFrom": env_from,
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
        "volumeMounts": volume_mounts,
    })
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
