//! Router metrics, names as in docs/contracts.md, in the default registry.

use prometheus::{
    register_histogram, register_histogram_vec, register_int_counter, register_int_counter_vec,
    register_int_gauge, register_int_gauge_vec, Histogram, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec,
};
use std::sync::LazyLock;

const BUCKETS: &[f64] = &[
    0.000_01, 0.000_05, 0.000_1, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];

macro_rules! must {
    ($e:expr) => {
        // Registration only fails on a duplicate name, a programming error.
        $e.expect("metric registers once")
    };
}

pub static REQUESTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    must!(register_int_counter_vec!(
        "shardhouse_router_requests_total",
        "Requests by endpoint and HTTP status",
        &["endpoint", "status"]
    ))
});
pub static POINTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    must!(register_int_counter_vec!(
        "shardhouse_router_points_total",
        "Points accepted and committed",
        &["endpoint"]
    ))
});
pub static BYTES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    must!(register_int_counter_vec!(
        "shardhouse_router_bytes_total",
        "Request body bytes received (as sent, before decompression)",
        &["endpoint"]
    ))
});
pub static REJECTED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    must!(register_int_counter_vec!(
        "shardhouse_router_rejected_total",
        "Rejections by reason (overloaded, cardinality: points; others: requests or points)",
        &["reason"]
    ))
});
pub static PARSE_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    must!(register_histogram_vec!(
        "shardhouse_router_parse_seconds",
        "Parse + series hashing + column build of one request",
        &["endpoint"],
        BUCKETS.to_vec()
    ))
});
pub static SERIES_HASH_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    must!(register_histogram!(
        "shardhouse_router_series_hash_seconds",
        "Series resolution (parse tags, canonical key, series_id) of one request",
        BUCKETS.to_vec()
    ))
});
pub static BATCH_BUILD_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    must!(register_histogram!(
        "shardhouse_router_batch_build_seconds",
        "Arrow IPC encoding of one request's shard batches",
        BUCKETS.to_vec()
    ))
});
pub static FORWARD_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    must!(register_histogram!(
        "shardhouse_router_forward_seconds",
        "Node.Write of one (coalesced) shard write, including retries",
        BUCKETS.to_vec()
    ))
});
pub static COALESCED_REQUESTS: LazyLock<Histogram> = LazyLock::new(|| {
    must!(register_histogram!(
        "shardhouse_router_coalesced_requests",
        "Client requests carried by one Node.Write (per-shard coalescing)",
        vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0]
    ))
});
pub static QUEUE_WAIT_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    must!(register_histogram!(
        "shardhouse_router_queue_wait_seconds",
        "Time a request's shard batch waited in the shard's queue for a write slot",
        vec![0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5]
    ))
});
pub static NODE_CALL_WRITES: LazyLock<Histogram> = LazyLock::new(|| {
    must!(register_histogram!(
        "shardhouse_router_node_call_writes",
        "Shard writes carried by one call to a node (per-node batching)",
        vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0]
    ))
});
pub static WRITE_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    must!(register_histogram_vec!(
        "shardhouse_router_write_seconds",
        "End to end: request in to ack",
        &["endpoint"],
        BUCKETS.to_vec()
    ))
});
pub static INFLIGHT_BYTES: LazyLock<IntGauge> = LazyLock::new(|| {
    must!(register_int_gauge!(
        "shardhouse_router_inflight_bytes",
        "Bytes of requests being processed"
    ))
});
pub static SERIES_CARDINALITY: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    must!(register_int_gauge_vec!(
        "shardhouse_router_series_cardinality",
        "Series admitted per database since start",
        &["db"]
    ))
});
pub static SERIES_CACHE_LOOKUPS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    must!(register_int_counter_vec!(
        "shardhouse_router_series_cache_lookups_total",
        "Series new to a request looked up in the router-wide series cache, by result (hit, miss)",
        &["result"]
    ))
});
pub static SERIES_CACHE_ENTRIES: LazyLock<IntGauge> = LazyLock::new(|| {
    must!(register_int_gauge!(
        "shardhouse_router_series_cache_entries",
        "Series held by the router-wide series cache"
    ))
});
pub static SERIES_CACHE_CLEARS: LazyLock<IntCounter> = LazyLock::new(|| {
    must!(register_int_counter!(
        "shardhouse_router_series_cache_clears_total",
        "Full stripes of the series cache cleared to make room (series_cache_entries too small for the live series)"
    ))
});

/// TLS listener events: `reload` (new certificate in use), `reload_failed`
/// (changed files that do not load), `handshake_failed`.
pub static TLS_EVENTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    must!(register_int_counter_vec!(
        "shardhouse_router_tls_events_total",
        "TLS certificate reloads and failed handshakes",
        &["event"]
    ))
});

/// `percentile()` statements whose shard windows did not decide the rank
/// and were read again as points (read/influx/pushdown.rs).
pub static QUERY_PERCENTILE_REREADS: LazyLock<IntCounter> = LazyLock::new(|| {
    must!(register_int_counter!(
        "shardhouse_router_query_percentile_rereads_total",
        "percentile() statements read again as points because the shards' rank windows did not decide the answer"
    ))
});

/// The InfluxQL cache of settled buckets (read/influx/cache.rs).
pub static QUERY_CACHE_HITS: LazyLock<IntCounter> = LazyLock::new(|| {
    must!(register_int_counter!(
        "shardhouse_router_query_cache_hits_total",
        "GROUP BY time() statements answered from cached settled buckets plus the newest ones"
    ))
});
pub static QUERY_CACHE_MISSES: LazyLock<IntCounter> = LazyLock::new(|| {
    must!(register_int_counter!(
        "shardhouse_router_query_cache_misses_total",
        "Cacheable statements with no usable cached buckets (read in full)"
    ))
});
pub static QUERY_CACHE_INVALIDATIONS: LazyLock<IntCounter> = LazyLock::new(|| {
    must!(register_int_counter!(
        "shardhouse_router_query_cache_invalidations_total",
        "Cached buckets dropped because a shard's change mark moved (late write, delete, drop, retention) or another replica answered"
    ))
});
pub static QUERY_CACHE_BYTES: LazyLock<IntGauge> = LazyLock::new(|| {
    must!(register_int_gauge!(
        "shardhouse_router_query_cache_bytes",
        "Bytes held by the InfluxQL cache of settled buckets (at most query_cache_mb)"
    ))
});

/// Registers every metric so `/metrics` lists them before first use.
pub static CQ_RUNS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    must!(register_int_counter_vec!(
        "shardhouse_router_cq_runs_total",
        "Continuous query windows run by this router, by result (ok, error)",
        &["result"]
    ))
});
pub static CQ_LEADER: LazyLock<IntGauge> = LazyLock::new(|| {
    must!(register_int_gauge!(
        "shardhouse_router_cq_leader",
        "1 while this router holds the continuous-query lease in etcd"
    ))
});

pub fn init() {
    LazyLock::force(&CQ_RUNS);
    LazyLock::force(&CQ_LEADER);
    LazyLock::force(&REQUESTS);
    LazyLock::force(&POINTS);
    LazyLock::force(&BYTES);
    LazyLock::force(&REJECTED);
    LazyLock::force(&PARSE_SECONDS);
    LazyLock::force(&SERIES_HASH_SECONDS);
    LazyLock::force(&BATCH_BUILD_SECONDS);
    LazyLock::force(&FORWARD_SECONDS);
    LazyLock::force(&COALESCED_REQUESTS);
    LazyLock::force(&NODE_CALL_WRITES);
    LazyLock::force(&QUEUE_WAIT_SECONDS);
    LazyLock::force(&WRITE_SECONDS);
    LazyLock::force(&INFLIGHT_BYTES);
    LazyLock::force(&SERIES_CARDINALITY);
    LazyLock::force(&SERIES_CACHE_LOOKUPS);
    LazyLock::force(&SERIES_CACHE_ENTRIES);
    LazyLock::force(&SERIES_CACHE_CLEARS);
    LazyLock::force(&TLS_EVENTS);
    LazyLock::force(&QUERY_CACHE_HITS);
    LazyLock::force(&QUERY_PERCENTILE_REREADS);
    LazyLock::force(&QUERY_CACHE_MISSES);
    LazyLock::force(&QUERY_CACHE_INVALIDATIONS);
    LazyLock::force(&QUERY_CACHE_BYTES);
}

/// Prometheus text of the default registry.
pub fn render() -> String {
    let families = prometheus::gather();
    prometheus::TextEncoder::new()
        .encode_to_string(&families)
        .unwrap_or_default()
}
