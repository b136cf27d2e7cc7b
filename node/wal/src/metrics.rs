//! Prometheus metrics of the WAL (names fixed in docs/contracts.md), in the
//! process's default registry.

use std::sync::LazyLock;

use prometheus::{
    register_gauge, register_histogram, register_int_counter, register_int_counter_vec,
    register_int_gauge, Gauge, Histogram, IntCounter, IntCounterVec, IntGauge,
};

pub static APPEND_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    register_histogram!(
        "shardhouse_wal_append_seconds",
        "Time to write one synced RocksDB write batch (one per Ready round, all shards of a poller)",
        prometheus::exponential_buckets(0.0001, 2.0, 16).expect("valid buckets")
    )
    .expect("register shardhouse_wal_append_seconds")
});

pub static GROUP_COMMIT_ENTRIES: LazyLock<Histogram> = LazyLock::new(|| {
    register_histogram!(
        "shardhouse_wal_group_commit_entries",
        "Log entries per synced RocksDB write batch",
        prometheus::exponential_buckets(1.0, 2.0, 14).expect("valid buckets")
    )
    .expect("register shardhouse_wal_group_commit_entries")
});

pub static COMMIT_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    register_histogram!(
        "shardhouse_wal_commit_seconds",
        "Time from propose to commit on the leader",
        prometheus::exponential_buckets(0.0002, 2.0, 16).expect("valid buckets")
    )
    .expect("register shardhouse_wal_commit_seconds")
});

pub static SHARDS: LazyLock<Gauge> = LazyLock::new(|| {
    register_gauge!(
        "shardhouse_wal_shards",
        "Shard replicas hosted by this node"
    )
    .expect("register shardhouse_wal_shards")
});

pub static LEADERS: LazyLock<Gauge> = LazyLock::new(|| {
    register_gauge!("shardhouse_wal_leaders", "Shards this node leads")
        .expect("register shardhouse_wal_leaders")
});

pub static FOLLOWER_LAG: LazyLock<Gauge> = LazyLock::new(|| {
    register_gauge!(
        "shardhouse_wal_follower_lag_entries",
        "Max follower lag in entries over the shards this node leads"
    )
    .expect("register shardhouse_wal_follower_lag_entries")
});

pub static SNAPSHOTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "shardhouse_wal_snapshots_total",
        "Raft snapshots sent and received",
        &["direction"]
    )
    .expect("register shardhouse_wal_snapshots_total")
});

pub static APPLY_STALLED_SHARDS: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "shardhouse_wal_apply_stalled_shards",
        "Shards whose apply is stopped at an entry the state machine keeps failing (retried with backoff)"
    )
    .expect("register shardhouse_wal_apply_stalled_shards")
});

pub static APPLY_FAILURES: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "shardhouse_wal_apply_failures_total",
        "Failed attempts to apply a committed entry (each is retried, never skipped)"
    )
    .expect("register shardhouse_wal_apply_failures_total")
});

pub static APPLY_REJECTED: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "shardhouse_wal_apply_rejected_total",
        "Committed entries every replica skipped as unstorable (e.g. a field type conflict decided in log order)"
    )
    .expect("register shardhouse_wal_apply_rejected_total")
});

pub static RESTORE_FAILURES: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "shardhouse_wal_snapshot_restore_failures_total",
        "Failed attempts to restore a received snapshot into the state machine (retried with backoff; the shard waits, others go on)"
    )
    .expect("register shardhouse_wal_snapshot_restore_failures_total")
});

pub static REPLICA_REBUILDS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "shardhouse_wal_replica_rebuilds_total",
        "Replicas asked to be rebuilt from a peer's snapshot, by trigger (auto: apply stuck past the bound; manual: shardhouse-ctl; damaged: the engine found its stored copy damaged)",
        &["trigger"]
    )
    .expect("register shardhouse_wal_replica_rebuilds_total")
});

pub static DISK_FULL: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "shardhouse_wal_disk_full",
        "1 while writes are refused because the WAL filesystem is below its free-space reserve or RocksDB reported it out of space"
    )
    .expect("register shardhouse_wal_disk_full")
});

pub static WRITES_REFUSED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "shardhouse_wal_writes_refused_total",
        "Proposals refused by the WAL's disk guards (disk_full: below the free-space reserve; log_bound: the unflushed log is over its bound)",
        &["reason"]
    )
    .expect("register shardhouse_wal_writes_refused_total")
});

/// Registers every WAL metric now, so `/metrics` lists them (at zero)
/// before the first event.
pub fn register() {
    LazyLock::force(&APPEND_SECONDS);
    LazyLock::force(&GROUP_COMMIT_ENTRIES);
    LazyLock::force(&COMMIT_SECONDS);
    LazyLock::force(&SHARDS);
    LazyLock::force(&LEADERS);
    LazyLock::force(&FOLLOWER_LAG);
    LazyLock::force(&APPLY_STALLED_SHARDS);
    LazyLock::force(&APPLY_FAILURES);
    LazyLock::force(&APPLY_REJECTED);
    LazyLock::force(&RESTORE_FAILURES);
    LazyLock::force(&DISK_FULL);
    for r in ["disk_full", "log_bound"] {
        WRITES_REFUSED.with_label_values(&[r]);
    }
    for t in ["auto", "manual"] {
        REPLICA_REBUILDS.with_label_values(&[t]);
    }
    for d in ["sent", "received"] {
        SNAPSHOTS.with_label_values(&[d]);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn metric_names_follow_the_contract() {
        super::register();
        let names: Vec<String> = prometheus::gather()
            .iter()
            .map(|f| f.name().to_string())
            .filter(|n| n.starts_with("shardhouse_wal_"))
            .collect();
        for want in [
            "shardhouse_wal_append_seconds",
            "shardhouse_wal_group_commit_entries",
            "shardhouse_wal_commit_seconds",
            "shardhouse_wal_shards",
            "shardhouse_wal_leaders",
            "shardhouse_wal_follower_lag_entries",
            "shardhouse_wal_snapshots_total",
            "shardhouse_wal_apply_stalled_shards",
            "shardhouse_wal_apply_failures_total",
            "shardhouse_wal_apply_rejected_total",
            "shardhouse_wal_snapshot_restore_failures_total",
            "shardhouse_wal_replica_rebuilds_total",
            "shardhouse_wal_disk_full",
            "shardhouse_wal_writes_refused_total",
        ] {
            assert!(
                names.iter().any(|n| n == want),
                "{want} missing from {names:?}"
            );
        }
    }
}
