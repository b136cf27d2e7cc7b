//! Monitoring extras: Grafana dashboards and the Prometheus Operator's
//! ServiceMonitor.

use super::{from_json, meta, LABEL_INSTANCE, LABEL_NAME};
use crate::crd::ShardhouseCluster;
use crate::dashboards;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::DynamicObject;
use kube::ResourceExt;
use serde_json::json;

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
