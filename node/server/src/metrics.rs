//! Node metrics, registered in the process's default Prometheus registry
//! next to the WAL's and the engine's.

use prometheus::{
    register_histogram, register_int_counter, register_int_counter_vec, register_int_gauge,
    register_int_gauge_vec, Histogram, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
};
use std::sync::OnceLock;

pub struct NodeMetrics {
    /// `result`: committed, not_leader, overloaded, unavailable, rejected.
    pub writes_total: IntCounterVec,
    /// Write RPC, admit to commit.
    pub write_seconds: Histogram,
    pub inflight_bytes: IntGauge,
    /// `part`: see [`memory_part`]; refreshed at every scrape.
    pub memory_bytes: IntGaugeVec,
    pub malloc_trim_seconds: Histogram,
    pub malloc_trim_released_bytes: IntCounter,
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
        memory_bytes: register_int_gauge_vec!(
            "shardhouse_node_memory_bytes",
            "Memory of the node process by holder, outside the embedded engine (shardhouse_engine_memory_bytes)",
            &["part"]
        )
        .expect("metric registered once"),
        malloc_trim_seconds: register_histogram!(
            "shardhouse_node_malloc_trim_seconds",
            "Time of one malloc_trim(0), which gives glibc's freed pages (engine, RocksDB) back to the system",
            vec![0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25]
        )
        .expect("metric registered once"),
        malloc_trim_released_bytes: register_int_counter!(
            "shardhouse_node_malloc_trim_released_bytes_total",
            "Resident bytes malloc_trim gave back to the system (RSS before minus after)"
        )
        .expect("metric registered once"),
    })
}

/// `part` labels of `shardhouse_node_memory_bytes` (bounded set).
pub mod memory_part {
    /// Bytes the Rust side has allocated (jemalloc `stats.allocated`):
    /// buffered rows, WAL entries in flight, series sets, tag index.
    pub const HEAP: &str = "heap";
    /// Pages jemalloc holds for the Rust side (`stats.resident`): the heap
    /// plus what it freed and has not yet returned to the system.
    pub const HEAP_RESIDENT: &str = "heap_resident";
    /// The WAL's RocksDB memtables.
    pub const WAL_MEMTABLES: &str = "wal_memtables";
    /// Index and filter blocks of the WAL's open SST files.
    pub const WAL_SST_READERS: &str = "wal_sst_readers";
}

/// Result labels of `shardhouse_node_writes_total` (bounded set).
pub mod result {
    pub const COMMITTED: &str = "committed";
    pub const NOT_LEADER: &str = "not_leader";
    pub const OVERLOADED: &str = "overloaded";
    pub const UNAVAILABLE: &str = "unavailable";
    pub const REJECTED: &str = "rejected";
}
