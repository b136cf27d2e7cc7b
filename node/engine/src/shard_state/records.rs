//! Plain records a shard's state keeps: its databases as stored, the
//! tables whose flush keeps failing, and the parts of its copy found
//! damaged. No locks, no I/O.

use std::time::{Duration, Instant};

use crate::layout::TableId;

/// One database of a shard, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DatabaseState {
    /// Its chDB database (`layout::data_db`).
    pub(crate) chdb: String,
    /// Retention in ns; 0 = keep forever, -1 = the node's default.
    pub(crate) retention_ns: i64,
}

/// A shard whose flush keeps failing for some of its tables; see
/// [`Engine::flush_failures`](crate::Engine::flush_failures).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlushFailure {
    pub shard: u32,
    /// Tables whose rows could not be stored (`db/_series` for the series).
    pub tables: Vec<String>,
    pub error: String,
    pub attempts: u32,
    /// How long the tables have been failing.
    pub failing_for: Duration,
}

/// Tables of a shard whose flush failed, and when to try them again.
pub(crate) struct Failing {
    pub(super) tables: Vec<TableId>,
    pub(super) error: String,
    pub(super) attempts: u32,
    pub(super) since: Instant,
    pub(super) retry_at: Instant,
}

impl Failing {
    pub(crate) fn report(&self, shard: u32) -> FlushFailure {
        FlushFailure {
            shard,
            tables: self.tables.iter().map(|t| t.to_string()).collect(),
            error: self.error.clone(),
            attempts: self.attempts,
            failing_for: self.since.elapsed(),
        }
    }

    /// Whether the backoff of the last attempt has passed at `now`.
    pub(crate) fn retry_due(&self, now: Instant) -> bool {
        self.retry_at <= now
    }
}

/// Delay before the next attempt at a table that failed `attempts` times:
/// 200 ms doubling to 30 s.
pub fn retry_delay(attempts: u32) -> Duration {
    let ms = 200u64.saturating_mul(1u64 << attempts.saturating_sub(1).min(10));
    Duration::from_millis(ms.min(30_000))
}

/// One damaged part of a shard's table, as chDB reported it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DamagedPart {
    /// The chDB database (`shard_0003` or `shard_0003_<key>`).
    pub database: String,
    pub table: String,
    pub part: String,
    /// chDB's reason (`broken-on-start`) or the failed check's message.
    pub reason: String,
}

/// A shard whose stored copy on this node misses or garbles rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardDamage {
    pub shard: u32,
    pub parts: Vec<DamagedPart>,
}

impl ShardDamage {
    /// `db.table part (reason); ...`, for logs and `/health`.
    pub fn describe(&self) -> String {
        self.parts
            .iter()
            .map(|p| format!("{}.{} part {} ({})", p.database, p.table, p.part, p.reason))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failing_tables_back_off_to_thirty_seconds() {
        assert_eq!(retry_delay(1), Duration::from_millis(200));
        assert_eq!(retry_delay(3), Duration::from_millis(800));
        assert_eq!(retry_delay(9), Duration::from_secs(30));
        assert_eq!(retry_delay(u32::MAX), Duration::from_secs(30));
    }
}
