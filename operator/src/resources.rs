//! What should exist for a `ShardhouseCluster`: pure functions from the
//! custom resource (plus the few decisions the reconciler made, such as how
//! many node pods to run while a drain is in progress) to Kubernetes objects.
//! No I/O here; the reconciler applies the result with server-side apply.

use crate::crd::ShardhouseCluster;
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
        service_monitor: d.service_monitor.then(|| service_monitor(c)),
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
    let script = format!(
        "exec etcd --name=${{HOSTNAME}} --data-dir=/var/lib/etcd \
         --listen-client-urls=http://0.0.0.0:{ETCD_CLIENT_PORT} \
         --advertise-client-urls=http://${{HOSTNAME}}.{name}.{ns}.svc:{ETCD_CLIENT_PORT} \
         --listen-peer-urls=http://0.0.0.0:{ETCD_PEER_PORT} \
         --initial-advertise-peer-urls=http://${{HOSTNAME}}.{name}.{ns}.svc:{ETCD_PEER_PORT} \
         --initial-cluster={} --initial-cluster-state=new --initial-cluster-token={name}",
        initial.join(",")
    );
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
                    "containers": [{
                        "name": "etcd",
                        "image": e.image,
                        "command": ["/bin/sh", "-c", script],
                        "ports": [
                            {"name": "client", "containerPort": ETCD_CLIENT_PORT},
                            {"name": "peer", "containerPort": ETCD_PEER_PORT},
                        ],
                        "readinessProbe": {"httpGet": {"path": "/health", "port": ETCD_CLIENT_PORT}},
                        "volumeMounts": [{"name": "data", "mountPath": "/var/lib/etcd"}],
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
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "fsGroup": 65532},
                    "containers": [{
                        "name": "node",
                        "image": c.spec.image.node(),
                        "imagePullPolicy": c.spec.image.pull_policy,
                        "command": ["/bin/sh", "-c", script],
                        "envFrom": [{"configMapRef": {"name": config_name(c)}}],
                        "ports": [
                            {"name": "grpc", "containerPort": NODE_GRPC_PORT},
                            {"name": "http", "containerPort": NODE_HTTP_PORT},
                        ],
                        "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}},
                        "livenessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 20},
                        "resources": {
                            "requests": {"cpu": n.cores.to_string(), "memory": n.memory},
                            "limits": {"memory": n.memory},
                        },
                        "volumeMounts": [{"name": "data", "mountPath": NODE_DATA_DIR}],
                    }]
                }
            },
            // Labelled so the finalizer can find them: PVCs are created by the
            // StatefulSet controller and carry no owner reference to the cluster.
            "volumeClaimTemplates": [{"metadata": {"name": "data", "labels": labels(c, "node")}, "spec": pvc_spec}],
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Retain"},
        }
    }))
}

pub fn router_service(c: &ShardhouseCluster) -> Service {
    from_json(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": meta(c, router_name(c), "router"),
        "spec": {
            "selector": selector(c, "router"),
            "ports": [
                {"name": "http", "port": ROUTER_HTTP_PORT, "targetPort": "http"},
                {"name": "grpc", "port": ROUTER_GRPC_PORT, "targetPort": "grpc"},
            ],
        }
    }))
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
                        "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}},
                        "livenessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 20},
                        "resources": {
                            "requests": {"cpu": r.cores.to_string(), "memory": r.memory},
                            "limits": {"memory": r.memory},
                        },
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
    from_json(json!({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
        "metadata": meta(c, c.name_any(), "monitoring"),
        "spec": {
            "selector": {"matchLabels": {LABEL_NAME: "shardhouse", LABEL_INSTANCE: c.name_any()}},
            "endpoints": [{"port": "http", "path": "/metrics", "interval": "15s"}],
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
                },
                routers: RouterSpec::default(),
                shard_count: 16,
                replication_factor: 3,
                etcd: EtcdSpec::default(),
                auth_secret: Some("tokens".into()),
                autoscaling: None,
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
        let cmd = etcd.spec.unwrap().template.spec.unwrap().containers[0]
            .command
            .clone()
            .unwrap()
            .join(" ");
        assert!(
            cmd.contains("--initial-cluster=ts-etcd-0=http://ts-etcd-0.ts-etcd.prod.svc:2380 "),
            "{cmd}"
        );

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
