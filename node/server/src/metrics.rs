//! Node metrics, registered in the process's default Prometheus registry
//! next to the WAL's and the engine's.

use prometheus::{
    register_histogram, register_int_counter_vec, register_int_gauge, Histogram, IntCounterVec,
    IntGauge,
};
use std::sync::OnceLock;

pub struct NodeMetrics {
    /// `result`: committed, not_leader, overloaded, unavailable, rejected.
    pub writes_total: IntCounterVec,
    /// Write RPC, admit to commit.
    pub write_seconds: Histogram,
    pub inflight_bytes: IntGauge,
}

/// The process-wide node metrics (registered on first use).
pub fn metrics() -> &'static NodeMetrics {
    static METRICS: OnceLock<NodeMetrics> = OnceLock::new();
    METRICS.get_or_init(|| NodeMetrics {
        writes_total: register_int_counter_vec!(
            "shardhouse_node_writes_total",
            "Write RPCs by result",
            &["result"]
        )
        .expect("metric registered once"),
        write_seconds: register_histogram!(
            "shardhouse_node_write_seconds",
            "Write RPC latency from admission to commit",
            vec![0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0]
        )
        .expect("metric registered once"),
        inflight_bytes: register_int_gauge!(
            "shardhouse_node_inflight_bytes",
            "Bytes of Write requests admitted and not yet committed"
        )
        .expect("metric registered once"),
    })
}

/// Result labels of `shardhouse_node_writes_total` (bounded set).
pub mod result {
    pub const COMMITTED: &str = "committed";
    pub const NOT_LEADER: &str = "not_leader";
    pub const OVERLOADED: &str = "overloaded";
    pub const UNAVAILABLE: &str = "unavailable";
    pub const REJECTED: &str = "rejected";
}
