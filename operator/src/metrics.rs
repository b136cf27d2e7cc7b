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

pub static API_REQUESTS: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "shardhouse_operator_api_requests_total",
        "Requests sent to the Kubernetes API server (watches, reconciles, events)."
    )
    .expect("metric registers once")
});

pub static RECONCILE_API_REQUESTS: LazyLock<Histogram> = LazyLock::new(|| {
    register_histogram!(
        "shardhouse_operator_reconcile_api_requests",
        "Kubernetes API requests one reconcile run sent.",
        vec![5.0, 10.0, 15.0, 20.0, 30.0, 50.0, 100.0, 200.0]
    )
    .expect("metric registers once")
});

/// Touches every metric so `/metrics` lists them before the first reconcile.
pub fn init() {
    LazyLock::force(&RECONCILES);
    LazyLock::force(&RECONCILE_ERRORS);
    LazyLock::force(&RECONCILE_SECONDS);
    LazyLock::force(&REBALANCE_MOVES);
    LazyLock::force(&API_REQUESTS);
    LazyLock::force(&RECONCILE_API_REQUESTS);
}

/// Counts one request to the API server; the kube client's request layer
/// (main.rs) passes every request through it.
pub fn count_api_request<R>(req: R) -> R {
    API_REQUESTS.inc();
    req
}

/// Measures one reconcile: its duration and the API requests sent while it
/// ran (one reconcile per cluster at a time, so with one cluster they are
/// its own, plus a rare watch restart).
pub struct ReconcileMeter {
    _timer: HistogramTimer,
    started: std::time::Instant,
    requests_before: u64,
}

impl ReconcileMeter {
    /// (milliseconds, API requests) so far; records the requests.
    pub fn finish(self) -> (f64, u64) {
        let requests = API_REQUESTS.get().saturating_sub(self.requests_before);
        RECONCILE_API_REQUESTS.observe(requests as f64);
        (self.started.elapsed().as_secs_f64() * 1e3, requests)
    }
}

/// Counts a reconcile; its duration is recorded when the meter is dropped.
pub fn reconcile_meter() -> ReconcileMeter {
    RECONCILES.inc();
    ReconcileMeter {
        _timer: RECONCILE_SECONDS.start_timer(),
        started: std::time::Instant::now(),
        requests_before: API_REQUESTS.get(),
    }
}

/// Prometheus text of the default registry.
pub fn render() -> String {
    use prometheus::Encoder;
    let mut buf = Vec::new();
    // Encoding the default registry into a Vec cannot fail.
    let _ = prometheus::TextEncoder::new().encode(&prometheus::gather(), &mut buf);
    String::from_utf8(buf).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reconcile_counts_the_requests_sent_while_it_ran() {
        let before = API_REQUESTS.get();
        let meter = reconcile_meter();
        for i in 0..3 {
            assert_eq!(count_api_request(i), i, "the request passes unchanged");
        }
        let (ms, requests) = meter.finish();
        assert_eq!(requests, 3);
        assert!(ms >= 0.0);
        assert_eq!(API_REQUESTS.get(), before + 3);
    }
}
