//! Pure decisions of the WAL, kept free of I/O so they are unit-tested:
//! admission control and log compaction.

/// Whether a proposal of `size` bytes may enter a shard that already has
/// `inflight` bytes proposed and not yet applied. A proposal larger than the
/// whole limit is still admitted into an idle shard, or it could never pass.
pub fn admit(inflight: usize, size: usize, limit: usize) -> bool {
    inflight == 0 || inflight.saturating_add(size) <= limit
}

/// How long an overloaded caller should wait before retrying: about the time
/// the shard needs to commit what is queued, from the recent mean commit
/// latency, bounded to [10 ms, 5 s].
pub fn retry_after_ms(mean_commit_micros: u64) -> u64 {
    (mean_commit_micros.saturating_mul(2) / 1000).clamp(10, 5000)
}

/// Exponentially weighted moving average step (weight 1/8), in integers.
pub fn ewma(prev: u64, sample: u64) -> u64 {
    if prev == 0 {
        sample
    } else {
        prev - prev / 8 + sample / 8
    }
}

/// The index up to which a shard's log may be compacted now, or None.
///
/// Entries are only needed by the local state machine until they are
/// durable in it (`flushed`), and never beyond what was applied. Compacting
/// in steps of at least `min_step` entries keeps RocksDB range deletions few.
pub fn compaction_target(
    truncated: u64,
    applied: u64,
    flushed: u64,
    last_index: u64,
    min_step: u64,
) -> Option<u64> {
    let target = flushed.min(applied).min(last_index);
    if target > truncated && target - truncated >= min_step.max(1) {
        Some(target)
    } else {
        None
    }
}

/// The initial applied index given to raft-rs on open: committed entries
/// above it are re-delivered to the state machine. It must lie within
/// [truncated, commit].
pub fn recovery_applied_index(flushed: u64, truncated: u64, commit: u64) -> u64 {
    flushed.max(truncated).min(commit.max(truncated))
}

/// Delay before retrying an entry whose apply failed `attempts` times:
/// 100 ms doubling to 10 s, so a stuck shard costs a log line and an engine
/// call every 10 s, not a busy loop.
pub fn apply_retry_delay(attempts: u32) -> std::time::Duration {
    let ms = 100u64.saturating_mul(1u64 << attempts.saturating_sub(1).min(10));
    std::time::Duration::from_millis(ms.min(10_000))
}

/// The RocksDB rate limit for `sst_write_bytes_per_sec`: None = unlimited.
pub fn sst_rate_limit(bytes_per_sec: u64) -> Option<i64> {
    match bytes_per_sec {
        0 => None,
        n => Some(i64::try_from(n).unwrap_or(i64::MAX)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_bounds_inflight_bytes() {
        assert!(admit(0, 10, 100));
        assert!(admit(90, 10, 100));
        assert!(!admit(91, 10, 100));
        // An oversized proposal only passes into an idle shard.
        assert!(admit(0, 1000, 100));
        assert!(!admit(1, 1000, 100));
        assert!(!admit(usize::MAX, 1, 100));
    }

    #[test]
    fn retry_after_is_bounded() {
        assert_eq!(retry_after_ms(0), 10);
        assert_eq!(retry_after_ms(50_000), 100);
        assert_eq!(retry_after_ms(u64::MAX), 5000);
    }

    #[test]
    fn ewma_moves_towards_samples() {
        assert_eq!(ewma(0, 800), 800);
        assert_eq!(ewma(800, 1600), 900);
        assert_eq!(ewma(800, 800), 800);
    }

    #[test]
    fn compaction_never_passes_applied_or_flushed() {
        assert_eq!(compaction_target(0, 100, 50, 100, 1), Some(50));
        assert_eq!(compaction_target(0, 40, 50, 100, 1), Some(40));
        assert_eq!(compaction_target(0, 100, 200, 90, 1), Some(90));
        assert_eq!(compaction_target(50, 100, 50, 100, 1), None);
        assert_eq!(compaction_target(60, 100, 50, 100, 1), None);
        assert_eq!(compaction_target(0, 100, 5, 100, 10), None);
        assert_eq!(compaction_target(0, 100, 10, 100, 10), Some(10));
        assert_eq!(compaction_target(0, 0, 0, 0, 0), None);
    }

    #[test]
    fn recovery_applied_stays_in_range() {
        assert_eq!(recovery_applied_index(5, 0, 10), 5);
        assert_eq!(recovery_applied_index(0, 3, 10), 3);
        assert_eq!(recovery_applied_index(20, 0, 10), 10);
        assert_eq!(recovery_applied_index(0, 0, 0), 0);
        assert_eq!(recovery_applied_index(8, 8, 0), 8);
    }

    #[test]
    fn apply_retries_back_off_to_ten_seconds() {
        use std::time::Duration;
        assert_eq!(apply_retry_delay(1), Duration::from_millis(100));
        assert_eq!(apply_retry_delay(2), Duration::from_millis(200));
        assert_eq!(apply_retry_delay(5), Duration::from_millis(1600));
        assert_eq!(apply_retry_delay(8), Duration::from_secs(10));
        assert_eq!(apply_retry_delay(u32::MAX), Duration::from_secs(10));
    }

    #[test]
    fn sst_rate_limit_zero_is_unlimited() {
        assert_eq!(sst_rate_limit(0), None);
        assert_eq!(sst_rate_limit(48 << 20), Some(48 << 20));
        assert_eq!(sst_rate_limit(u64::MAX), Some(i64::MAX));
    }
}
