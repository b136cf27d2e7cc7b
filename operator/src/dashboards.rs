//! Grafana dashboards. The JSON lives in the chart (one source for the chart's
//! ConfigMaps and the ones the operator creates per cluster).

/// `(short name, dashboard JSON)`.
pub const ALL: &[(&str, &str)] = &[
    (
        "overview",
        include_str!("../../charts/shardhouse/dashboards/overview.json"),
    ),
    (
        "write-path",
        include_str!("../../charts/shardhouse/dashboards/write-path.json"),
    ),
    (
        "raft",
        include_str!("../../charts/shardhouse/dashboards/raft.json"),
    ),
    (
        "engine",
        include_str!("../../charts/shardhouse/dashboards/engine.json"),
    ),
    (
        "operator",
        include_str!("../../charts/shardhouse/dashboards/operator.json"),
    ),
];
