//! The operator's own metrics (names fixed in docs/contracts.md), registered
//! in the process's default Prometheus registry.

use prometheus::{register_histogram, register_int_counter, Histogram, HistogramTimer, IntCounter};
use std::sync::LazyLock;

pub static RECONCILES: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "shardhouse_operator_reconciles_total",
        "Reconcile runs started."
    )
    .expect("metric registers once")
});

pub static RECONCILE_ERRORS: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "shardhouse_operator_reconcile_errors_total",
        "Reconcile runs that failed and were requeued with backoff."
    )
    .expect("metric registers once")
});

pub static RECONCILE_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    register_histogram!(
        "shardhouse_operator_reconcile_seconds",
        "Duration of one reconcile run.",
        vec![0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]
    )
    .expect("metric registers once")
});

pub static REBALANCE_MOVES: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "shardhouse_operator_rebalance_moves_total",
        "Shard moves (learner add, promote, leader transfer, removal) completed."
    )
    .expect("metric registers once")
});

/// Touches every metric so `/metrics` lists them before the first reconcile.
pub fn init() {
    LazyLock::force(&RECONCILES);
    LazyLock::force(&RECONCILE_ERRORS);
    LazyLock::force(&RECONCILE_SECONDS);
    LazyLock::force(&REBALANCE_MOVES);
}

/// Counts a reconcile and records its duration when dropped.
pub fn reconcile_timer() -> HistogramTimer {
    RECONCILES.inc();
    RECONCILE_SECONDS.start_timer()
}

/// Prometheus text of the default registry.
pub fn render() -> String {
    use prometheus::Encoder;
    let mut buf = Vec::new();
    // Encoding the default registry into a Vec cannot fail.
    let _ = prometheus::TextEncoder::new().encode(&prometheus::gather(), &mut buf);
    String::from_utf8(buf).unwrap_or_default()
}
