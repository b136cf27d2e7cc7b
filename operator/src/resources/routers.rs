//! The routers: their Deployment and Service.

use super::scheduling::{anti_affinity, resources_of};
use super::security::{router_mounts, router_probe_scheme};
use super::{config_name, from_json, labels, meta, router_name, selector};
use super::{ROUTER_BINARY, ROUTER_GRPC_PORT, ROUTER_HTTP_PORT};
use crate::crd::{AntiAffinity, ShardhouseCluster};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use serde_json::json;

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
    let doors = router_mounts(c);
    env.extend(doors.env);
    let scheme = router_probe_scheme(c);
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
                    // fsGroup: the mounted Secrets are readable by the group.
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532},
                    "volumes": doors.volumes,
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
                        "readinessProbe": {"httpGet": {"path": "/ready", "port": "http", "scheme": scheme}, "periodSeconds": 5, "timeoutSeconds": 3},
                        "livenessProbe": {"httpGet": {"path": "/health", "port": "http", "scheme": scheme}, "periodSeconds": 20, "timeoutSeconds": 5},
                        "volumeMounts": doors.mounts,
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
