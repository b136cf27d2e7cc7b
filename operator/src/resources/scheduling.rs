//! Where pods may run and what they ask for: anti-affinity, requests and
//! limits, and the quantities written in them.

use super::selector;
use crate::crd::{AntiAffinity, Resources, ShardhouseCluster};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Pod anti-affinity by hostname between pods of one component.
pub(super) fn anti_affinity(c: &ShardhouseCluster, component: &str, rule: AntiAffinity) -> Value {
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
pub(super) fn resources_of(
    over: Option<&Resources>,
    cores: u32,
    memory: &str,
    cpu_limit: bool,
) -> Resources {
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
