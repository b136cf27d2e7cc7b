//! The managed etcd: its headless Service and StatefulSet.

use super::scheduling::anti_affinity;
use super::{etcd_name, from_json, labels, meta, ns, selector};
use super::{ETCD_CLIENT_PORT, ETCD_DATA_DIR, ETCD_PEER_PORT};
use crate::crd::{AntiAffinity, ShardhouseCluster};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Service;
use serde_json::json;

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
