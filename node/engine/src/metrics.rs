//! Engine metrics in the process's default Prometheus registry (names from docs/contracts.md).

use std::sync::LazyLock;

use prometheus::{
    register_histogram, register_int_counter, register_int_counter_vec, register_int_gauge,
    Histogram, IntCounter, IntCounterVec, IntGauge,
};

pub static FLUSH_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    register_histogram!(
        "shardhouse_engine_flush_seconds",
        "Time to write one shard's buffered rows into chDB",
        prometheus::exponential_buckets(0.001, 2.0, 16).expect("valid buckets")
    )
    .expect("metric registered once")
});

pub static SYNC_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    register_histogram!(
        "shardhouse_engine_sync_seconds",
        "Time of the syncfs that makes a flush's parts durable before its flushed index moves",
        prometheus::exponential_buckets(0.0005, 2.0, 14).expect("valid buckets")
    )
    .expect("metric registered once")
});

pub static FLUSHES_TOTAL: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!("shardhouse_engine_flushes_total", "Shard flushes into chDB")
        .expect("metric registered once")
});

pub static READS_FROM_ROLLUPS_TOTAL: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "shardhouse_engine_reads_from_rollups_total",
        "Planned reads answered from a measurement's rollups instead of its raw points"
    )
    .expect("metric registered once")
});

pub static READS_WITHOUT_FINAL_TOTAL: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "shardhouse_engine_reads_without_final_total",
        "Reads whose FINAL was dropped because every table it applied to holds each point once"
    )
    .expect("metric registered once")
});

pub static SERIES_SELECTIONS_TOTAL: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "shardhouse_engine_series_selections_total",
        "Series selections of planned reads: answered from the series cache (hit), computed and cached (miss), or left to the engine's subquery (skip)",
        &["result"]
    )
    .expect("metric registered once")
});

pub static TAG_INDEX_ANSWERS_TOTAL: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "shardhouse_engine_tag_index_answers_total",
        "Planned statements that read only the tag index: answered from the tag answers (hit) or read (miss)",
        &["result"]
    )
    .expect("metric registered once")
});

pub static READS_OF_NO_SERIES_TOTAL: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "shardhouse_engine_reads_of_no_series_total",
        "Planned reads answered with no rows without an engine statement: their series selection selects no series on the shard"
    )
    .expect("metric registered once")
});

pub static ROWS_FLUSHED_TOTAL: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "shardhouse_engine_rows_flushed_total",
        "Point rows written into chDB"
    )
    .expect("metric registered once")
});

pub static PENDING_ROWS: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "shardhouse_engine_pending_rows",
        "Applied point rows waiting for a flush"
    )
    .expect("metric registered once")
});

pub static PARTS: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "shardhouse_engine_parts",
        "Active data parts in the shards' tables"
    )
    .expect("metric registered once")
});

pub static MEMORY_BYTES: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "shardhouse_engine_memory_bytes",
        "Memory the embedded engine tracks as in use (its MemoryTracking: parts, merges, caches, queries), sampled every 10 s"
    )
    .expect("metric registered once")
});

pub static FLUSH_FAILING_SHARDS: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "shardhouse_engine_flush_failing_shards",
        "Shards with tables whose rows keep failing to flush (retried with backoff; /health says why)"
    )
    .expect("register shardhouse_engine_flush_failing_shards")
});

pub static FLUSH_FAILURES_TOTAL: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "shardhouse_engine_flush_failures_total",
        "Failed flush attempts (each failing table's rows stay buffered and in the WAL)"
    )
    .expect("register shardhouse_engine_flush_failures_total")
});

pub static UNSTORABLE_TABLES_SKIPPED: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "shardhouse_engine_unstorable_tables_skipped_total",
        "Tables of committed entries skipped on apply because the engine cannot store their name (entries from before names were checked)"
    )
    .expect("register shardhouse_engine_unstorable_tables_skipped_total")
});

pub static SERIES_ROWS_SKIPPED: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "shardhouse_engine_series_rows_skipped_total",
        "Series rows of applied entries left out because this replica already holds the series' _series row"
    )
    .expect("register shardhouse_engine_series_rows_skipped_total")
});

pub static RETENTION_PARTITIONS_DROPPED: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "shardhouse_engine_retention_partitions_dropped_total",
        "Day partitions dropped because their database's retention expired them"
    )
    .expect("register shardhouse_engine_retention_partitions_dropped_total")
});

pub static DAMAGED_SHARDS: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "shardhouse_engine_damaged_shards",
        "Shards whose stored copy here has damaged parts (reads refused; rebuilt from a peer's snapshot; /health says which parts)"
    )
    .expect("register shardhouse_engine_damaged_shards")
});

/// Registers every engine metric so `/metrics` lists them (at zero) from
/// start-up, before the first flush; dashboards and alerts query them.
pub fn register() {
    LazyLock::force(&FLUSH_SECONDS);
    LazyLock::force(&SYNC_SECONDS);
    LazyLock::force(&FLUSHES_TOTAL);
    LazyLock::force(&ROWS_FLUSHED_TOTAL);
    LazyLock::force(&PENDING_ROWS);
    LazyLock::force(&PARTS);
    LazyLock::force(&MEMORY_BYTES);
    LazyLock::force(&FLUSH_FAILING_SHARDS);
    LazyLock::force(&FLUSH_FAILURES_TOTAL);
    LazyLock::force(&UNSTORABLE_TABLES_SKIPPED);
    LazyLock::force(&SERIES_ROWS_SKIPPED);
    LazyLock::force(&RETENTION_PARTITIONS_DROPPED);
    LazyLock::force(&DAMAGED_SHARDS);
    LazyLock::force(&READS_OF_NO_SERIES_TOTAL);
    // Exported at 0 before the first read.
    for result in ["hit", "miss", "skip"] {
        SERIES_SELECTIONS_TOTAL.with_label_values(&[result]);
    }
    for result in ["hit", "miss"] {
        TAG_INDEX_ANSWERS_TOTAL.with_label_values(&[result]);
    }
}

/// Rows the engine read from tables, as its own `SelectedRows` event
/// counts them (every statement: reads, flush checks, merges excluded),
/// brought up to date when metrics are scraped
/// ([`crate::Engine::refresh_read_counters`]): a read of rollups shows as
/// far fewer rows than one of raw points.
pub static SELECTED_ROWS_TOTAL: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "shardhouse_engine_selected_rows_total",
        "Rows the engine read from tables (its SelectedRows event)"
    )
    .expect("metric registered once")
});

impl crate::Engine {
    /// Brings [`SELECTED_ROWS_TOTAL`] up to the engine's own count (one
    /// small statement over `system.events`; blocks).
    pub fn refresh_read_counters(&self) {
        let mut conn = self.inner.readers.get();
        let rows = conn
            .query("SELECT toUInt64(value) FROM system.events WHERE event = 'SelectedRows'")
            .ok()
            .and_then(|b| {
                b.first()
                    .and_then(|b| crate::columns::u64s(b, 0).first().copied())
            });
        if let Some(rows) = rows {
            let seen = SELECTED_ROWS_TOTAL.get();
            if rows > seen {
                SELECTED_ROWS_TOTAL.inc_by(rows - seen);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_contract_metric_is_exported_after_register() {
        super::register();
        let names: Vec<String> = prometheus::gather()
            .iter()
            .map(|f| f.name().to_owned())
            .collect();
        for want in [
            "shardhouse_engine_flush_seconds",
            "shardhouse_engine_flushes_total",
            "shardhouse_engine_rows_flushed_total",
            "shardhouse_engine_pending_rows",
            "shardhouse_engine_parts",
            "shardhouse_engine_memory_bytes",
            "shardhouse_engine_flush_failing_shards",
            "shardhouse_engine_flush_failures_total",
            "shardhouse_engine_unstorable_tables_skipped_total",
            "shardhouse_engine_series_rows_skipped_total",
            "shardhouse_engine_damaged_shards",
            "shardhouse_engine_series_selections_total",
            "shardhouse_engine_tag_index_answers_total",
            "shardhouse_engine_reads_of_no_series_total",
        ] {
            assert!(
                names.iter().any(|n| n == want),
                "{want} missing from {names:?}"
            );
        }
    }
}
